"""Delegation tokens on the wire: bad ones get AuthTokenCheckFailed and change nothing."""

from __future__ import annotations

import time
import uuid

import jwt
import pytest

from millrace.client.transport import segment_store as c
from millrace.client.transport.segment_store import SegmentStoreClient
from millrace.kernel import claims
from millrace.kernel import wire as wire
from millrace.ops import cli
from segment_app.engine import errors as engine_errors

SEG = "sc/st/0.#epoch.0"
SECRET = "auth-test-secret-0123456789abcdefghij"
OTHER_SECRET = "another-secret-0123456789abcdefghijklmn"


def token(resource: str = "sc/st/", access: str = claims.READ_UPDATE, ttl: float = 60) -> str:
    return claims.mint_token(SECRET, resource, access, ttl)


@pytest.fixture
async def auth_server(make_server):
    return await make_server(auth_enabled=True, token_secret=SECRET)


@pytest.fixture
async def auth_client(auth_server):
    client = await SegmentStoreClient.connect("127.0.0.1", auth_server.port)
    yield client
    await client.close()


# Minted when a test runs, not at import: a collection-time token would expire before a long
# suite reaches these tests, and "expired" would then hide the failure each case is about.
BAD_TOKENS = {
    "missing": lambda: "",
    "garbage": lambda: "not-a-jwt",
    "wrong secret": lambda: claims.mint_token(OTHER_SECRET, "*", claims.READ_UPDATE, 60),
    "wrong resource": lambda: claims.mint_token(SECRET, "sc/other/", claims.READ_UPDATE, 60),
    "read only": lambda: claims.mint_token(SECRET, "sc/st/", claims.READ, 60),
    "unsigned": lambda: jwt.encode(
        {"resource": "*", "access": "READ_UPDATE", "exp": time.time() + 60}, key=None,
        algorithm="none",
    ),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(BAD_TOKENS))
async def test_writes_with_bad_tokens_change_nothing(auth_client, store, kind: str) -> None:
    bad = BAD_TOKENS[kind]()
    with pytest.raises(c.AuthTokenCheckFailedError) as info:
        await auth_client.create_segment(SEG, token=bad)
    assert not info.value.expired
    with pytest.raises(engine_errors.SegmentNotFoundError):
        await store.get_info(SEG)
    await store.create_segment(SEG)
    await store.append(SEG, b"0123456789")
    other = SEG + "#transaction.0000000000000000000000000000000a"
    await store.create_segment(other)
    attempts = [
        auth_client.seal(SEG, token=bad),
        auth_client.truncate(SEG, 5, token=bad),
        auth_client.delete(SEG, token=bad),
        auth_client.merge(SEG, other, token=bad),
        auth_client.update_attribute(SEG, uuid.uuid4(), 1, token=bad),
        auth_client.setup_append(SEG, uuid.uuid4(), token=bad),
    ]
    for attempt in attempts:
        with pytest.raises(c.AuthTokenCheckFailedError):
            await attempt
    info_after = await store.get_info(SEG)
    assert (info_after.length, info_after.start_offset, info_after.sealed) == (10, 0, False)
    assert (await store.get_info(other)).exists


async def test_expired_token_gets_error_code_1(auth_client) -> None:
    expired = claims.mint_token(SECRET, "*", claims.READ_UPDATE, 60, now=time.time() - 120)
    with pytest.raises(c.AuthTokenCheckFailedError) as info:
        await auth_client.create_segment(SEG, token=expired)
    assert info.value.expired


async def test_expired_reply_bytes(auth_server, open_raw) -> None:
    conn = await open_raw(auth_server.port)
    expired = claims.mint_token(SECRET, "*", claims.READ_UPDATE, 1, now=time.time() - 60)
    await conn.send(wire.GetStreamSegmentInfo(42, SEG, expired))
    reply = await conn.recv()
    assert isinstance(reply, wire.AuthTokenCheckFailed)
    assert (reply.request_id, reply.error_code) == (42, wire.TOKEN_EXPIRED)
    await conn.close()


