"""URLs of the health endpoints (Pravega's paths; mounted at the root and under ``/v1``)."""

from django.urls import path

from controller_app.api.health_views import ASPECTS, health_view

urlpatterns = [path("health", health_view, {"aspect": "health"})]
for _aspect in ASPECTS[1:]:
    urlpatterns += [
        path(f"health/{_aspect}", health_view, {"aspect": _aspect}),
        path(f"health/{_aspect}/<str:contributor>", health_view, {"aspect": _aspect}),
    ]
# Last, so that "readiness" and the other aspects are not taken for contributor names.
urlpatterns.append(path("health/<str:contributor>", health_view, {"aspect": "health"}))
