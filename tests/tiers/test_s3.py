"""The s3 tier-2 backend against moto's S3 server (a real HTTP server process on 127.0.0.1):
the shared contract, multipart uploads, bad options and an unreachable or missing bucket."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.faulty_proxy import FaultyProxy
from tests.tiers.s3_server import make_bucket, moto_server
from tiers.base import ChunkStorage, StorageError
from tiers.registry import load_tier2
from tiers.s3 import S3ChunkStorage
from tiers.testing.contract import ChunkStorageContract


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    with moto_server() as url:
        yield url


def _storage(url: str, bucket: str, **more: object) -> S3ChunkStorage:
    return S3ChunkStorage(bucket=bucket, prefix="millrace/", endpoint_url=url, region="us-east-1",
                          access_key_id="testing", secret_access_key="testing", **more)  # fmt: skip


def _bucket_of(tmp_path: Path) -> str:
    """One bucket per test (the same for every instance the test makes)."""
    return "t" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:20]


class TestS3ChunkStorage(ChunkStorageContract):
    @pytest.fixture(autouse=True)
    def _server(self, s3_url: str) -> None:
        self.url = s3_url

    def make_storage(self, tmp_path: Path) -> ChunkStorage:
        bucket = _bucket_of(tmp_path)
        make_bucket(self.url, bucket)
        return _storage(self.url, bucket)


class TestS3ChunkStorageByName(TestS3ChunkStorage):
    """Through the registry, with credentials from the standard AWS variables, as the
    segment store builds it from ``MILLRACE_TIER2=s3`` and ``MILLRACE_TIER2_OPTIONS``."""

    @pytest.fixture(autouse=True)
    def _credentials(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")

    def make_storage(self, tmp_path: Path) -> ChunkStorage:
        bucket = _bucket_of(tmp_path)
        make_bucket(self.url, bucket)
        return load_tier2("s3", bucket=bucket, prefix="p/", endpoint_url=self.url)


async def test_a_large_chunk_goes_up_in_parts_and_reads_back(s3_url: str) -> None:
    make_bucket(s3_url, "multipart")
    storage = _storage(s3_url, "multipart", multipart_threshold_bytes=6 << 20, payload_signing=True)
    data = bytes(i % 251 for i in range(13 << 20))  # three parts of 5 MiB, the last shorter
    storage.multipart_part_bytes = 5 << 20
    await storage.create_with_data("big", data)
    assert await storage.length("big") == len(data)
    assert await storage.read("big", (5 << 20) - 3, 10) == data[(5 << 20) - 3 : (5 << 20) + 7]
    assert await storage.read("big", 0, len(data)) == data  # (parts go up side by side)
    with pytest.raises(StorageError, match="exists"):
        await storage.create_with_data("big", data)
    await storage.close()


async def test_a_read_whose_body_is_cut_short_is_a_tier_error(s3_url: str) -> None:
    """The answer's headers come, its body stops halfway (the connection reset): a tier-2
    error the segment store answers as retriable, not an unexpected one; the next read works."""
    make_bucket(s3_url, "cut")
    proxy = FaultyProxy(int(s3_url.rsplit(":", 1)[1]))
    try:
        storage = _storage(f"http://127.0.0.1:{proxy.port}", "cut", max_attempts=1)
        data = bytes(i % 251 for i in range(4 << 20))
        await storage.create_with_data("c", data)
        proxy.reset_mid_frame(after=1 << 20)  # the headers and the first MiB of the body
        for _ in range(3):  # (a loaded machine may fail a read before the cut is reached)
            with pytest.raises(StorageError, match="read of chunk 'c' failed"):
                await storage.read("c", 0, len(data))
            if proxy.resets:
                break
        assert proxy.resets == 1
        for attempt in range(3):  # (loaded, a connection of the cut one may still be pooled)
            try:
                assert await storage.read("c", 0, len(data)) == data
                break
            except StorageError:
                if attempt == 2:
                    raise
        assert proxy.resets == 1  # (the proxy cut nothing more)
        await storage.close()
    finally:
        proxy.close()


async def test_a_missing_bucket_and_a_dead_endpoint_are_named(s3_url: str) -> None:
    missing = _storage(s3_url, "no-such-bucket")
    with pytest.raises(StorageError, match="bucket 'no-such-bucket' does not exist"):
        await missing.create_with_data("c", b"x")
    dead = _storage("http://127.0.0.1:9", "b", max_attempts=2, connect_timeout_s=1)
    with pytest.raises(
        StorageError, match=r"S3ChunkStorage\(s3://b/millrace/ at http://127.0.0.1:9\)"
    ):
        await dead.exists("c")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, r"needs option\(s\): bucket"),
        ({"bucket": "b", "retry_mode": "often"}, "retry_mode"),
        ({"bucket": "b", "max_attempts": 0}, "max_attempts"),
        ({"bucket": "b", "multipart_part_bytes": 1024}, "at least 5242880"),
        ({"bucket": "b", "multipart_concurrency": 0}, "multipart_concurrency"),
        ({"bucket": "b", "payload_signing": "yes"}, "payload_signing"),
    ],
)
def test_bad_options_are_refused_with_their_name(options: dict, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        load_tier2("s3", **options)
