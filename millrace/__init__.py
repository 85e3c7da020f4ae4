"""Millrace: durable, elastic, ordered event streams for Python people, modelled on Pravega.

One sub-package per floor, every import pointing down (ARCHITECTURE.md, "Layers"):

* ``millrace.ops``: the node's operations: the ``millrace`` command line and the standalone
  supervisor;
* ``millrace.project``: the Django project (settings, URLs, ASGI/WSGI, the Celery app);
* ``millrace.client``: the client SDK users import (its transport in ``client.transport``);
* ``millrace.kernel``: what every role and the client share, with no Django: the wire codec,
  names and ids, token claims, typed settings, status files.

``import millrace.client`` loads neither Django nor Celery nor PySpark: the base install
(``pip install millrace``) is the client; the server and the rest are extras.
"""
