"""The segment store role: the engine (``engine``) and its network faces (``server``, Pravega's
wire protocol; ``kafka``, Kafka's).

Its modules:

* ``engine``: the segment store engine
* ``kafka``: the segment store's Kafka face
* ``server``: the segment store's network face
"""