async def test_reads_need_a_read_token(auth_client, store) -> None:
    await store.create_segment(SEG)
    await store.append(SEG, b"data")
    with pytest.raises(c.AuthTokenCheckFailedError):
        await auth_client.read_segment(SEG, 0, token="")
    with pytest.raises(c.AuthTokenCheckFailedError):
        await auth_client.get_info(SEG, token=token("sc/other/", claims.READ))
    read = token(SEG, claims.READ)
    assert (await auth_client.read_segment(SEG, 0, token=read)).data == b"data"
    assert (await auth_client.get_info(SEG, token=read)).write_offset == 4
    assert await auth_client.get_attribute(SEG, uuid.uuid4(), token=read) < 0


async def test_good_token_allows_everything(auth_server) -> None:
    client = await SegmentStoreClient.connect(
        "127.0.0.1", auth_server.port, delegation_token=token()
    )
    await client.create_segment(SEG)
    writer = uuid.uuid4()
    await client.setup_append(SEG, writer)
    assert (await (await client.append_block(writer, b"ok"))).segment_write_offset == 10
    txn = SEG + "#transaction.00000000000000000000000000000001"
    await client.create_segment(txn)  # derived segments are covered by the stream prefix
    assert await client.merge(SEG, txn) == 10
    await client.seal(SEG)
    await client.close()


async def test_exact_segment_token_covers_its_derived_segments(auth_client, store) -> None:
    await store.create_segment(SEG)
    exact = token(SEG)
    await auth_client.create_segment(
        SEG + "#transaction.00000000000000000000000000000002", token=exact
    )
    with pytest.raises(c.AuthTokenCheckFailedError):
        await auth_client.create_segment("sc/st/0.#epoch.00", token=exact)


async def test_block_from_another_connection_is_not_authorized(
    auth_server, open_raw, store
) -> None:
    await store.create_segment(SEG)
    owner, intruder = await open_raw(auth_server.port), await open_raw(auth_server.port)
    writer = uuid.uuid4()
    await owner.send(wire.SetupAppend(1, writer, SEG, token()))
    assert isinstance(await owner.recv(), wire.AppendSetup)
    data = wire.encode_frame(wire.Event(b"sneaky"))
    await intruder.send(wire.AppendBlockEnd(writer, len(data), data, 1, 1, 2))
    reply = await intruder.recv()
    assert isinstance(reply, wire.AuthTokenCheckFailed) and reply.request_id == 2
    assert (await store.get_info(SEG)).length == 0
    await owner.close()
    await intruder.close()


async def test_auth_off_accepts_empty_tokens(client) -> None:
    await client.create_segment(SEG, token="")
    await client.seal(SEG, token="")


def test_auth_on_requires_a_secret(store) -> None:
    from segment_app.server.server import SegmentStoreServer
    from segment_app.server.services import ServerConfig

    with pytest.raises(ValueError, match="MILLRACE_TOKEN_SECRET"):
        SegmentStoreServer(store, ServerConfig(auth_enabled=True, token_secret=""))


# -- the token module alone -----------------------------------------------------------------


def test_verifier_uses_the_injected_clock() -> None:
    now = [1000.0]
    verifier = claims.TokenVerifier(SECRET, clock=lambda: now[0])
    minted = claims.mint_token(SECRET, "a/b/", claims.READ, 10, now=1000.0)
    verifier.check(minted, "a/b/1.#epoch.0", claims.READ)
    now[0] = 1010.0
    with pytest.raises(claims.AuthError) as info:
        verifier.check(minted, "a/b/1.#epoch.0", claims.READ)
    assert info.value.expired


