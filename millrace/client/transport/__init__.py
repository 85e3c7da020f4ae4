"""The client's transport: connections to segment stores over Pravega's wire protocol.

* ``segment_store.SegmentStoreClient``: one connection and what runs on it, as parts: the
  connection itself (``connection``: the asyncio protocol, its send queue, congestion and reply
  matching), its request/reply calls (``calls``) and its writers' append sessions (``appends``,
  with ``append_many`` over many writers at once, the blocks of ``append_blocks``, when each
  block is sent (``send_timing``) and the order blocks and calls complete in (``completion``));
* ``pool``: one shared connection per segment store node; ``probe``: a bare keep-alive;
* ``io_loop``: the event loop thread that runs the client for blocking code, and
  ``sync.SyncSegmentStoreClient``, a connection used from blocking code through it.

The streams' API above it (``millrace.client.manager``, writers, readers) uses it; nothing in
it knows of streams.

Its other modules:

* ``direct``: a blocking connection to a segment store, for request/response calls from the
  caller's own thread
* ``table_calls``: table-segment calls on one connection (Pravega's table commands)
"""
