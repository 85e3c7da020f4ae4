"""moto's S3 server as a real process on 127.0.0.1, for the s3 tier's tests and benchmarks."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import IO

from tests.acceptance.standalone_node import free_ports

#: Credentials moto accepts (any); set in the environment of whatever talks to it.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """Start ``python -m moto.server`` on a free loopback port; its URL until the block ends.
    Its output (a line per request) goes to a temporary file: a pipe nobody reads would fill
    and stop the server."""
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            _wait_until_up(url, process, log)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_up(url: str, process: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=2).close()
            return
        except (urllib.error.URLError, ConnectionError):
            if process.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                error = log.read().decode(errors="replace")
                raise RuntimeError(f"moto's S3 server did not start: {error[-2000:]}") from None
            time.sleep(0.1)


def make_bucket(url: str, bucket: str) -> None:
    """Create ``bucket`` on the server at ``url`` (fine if it is there)."""
    import boto3

    client = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=bucket)
    client.close()
