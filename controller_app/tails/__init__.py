"""WebSocket tail reads, served by the controller's ASGI process: the Channels consumers
(``tail``), their authentication (``auth``), the stream directory they ask (``directory``) and
their routes (``routing``). They read the segment store through the client SDK."""
