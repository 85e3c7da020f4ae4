"""The embedded Celery broker: kombu's filesystem transport, made safe for concurrent processes.

Kombu's filesystem transport creates a message file and then writes into it; a worker polling
the folder can move and read the file in between, get zero bytes, fail to decode them and stop
("Unrecoverable error: JSONDecodeError"), and the message is lost. Here a message is written to
``<name>.part`` (a name no queue matches) and renamed to its final name only when complete, so
a reader sees whole messages or none. A message that still cannot be decoded is logged and
skipped rather than stopping the worker.

Selected by ``CELERY_BROKER_TRANSPORT`` in the settings when no ``REDIS_URL`` is set.
"""

from __future__ import annotations

import logging
import os
import uuid
from time import monotonic
from typing import Any

from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

log = logging.getLogger(__name__)


class Channel(filesystem.Channel):  # type: ignore[misc]
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + ".part"
        try:
            with open(partial, "wb") as handle:
                handle.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)  # atomic: readers see the whole message or nothing
        except OSError as exc:
            raise filesystem.ChannelError(f"cannot add {final!r} to the queue") from exc

    def _get(self, queue: str) -> Any:
        try:
            return super()._get(queue)
        except ValueError as exc:  # a damaged message file: skip it, keep serving
            log.error("skipped an undecodable message of queue %s: %s", queue, exc)
            raise filesystem.Empty() from exc


class FileSystemTransport(filesystem.Transport):  # type: ignore[misc]
    Channel = Channel
