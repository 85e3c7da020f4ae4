"""``S3ChunkStorage``: tier-2 chunks as objects in an S3 bucket (AWS or any S3-compatible store).

Responsibility: map chunk names to object keys under a prefix and implement the tier-2
primitives with boto3. Objects are immutable, so the backend declares ``supports_append =
False``: the engine writes every flush as a new chunk and lists a segment's chunks in its own
layout records; truncation deletes whole chunks; a merge relinks the source's chunks without
copying data (``segment_app.engine.writer``). A chunk is created at most once: the put carries
``If-None-Match: *``, so a second create fails even from another node. Chunks of
``multipart_threshold_bytes`` or more go up as a multipart upload in parts of
``multipart_part_bytes``, ``multipart_concurrency`` parts at a time; the chunks of several
segments (one ``write_many``) go up ``write_many_concurrency`` at a time. Throttling, 5xx
answers and dropped connections are retried by botocore with backoff (``retry_mode``,
``max_attempts``); an error that stays is raised as ``StorageError`` naming the operation, the
key and S3's error code.

Integrity in transit: every put carries botocore's CRC32 checksum, which S3 checks. Over
``https`` botocore then leaves the payload out of the SigV4 signature (AWS's default); over
plain ``http`` (a local MinIO, say) it would SHA-256 the whole body for the signature on top:
``payload_signing`` (default false) asks for that, as botocore's ``payload_signing_enabled``.

Credentials and region come from the options when given, else from the usual AWS places
(``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_REGION`` …, ``~/.aws``, an instance
role), as boto3 finds them.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import botocore.config
import botocore.exceptions

from tiers.base import (
    BadChunkOffsetError,
    ChunkExistsError,
    ChunkNotFoundError,
    ChunkStorage,
    StorageError,
)

__all__ = ["S3ChunkStorage"]

#: S3's smallest multipart part (every part but the last).
PART_BYTES_MIN = 5 * 1024 * 1024
_MISSING = ("404", "NoSuchKey", "NotFound")
_BOTO_ERRORS = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)


class S3ChunkStorage(ChunkStorage):
    """Tier-2 in an S3 bucket: no append (a new object per flush), no native concat.

    Options: ``bucket`` (required), ``prefix`` (prepended to every key, e.g. ``"millrace/"``),
    ``endpoint_url`` (an S3-compatible store; default AWS), ``region``, ``access_key_id`` and
    ``secret_access_key`` (default: the AWS environment and files), ``retry_mode``
    (``standard`` or ``adaptive``), ``max_attempts``, ``connect_timeout_s``,
    ``read_timeout_s``, ``multipart_threshold_bytes``, ``multipart_part_bytes``,
    ``multipart_concurrency``, ``payload_signing``.
    """

    name = "s3"
    supports_append = False
    supports_concat = False
    is_durable = True
    blocking = True
    #: the flushes of several segments go up side by side (each mostly waits for S3)
    write_many_concurrency = 8

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        retry_mode: str = "standard",
        max_attempts: int = 8,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 60.0,
        multipart_threshold_bytes: int = 64 * 1024 * 1024,
        multipart_part_bytes: int = 8 * 1024 * 1024,
        multipart_concurrency: int = 4,
        payload_signing: bool = False,
    ) -> None:
        if not isinstance(bucket, str) or not bucket:
            raise ValueError("the s3 tier needs option 'bucket' (the bucket's name)")
        if not isinstance(prefix, str):
            raise ValueError(f"option 'prefix' must be a string, not {prefix!r}")
        if retry_mode not in ("standard", "adaptive", "legacy"):
            raise ValueError(f"option 'retry_mode' must be standard or adaptive: {retry_mode!r}")
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"option 'max_attempts' must be an integer >= 1, not {max_attempts!r}")
        if not isinstance(multipart_part_bytes, int) or multipart_part_bytes < PART_BYTES_MIN:
            raise ValueError(
                f"option 'multipart_part_bytes' must be at least {PART_BYTES_MIN} (S3's minimum)"
            )
        if not isinstance(multipart_threshold_bytes, int) or multipart_threshold_bytes < 1:
            raise ValueError("option 'multipart_threshold_bytes' must be an integer >= 1")
        if not isinstance(multipart_concurrency, int) or multipart_concurrency < 1:
            raise ValueError("option 'multipart_concurrency' must be an integer >= 1")
        if not isinstance(payload_signing, bool):
            raise ValueError(f"option 'payload_signing' must be true or false: {payload_signing!r}")
        self.bucket, self.prefix, self.endpoint_url = bucket, prefix, endpoint_url
        self.multipart_threshold_bytes = multipart_threshold_bytes
        self.multipart_part_bytes = multipart_part_bytes
        config = botocore.config.Config(
            retries={"mode": retry_mode, "max_attempts": max_attempts},
            connect_timeout=connect_timeout_s,
            read_timeout=read_timeout_s,
            max_pool_connections=32,
            s3={"payload_signing_enabled": payload_signing},
        )
        session = boto3.session.Session(
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            region_name=region,
        )
        self._client: Any = session.client("s3", endpoint_url=endpoint_url, config=config)
        #: uploads a multipart chunk's parts side by side (boto3 clients are thread-safe)
        self._parts = ThreadPoolExecutor(multipart_concurrency, thread_name_prefix="s3-part")

    def __repr__(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"S3ChunkStorage(s3://{self.bucket}/{self.prefix}{where})"

    def _key(self, name: str) -> str:
        return self.prefix + name

    # -- primitives ----------------------------------------------------------------------------

    def _do_create(self, name: str) -> None:
        self._put(name, b"")

    def _do_create_with_data(self, name: str, data: bytes | memoryview) -> None:
        if len(data) >= self.multipart_threshold_bytes:
            self._put_multipart(name, data)
        else:
            self._put(name, data)

    def _do_write(self, name: str, offset: int, data: bytes | memoryview) -> None:
        raise StorageError("S3 objects cannot be appended to; use create_with_data")

    def _do_read(self, name: str, offset: int, length: int) -> bytes:
        # (past the end: InvalidRange, or fewer bytes, which the base refuses)
        last = offset + length - 1

        def get() -> bytes:
            answer = self._client.get_object(
                Bucket=self.bucket, Key=self._key(name), Range=f"bytes={offset}-{last}"
            )
            body: bytes = answer["Body"].read()  # a body cut short fails the request too
            return body

        data: bytes = self._request("read", name, get)
        return data

    def _do_delete(self, name: str) -> None:
        self._do_length(name)  # (S3 deletes a missing key without a word)
        self._request("delete", name, self._client.delete_object, Bucket=self.bucket,
                   Key=self._key(name))  # fmt: skip

    def _do_exists(self, name: str) -> bool:
        try:
            self._do_length(name)
        except ChunkNotFoundError:
            return False
        return True

    def _do_length(self, name: str) -> int:
        answer = self._request("head", name, self._client.head_object, Bucket=self.bucket,
                            Key=self._key(name))  # fmt: skip
        return int(answer["ContentLength"])

    def _do_close(self) -> None:
        self._parts.shutdown()
        self._client.close()

    # -- helpers -------------------------------------------------------------------------------

    def _put(self, name: str, data: bytes | memoryview) -> None:
        self._request("create", name, self._client.put_object, Bucket=self.bucket,
                   Key=self._key(name), Body=bytes(data), IfNoneMatch="*")  # fmt: skip

    def _put_multipart(self, name: str, data: bytes | memoryview) -> None:
        """A large chunk in parts; the upload is abandoned (and its parts dropped) if any part
        fails, so a half-written chunk never appears."""
        if self._do_exists(name):
            raise ChunkExistsError(f"chunk {name!r} exists")
        key = self._key(name)
        started = self._request("create", name, self._client.create_multipart_upload,
                             Bucket=self.bucket, Key=key)  # fmt: skip
        upload = started["UploadId"]
        view, step = memoryview(data), self.multipart_part_bytes

        def part(number: int) -> dict[str, Any]:
            start = (number - 1) * step
            done = self._request("create", name, self._client.upload_part, Bucket=self.bucket,
                              Key=key, UploadId=upload, PartNumber=number,
                              Body=bytes(view[start : start + step]))  # fmt: skip
            return {"PartNumber": number, "ETag": done["ETag"]}

        try:
            numbers = range(1, (len(view) + step - 1) // step + 1)
            parts = list(self._parts.map(part, numbers))  # (the first error is raised here)
            self._request("create", name, self._client.complete_multipart_upload,
                       Bucket=self.bucket, Key=key, UploadId=upload, IfNoneMatch="*",
                       MultipartUpload={"Parts": parts})  # fmt: skip
        except BaseException:
            # (if even this fails, the bucket's rule for incomplete uploads cleans up)
            with contextlib.suppress(*_BOTO_ERRORS):
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload)
            raise

    def _request(self, action: str, name: str, fn: Any, **arguments: Any) -> Any:
        """One S3 request (botocore retries what is worth retrying); its errors as tier-2's."""
        try:
            return fn(**arguments)
        except botocore.exceptions.ClientError as error:
            raise self._error(action, name, error) from error
        except botocore.exceptions.BotoCoreError as error:  # connection, credentials ...
            raise StorageError(f"{self!r}: {action} of chunk {name!r} failed: {error}") from error

    def _error(self, action: str, name: str, error: Any) -> StorageError:
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in _MISSING:
            return ChunkNotFoundError(f"chunk {name!r} not found")
        if action == "create" and (code == "PreconditionFailed" or status == 412):
            return ChunkExistsError(f"chunk {name!r} exists")
        if code == "InvalidRange":
            return BadChunkOffsetError(f"chunk {name!r}: bad read range")
        if code == "NoSuchBucket":
            return StorageError(f"{self!r}: bucket {self.bucket!r} does not exist")
        return StorageError(f"{self!r}: {action} of chunk {name!r} failed: {code} ({status})")
