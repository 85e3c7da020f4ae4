"""WebSocket tail reads, served by the controller's ASGI process: the Channels consumers
(``tail``), their authentication (``auth``), what they ask of the controller's metadata
(``streams``) and their routes (``routing``). They read the segment store through the client
SDK."""
