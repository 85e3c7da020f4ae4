"""The schema registry's REST API: Confluent's Schema Registry API v1, under ``/registry/``.

Confluent's clients (``confluent-kafka``'s ``SchemaRegistryClient`` and its serializers,
``python-schema-registry-client``) work against it unchanged, given
``http://<controller>/registry`` as their URL and credentials (Basic ``user:password``, or a
Millrace API token as a Bearer token). Bodies and answers are Confluent's, in its media type
``application/vnd.schemaregistry.v1+json`` (``application/json`` too); errors are
``{"error_code": <Confluent's code>, "message": ...}``. A viewer reads (the lookup and
compatibility POSTs are reads), an operator registers, an admin deletes and configures; every
change is in the audit log. The semantics are ``controller_app.registry.service``'s.
"""

from __future__ import annotations

import json
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import renderers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controller_app.access import grants
from controller_app.api import errors as api_errors
from controller_app.api import registry_shortcut
from controller_app.api.authentication import (
    BearerOrTokenAuthentication,
    LimitedBasicAuthentication,
)
from controller_app.api.fields import JSONParser
from controller_app.api.registry_media import MEDIA_TYPE, RegistryRenderer
from controller_app.models import CredentialsGeneration
from controller_app.registry import formats
from controller_app.registry import service as registry
from controller_app.registry.errors import RegistryError

__all__ = ["urlpatterns"]

#: The credentials of a header, which the lookup by id may take in front of Django
#: (``registry_shortcut``); a console's session cookie is not one.
HEADER_AUTHENTICATORS = (BearerOrTokenAuthentication, LimitedBasicAuthentication)


class RegistryParser(JSONParser):
    media_type = MEDIA_TYPE


class RegistryAnyVersionParser(JSONParser):
    media_type = "application/vnd.schemaregistry+json"


