from django.contrib import admin
from django.urls import path, re_path

from deliveries.api import api, unknown_path
from delivery_project.health import healthz, readyz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    re_path(r"^api/", unknown_path),
]
