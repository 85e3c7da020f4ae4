"""What the REST tests expect of an answer: a success with its body, or an error with its code
and a message."""

from __future__ import annotations

from typing import Any


def ok(response: Any, status: int = 200) -> dict:
    assert response.status_code == status, response.content
    return response.json() if response.content else {}


def error(response: Any, status: int, code: str) -> str:
    """The error's message (there must be one)."""
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code and body["message"], body
    return body["message"]
