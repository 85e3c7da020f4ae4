"""Root URL configuration: health endpoints (no authentication) and the Django admin."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", include("segment_app.urls")),
    path("admin/", admin.site.urls),
]
