"""Reading segments: the read index over the cache, tier-1 and tier-2, and its disk cache.

Its modules:

* ``disk_cache``: the read index's on-disk cache
* ``read_index``: the read index
"""
