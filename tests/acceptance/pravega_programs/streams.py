"""Scopes and streams: create (again: False), list, policies and tags, seal, delete."""

from __future__ import annotations

import sys

import pravega_client
from common import answer, manager

m = manager()
scope = sys.argv[2]
found = {
    "scope": m.create_scope(scope),
    "scope_again": m.create_scope(scope),
    "stream": m.create_stream(scope, "plain", 3),
    "stream_again": m.create_stream(scope, "plain", 3),
    "tagged": m.create_stream_with_policy(
        scope,
        "tagged",
        pravega_client.StreamScalingPolicy.fixed_scaling_policy(2),
        pravega_client.StreamRetentionPolicy.by_size(1 << 30),
        ["red", "blue"],
    ),
}
found["tags"] = m.get_stream_tags(scope, "tagged")
found["updated"] = m.update_stream_with_policy(
    scope,
    "tagged",
    pravega_client.StreamScalingPolicy.fixed_scaling_policy(2),
    pravega_client.StreamRetentionPolicy.by_time(86_400_000),
    ["green"],
)
found["tags_after"] = m.get_stream_tags(scope, "tagged")
found["scopes"] = scope in m.list_scope()
found["streams"] = sorted(m.list_stream(scope))
found["sealed"] = m.seal_stream(scope, "plain")
found["deleted"] = m.delete_stream(scope, "plain")
found["streams_after"] = sorted(m.list_stream(scope))
answer(found)
