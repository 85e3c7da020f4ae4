"""Moving a container's operations from tier-1 to tier-2 chunks.

Its modules:

* ``storage_writer``: the storage writer
"""
