"""The operator, analyst and finance groups with their permissions (tenancy/roles.py)."""

from typing import Any

from django.db import migrations


def create_role_groups(apps: Any, schema_editor: Any) -> None:
    from tenancy.roles import sync_role_groups

    sync_role_groups(apps=apps, using=schema_editor.connection.alias, strict=False)


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("sampling", "0002_sample_counters"),
        ("evidence", "0001_initial"),
        ("analysis", "0001_initial"),
        ("billing", "0004_default_price_version"),
    ]

    operations = [migrations.RunPython(create_role_groups, migrations.RunPython.noop)]
