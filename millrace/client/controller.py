"""The client's side of the controller: its REST API, over httpx (asyncio).

What writers and readers need from the controller: scopes and streams, the current segments,
a segment's successors, where a segment is served, and delegation tokens for the segment
store. Errors come back as ``ControllerError`` with the API's stable ``code``.
"""

from __future__ import annotations

from typing import Any

import httpx

from millrace.client.routing import SegmentRange

#: Seconds one REST call may take (a scale or seal waits for the controller's worker).
REQUEST_TIMEOUT_SECONDS = 60.0


class ControllerError(Exception):
    """An error answer of the controller: HTTP ``status``, stable ``code``, ``message``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class AsyncControllerClient:
    """REST calls to one controller (``http://host:9091``), authenticated by an API token."""

    def __init__(self, uri: str, token: str = "", *, timeout: float = REQUEST_TIMEOUT_SECONDS):
        headers = {"Authorization": f"Token {token}"} if token else {}
        self._http = httpx.AsyncClient(
            base_url=uri.rstrip("/") + "/v1", headers=headers, timeout=timeout
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        response = await self._http.request(method, path, json=body)
        if response.status_code >= 400:
            try:
                error = response.json()
                code, message = error["code"], error["message"]
            except (ValueError, KeyError, TypeError):
                code, message = "http-error", response.text[:200]
            raise ControllerError(response.status_code, code, message)
        return response.json() if response.content else None

    # -- scopes and streams ----------------------------------------------------------------

    async def create_scope(self, scope: str) -> bool:
        """Create ``scope``; ``False`` if it existed already."""
        try:
            await self.call("POST", "/scopes", {"scopeName": scope})
        except ControllerError as exc:
            if exc.code == "already-exists":
                return False
            raise
        return True

    async def delete_scope(self, scope: str) -> None:
        await self.call("DELETE", f"/scopes/{scope}")

    async def create_stream(self, scope: str, stream: str, initial_segments: int = 1) -> bool:
        """Create ``scope/stream`` with a fixed number of segments; ``False`` if it existed."""
        body = {
            "streamName": stream,
            "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": initial_segments},
        }
        try:
            await self.call("POST", f"/scopes/{scope}/streams", body)
        except ControllerError as exc:
            if exc.code == "already-exists":
                return False
            raise
        return True

    async def seal_stream(self, scope: str, stream: str) -> None:
        await self.call("PUT", f"/scopes/{scope}/streams/{stream}/state", {"streamState": "SEALED"})

    async def delete_stream(self, scope: str, stream: str) -> None:
        await self.call("DELETE", f"/scopes/{scope}/streams/{stream}")

    # -- segments --------------------------------------------------------------------------

    async def current_segments(self, scope: str, stream: str) -> list[SegmentRange]:
        found = await self.call("GET", f"/scopes/{scope}/streams/{stream}/segments")
        return [_segment(item) for item in found["segments"]]

    async def successors(
        self, scope: str, stream: str, segment_id: int
    ) -> list[tuple[SegmentRange, list[int]]]:
        path = f"/scopes/{scope}/streams/{stream}/segments/{segment_id}/successors"
        found = await self.call("GET", path)
        return [(_segment(item), list(item["predecessors"])) for item in found["successors"]]

    async def segment_uri(self, scope: str, stream: str, segment_id: int) -> tuple[str, int]:
        found = await self.call(
            "GET", f"/scopes/{scope}/streams/{stream}/segments/{segment_id}/uri"
        )
        return str(found["host"]), int(found["port"])

    async def delegation_token(self, scope: str, stream: str) -> str:
        found = await self.call("POST", f"/scopes/{scope}/streams/{stream}/delegation-token")
        return str(found["token"])


def _segment(item: dict[str, Any]) -> SegmentRange:
    return SegmentRange(
        int(item["segmentId"]), str(item["name"]), float(item["keyStart"]), float(item["keyEnd"])
    )
