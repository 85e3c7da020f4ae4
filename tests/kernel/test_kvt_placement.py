"""Key-value table placement as Pravega's Java client computes it: ``partition_of`` against
Guava itself (the ``guava`` jar PySpark ships), run by Java 17 as a single-file program that
does what ``KeyValueTableSegments`` and ``HashHelper`` do; and the hash against mmh3 where their
seeds agree."""

from __future__ import annotations

import glob
import os
import random
import shutil
import struct
import subprocess
from pathlib import Path

import mmh3
import pytest

from millrace.kernel.kvt import PLACEMENTS, KvtConfig, KvtError, partition_of

# Pravega's client, reduced to what places a key: the controller's key ranges
# ((x + 1) * (1.0 / n)), the hash (Guava's murmur3_128 seeded with the String's hashCode) and
# longToDoubleFraction, then ceilingEntry. Reads "<partitions> <hex key>" lines.
JAVA = """
import com.google.common.hash.Hashing;
import java.io.*;
import java.util.*;

public class Place {
    public static void main(String[] args) throws IOException {
        var hash = Hashing.murmur3_128("KeyValueTableRouter".hashCode());
        var in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) {
            String[] parts = line.split(" ");
            int n = Integer.parseInt(parts[0]);
            byte[] key = HexFormat.of().parseHex(parts.length > 1 ? parts[1] : "");
            double chunk = 1.0 / n;
            TreeMap<Double, Integer> ends = new TreeMap<>();
            for (int x = 0; x < n; x++) ends.put((x + 1) * chunk, x);
            long value = hash.hashBytes(key).asLong();
            long fraction = (value >> 12) & 0x000fffffffffffffL;
            double point = Double.longBitsToDouble(0x3ff0000000000000L + fraction) - 1;
            System.out.println(ends.ceilingEntry(point).getValue());
        }
    }
}
"""


def guava_jar() -> str | None:
    import pyspark

    found = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "guava-*.jar"))
    return found[0] if found else None


def test_a_key_lands_in_the_partition_pravegas_java_client_picks(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    jar = guava_jar()
    if jar is None or shutil.which("java") is None:
        pytest.skip("needs Java and PySpark's guava jar")
    (tmp_path / "Place.java").write_text(JAVA)
    rng = random.Random(44)
    cases = [(rng.choice([1, 2, 3, 4, 5, 7, 16, 1024]), rng.randbytes(rng.randrange(1, 40)))
             for _ in range(3000)]  # fmt: skip
    cases += [(4, b"user-001"), (4, b"user-002"), (3, b"\x00" * 8), (2, b"\xff" * 16)]
    lines = "".join(f"{n} {key.hex()}\n" for n, key in cases)
    done = subprocess.run(["java", "-cp", jar, str(tmp_path / "Place.java")], input=lines,
                          capture_output=True, text=True, timeout=180, check=True)  # fmt: skip
    java = [int(x) for x in done.stdout.split()]
    assert len(java) == len(cases)
    ours = [partition_of(key, n) for n, key in cases]
    assert ours == java
    assert len({p for (n, _), p in zip(cases, ours, strict=True) if n == 16}) == 16  # spread


def test_the_hash_is_murmur3_where_mmh3_can_be_seeded_alike() -> None:
    from millrace.kernel.kvt import _murmur3_x64_128_low

    rng = random.Random(9)
    for _ in range(2000):
        data, seed = rng.randbytes(rng.randrange(0, 70)), rng.randrange(0, 1 << 31)
        want = struct.unpack_from("<Q", mmh3.hash_bytes(data, seed, x64arch=True))[0]
        assert _murmur3_x64_128_low(data, seed) == want


def test_tables_made_before_keep_their_placement() -> None:
    """``millrace-1`` is ADR 0009's placement, unchanged (the keys of older tables stay put)."""
    assert PLACEMENTS[0] == "pravega"
    old = [partition_of(f"key-{i:04d}".encode(), 4, "millrace-1") for i in range(8)]
    assert old == [KvtConfig(4, 8, 0, "millrace-1").partition(f"key-{i:04d}".encode())
                   for i in range(8)]  # fmt: skip
    digest = mmh3.hash_bytes(b"key-0000", 0x5E52B6B7, x64arch=True)
    point = (struct.unpack_from("<Q", digest)[0] >> 12) / float(1 << 52)
    assert old[0] == min(int(point * 4), 3)
    with pytest.raises(KvtError, match="placement must be one of"):
        KvtConfig(4, 8, 0, "sideways").validate()
