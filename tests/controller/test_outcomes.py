"""One table of outcomes (``controller_app.outcomes``): every controller error has its row, and
REST and gRPC answer each error as the row says, gRPC through a ``grpc.aio`` channel to an
in-process endpoint (the real rpc wrapper, authentication included)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from controller_app import errors as ce
from controller_app.access.roles import grant
from controller_app.access.tokens import token_for
from controller_app.grpc import controller_pb2 as pb
from controller_app.grpc import segments as grpc_segments
from controller_app.grpc.controller_pb2_grpc import ControllerServiceStub
from controller_app.grpc.server import GrpcEndpoint
from controller_app.outcomes import OUTAGES, OUTCOMES, outcome_of
from millrace.client.transport import segment_store as ssc


def controller_errors() -> list[type[BaseException]]:
    """Every error class ``controller_app.errors`` defines (the base excepted)."""
    return [cls for _, cls in inspect.getmembers(ce, inspect.isclass)
            if issubclass(cls, ce.ControllerError) and cls is not ce.ControllerError
            and cls.__module__ == ce.__name__]  # fmt: skip


def test_every_controller_error_has_its_own_row() -> None:
    rows = {cls for cls, _ in OUTCOMES} | set(OUTAGES)
    missing = [cls.__name__ for cls in controller_errors() if cls not in rows]
    assert not missing, f"no row in controller_app.outcomes for {missing}"


def test_a_subclass_row_comes_before_its_base() -> None:
    classes = [cls for cls, _ in OUTCOMES]
    for i, cls in enumerate(classes):
        for later in classes[i + 1 :]:
            assert not issubclass(later, cls), f"{later.__name__} is shadowed by {cls.__name__}"


def test_an_error_with_no_row_is_a_bug() -> None:
    assert outcome_of(KeyError("a bug")) is None  # (no bare LookupError: a KeyError is a bug)
    assert outcome_of(ce.NoNodeForSegmentError("failover")).grpc == "UNAVAILABLE"  # type: ignore[union-attr]


#: One instance of each class of the table, and a bug.
CASES = [cls("what went wrong") for cls, _ in OUTCOMES] + [KeyError("a bug")]


@pytest.fixture
def token(transactional_db: Any) -> str:
    user = get_user_model().objects.create_user("outcomes")
    grant(user, "admin")
    return token_for(user)


@pytest.fixture
def endpoint(transactional_db: Any) -> Iterator[GrpcEndpoint]:
    running = GrpcEndpoint("127.0.0.1", 0).start()
    yield running
    running.stop()


def _grpc_status(port: int, token: str) -> tuple[grpc.StatusCode, str]:
    async def call() -> tuple[grpc.StatusCode, str]:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = ControllerServiceStub(channel)
            try:
                await stub.getCurrentSegments(
                    pb.StreamInfo(scope="s", stream="t"),
                    metadata=[("authorization", f"Bearer {token}")], timeout=30,
                )  # fmt: skip
            except grpc.aio.AioRpcError as exc:
                return exc.code(), exc.details() or ""
        raise AssertionError("the rpc succeeded")

    return asyncio.run(call())


def test_grpc_and_rest_answer_each_error_as_its_row_says(
    endpoint: GrpcEndpoint, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same error raised where gRPC's ``getCurrentSegments`` and REST's stream view look
    the stream up: the status, code and message are the row's on both faces."""
    rest = APIClient()
    rest.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    for error in CASES:

        def fail(*args: Any, error: BaseException = error) -> Any:
            raise error

        monkeypatch.setattr(grpc_segments, "get_stream", fail)
        monkeypatch.setattr("controller_app.api.views.get_stream", fail)
        code, message = _grpc_status(endpoint.port, token)
        answer = rest.get("/v1/scopes/s/streams/t")
        row = outcome_of(error)
        if row is None:
            assert (code, message) == (grpc.StatusCode.INTERNAL, "internal error: KeyError")
            assert answer.status_code == 500 and answer.json()["code"] == "internal-error"
            continue
        assert code == grpc.StatusCode[row.grpc], type(error)
        assert message == row.say(error)
        assert (answer.status_code, answer.json()["code"]) == (row.http, row.code), type(error)
        assert answer.json()["message"] == row.say(error)
        assert answer.headers.get("Retry-After") == (str(row.retry_after) if row.retry else None)


def test_the_segment_stores_own_errors_have_rows() -> None:
    assert outcome_of(ssc.SegmentSealedError("s")).code == "stream-sealed"  # type: ignore[union-attr]
    assert outcome_of(ConnectionResetError()).retry  # type: ignore[union-attr]
