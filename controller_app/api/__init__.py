"""The controller's REST API: Pravega's admin API under ``/v1/`` and Millrace's additions.

``urls`` maps paths to ``views``; ``serializers`` hold the JSON shapes (Pravega's field names);
``errors`` turns every error into ``{"code": ..., "message": ...}``; ``authentication`` reads
API tokens. Views validate and translate; every write goes through ``controller_app.workflows``.

Its other modules:

* ``acl_views``: ``/v1/acl``: grants listed, given, revoked and checked
* ``cluster_views``: ``GET /v1/cluster``
* ``kafka_views``: ``GET /v1/kafka/groups``
* ``events``: REST append and read for HTTP clients
* ``fields``: request fields and the JSON parser, strict where DRF's defaults are lenient
* ``health_urls``: URLs of the health endpoints (Pravega's paths
* ``health_views``: HTTP health endpoints of a node, shaped like Pravega's REST health API
* ``kvtables``: REST views of key-value tables (Millrace's addition
* ``metrics_views``: ``GET /metrics`` and ``GET /v1/metrics/targets`` (Prometheus)
* ``permissions``: the REST API's permission (grants on the resource a path names)
* ``quota_views``: ``/v1/scopes/{scope}/quota``: a scope's quota, its use, its throttle time
* ``reader_groups``: REST views of reader groups
* ``registry``: the schema registry's REST API (Confluent's Schema Registry API v1, under
  ``/registry/``)
* ``registry_media``: the registry's media type and renderer (its views' and its shortcut's)
* ``registry_shortcut``: the registry's lookup by id, answered in front of Django for a
  credential Django allowed lately (ADR 0015)
"""

#: The paths of the APIs programs call (REST answers in JSON; the rest is the console's).
API_PATH_PREFIXES = ("/v1/", "/api/", "/registry/")


def is_api_path(path: str) -> bool:
    return path.startswith(API_PATH_PREFIXES)
