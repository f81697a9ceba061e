from django.urls import path

from . import views

app_name = "ops"

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
    path("admin/operations/", views.operations, name="operations"),
]
