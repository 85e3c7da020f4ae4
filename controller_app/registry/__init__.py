"""The schema registry: Confluent's Schema Registry, served by the controller.

``service`` holds its operations with Confluent's semantics (the REST views of
``controller_app.api.registry``, the CLI and the console call it); ``formats`` parses schemas
and judges compatibility through one module per format; ``errors`` holds Confluent's error
codes. Its records are ``controller_app.models.registry``'s.

Its other modules:

* ``avro_format``: Avro schemas (Apache Avro's parser and compatibility checker)
* ``decoding``: events decoded by their schema ids (REST and WebSocket ``decode=json``, the
  console, ``stream read --decode``)
* ``policies``: streams' schema policies (enforcement, subject, schema ids) for the segment
  stores
* ``json_format``: JSON Schema schemas (``jsonschema``) and their compatibility rules
* ``protobuf_format``: Protobuf schemas (``protoc`` and protobuf's descriptors) and their
  compatibility rules
* ``schema_types``: what the formats share (their errors, references, compact JSON)
"""
