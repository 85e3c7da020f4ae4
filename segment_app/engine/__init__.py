"""The segment store engine: containers of segments over a tier-1 log and tier-2 chunks.

Its modules:

* ``api``: the public surface of the segment store engine
* ``bootstrap``: the composition root
* ``config``: typed configuration of the segment store engine (one frozen dataclass per
  component)
* ``containers``: segment containers
* ``errors``: errors the segment store engine raises to its callers (wire server, controller
  client)
* ``invariants``: invariant checks for the engine
* ``logs``: a container's durable log
* ``reading``: reading segments
* ``store``: the segment store
* ``tables``: table segments
* ``writer``: moving a container's operations from tier-1 to tier-2 chunks
"""
