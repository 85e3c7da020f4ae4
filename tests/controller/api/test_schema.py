"""schemathesis against the published OpenAPI schema: no 5xx, responses match the schema.

Every operation of ``/api/schema/`` gets generated requests (a bounded number per operation)
through the WSGI app with a valid token, against a real segment store; a scope and a stream
named like the examples exist so that some requests reach real records.
"""

from __future__ import annotations

import pytest
import schemathesis
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, given, settings
from rest_framework.authtoken.models import Token

from controller_app.access.roles import grant
from millrace.project.wsgi import application

schema = schemathesis.openapi.from_wsgi("/api/schema/", application)


@pytest.fixture
def keep_connection():
    """The WSGI handler closes the database connection after each request; the test's
    transaction lives on it, so keep it open (as Django's own test client does)."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def token(db: None, registered_node, keep_connection: None) -> str:
    user = get_user_model().objects.create_user("fuzzer", password=None)
    grant(user, "operator")
    return Token.objects.create(user=user).key


#: One test per operation, each with its own id (``schema.parametrize()`` gives them all the
#: same node id, which pytest-xdist takes for a single test and so runs one operation only).
OPERATIONS = [result.ok() for result in schema.get_all_operations()]


@pytest.mark.parametrize("operation", OPERATIONS, ids=[op.label for op in OPERATIONS])
def test_api_conforms_to_its_schema(operation, token: str) -> None:
    @given(case=operation.as_strategy())
    @settings(
        max_examples=15,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )
    def conforms(case) -> None:
        case.call_and_validate(
            headers={"Authorization": f"Token {token}"},
            checks=[
                schemathesis.checks.not_a_server_error,
                schemathesis.checks.response_schema_conformance,
            ],
            excluded_checks=[],
        )

    conforms()


def test_the_schema_is_made_without_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    """Each opening of the API docs makes the schema; it once logged 44 warnings each time
    (an authenticator the schema generator did not know, two serializers of one name)."""
    from drf_spectacular.drainage import GENERATOR_STATS
    from drf_spectacular.generators import SchemaGenerator

    GENERATOR_STATS.reset()
    SchemaGenerator().get_schema(request=None, public=True)
    assert not GENERATOR_STATS._warn_cache, list(GENERATOR_STATS._warn_cache)
    assert (
        "basicAuth"
        in SchemaGenerator().get_schema(request=None, public=True)["components"]["securitySchemes"]
    )
