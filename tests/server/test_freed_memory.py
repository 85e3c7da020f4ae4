"""The segment store keeps freed buffers for reuse (``keep_freed_memory``): a second round of
the same large buffers lands in memory the process already has, not in fresh pages."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

ROUNDS = textwrap.dedent(
    """
    import resource, sys
    from millrace.kernel.memory import keep_freed_memory
    if sys.argv[1] == "keep":
        assert keep_freed_memory()
    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    def round_of_buffers():
        before = faults()
        held = [b"x" * (4 << 20) for _ in range(64)]  # 256 MiB alive at once, then freed
        del held
        return faults() - before
    first, second = round_of_buffers(), round_of_buffers()
    print(first, second)
    """
)


def rounds(mode: str) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", ROUNDS, mode], check=True, capture_output=True, text=True
    ).stdout
    first, second = map(int, out.split())
    return first, second


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_a_second_round_of_buffers_reuses_the_first_rounds_memory() -> None:
    first, second = rounds("keep")
    assert first > 50_000  # 256 MiB of 4 KiB pages touched for the first time
    assert second < first // 10
    default_first, default_second = rounds("default")  # glibc's own: unmapped, touched again
    assert default_second > default_first // 2
