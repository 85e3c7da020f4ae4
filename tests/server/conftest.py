"""A real segment store on memory tiers, wire servers on free ports (tests.in_process_node)."""

from tests.in_process_node import (  # noqa: F401 - fixtures
    client,
    make_server,
    open_raw,
    raw,
    server,
    store,
)
