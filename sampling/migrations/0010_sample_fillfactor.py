"""Room on each page of the sample table for the versions a step writes (docs/decisions.md,
"Room for a sample's next version on its page")."""

from django.db import migrations

FILLFACTOR = 75


def leave_room(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE sampling_sample SET (fillfactor = {FILLFACTOR})")


def fill_pages(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE sampling_sample RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [("sampling", "0009_upstream_cancel")]

    operations = [migrations.RunPython(leave_room, fill_pages, elidable=False)]
