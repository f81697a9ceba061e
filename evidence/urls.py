from django.urls import path

from . import downloads

app_name = "evidence"

urlpatterns = [
    path("objects/<int:object_id>/", downloads.download_object, name="download"),
    path("key/<path:key>", downloads.download_by_key, name="download_by_key"),
]
