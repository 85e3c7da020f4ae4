"""Request fields and the JSON parser, strict where DRF's defaults are lenient.

DRF's ``CharField`` turns a number into its text (``{"scopeName": 123}`` would create scope
``"123"``, an event ``"data": 5`` would be stored as ``"5"``): ``CharField`` here refuses
anything that is not a JSON string. ``JSONParser`` answers a body over the size limit with 413
naming the limit and JSON nested too deep for the decoder with 400, where DRF and Django would
answer 500 (``RequestDataTooBig``, ``RecursionError``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import exceptions, parsers, serializers


class CharField(serializers.CharField):
    """A string, given as a JSON string: no number or boolean turned into text."""

    default_error_messages = {"invalid": "must be a string, not {kind}."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid", kind=type(data).__name__)
        return super().to_internal_value(data)


class BodyTooLargeError(exceptions.APIException):
    status_code = 413
    default_code = "request-too-large"


def body_limit_message() -> str:
    return f"the request body is over the limit of {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes"


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser with the body size limit and a clear answer for deep nesting."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        request = (parser_context or {}).get("request")
        length = request.META.get("CONTENT_LENGTH") if request is not None else None
        if length and length.isdigit() and int(length) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            raise BodyTooLargeError(body_limit_message())
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError("JSON parse error - nested too deeply") from None
