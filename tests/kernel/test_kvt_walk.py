"""``PartitionWalk``: one page over a table's partitions, as the REST API and both clients
page, driven here against partitions held in lists."""

from __future__ import annotations

import pytest

from millrace.kernel.kvt import KvtError, PartitionWalk

#: Three partitions' sorted keys; a read gives up to ``count`` keys after the continuation (the
#: last key given), and that key as the next token.
PARTS = {0: [b"a", b"b", b"c"], 1: [], 2: [b"x", b"y"]}


def read(partition: int, after: bytes, count: int) -> tuple[list[bytes], bytes]:
    keys = [k for k in PARTS[partition] if k > after][:count]
    return keys, keys[-1] if keys else after


def walk_all(limit: int, partitions: list[int] | None = None) -> list[list[bytes]]:
    pages, token = [], ""
    while True:
        walk = PartitionWalk(partitions or [0, 1, 2], token, 3, limit)
        while (asked := walk.ask()) is not None:
            walk.got(*read(*asked))
        pages.append(walk.found)
        token = walk.next_token()
        if not token:
            return pages


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 10])
def test_every_key_once_in_order_whatever_the_page_size(limit: int) -> None:
    pages = walk_all(limit)
    assert [k for page in pages for k in page] == [b"a", b"b", b"c", b"x", b"y"]
    assert all(0 < len(page) <= limit for page in pages[:-1])


def test_a_walk_over_some_partitions_reads_only_those() -> None:
    assert walk_all(10, [2]) == [[b"x", b"y"]]


def test_a_bad_limit_or_token_is_refused() -> None:
    with pytest.raises(KvtError):
        PartitionWalk([0], "", 1, 0)
    with pytest.raises(KvtError):
        PartitionWalk([0], "nonsense", 1, 5)
