"""The kernel: what the client, the segment store and the controller all share.

The wire codec (``wire``), segment names and ids (``naming``), delegation-token claims
(``claims``), typed settings read from the environment (``config``), status files
(``status_files``) and the allocator tuning of bulk-data processes (``memory``). It imports no
Django and no role, only the standard library, small codecs and ``tiers`` (for the names of
backends).
"""