def registry_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Confluent's error body: ``RegistryError`` with its code, anything else with the HTTP
    status as the code (as Confluent's own 401/403/5xx answers are), headers kept
    (``Retry-After``)."""
    if isinstance(exc, RegistryError):
        return Response({"error_code": exc.code, "message": exc.message}, status=exc.status)
    response = api_errors.exception_handler(exc, context)
    if response is not None and isinstance(response.data, dict):
        message = response.data.get("message", "")
        code = response.status_code if response.status_code != 500 else 50001
        response.data = {"error_code": code, "message": message}
    return response


def _flag(request: Request, name: str) -> bool:
    return str(request.query_params.get(name, "")).lower() == "true"


def _body(request: Request) -> dict[str, Any]:
    data = request.data
    if not isinstance(data, dict):
        raise RegistryError(422, 422, "the body must be a JSON object")
    return data


@extend_schema(exclude=True)  # (Confluent's API: documented in docs/components/schema-registry.md)
class RegistryView(APIView):
    renderer_classes = [RegistryRenderer, renderers.JSONRenderer]
    parser_classes = [RegistryParser, RegistryAnyVersionParser, JSONParser]

    def get_exception_handler(self) -> Any:
        return registry_exception_handler

    def grant_resource(self, request: Request) -> str:
        """``prn::/registry/subject:X`` for a subject's calls, ``prn::/registry`` for the rest."""
        return grants.subject_resource(self.kwargs.get("subject"))


class RootView(RegistryView):
    def get(self, request: Request) -> Response:
        return Response({})


class SchemaTypesView(RegistryView):
    def get(self, request: Request) -> Response:
        return Response(list(formats.TYPES))


class SchemaView(RegistryView):
    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # (read before the caller is verified: a change made meanwhile shows as a new one)
        self.generation = CredentialsGeneration.current()
        super().initial(request, *args, **kwargs)

    def get(self, request: Request, schema_id: int) -> Response:
        answer = registry.schema_by_id(schema_id, request.query_params.get("format"))
        if isinstance(request.successful_authenticator, HEADER_AUTHENTICATORS):
            authorization = request.META.get("HTTP_AUTHORIZATION", "")
            registry_shortcut.allow(authorization, self.generation)
        return Response(answer)


class SchemaTextView(RegistryView):
    renderer_classes = [renderers.JSONRenderer]

    def get(self, request: Request, schema_id: int) -> Response:
        return Response(_raw(registry.schema_by_id(schema_id, request.query_params.get("format"))))


def _raw(answer: dict[str, Any]) -> Any:
    """``/schema`` endpoints answer the schema itself: JSON for Avro and JSON Schema."""
    text = answer["schema"]
    if answer.get("schemaType", "AVRO") == "PROTOBUF":
        return text
    return json.loads(text)


class SchemaSubjectsView(RegistryView):
    def get(self, request: Request, schema_id: int) -> Response:
        return Response(registry.subjects_of_schema(schema_id, deleted=_flag(request, "deleted")))


class SchemaVersionsView(RegistryView):
    def get(self, request: Request, schema_id: int) -> Response:
        return Response(registry.versions_of_schema(schema_id, deleted=_flag(request, "deleted")))


class SubjectsView(RegistryView):
    def get(self, request: Request) -> Response:
        return Response(
            registry.list_subjects(
                request.query_params.get("subjectPrefix", ""),
                deleted=_flag(request, "deleted"),
                deleted_only=_flag(request, "deletedOnly"),
            )
        )


class SubjectView(RegistryView):
    needs = {"POST": "read", "DELETE": "admin"}
    audit_actions = {"DELETE": "schema.delete-subject"}

    def post(self, request: Request, subject: str) -> Response:
        return Response(
            registry.lookup(
                subject,
                _body(request),
                normalize=_flag(request, "normalize"),
                deleted=_flag(request, "deleted"),
            )
        )

    def delete(self, request: Request, subject: str) -> Response:
        return Response(registry.delete_subject(subject, permanent=_flag(request, "permanent")))


class VersionsView(RegistryView):
    audit_actions = {"POST": "schema.register"}

    def get(self, request: Request, subject: str) -> Response:
        return Response(registry.list_versions(subject, deleted=_flag(request, "deleted")))

    def post(self, request: Request, subject: str) -> Response:
        answer = registry.register(subject, _body(request), normalize=_flag(request, "normalize"))
        request._request.audit_object = f"{subject}/{answer['version']}"  # type: ignore[attr-defined]
        return Response({"id": answer["id"]})


class VersionView(RegistryView):
    needs = {"DELETE": "admin"}
    audit_actions = {"DELETE": "schema.delete-version"}

    def get(self, request: Request, subject: str, version: str) -> Response:
        return Response(
            registry.get_version(
                subject,
                version,
                deleted=_flag(request, "deleted"),
                fmt=request.query_params.get("format"),
            )
        )

    def delete(self, request: Request, subject: str, version: str) -> Response:
        permanent = _flag(request, "permanent")
        return Response(registry.delete_version(subject, version, permanent=permanent))


class VersionTextView(RegistryView):
    renderer_classes = [renderers.JSONRenderer]

    def get(self, request: Request, subject: str, version: str) -> Response:
        answer = registry.get_version(subject, version, deleted=_flag(request, "deleted"))
        return Response(_raw(answer))


class ReferencedByView(RegistryView):
    def get(self, request: Request, subject: str, version: str) -> Response:
        return Response(registry.referenced_by(subject, version))


class CompatibilityView(RegistryView):
    needs = {"POST": "read"}

    def post(self, request: Request, subject: str, version: str | None = None) -> Response:
        try:
            problems = registry.check_compatibility(
                subject, version, _body(request), normalize=_flag(request, "normalize")
            )
        except RegistryError as exc:
            if exc.code != 40401 or version is not None:
                raise
            problems = []  # (a subject not registered yet: anything is compatible with it)
        answer: dict[str, Any] = {"is_compatible": not problems}
        if _flag(request, "verbose"):
            answer["messages"] = problems
        return Response(answer)


class ConfigView(RegistryView):
    needs = {"PUT": "admin", "DELETE": "admin"}
    audit_actions = {"PUT": "schema.config", "DELETE": "schema.config-delete"}

    def get(self, request: Request, subject: str | None = None) -> Response:
        default = _flag(request, "defaultToGlobal")
        return Response(registry.get_config(subject, default_to_global=default))

    def put(self, request: Request, subject: str | None = None) -> Response:
        return Response(registry.set_config(subject, _body(request).get("compatibility")))

    def delete(self, request: Request, subject: str | None = None) -> Response:
        return Response(registry.delete_config(subject))


class ModeView(RegistryView):
    needs = {"PUT": "admin", "DELETE": "admin"}
    audit_actions = {"PUT": "schema.mode", "DELETE": "schema.mode-delete"}

    def get(self, request: Request, subject: str | None = None) -> Response:
        default = _flag(request, "defaultToGlobal")
        return Response(registry.get_mode(subject, default_to_global=default))

    def put(self, request: Request, subject: str | None = None) -> Response:
        return Response(registry.set_mode(subject, _body(request).get("mode")))

    def delete(self, request: Request, subject: str | None = None) -> Response:
        return Response(registry.delete_mode(subject))


def _urls() -> list[Any]:
    from django.urls import path

    subject = "subjects/<str:subject>"
    version = f"{subject}/versions/<str:version>"
    return [
        path("", RootView.as_view()),
        path("schemas/types", SchemaTypesView.as_view()),
        path("schemas/ids/<int:schema_id>", SchemaView.as_view()),
        path("schemas/ids/<int:schema_id>/schema", SchemaTextView.as_view()),
        path("schemas/ids/<int:schema_id>/subjects", SchemaSubjectsView.as_view()),
        path("schemas/ids/<int:schema_id>/versions", SchemaVersionsView.as_view()),
        path("subjects", SubjectsView.as_view()),
        path(subject, SubjectView.as_view()),
        path(f"{subject}/versions", VersionsView.as_view()),
        path(version, VersionView.as_view()),
        path(f"{version}/schema", VersionTextView.as_view()),
        path(f"{version}/referencedby", ReferencedByView.as_view()),
        path(f"compatibility/{subject}/versions", CompatibilityView.as_view()),
        path(f"compatibility/{version}", CompatibilityView.as_view()),
        path("config", ConfigView.as_view()),
        path("config/<str:subject>", ConfigView.as_view()),
        path("mode", ModeView.as_view()),
        path("mode/<str:subject>", ModeView.as_view()),
    ]


urlpatterns = _urls()
