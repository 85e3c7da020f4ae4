"""Each backend declares its own defaults for a node; the composition root knows no names."""

from __future__ import annotations

import inspect
from pathlib import Path

from segment_app.engine import bootstrap
from segment_app.engine.bootstrap import StoreSettings, build_segment_store
from tiers.file import FileDurableDataLog
from tiers.filesystem import FileSystemChunkStorage
from tiers.memory import MemoryChunkStorage, MemoryDurableDataLog


def test_backends_declare_where_they_keep_a_nodes_state(tmp_path: Path) -> None:
    root = str(tmp_path)
    assert FileDurableDataLog.default_options(root, "container-3") == {
        "path": str(tmp_path / "tier1" / "container-3")
    }
    assert MemoryDurableDataLog.default_options(root, "container-3") == {"log_id": "container-3"}
    assert FileSystemChunkStorage.default_options(root) == {"root": str(tmp_path / "tier2")}
    assert MemoryChunkStorage.default_options(root) == {}


def test_the_composition_root_uses_them_and_the_users_options_win(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    settings = StoreSettings(data_dir=str(tmp_path), tier2_options={"root": str(elsewhere)})
    container = build_segment_store(settings).factory(1)
    assert container.data_log.path == str(tmp_path / "tier1" / "container-1")  # type: ignore[attr-defined]
    assert Path(container.storage.root) == elsewhere  # type: ignore[attr-defined]


def test_the_composition_root_names_no_backend() -> None:
    source = inspect.getsource(bootstrap.build_segment_store)
    for name in ('"file"', '"filesystem"', '"memory"'):
        assert name not in source
