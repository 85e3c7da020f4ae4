"""The controller's REST API: Pravega's admin API under ``/v1/`` and Millrace's additions.

``urls`` maps paths to ``views``; ``serializers`` hold the JSON shapes (Pravega's field names);
``errors`` turns every error into ``{"code": ..., "message": ...}``; ``authentication`` reads
API tokens. Views validate and translate; every write goes through ``controller_app.workflows``.
"""
