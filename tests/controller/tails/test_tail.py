"""WebSocket tail reads through the whole ASGI app (origin check, token auth, routing).

A real segment store (memory tiers) serves on a free port; the stream's metadata is written
with the test history builder, its segments created in the store, and the node registered as
the owner of both containers. Events are appended over the wire protocol and must come out of
the WebSocket in order, across a scale, until the stream is sealed.
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any
from urllib.parse import quote

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token

from controller_app import selectors as sel
from controller_app.access.roles import grant
from controller_app.choices import StreamState
from controller_app.models import Stream
from millrace.client.transport.segment_store import SegmentStoreClient
from millrace.project.asgi import application
from tests.controller import factories as f
from tests.controller.history import History
from tests.in_process_node import make_server, server, store  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)
ORIGIN = (b"origin", b"http://127.0.0.1")


@pytest.fixture
def token(db: None) -> str:
    user = get_user_model().objects.create_user("reader", password=None)
    grant(user, "viewer")
    return Token.objects.create(user=user).key


@pytest.fixture
async def client(server: Any) -> Any:  # noqa: F811 - the server fixture
    c = await SegmentStoreClient.connect("127.0.0.1", server.port, request_timeout=10.0)
    yield c
    await c.close()


@pytest.fixture
def history(server: Any) -> History:  # noqa: F811
    node = f.NodeFactory(host="127.0.0.1", port=server.port)
    for number in range(2):  # the store has two containers
        f.ContainerAssignmentFactory(container__number=number, node=node)
    stream = f.StreamFactory(scope=f.ScopeFactory(name="sc"), name="st")
    built = History(stream, segments=2)
    built.save()
    built.stream = sel.get_stream("sc", "st")  # scope joined: names need no query later
    return built


def _name(history: History, segment_id: int) -> str:
    return sel.segment_name(history.stream, segment_id)


async def _create_current(client: SegmentStoreClient, history: History) -> None:
    for segment in history.current:
        await client.create_segment(_name(history, segment.id))


async def _append(client: SegmentStoreClient, name: str, events: list[bytes]) -> None:
    writer = uuid.uuid4()
    await client.setup_append(name, writer)
    await (await client.append_block(writer, events))


async def _open(path: str, token: str | None, origin: bytes = ORIGIN[1]) -> WebsocketCommunicator:
    headers = [(b"origin", origin)]
    if token:
        headers.append((b"authorization", f"Token {token}".encode()))
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    return communicator


async def _messages_until(
    communicator: WebsocketCommunicator, done: Any, timeout: float = 10
) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    while not done(seen):
        seen.append(json.loads(await communicator.receive_from(timeout)))
    return seen


def _events(messages: list[dict[str, Any]]) -> list[tuple[str, bytes]]:
    return [
        (m["segment"], base64.b64decode(e["data"]))
        for m in messages
        if m["type"] == "events"
        for e in m["events"]
    ]


async def test_stream_tail_across_a_scale_until_sealed(client, history, token) -> None:
    await _create_current(client, history)
    low, high = (_name(history, s.id) for s in history.current)
    await _append(client, low, [b"low-0", b"low-1"])
    await _append(client, high, [b"high-0"])

    ws = await _open("/ws/streams/sc/st?from=head", token)
    first = json.loads(await ws.receive_from(10))
    assert first["type"] == "subscribed"
    assert set(first["position"]) == {str(s.id) for s in history.current}
    got = await _messages_until(ws, lambda seen: len(_events(seen)) == 3)
    assert sorted(_events(got)) == sorted([(high, b"high-0"), (low, b"low-0"), (low, b"low-1")])

    # Scale: split the upper segment; its successors get events, then the parent's last ones.
    high_id = history.current[1].id
    await _append(client, high, [b"high-1"])
    await client.seal(high)
    successors = history.split(high_id)
    for segment in successors:
        await client.create_segment(_name(history, segment.id))
    await _append(client, _name(history, successors[0].id), [b"after-0"])
    await _append(client, _name(history, successors[1].id), [b"after-1"])
    await sync_to_async(_rewrite)(history)

    got = await _messages_until(ws, lambda seen: len(_events(seen)) == 3)
    events = _events(got)
    assert events[0] == (high, b"high-1")  # the parent is read to its end first
    assert sorted(e[1] for e in events[1:]) == [b"after-0", b"after-1"]

    # Seal the stream: every segment ends, the subscription ends.
    for segment in history.current:
        await client.seal(_name(history, segment.id))
    await sync_to_async(
        lambda: Stream.objects.filter(pk=history.stream.pk).update(state=StreamState.SEALED)
    )()
    got = await _messages_until(ws, lambda seen: seen and seen[-1]["type"] == "end")
    assert _events(got) == []
    assert (await ws.receive_output(5))["type"] == "websocket.close"


def _rewrite(history: History) -> None:
    """Store the history again (the split added an epoch and sealed a record)."""
    from controller_app.models import Epoch, SegmentRecord

    Epoch.objects.filter(stream=history.stream).delete()
    SegmentRecord.objects.filter(stream=history.stream).delete()
    history.save()
    history.stream = sel.get_stream("sc", "st")


async def test_tail_starts_at_the_end(client, history, token) -> None:
    await _create_current(client, history)
    low = _name(history, history.current[0].id)
    await _append(client, low, [b"old"])
    ws = await _open("/ws/streams/sc/st?from=tail&encoding=utf-8", token)
    assert json.loads(await ws.receive_from(10))["type"] == "subscribed"
    await _append(client, low, [b"new", b"\xff\xfe"])
    got = await _messages_until(ws, lambda seen: sum(len(m["events"]) for m in seen) == 2)
    items = [e for m in got for e in m["events"]]
    assert items[0]["text"] == "new"  # utf-8 asked for, given when the bytes are text
    assert base64.b64decode(items[1]["data"]) == b"\xff\xfe"
    await ws.disconnect()


async def test_one_segment_from_an_offset(client, history, token) -> None:
    await _create_current(client, history)
    low = _name(history, history.current[0].id)
    await _append(client, low, [b"a", b"b", b"c"])
    # '#' must be sent as %23 (it starts a URL fragment); after the first event: 8 + 1 bytes.
    ws = await _open(f"/ws/segments/{quote(low, safe='/')}?offset=9", token)
    assert json.loads(await ws.receive_from(10)) == {
        "type": "subscribed",
        "segment": low,
        "offset": 9,
    }
    got = await _messages_until(ws, lambda seen: len(_events(seen)) == 2)
    assert [e[1] for e in _events(got)] == [b"b", b"c"]
    # Not a client message we know: a clear error, and the subscription goes on.
    await ws.send_to(text_data="garbage")
    assert json.loads(await ws.receive_from(5))["code"] == "bad-message"
    await ws.send_to(text_data='{"type": "ping"}')
    assert json.loads(await ws.receive_from(5)) == {"type": "pong"}
    await ws.disconnect()


@pytest.mark.parametrize(
    ("path", "code", "close"),
    [
        ("/ws/streams/sc/nosuch", "not-found", 4404),
        ("/ws/streams/sc/st?from=yesterday", "bad-request", 4400),
        ("/ws/streams/sc/st?from=cut:1=2=3", "bad-request", 4400),
        ("/ws/streams/sc/st?from=position:999=0", "bad-request", 4400),
        ("/ws/streams/sc/st?from=position:0=-5", "bad-request", 4400),
        ("/ws/streams/sc/st?from=position:0=99999999999999999999999", "bad-request", 4400),
        ("/ws/streams/sc/st?from=time:99999999999999999999999", "bad-request", 4400),
        ("/ws/streams/sc/st?from=position:" + "0=1," * 25_000, "bad-request", 4400),
        ("/ws/streams/sc/st?encoding=rot13", "bad-request", 4400),
        ("/ws/segments/not-a-segment", "bad-request", 4400),
    ],
)
async def test_bad_subscriptions_get_a_clear_error(
    client, history, token, path: str, code: str, close: int
) -> None:
    await _create_current(client, history)
    ws = await _open(path, token)
    error = json.loads(await ws.receive_from(10))
    assert (error["type"], error["code"]) == ("error", code)
    assert error["message"]
    assert await ws.receive_output(5) == {"type": "websocket.close", "code": close}


@pytest.mark.parametrize("credentials", [None, "wrong-token"])
async def test_without_valid_credentials_nothing_is_read(
    client, history, credentials: str | None
) -> None:
    await _create_current(client, history)
    await _append(client, _name(history, history.current[0].id), [b"secret"])
    ws = await _open("/ws/streams/sc/st?from=head", credentials)
    error = json.loads(await ws.receive_from(10))
    assert error["code"] == "not-authenticated"
    assert await ws.receive_output(5) == {"type": "websocket.close", "code": 4401}


async def test_token_in_the_query_string(client, history, token) -> None:
    await _create_current(client, history)
    ws = await _open(f"/ws/streams/sc/st?from=head&token={token}", None)
    assert json.loads(await ws.receive_from(10))["type"] == "subscribed"
    await ws.disconnect()


async def test_foreign_origins_are_refused_with_the_reason(history, token) -> None:
    communicator = WebsocketCommunicator(
        application,
        "/ws/streams/sc/st",
        headers=[
            (b"origin", b"http://evil.example"),
            (b"authorization", f"Token {token}".encode()),
        ],
    )
    connected, _ = await communicator.connect(timeout=10)
    assert connected  # the test server has no denial response: an error message, then close
    error = json.loads(await communicator.receive_from(10))
    assert (error["type"], error["code"]) == ("error", "forbidden-origin")
    assert "evil.example" in error["message"] and "MILLRACE_ALLOWED_HOSTS" in error["message"]
    assert await communicator.receive_output(5) == {"type": "websocket.close", "code": 4403}


async def _open_without_origin(path: str, headers: list[tuple[bytes, bytes]]) -> Any:
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    return communicator


@pytest.mark.parametrize("where", ["header", "query"])
async def test_programs_without_an_origin_get_in_with_a_token(
    client, history, token, where: str
) -> None:
    """What Python's websockets or websocat send: no Origin, a token."""
    await _create_current(client, history)
    await _append(client, _name(history, history.current[0].id), [b"hello"])
    headers = [(b"authorization", f"Token {token}".encode())] if where == "header" else []
    query = f"&token={token}" if where == "query" else ""
    ws = await _open_without_origin(f"/ws/streams/sc/st?from=head{query}", headers)
    messages = await _messages_until(ws, lambda seen: any(m["type"] == "events" for m in seen))
    assert messages[0]["type"] == "subscribed"
    assert [data for _, data in _events(messages)] == [b"hello"]
    await ws.disconnect()