@pytest.mark.parametrize(
    "granted, segment, ok",
    [
        ("*", "anything", True),
        ("a/b/", "a/b/0.#epoch.0", True),
        ("a/b/", "a/bc/0.#epoch.0", False),
        ("a/b/0.#epoch.0", "a/b/0.#epoch.0", True),
        ("a/b/0.#epoch.0", "a/b/0.#epoch.0#transient.x.y", True),
        ("a/b/0.#epoch.0", "a/b/0.#epoch.01", False),
        ("", "a", False),
    ],
)
def test_resource_matching(granted: str, segment: str, ok: bool) -> None:
    assert claims.resource_matches(granted, segment) is ok


def test_mint_token_rejects_unknown_access() -> None:
    with pytest.raises(ValueError):
        claims.mint_token(SECRET, "*", "WRITE", 10)


def test_mint_token_command_prints_a_valid_token(capsys, monkeypatch) -> None:
    monkeypatch.setenv("MILLRACE_TOKEN_SECRET", SECRET)
    assert cli.main(["mint-token", "sc/st/", "--access", "READ_UPDATE", "--ttl", "30"]) == 0
    printed = capsys.readouterr().out.strip()
    claims.TokenVerifier(SECRET).check(printed, "sc/st/0.#epoch.0", claims.READ_UPDATE)


def expired_token() -> str:
    return claims.mint_token(SECRET, "sc/st/", claims.READ_UPDATE, 60, now=time.time() - 120)


async def test_an_expired_default_token_is_renewed_once(auth_server, store) -> None:
    """A client living longer than its delegation token: when the segment store says the
    token has expired, ``token_refresh`` gets a new one and the request goes again; without it
    (or when the new one is expired as well) the error is raised, with nothing changed."""
    renewals: list[str] = []

    async def renew() -> str:
        renewals.append("new")
        return token()

    client = await SegmentStoreClient.connect(
        "127.0.0.1", auth_server.port, delegation_token=expired_token(), token_refresh=renew
    )
    await client.create_segment(SEG)  # the expired token, then a new one
    writer = uuid.uuid4()
    await client.setup_append(SEG, writer)  # the new one at once
    await (await client.append_block(writer, b"event"))
    assert renewals == ["new"]
    assert (await store.get_info(SEG)).length > 0
    await client.close()

    async def stale() -> str:
        renewals.append("stale")
        return expired_token()

    other = SEG.replace("0.#", "1.#")
    client = await SegmentStoreClient.connect(
        "127.0.0.1", auth_server.port, delegation_token=expired_token(), token_refresh=stale
    )
    with pytest.raises(c.AuthTokenCheckFailedError) as info:
        await client.create_segment(other)
    assert info.value.expired and renewals == ["new", "stale"]  # one try, no loop
    await client.close()
    client = await SegmentStoreClient.connect(
        "127.0.0.1", auth_server.port, delegation_token=expired_token()
    )
    with pytest.raises(c.AuthTokenCheckFailedError):
        await client.create_segment(other)
    await client.close()
    with pytest.raises(engine_errors.SegmentNotFoundError):
        await store.get_info(other)


async def test_a_follower_renews_its_expired_read_token(auth_server, store) -> None:
    """A tail reader (SDK reader, WebSocket subscription) outliving its read token asks for a
    new one and goes on reading, instead of ending with an auth error."""
    from millrace.client.follower import StreamFollower, Target
    from millrace.client.transport.pool import SegmentStorePool

    await store.create_segment(SEG)
    await store.append(SEG, wire.EVENT_HEADER.pack(0, 3) + b"abc")
    await store.seal(SEG)
    got: list[bytes] = []

    async def emit(target: Target, events: list, next_offset: int) -> None:  # type: ignore[type-arg]
        got.extend(e.data for e in events)

    async def renew() -> str:
        return token()

    pool = SegmentStorePool()
    target = Target(SEG, 0, "127.0.0.1", auth_server.port)
    follower = StreamFollower(pool, expired_token(), emit, token_refresh=renew)
    await follower.read_segment(target, 0)
    assert got == [b"abc"]
    without = StreamFollower(pool, expired_token(), emit)
    with pytest.raises(c.AuthTokenCheckFailedError):
        await without.read_segment(target, 0)
    await pool.close()
