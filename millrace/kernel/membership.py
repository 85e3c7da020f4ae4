"""What a segment store node and the cluster's metadata say to each other.

``NodeCard`` is what a node tells the cluster about itself; ``Membership`` is what the node
needs of the cluster's metadata (``segment_app.server.membership.NodeSession`` calls it;
``controller_app.cluster.membership.DatabaseMembership`` implements it). Here, below both, so
that neither imports the other.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

__all__ = ["Membership", "NodeCard"]


@dataclasses.dataclass(frozen=True, slots=True)
class NodeCard:
    """What a segment store node tells the cluster about itself."""

    node_id: str
    host: str
    port: int
    metrics_port: int | None
    container_count: int
    #: Its ports need TLS (clients see ``tls://host:port``).
    tls: bool = False


class Membership(Protocol):
    """The cluster's metadata, as a node uses it (blocking calls; run in a thread)."""

    def join(self, card: NodeCard) -> None:
        """Register the node (again, after a restart) and open its session."""

    def renew(self, node_id: str) -> dict[int, int]:
        """Renew the node's session; the containers assigned to it: number -> epoch."""

    def leave(self, node_id: str) -> None:
        """Close the node's session: it is gone now, not after the session timeout."""
