"""The jetstream tier-1 backend against real nats-server processes started by the tests: the
shared contract (fencing included) on one server, frames split over several messages, bad
options, and a server that is not there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tiers.nats_servers import NatsServer, nats_servers
from tiers.base import DataLogError, DurableDataLog
from tiers.jetstream import JetStreamDurableDataLog
from tiers.registry import load_tier1
from tiers.testing.contract import DurableDataLogContract


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    with nats_servers(tmp_path_factory.mktemp("nats")) as (server,):
        yield server


class TestJetStreamDurableDataLog(DurableDataLogContract):
    @pytest.fixture(autouse=True)
    def _server(self, nats_server: NatsServer) -> None:
        self.url = nats_server.url

    def make_log(self, tmp_path: Path, log_id: str) -> DurableDataLog:
        return load_tier1("jetstream", servers=[self.url], log_id=f"{tmp_path}/{log_id}")


async def test_a_frame_larger_than_a_message_is_split_and_put_together(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    log = JetStreamDurableDataLog(servers=nats_server.url, log_id=f"{tmp_path}/big")
    await log.open(1)
    frames = [bytes(i % 251 for i in range(3 << 20)), b"small", b"y" * (1 << 20)]
    addresses = [await log.append(frame) for frame in frames]
    assert addresses[0].sequence - addresses[0].offset >= 3  # 3 MiB: 4 messages of < 1 MiB
    assert [item async for item in log.read_all()] == list(zip(addresses, frames, strict=True))
    await log.close()


async def test_no_server_is_a_clear_error(tmp_path: Path) -> None:
    log = JetStreamDurableDataLog(servers="nats://127.0.0.1:9", log_id="x", connect_timeout_s=1)
    with pytest.raises(
        DataLogError, match=r"JetStreamDurableDataLog\(MILLRACE_x_.* at nats://127.0.0.1:9\)"
    ):
        await log.open(1)
    await log.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"servers": []}, "'servers'"),
        ({"replicas": 0}, "'replicas'"),
        ({"storage": "tape"}, "'storage'"),
        ({"stream_prefix": "a.b"}, "'stream_prefix'"),
    ],
)
def test_bad_options_are_refused_with_their_name(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_tier1("jetstream", **options)
