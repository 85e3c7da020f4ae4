"""The test-only protection switches the acceptance tests use to prove they can fail.

``MILLRACE_TEST_UNSAFE`` (``no-fsync``, ``no-dedup``, ``no-fencing``, ``no-crc``) is parsed with
the other settings, rejected when unknown, announced loudly, and reaches the engine and tier
configuration; the file tier-1's test-only options (``fencing``, ``verify_crc``, ``sync_trace``)
do what the tests rely on. In process: no node is started here.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from millrace.kernel.config import ConfigError, SegmentStoreSettings
from millrace.ops import cli
from segment_app.engine.bootstrap import StoreSettings, build_segment_store
from segment_app.server import node
from tests.acceptance.disk import flip_bit, records, synced_lengths
from tiers.base import DataLogCorruptionError, DataLogFencedError
from tiers.file import FileDurableDataLog
from tiers.file import format as fmt

ALL = "no-fsync,no-dedup,no-fencing,no-crc"


def settings_with(data_dir: Path, unsafe: str) -> SegmentStoreSettings:
    env = {"MILLRACE_DATA_DIR": str(data_dir), "MILLRACE_TEST_UNSAFE": unsafe}
    return SegmentStoreSettings.from_env(env)


def test_flags_are_parsed_from_the_environment(data_dir: Path) -> None:
    assert settings_with(data_dir, "").unsafe == frozenset()
    assert settings_with(data_dir, " no-fsync, No-CRC ,").unsafe == {"no-fsync", "no-crc"}


def test_an_unknown_flag_is_a_configuration_error(data_dir: Path) -> None:
    with pytest.raises(ConfigError) as error:
        settings_with(data_dir, "no-fsync,no-fsnyc")
    message = str(error.value)
    assert message.startswith("MILLRACE_TEST_UNSAFE='no-fsync,no-fsnyc': unknown flag 'no-fsnyc'")
    assert "no-dedup" in message and "no-fencing" in message


def test_the_node_refuses_to_start_with_an_unknown_flag(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MILLRACE_DATA_DIR", str(data_dir))
    monkeypatch.setenv("MILLRACE_TEST_UNSAFE", "no-safety")
    assert cli.main(["segmentstore"]) == node.EXIT_USAGE
    assert "MILLRACE_TEST_UNSAFE" in capsys.readouterr().err


def test_flags_reach_the_engine_and_the_tiers(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = StoreSettings(data_dir=str(data_dir))
    assert node._unsafe_settings(settings, frozenset()) is settings
    with caplog.at_level(logging.WARNING):
        unsafe = node._unsafe_settings(settings, frozenset(ALL.split(",")))
    assert "UNSAFE TEST MODE" in caplog.text
    container = build_segment_store(unsafe).factory(0)
    data_log, storage = container.data_log, container.storage
    assert isinstance(data_log, FileDurableDataLog)
    assert (data_log.fsync, data_log.fencing, data_log.verify_crc) == (False, False, False)
    assert storage.fsync is False  # type: ignore[attr-defined]
    assert container.config.deduplicate is False
    assert container.config.durable_log.verify_crc is False


def test_flags_leave_other_backends_alone(data_dir: Path) -> None:
    settings = StoreSettings(data_dir=str(data_dir), tier1="memory", tier2="memory")
    unsafe = node._unsafe_settings(settings, frozenset(ALL.split(",")))
    assert unsafe.tier1_options == {} and unsafe.tier2_options == {}
    assert unsafe.store.container.deduplicate is False


def test_node_settings_carry_the_flags(data_dir: Path) -> None:
    env = {"MILLRACE_DATA_DIR": str(data_dir), "MILLRACE_TEST_UNSAFE": "no-dedup"}
    settings = SegmentStoreSettings.from_env(env)
    assert settings.unsafe == {"no-dedup"}
    assert node._build_store(settings).config.container.deduplicate is False


# -- the file tier-1's test-only options -------------------------------------------------------


async def opened(path: Path, epoch: int, **options: object) -> FileDurableDataLog:
    log = FileDurableDataLog(path=path, **options)  # type: ignore[arg-type]
    await log.open(epoch)
    return log


@pytest.mark.parametrize("fencing", [True, False])
async def test_fencing_off_lets_a_fenced_log_acknowledge(tmp_path: Path, fencing: bool) -> None:
    old = await opened(tmp_path, 1, fencing=fencing)
    await old.append(b"before")
    new = await opened(tmp_path, 2)
    if fencing:
        with pytest.raises(DataLogFencedError):
            await old.append(b"after the takeover")
    else:
        await old.append(b"after the takeover")  # acknowledged, and lost: nobody reads it
    assert [frame async for _, frame in new.read_all()] == [b"before"]


async def test_crc_off_reads_a_damaged_record(tmp_path: Path) -> None:
    log = await opened(tmp_path / "a", 1)
    for i in range(5):
        await log.append(b"frame %d" % i)
    middle = list(records(tmp_path / "a" / "ledger-1.log"))[2]
    flip_bit(middle.path, middle.payload_offset + 1)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    with pytest.raises(DataLogCorruptionError, match="CRC32C mismatch"):
        await opened(tmp_path / "a", 2)
    unchecked = await opened(tmp_path / "b", 2, verify_crc=False)
    frames = [frame async for _, frame in unchecked.read_all()]
    assert frames[2] != b"frame 2" and frames[3] == b"frame 3"


@pytest.mark.parametrize("fsync", [True, False])
async def test_sync_trace_records_synced_lengths_only(tmp_path: Path, fsync: bool) -> None:
    log = await opened(tmp_path, 1, sync_trace=True, fsync=fsync)
    for i in range(3):
        last = await log.append(b"frame %d" % i)
    end = last.offset + fmt.RECORD.size + len(b"frame 2")  # (direct writes pad the file)
    assert synced_lengths(tmp_path) == ({"ledger-1.log": end} if fsync else {})
