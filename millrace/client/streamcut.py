"""Stream cuts as values: a consistent position in a stream that users save and pass around.

``StreamCut`` maps segment ids to offsets for one stream. ``to_text()`` gives a compact,
URL-safe string (``mrcut1.<base64url of JSON>``) and ``StreamCut.from_text`` reads it back,
checking its form. The stream manager gives the head, the tail and the cut at a time; a reader
can start at any cut.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field

PREFIX = "mrcut1."


@dataclass(frozen=True)
class StreamCut:
    scope: str
    stream: str
    #: segment id -> offset
    positions: dict[int, int] = field(default_factory=dict)

    def to_text(self) -> str:
        body = {
            "scope": self.scope,
            "stream": self.stream,
            "positions": {str(k): v for k, v in sorted(self.positions.items())},
        }
        raw = json.dumps(body, separators=(",", ":")).encode()
        return PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def from_text(cls, text: str) -> StreamCut:
        if not text.startswith(PREFIX):
            raise ValueError(f"not a Millrace stream cut (expected {PREFIX}...)")
        encoded = text[len(PREFIX) :]
        try:
            raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
            body = json.loads(raw)
            positions = {int(k): int(v) for k, v in body["positions"].items()}
            cut = cls(str(body["scope"]), str(body["stream"]), positions)
        except (binascii.Error, ValueError, KeyError, TypeError, AttributeError):
            raise ValueError("a damaged stream cut text") from None
        if not positions or any(k < 0 or v < 0 for k, v in positions.items()):
            raise ValueError("a stream cut names segments at offsets of at least 0")
        return cut

    def __str__(self) -> str:
        return self.to_text()
