"""Root URL configuration.

* ``/health...`` and ``/v1/health...``: the node's health (no authentication); ``/live`` and
  ``/ready``: this controller process's own probes (no authentication);
* ``/v1/...``: the REST API (Pravega's admin API and Millrace's additions);
* ``/api/schema/`` (OpenAPI 3, YAML or JSON by ``Accept``), ``/api/docs/`` (Swagger UI, served
  by the node with its script apart from the page, as the content security policy asks);
* ``/admin/``: the Django admin;
* ``/metrics``: Prometheus metrics (``controller_app.operations.metrics``), with the API's
  authentication;
* everything else: the browser console (``admin_ui.urls``): ``/`` is its dashboard, ``/login/``
  signs in.

Unknown API paths and server errors answer JSON (``controller_app.api.errors``).
"""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from controller_app.api.health_views import process_probe_view
from controller_app.api.metrics_views import PrometheusView

urlpatterns = [
    path("", include("controller_app.api.health_urls")),
    path("v1/", include("controller_app.api.health_urls")),
    path("v1/", include("controller_app.api.urls")),
    path("registry/", include("controller_app.api.registry")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("admin/", admin.site.urls),
    path("metrics", PrometheusView.as_view(), name="metrics"),
    path("live", process_probe_view, {"aspect": "live"}),
    path("ready", process_probe_view, {"aspect": "ready"}),
    path("", include("admin_ui.urls")),
]

handler400 = "controller_app.api.errors.bad_request"
handler404 = "controller_app.api.errors.not_found"
handler500 = "controller_app.api.errors.server_error"
