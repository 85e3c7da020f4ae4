"""The composition root: builds a real segment store from typed configuration.

This is the one place that picks tier backends (through the plugin registry) and wires them
into containers; everything else receives its components through constructors. It knows no
backend by name: each declares its defaults for a node (``default_options``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from millrace.kernel.config import DEFAULT_DATA_DIR, SegmentStoreSettings
from segment_app.engine.config import SegmentStoreConfig
from segment_app.engine.containers.container import ContainerParts, SegmentContainer
from segment_app.engine.store import SegmentStore
from tiers import load_tier1, load_tier2
from tiers.registry import resolve_tier1, resolve_tier2

__all__ = ["StoreSettings", "build_segment_store"]


@dataclasses.dataclass(frozen=True, slots=True)
class StoreSettings:
    """Where and how a node stores data."""

    #: Directory for the file tier-1 and the filesystem tier-2 (when those are chosen).
    data_dir: str = DEFAULT_DATA_DIR
    #: Tier-1 backend name (entry point in ``millrace.tier1``) or dotted path.
    tier1: str = SegmentStoreSettings.tier1
    #: Extra keyword options for the tier-1 backend.
    tier1_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Tier-2 backend name (entry point in ``millrace.tier2``) or dotted path.
    tier2: str = SegmentStoreSettings.tier2
    #: Extra keyword options for the tier-2 backend.
    tier2_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    store: SegmentStoreConfig = dataclasses.field(default_factory=SegmentStoreConfig)


def tier2_options(settings: StoreSettings) -> dict[str, Any]:
    """The tier-2 backend's options: its defaults for this node, the user's over them."""
    defaults = resolve_tier2(settings.tier2).default_options(settings.data_dir)
    return {**defaults, **settings.tier2_options}


def build_segment_store(settings: StoreSettings) -> SegmentStore:
    """The store of ``settings``: each backend gets its own defaults for this node
    (``default_options``), then the user's tier options over them."""
    storage = load_tier2(settings.tier2, **tier2_options(settings))
    tier1 = resolve_tier1(settings.tier1)
    frame_bytes_max = settings.store.container.durable_log.frame_bytes_max

    def make_container(container_id: int) -> SegmentContainer:
        defaults = tier1.default_options(settings.data_dir, f"container-{container_id}")
        options = {"frame_bytes_max": frame_bytes_max, **defaults, **settings.tier1_options}
        data_log = load_tier1(settings.tier1, **options)
        config = settings.store.container
        if config.read_index.disk_cache_bytes_max > 0:  # each container its own disk cache
            where = os.path.join(settings.data_dir, "cache", f"container-{container_id}")
            read_index = dataclasses.replace(config.read_index, disk_cache_path=where)
            config = dataclasses.replace(config, read_index=read_index)
        return SegmentContainer(container_id, data_log, storage, config, parts=ContainerParts())

    return SegmentStore(settings.store, make_container)