async def test_a_user_without_a_role_reads_nothing(client, history) -> None:
    user = await sync_to_async(get_user_model().objects.create_user)("norole", password=None)
    key = (await sync_to_async(Token.objects.create)(user=user)).key
    await _create_current(client, history)
    await _append(client, _name(history, history.current[0].id), [b"secret"])
    ws = await _open("/ws/streams/sc/st?from=head", key)
    error = json.loads(await ws.receive_from(10))
    assert (error["code"], error["message"]) == (
        "permission-denied",
        "READ on prn::/scope:sc/stream:st is not granted to you (no grant, and this needs the "
        "viewer role or a stronger one)",
    )
    assert await ws.receive_output(5) == {"type": "websocket.close", "code": 4403}


async def test_without_an_origin_a_session_cookie_is_not_enough(client, history, token) -> None:
    """The origin check's protection: a handshake without an Origin cannot ride on a session."""
    from django.test import Client

    user = await sync_to_async(get_user_model().objects.create_user)("browser", password="pw")
    await sync_to_async(grant)(user, "viewer")
    browser = Client()
    await sync_to_async(browser.force_login)(user)
    cookie = f"sessionid={browser.cookies['sessionid'].value}".encode()
    await _create_current(client, history)
    with_origin = await _open_with_cookie(cookie, ORIGIN[1])
    assert json.loads(await with_origin.receive_from(10))["type"] == "subscribed"
    await with_origin.disconnect()
    without = await _open_without_origin("/ws/streams/sc/st", [(b"cookie", cookie)])
    error = json.loads(await without.receive_from(10))
    assert error["code"] == "not-authenticated"
    assert await without.receive_output(5) == {"type": "websocket.close", "code": 4401}


