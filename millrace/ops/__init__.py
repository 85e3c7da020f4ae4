"""The node's operations: the ``millrace`` command line (``cli``) and the standalone
supervisor (``standalone``). The top floor: it starts the project's processes and imports
anything below it; nothing imports it.

Its other modules:

* ``local_cluster``: ``millrace cluster local``
"""
