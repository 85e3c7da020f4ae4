"""The ``jetstream`` tier-1 backend: each container's log a NATS JetStream stream.

Responsibility: export ``JetStreamDurableDataLog`` (implemented in ``log.py``).
"""

from tiers.jetstream.log import JetStreamDurableDataLog

__all__ = ["JetStreamDurableDataLog"]
