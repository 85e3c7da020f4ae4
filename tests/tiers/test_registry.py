"""The tier plugin registry: entry-point names, dotted paths, and its error messages."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import tiers
from tiers import registry
from tiers.file import FileDurableDataLog
from tiers.filesystem import FileSystemChunkStorage
from tiers.memory import MemoryChunkStorage, MemoryDurableDataLog, MemoryObjectChunkStorage
from tiers.registry import (
    BackendConfigError,
    BackendOptionError,
    UnknownBackendError,
    load_tier1,
    load_tier2,
)


def test_entry_point_names(tmp_path: Path) -> None:
    assert isinstance(load_tier1("memory"), MemoryDurableDataLog)
    assert isinstance(load_tier1("file", path=tmp_path), FileDurableDataLog)
    assert isinstance(load_tier2("memory"), MemoryChunkStorage)
    assert isinstance(load_tier2("filesystem", root=tmp_path), FileSystemChunkStorage)
    assert {"memory", "file"} <= set(registry.available_tier1())
    assert {"memory", "filesystem"} <= set(registry.available_tier2())


def test_package_root_reexports() -> None:
    assert tiers.load_tier1 is load_tier1
    assert tiers.load_tier2 is load_tier2
    assert tiers.UnknownBackendError is UnknownBackendError


@pytest.mark.parametrize(
    "path", ["tiers.memory:MemoryObjectChunkStorage", "tiers.memory.MemoryObjectChunkStorage"]
)
def test_dotted_paths(path: str) -> None:
    assert isinstance(load_tier2(path), MemoryObjectChunkStorage)


def test_options_reach_the_backend(tmp_path: Path) -> None:
    log = load_tier1("file", path=tmp_path, fsync=False, ledger_bytes_max=1 << 20)
    assert isinstance(log, FileDurableDataLog)
    assert (log.fsync, log.ledger_bytes_max) == (False, 1 << 20)


def test_unknown_name_suggests_and_lists() -> None:
    with pytest.raises(UnknownBackendError) as error:
        load_tier1("fiel")
    message = str(error.value)
    assert "did you mean 'file'?" in message
    assert "Known backends: file, jetstream, memory." in message
    assert isinstance(error.value, ValueError)
    with pytest.raises(UnknownBackendError, match="did you mean 'filesystem'"):
        load_tier2("filesytem")
    with pytest.raises(UnknownBackendError) as error:
        load_tier2("zzz")
    assert "did you mean" not in str(error.value)


@pytest.mark.parametrize(
    "path", ["no_such_module:Thing", "tiers.memory:NoSuchClass", "tiers.memory.Nope", "tiers:"]
)
def test_bad_dotted_paths(path: str) -> None:
    with pytest.raises(UnknownBackendError):
        load_tier1(path)


def test_a_class_of_the_wrong_tier_is_refused() -> None:
    with pytest.raises(BackendConfigError, match="not a subclass of DurableDataLog"):
        load_tier1("tiers.memory:MemoryChunkStorage")
    with pytest.raises(BackendConfigError, match="not a subclass of ChunkStorage"):
        load_tier2("tiers.base:LogAddress")


def test_unknown_option_is_named_with_a_suggestion(tmp_path: Path) -> None:
    with pytest.raises(BackendOptionError) as error:
        load_tier1("file", path=tmp_path, fsnyc=False)
    message = str(error.value)
    assert "no option 'fsnyc'; did you mean 'fsync'?" in message
    assert "ledger_bytes_max" in message
    assert isinstance(error.value, ValueError)


def test_missing_required_option_is_named() -> None:
    with pytest.raises(BackendOptionError, match="needs option\\(s\\): root"):
        load_tier2("filesystem")


def test_third_party_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = EntryPoint("acme", "tiers.memory:MemoryObjectChunkStorage", registry.TIER2_GROUP)

    def entry_points(group: str) -> list[EntryPoint]:
        return [fake] if group == registry.TIER2_GROUP else []

    monkeypatch.setattr(registry, "entry_points", entry_points)
    assert isinstance(load_tier2("acme"), MemoryObjectChunkStorage)
    with pytest.raises(UnknownBackendError, match="did you mean 'acme'"):
        load_tier2("acne")


def test_broken_entry_point_says_which(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = EntryPoint("broken", "no_such_pkg.mod:Log", registry.TIER1_GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [broken])
    with pytest.raises(ImportError, match=r"tier-1 backend 'broken' \(no_such_pkg\.mod:Log\)"):
        load_tier1("broken")
