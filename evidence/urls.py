from django.urls import path

from . import views

app_name = "evidence"

urlpatterns = [
    path("objects/<int:object_id>/", views.download_object, name="download"),
    path("key/<path:key>", views.download_by_key, name="download_by_key"),
]
