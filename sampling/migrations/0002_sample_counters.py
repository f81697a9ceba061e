"""The sample counters' triggers and the recount of existing samples (sampling/counters.py).
The table itself is in 0001_initial."""

from django.db import migrations

from sampling import counters


def install_and_count(apps, schema_editor):  # type: ignore[no-untyped-def]
    """Triggers first, then the recount of existing samples."""
    counters.install(schema_editor.connection)
    counters.rebuild(schema_editor.connection)


def drop_triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    with schema_editor.connection.cursor() as cursor:
        for statement in counters.trigger_statements(schema_editor.connection.vendor):
            if statement.startswith("DROP TRIGGER"):
                cursor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("sampling", "0001_initial")]

    operations = [migrations.RunPython(install_and_count, drop_triggers, elidable=False)]
