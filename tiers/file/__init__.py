"""The ``file`` tier-1 backend: a durable data log on local files (fdatasync, group commit).

Responsibility: export ``FileDurableDataLog``; the implementation is in ``log.py``, its byte
formats in ``format.py`` and the record scanner in ``scan.py``.

Its other modules:

* ``direct``: ``LedgerAppender``
* ``read``: reading the ledgers back (``LedgerReader``)
* ``thread``: a per-log writer thread
"""

from tiers.file.log import FileDurableDataLog

__all__ = ["FileDurableDataLog"]
