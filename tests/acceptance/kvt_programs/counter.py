"""A writer process of the key-value table test: increments one counter ``times`` times by
compare-and-set (read the entry, put the value + 1 at the version read, again on a bad
version), through the blocking client as a user's program would. Prints its conflicts."""

from __future__ import annotations

import sys

from millrace.client.kvt import BadKeyVersionError, KeyValueTableManager


def main() -> None:
    url, token, scope, table_name, times = sys.argv[1:6]
    conflicts = 0
    with KeyValueTableManager(url, token) as manager:
        table = manager.open(scope, table_name)
        for _ in range(int(times)):
            while True:
                entry = table.get(b"counter!")
                assert entry is not None
                try:
                    table.put(b"counter!", b"%d" % (int(entry.value) + 1), version=entry.version)
                    break
                except BadKeyVersionError:
                    conflicts += 1
    print(f"conflicts {conflicts}", flush=True)


if __name__ == "__main__":
    main()
