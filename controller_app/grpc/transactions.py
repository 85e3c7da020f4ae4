"""The gRPC rpcs of transactions and writers' marks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controller_app import selectors as sel
from controller_app.errors import (
    InvalidArgumentError,
    InvalidStreamCutError,
    NotFoundError,
    PreconditionFailedError,
    StreamNotFoundError,
    TransactionNotFoundError,
)
from controller_app.grpc import controller_pb2 as pb
from controller_app.grpc.common import (
    _NO_TIMESTAMP,
    _TXN_STATES,
    PAGE_SIZE,
    RpcArea,
    _cut,
    _names,
    _ranges,
    _txn_id,
    _txn_uuid,
    outcome,
    rpc,
)
from controller_app.segment_client import segment_store
from controller_app.workflows import (
    marks,
    transactions,
)
from controller_app.workflows.common import get_stream
from millrace.kernel import defaults


class Transactions(RpcArea):
    """Transactions and writers' marks."""

    # -- transactions ---------------------------------------------------------------------

    @rpc("operate")
    def createTransaction(self, request: pb.CreateTxnRequest, user: Any) -> pb.CreateTxnResponse:
        scope, name = _names(request.streamInfo)
        txn = transactions.create_transaction(
            segment_store(), scope, name, lease_ms=request.lease or defaults.TRANSACTION_LEASE_MS
        )
        row = get_stream(scope, name)
        segments = sel.epoch_record(row, txn.epoch).segment_list()
        return pb.CreateTxnResponse(
            txnId=_txn_id(txn), activeSegments=_ranges(row, segments),
            delegationToken=self._token(user, scope, name),
        )  # fmt: skip

    def _txn_status(self, work: Callable[[], Any]) -> pb.TxnStatus:
        kind = pb.TxnStatus
        return outcome(kind, work, {
            StreamNotFoundError: kind.STREAM_NOT_FOUND,
            TransactionNotFoundError: kind.TRANSACTION_NOT_FOUND,
        })  # fmt: skip

    @rpc("operate")
    def commitTransaction(self, request: pb.TxnRequest, user: Any) -> pb.TxnStatus:
        scope, name = _names(request.streamInfo)
        txn_id = _txn_uuid(request.txnId)
        stamp = None if request.timestamp == _NO_TIMESTAMP else request.timestamp
        return self._txn_status(lambda: transactions.commit_transaction(
            scope, name, txn_id, writer_id=request.writerId, timestamp=stamp
        ))  # fmt: skip

    @rpc("operate")
    def abortTransaction(self, request: pb.TxnRequest, user: Any) -> pb.TxnStatus:
        scope, name = _names(request.streamInfo)
        txn_id = _txn_uuid(request.txnId)
        return self._txn_status(lambda: transactions.abort_transaction(scope, name, txn_id))

    @rpc("operate")
    def pingTransaction(self, request: pb.PingTxnRequest, user: Any) -> pb.PingTxnStatus:
        status = pb.PingTxnStatus
        scope, name = _names(request.streamInfo)
        txn_id = _txn_uuid(request.txnId)
        try:
            transactions.ping_transaction(scope, name, txn_id, request.lease)
        except InvalidArgumentError:
            return status(status=status.LEASE_TOO_LARGE)
        except PreconditionFailedError:
            state = transactions.transaction_state(scope, name, txn_id)
            if state == "COMMITTED" or state == "COMMITTING":
                return status(status=status.COMMITTED)
            if state in ("ABORTED", "ABORTING"):
                return status(status=status.ABORTED)
            return status(status=status.MAX_EXECUTION_TIME_EXCEEDED)
        except TransactionNotFoundError:
            return status(status=status.UNKNOWN)
        return status(status=status.OK)

    @rpc("read")
    def checkTransactionState(self, request: pb.TxnRequest, user: Any) -> pb.TxnState:
        scope, name = _names(request.streamInfo)
        try:
            state = transactions.transaction_state(scope, name, _txn_uuid(request.txnId))
        except TransactionNotFoundError:
            return pb.TxnState(state=pb.TxnState.UNKNOWN)
        return pb.TxnState(state=_TXN_STATES.get(state, pb.TxnState.UNKNOWN))

    @rpc("read")
    def listCompletedTransactions(
        self, request: pb.ListCompletedTxnRequest, user: Any
    ) -> pb.ListCompletedTxnResponse:
        row = get_stream(*_names(request.streamInfo))
        done = sel.completed_transactions(row, PAGE_SIZE)
        return pb.ListCompletedTxnResponse(response=[
            pb.TxnResponse(
                txnId=_txn_id(txn),
                status=pb.TxnResponse.COMMITTED if txn.state == "COMMITTED"
                else pb.TxnResponse.ABORTED,
            )
            for txn in done
        ])  # fmt: skip

    # -- writers' marks -------------------------------------------------------------------

    @rpc("operate")
    def noteTimestampFromWriter(
        self, request: pb.TimestampFromWriter, user: Any
    ) -> pb.TimestampResponse:
        status = pb.TimestampResponse
        scope, name = _names(request.position.streamInfo)
        try:
            marks.note_writer_mark(
                scope, name, request.writer, request.timestamp, _cut(request.position.cut)
            )
        except InvalidStreamCutError:
            return status(result=status.INVALID_POSITION)
        except InvalidArgumentError:
            return status(result=status.INVALID_TIME)
        return status(result=status.SUCCESS)

    @rpc("operate")
    def removeWriter(self, request: pb.RemoveWriterRequest, user: Any) -> pb.RemoveWriterResponse:
        status = pb.RemoveWriterResponse
        try:
            scope, name = _names(request.stream)
            row = get_stream(scope, name)
        except (NotFoundError, InvalidArgumentError):
            return status(result=status.STREAM_DOES_NOT_EXIST)
        removed = marks.remove_writer(row, request.writer)
        return status(result=status.SUCCESS if removed else status.UNKNOWN_WRITER)