async def _open_with_cookie(cookie: bytes, origin: bytes) -> Any:
    headers = [(b"cookie", cookie), (b"origin", origin)]
    return await _open_without_origin("/ws/streams/sc/st", headers)


async def test_a_dropped_subscription_resumes_from_its_position(client, history, token) -> None:
    """The ``next`` offsets received, sent back as ``from=position:...``: only what came after."""
    await _create_current(client, history)
    first, second = (_name(history, s.id) for s in history.current)
    await _append(client, first, [b"a1", b"a2"])
    ws = await _open("/ws/streams/sc/st?from=head", token)
    got = await _messages_until(ws, lambda seen: len(_events(seen)) == 2)
    position = dict(got[0]["position"])
    for message in got:
        if message["type"] == "events":
            position[str(message["segmentId"])] = message["next"]
    await ws.disconnect()
    await _append(client, first, [b"a3"])
    await _append(client, second, [b"b1"])
    cut = ",".join(f"{segment}={offset}" for segment, offset in position.items())
    again = await _open(f"/ws/streams/sc/st?from=position:{cut}", token)
    resumed = await _messages_until(again, lambda seen: len(_events(seen)) == 2)
    assert resumed[0]["position"] == position
    assert sorted(data for _, data in _events(resumed)) == [b"a3", b"b1"]
    await again.disconnect()


