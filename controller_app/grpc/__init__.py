"""Pravega's Client-Controller API over gRPC, for Pravega's own clients.

Its modules:

* ``common``: what every rpc of ``ControllerService`` shares
* ``kvtables``: the gRPC rpcs of key-value tables
* ``reader_groups``: the gRPC rpcs of reader groups
* ``regenerate``: regenerate the Python stubs of ``controller.proto`` (committed next to it)
* ``scopes_streams``: the gRPC rpcs of scopes and streams
* ``segments``: the gRPC rpcs of segments
* ``server``: the controller's gRPC endpoint
* ``service``: Pravega's Client-Controller API over gRPC
* ``transactions``: the gRPC rpcs of transactions and writers' marks
"""
