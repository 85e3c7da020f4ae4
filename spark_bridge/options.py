"""The data source's options, parsed once into a frozen dataclass with clear errors.

Names are those of Pravega's Spark connector (``controller``, ``scope``, ``stream``,
``start_stream_cut`` ...), plus ``token`` / ``token_file`` for Millrace's credentials. Spark
hands options over case-insensitively (lower-cased); an unknown name or a bad value raises
``OptionError`` naming it, which fails the job while Spark plans it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from millrace.client.streamcut import StreamCut


class OptionError(ValueError):
    """A bad ``millrace`` data source option (its message names the option)."""


#: Stream cuts that are words, not cut texts.
CUT_WORDS = ("earliest", "latest", "unbounded")
METADATA = ("streams", "streaminfo")
#: Words some string options take (lower-cased), and what they say.
CHOICES = {
    "metadata": METADATA,
    "schema": ("none", "registry"),  # rows of raw events, or typed by the stream's subject
    "mode": ("failfast", "permissive"),  # a typed read's undecodable event: fail, or null
}
#: Integer options with bounds of their own (others: 0 or more).
LIMITS = {
    "default_num_segments": (1, 10_000),
    "default_scale_factor": (0, 1_000),
    "transaction_timeout_ms": (1_000, 600_000),  # a transaction's lease, as the API takes it
}


@dataclasses.dataclass(frozen=True)
class Options:
    controller: str
    scope: str
    stream: str = ""
    start_stream_cut: str = "earliest"
    end_stream_cut: str = "unbounded"
    exactly_once: bool = True
    transaction_timeout_ms: int = 120_000
    allow_create_scope: bool = True
    allow_create_stream: bool = True
    default_num_segments: int = 1
    default_scale_factor: int = 2
    default_segment_target_rate_bytes_per_sec: int = 0
    default_segment_target_rate_events_per_sec: int = 0
    default_retention_duration_milliseconds: int = 0
    default_retention_size_bytes: int = 0
    approx_bytes_per_trigger: int = 0
    metadata: str = ""
    #: TLS (an ``https://``/``tls://`` controller): the CA file (on every executor's host) the
    #: controller and the segment store nodes are verified with, Pravega's ``trustStore``.
    trust_store: str = ""
    #: Check the nodes' host names against their certificates (Pravega's validateHostName).
    validate_hostname: bool = True
    #: ``registry``: rows typed by the stream's value subject's Avro schema (``typed``).
    schema: str = "none"
    #: The subject's version a typed job reads or writes with (0: the latest).
    schema_version: int = 0
    #: A typed write registers the DataFrame's own schema (Confluent's auto.register.schemas).
    auto_register_schemas: bool = False
    mode: str = "failfast"
    token: str = dataclasses.field(default="", repr=False)

    @classmethod
    def parse(cls, given: Mapping[str, Any]) -> Options:
        known = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        token_file = None
        for raw_key, raw_value in given.items():
            key = str(raw_key).lower()
            value = "" if raw_value is None else str(raw_value).strip()
            if key == "token_file":
                token_file = value
                continue
            if key in ("path", "__partition_columns"):  # Spark's own, for load(path) / save(path)
                continue
            field = known.get(key)
            if field is None:
                names = ", ".join(sorted([*known, "token_file"]))
                raise OptionError(f"millrace: unknown option {raw_key!r}; the options are {names}")
            values[key] = _convert(key, value, field.default)
        listing = values.get("metadata") == "streams"  # the scope's streams: no stream needed
        for required in ("controller", "scope", *(() if listing else ("stream",))):
            if not values.get(required):
                raise OptionError(f"millrace: option {required!r} is required")
        if not values["controller"].startswith(("http://", "https://", "tls://")):
            raise OptionError(
                f"millrace: option 'controller' must be Millrace's HTTP URL, not "
                f"{values['controller']!r}"
            )
        trust_store = values.get("trust_store")
        if trust_store and not Path(trust_store).is_file():
            raise OptionError(f"millrace: option 'trust_store': no such file {trust_store!r}")
        if token_file and not values.get("token"):
            try:
                values["token"] = Path(token_file).read_text().strip()
            except OSError as exc:
                raise OptionError(f"millrace: option 'token_file': {exc}") from None
        options = cls(**values)
        options.check_cut("start_stream_cut")
        options.check_cut("end_stream_cut")
        return options

    def check_cut(self, name: str) -> None:
        text = getattr(self, name)
        if text in CUT_WORDS:
            return
        try:
            cut = StreamCut.from_text(text)
        except ValueError as exc:
            raise OptionError(
                f"millrace: option {name!r} must be earliest, latest, unbounded or a stream "
                f"cut's text form: {exc}"
            ) from None
        if (cut.scope, cut.stream) != (self.scope, self.stream):
            raise OptionError(
                f"millrace: option {name!r} is a cut of {cut.scope}/{cut.stream}, "
                f"not of {self.scope}/{self.stream}"
            )

    def cut(self, name: str) -> StreamCut | None:
        """The option's stream cut; None for a word (the caller knows what it means)."""
        text = getattr(self, name)
        return None if text in CUT_WORDS else StreamCut.from_text(text)


def _convert(key: str, value: str, default: Any) -> Any:
    if isinstance(default, bool):
        if value.lower() in ("true", "1", "yes"):
            return True
        if value.lower() in ("false", "0", "no"):
            return False
        raise OptionError(f"millrace: option {key!r} must be true or false, not {value!r}")
    if isinstance(default, int):
        try:
            number = int(value)
        except ValueError:
            raise OptionError(
                f"millrace: option {key!r} must be an integer, not {value!r}"
            ) from None
        low, high = LIMITS.get(key, (0, 2**63 - 1))
        if not low <= number <= high:
            raise OptionError(
                f"millrace: option {key!r} must be from {low} to {high}, not {number}"
            )
        return number
    if key in CHOICES:
        if value.lower() not in CHOICES[key]:
            words = " or ".join(CHOICES[key])
            raise OptionError(f"millrace: option {key!r} must be {words}, not {value!r}")
        return value.lower()
    return value