def _whole_events(messages: list[dict[str, Any]]) -> list[bytes]:
    """The events of ``messages``, an event sent in parts put back together (as a client
    does: the parts of one offset, in order)."""
    whole, pieces = [], []
    for message in messages:
        for item in message["events"]:
            if "parts" not in item:
                whole.append(
                    item["text"].encode() if "text" in item else base64.b64decode(item["data"])
                )
                continue
            pieces.append(base64.b64decode(item["data"]))
            if item["part"] == item["parts"] - 1:
                whole.append(b"".join(pieces))
                assert len(whole[-1]) == item["size"]
                pieces = []
    return whole


async def test_no_message_is_larger_than_a_default_websocket_client_takes(
    client, history, token
) -> None:
    """Python's ``websockets`` takes messages of at most 1 MiB by default: a 2 MiB event comes
    in parts, many small ones in several messages; every event arrives whole and in order, and
    a part's ``next`` never passes an event not yet whole (a resume starts at its beginning)."""
    await _create_current(client, history)
    low = _name(history, history.current[0].id)
    small = [f"s{i}:".encode() + b"y" * 2000 for i in range(700)]  # 1.4 MB in all
    big = b"b" * (2 * 1024 * 1024)
    ws = await _open("/ws/streams/sc/st?from=head&encoding=utf-8", token)
    assert json.loads(await ws.receive_from(10))["type"] == "subscribed"
    await _append(client, low, [b"first", big, *small])
    raw: list[str] = []
    while len(_whole_events([json.loads(r) for r in raw if '"events"' in r])) < 2 + len(small):
        raw.append(await ws.receive_from(10))
    assert max(len(r.encode()) for r in raw) <= 1024 * 1024
    messages = [json.loads(r) for r in raw]
    assert _whole_events(messages) == [b"first", big, *small]
    parts = [m for m in messages if m["events"] and "parts" in m["events"][0]]
    assert len(parts) == 6  # 2 MiB in parts of 384 KiB
    big_offset = parts[0]["events"][0]["offset"]
    assert [m["next"] for m in parts[:-1]] == [big_offset] * 5
    assert parts[-1]["next"] == big_offset + 8 + len(big)
    await ws.disconnect()
