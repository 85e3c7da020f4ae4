"""Channels consumers of the segment store role: WebSocket tail reads (``tail``)."""
