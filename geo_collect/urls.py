from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from sampling.views import collector_callback

urlpatterns = [
    # The operator console is the admin; "/" takes an operator there (via its login page).
    path("", RedirectView.as_view(pattern_name="admin:index", permanent=False)),
    path("", include("ops.urls")),  # before admin/: /admin/operations/ is ours
    path("admin/", admin.site.urls),
    path("evidence/", include("evidence.urls")),
    path("api/", include("api.urls")),
    path("callbacks/collector/", collector_callback, name="collector-callback"),
]
