"""The domain defaults both sides share: one home for each, read by the client, the controller,
the segment store and the command line alike.

A value here is what a caller gets when it names none; where the same fact needs bounds or a
check against another, they sit beside it. ``tests/test_tidy.py`` fails on a literal of these
values written elsewhere in the code (``test_each_default_has_one_home``).
"""

from __future__ import annotations

__all__ = [
    "CLIENT_SILENCE_SECONDS",
    "DELIVERY_TIMEOUT_SECONDS",
    "FRAME_BYTES_MAX",
    "READER_TIMEOUT_MS",
    "TRANSACTION_LEASE_MS",
    "TRANSACTION_LEASE_MS_MAX",
    "TRANSACTION_LEASE_MS_MIN",
    "WORKFLOW_WAIT_SECONDS",
]

#: A transaction's lease (ms) when its caller names none (REST's ``leaseMs`` left out, gRPC's
#: ``lease`` 0, the client's ``begin_txn``), and the bounds of any lease asked for.
TRANSACTION_LEASE_MS = 30_000
TRANSACTION_LEASE_MS_MIN, TRANSACTION_LEASE_MS_MAX = 1_000, 600_000

#: A reader of a reader group silent this long is declared dead (Pravega's default), unless
#: the group is configured otherwise.
READER_TIMEOUT_MS = 30_000

#: How long a writer keeps retrying an event before it fails it (the blocking writer's and the
#: event writer's ``delivery_timeout_s``).
DELIVERY_TIMEOUT_SECONDS = 120.0

#: How long a REST, gRPC or console call waits for a workflow (create, update, seal, delete,
#: scale, truncate) to finish before it answers 504 / DEADLINE_EXCEEDED (the workflow goes on).
WORKFLOW_WAIT_SECONDS = 30.0

#: The largest data frame the engine writes to tier-1 in one append, and so the largest a
#: tier-1 log takes by default.
FRAME_BYTES_MAX = 4 * 1024 * 1024

#: A client's connection nothing arrived on for this long is given up as silent (the node is
#: partitioned, paused or frozen). A node's session timeout must be above it
#: (``MILLRACE_NODE_SESSION_TIMEOUT_S``, checked by the settings), so that a client has found
#: the silence by the time the node's containers move.
CLIENT_SILENCE_SECONDS = 4.0
