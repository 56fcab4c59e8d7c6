from django.contrib import admin
from django.http import HttpResponseRedirect
from django.templatetags.static import static
from django.urls import path, re_path
from django.views.generic import RedirectView

from delivery_project.api import api, unknown_path
from delivery_project.health import healthz, readyz
from delivery_project.metrics import dead_letter_groups, metrics

urlpatterns = [
    # The root has no page of its own: a visitor finds the API's docs, where the console's "View site" goes.
    path("", RedirectView.as_view(pattern_name="api:openapi-view"), name="root"),
    # Browsers ask every site for /favicon.ico: the console's icon, not a 404 on every admin page.
    path("favicon.ico", lambda request: HttpResponseRedirect(static("delivery_project/favicon.svg")), name="favicon"),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics, name="metrics"),
    path("dead-letter-groups", dead_letter_groups, name="dead_letter_groups"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    re_path(r"^api/", unknown_path),
]
