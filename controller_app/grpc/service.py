"""Pravega's Client-Controller API over gRPC: ``ControllerService`` for Pravega's own clients.

Responsibility: each rpc authenticates the caller (Pravega's ``authorization`` metadata:
``Basic <base64 user:password>``, ``Basic <API token>`` or ``Bearer <API token>``), checks the
role the REST API would ask for the same thing, and calls the same workflow or selector as the
REST view (no rule lives here). Answers follow Pravega's controller:

* outcomes the proto has a status for (a scope that exists, a stream not found, a transaction
  not found ...) are that status, since Pravega's clients read them;
* other errors are gRPC status codes, each the one ``controller_app.outcomes`` gives it (the
  table REST reads too): INVALID_ARGUMENT (bad input), NOT_FOUND, ALREADY_EXISTS,
  FAILED_PRECONDITION, UNAVAILABLE for a metadata database, broker, segment store or
  container node that is away (clients retry it), DEADLINE_EXCEEDED for a workflow that
  outlasts the wait; UNAUTHENTICATED and PERMISSION_DENIED; INTERNAL for an error with no row
  (a bug: logged, never its text);
* rpcs Millrace does not serve answer UNIMPLEMENTED with a message (Pravega's clients do not
  retry it).

The rpcs run their Django work in threads (``asyncio.to_thread``) off the aio server's loop.
"""

from __future__ import annotations

from controller_app.grpc import controller_pb2_grpc as pb_grpc
from controller_app.grpc.common import PAGE_SIZE
from controller_app.grpc.kvtables import KeyValueTables
from controller_app.grpc.reader_groups import ReaderGroups
from controller_app.grpc.scopes_streams import ScopesAndStreams
from controller_app.grpc.segments import Segments
from controller_app.grpc.transactions import Transactions

__all__ = ["PAGE_SIZE", "ControllerService"]


class ControllerService(ScopesAndStreams, Segments, Transactions, ReaderGroups, KeyValueTables,
                        pb_grpc.ControllerServiceServicer):  # fmt: skip
    """Every rpc of ``ControllerService`` (see the module docstring); ``address`` is this
    controller's gRPC endpoint."""
