"""The segment store role: the engine (``engine``) and its network face (``server``).

Its modules:

* ``engine``: the segment store engine
* ``server``: the segment store's network face
"""
