"""Millrace's Python client SDK.

``millrace.client.segment_store`` talks to a segment store over the wire protocol
(``SegmentStoreClient`` and its sync wrapper ``SyncSegmentStoreClient``).
"""
