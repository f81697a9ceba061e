"""The role groups again, once the tenant's content type is tenancy's (tenancy/0002): on a
fresh database 0001 may have run before `tenancy.view_tenant` existed and left it out."""

from typing import Any

from django.db import migrations


def sync_role_groups(apps: Any, schema_editor: Any) -> None:
    from tenancy.roles import sync_role_groups

    sync_role_groups(apps=apps, using=schema_editor.connection.alias, strict=False)


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0001_role_groups"),
        ("tenancy", "0002_move_content_types"),
    ]

    operations = [migrations.RunPython(sync_role_groups, migrations.RunPython.noop)]
