"""The composition root: builds a real segment store from typed configuration.

This is the one place that picks tier backends (through the plugin registry) and wires them
into containers; everything else receives its components through constructors.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from segment_app.engine.config import SegmentStoreConfig
from segment_app.engine.containers.container import SegmentContainer
from segment_app.engine.store import SegmentStore
from tiers import load_tier1, load_tier2

__all__ = ["StoreSettings", "build_segment_store"]


@dataclasses.dataclass(frozen=True, slots=True)
class StoreSettings:
    """Where and how a node stores data."""

    #: Directory for the file tier-1 and the filesystem tier-2 (when those are chosen).
    data_dir: str = "./data"
    #: Tier-1 backend name (entry point in ``millrace.tier1``) or dotted path.
    tier1: str = "file"
    #: Extra keyword options for the tier-1 backend.
    tier1_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Tier-2 backend name (entry point in ``millrace.tier2``) or dotted path.
    tier2: str = "filesystem"
    #: Extra keyword options for the tier-2 backend.
    tier2_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    store: SegmentStoreConfig = dataclasses.field(default_factory=SegmentStoreConfig)


def build_segment_store(settings: StoreSettings) -> SegmentStore:
    tier2_options = dict(settings.tier2_options)
    if settings.tier2 == "filesystem":
        tier2_options.setdefault("root", os.path.join(settings.data_dir, "tier2"))
    storage = load_tier2(settings.tier2, **tier2_options)

    def make_container(container_id: int) -> SegmentContainer:
        options = dict(settings.tier1_options)
        if settings.tier1 == "file":
            options.setdefault(
                "path", os.path.join(settings.data_dir, "tier1", f"container-{container_id}")
            )
        elif settings.tier1 == "memory":
            options.setdefault("log_id", f"container-{container_id}")
        options.setdefault("frame_bytes_max", settings.store.container.durable_log.frame_bytes_max)
        data_log = load_tier1(settings.tier1, **options)
        return SegmentContainer(container_id, data_log, storage, settings.store.container)

    return SegmentStore(settings.store, make_container)
