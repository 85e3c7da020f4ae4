"""The data source's options: parsed once, every bad one refused with a message naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from millrace.client.streamcut import StreamCut
from spark_bridge.options import OptionError, Options

BASE = {"controller": "http://127.0.0.1:9091", "scope": "sc", "stream": "st"}


def test_defaults_and_conversions(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc\n")
    parsed = Options.parse({**BASE, "EXACTLY_ONCE": "false", "default_num_segments": "3",
                            "token_file": str(token), "metadata": "StreamInfo"})  # fmt: skip
    assert (parsed.exactly_once, parsed.default_num_segments, parsed.token) == (False, 3, "abc")
    assert (parsed.start_stream_cut, parsed.end_stream_cut) == ("earliest", "unbounded")
    assert parsed.metadata == "streaminfo"
    assert "abc" not in repr(parsed)  # the token is never shown


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"colour": "blue"}, "unknown option 'colour'"),
        ({"scope": ""}, "option 'scope' is required"),
        ({"controller": "127.0.0.1:9091"}, "option 'controller' must be Millrace's HTTP URL"),
        ({"exactly_once": "maybe"}, "option 'exactly_once' must be true or false"),
        ({"default_num_segments": "0"}, "option 'default_num_segments' must be from 1 to 10000"),
        ({"transaction_timeout_ms": "soon"}, "option 'transaction_timeout_ms' must be an integer"),
        ({"transaction_timeout_ms": "10"}, "option 'transaction_timeout_ms' must be from 1000"),
        ({"start_stream_cut": "yesterday"}, "option 'start_stream_cut' must be earliest"),
        ({"end_stream_cut": StreamCut("other", "st", {0: 0}).to_text()},
         "option 'end_stream_cut' is a cut of other/st"),
        ({"metadata": "Everything"}, "option 'metadata' must be streams or streaminfo"),
        ({"token_file": "/nonexistent/token"}, "option 'token_file'"),
        ({"approx_bytes_per_trigger": "-1"}, "'approx_bytes_per_trigger' must be from 0"),
        ({"stream": ""}, "option 'stream' is required"),
        ({"schema": "avro"}, "option 'schema' must be none or registry, not 'avro'"),
        ({"schema_version": "-1"}, "option 'schema_version' must be from 0"),
        ({"auto_register_schemas": "sure"}, "option 'auto_register_schemas' must be true or false"),
        ({"mode": "dropmalformed"}, "option 'mode' must be failfast or permissive"),
    ],
)  # fmt: skip
def test_bad_options_are_refused_by_name(given: dict[str, str], named: str) -> None:
    with pytest.raises(OptionError, match=named.replace("(", r"\(")):
        Options.parse({**BASE, **given})


def test_a_cut_of_the_stream_is_taken() -> None:
    text = StreamCut("sc", "st", {0: 10}).to_text()
    parsed = Options.parse({**BASE, "start_stream_cut": text})
    assert parsed.cut("start_stream_cut") == StreamCut("sc", "st", {0: 10})
    assert parsed.cut("end_stream_cut") is None


def test_listing_a_scopes_streams_needs_no_stream() -> None:
    parsed = Options.parse({"controller": BASE["controller"], "scope": "sc", "metadata": "Streams"})
    assert (parsed.scope, parsed.stream, parsed.metadata) == ("sc", "", "streams")
