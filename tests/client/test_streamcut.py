"""Stream cuts as text: round trip, and clear errors for anything else."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from millrace.client.streamcut import StreamCut


@given(st.dictionaries(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1), min_size=1))
def test_text_round_trip(positions: dict[int, int]) -> None:
    cut = StreamCut("sc", "st", positions)
    text = cut.to_text()
    assert text.startswith("mrcut1.") and " " not in text and "/" not in text
    assert StreamCut.from_text(text) == cut


@pytest.mark.parametrize(
    "text", ["", "hello", "mrcut1.", "mrcut1.!!!", "mrcut1.e30", "mrcut1.eyJzY29wZSI6MX0"]
)
def test_bad_text_is_a_clear_error(text: str) -> None:
    with pytest.raises(ValueError, match="stream cut"):
        StreamCut.from_text(text)
