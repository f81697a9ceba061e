"""The moved models keep their content types, and with them their permissions, the role groups
holding those permissions and the admin log: the rows are relabelled, not recreated. On a fresh
database (no content types yet, or both created by a data migration that ran in between) the
stale one is removed, as `remove_stale_contenttypes` would."""

from typing import Any

from django.db import migrations

MOVED = (("sampling", "tenant"), ("evidence", "tenantmembership"))


def _relabel(apps: Any, schema_editor: Any, *, backwards: bool) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    rows = content_type.objects.using(schema_editor.connection.alias)
    for old_app, model in MOVED:
        source, target = ("tenancy", old_app) if backwards else (old_app, "tenancy")
        if rows.filter(app_label=target, model=model).exists():
            rows.filter(app_label=source, model=model).delete()
        else:
            rows.filter(app_label=source, model=model).update(app_label=target)
    # The process-wide cache may still map the old labels (tests migrate in-process).
    from django.contrib.contenttypes.models import ContentType

    ContentType.objects.clear_cache()


def forwards(apps: Any, schema_editor: Any) -> None:
    _relabel(apps, schema_editor, backwards=False)


def backwards(apps: Any, schema_editor: Any) -> None:
    _relabel(apps, schema_editor, backwards=True)


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("tenancy", "0001_initial"),
        ("sampling", "0004_tenant_to_tenancy"),
        ("evidence", "0003_tenantmembership_to_tenancy"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
