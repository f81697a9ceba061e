from django.contrib import admin
from django.http import HttpRequest, HttpResponseRedirect
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from sampling.views import collector_callback


def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """Browsers ask for /favicon.ico on pages that name none (a download, a bare error)."""
    return HttpResponseRedirect(static("console/favicon.svg"))


urlpatterns = [
    path("favicon.ico", favicon),
    # The operator console is the admin; "/" takes an operator there (via its login page).
    path("", RedirectView.as_view(pattern_name="admin:index", permanent=False)),
    path("", include("ops.urls")),  # before admin/: /admin/operations/ is ours
    path("admin/", admin.site.urls),
    path("evidence/", include("evidence.urls")),
    path("api/", include("api.urls")),
    path("callbacks/collector/", collector_callback, name="collector-callback"),
]
