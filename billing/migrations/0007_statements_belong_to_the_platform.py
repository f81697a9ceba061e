"""Provider statements belong to the platform, and can be voided.

* `StatementVoid`: the append-only correction of a mistaken statement (its own guard trigger).
* The same file is one statement per provider while it is not voided, and a task is listed by
  one live statement of its provider: both checked under the provider's import lock
  (billing/reconciliation.py), since a unique index cannot see a void. The unique constraints
  on `sha256` and on (provider, upstream_id) become plain indexes.
* On SQLite the two statement tables are rebuilt by the constraint changes, which drops their
  append-only triggers: they are installed again (0002's statements, IF NOT EXISTS).
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

TABLE = "billing_statementvoid"
REBUILT = ["billing_upstreamstatement", "billing_upstreamstatementline"]

PG_STATEMENTS = [
    f"""
CREATE TRIGGER {TABLE}_append_only BEFORE UPDATE OR DELETE ON {TABLE}
    FOR EACH ROW EXECUTE FUNCTION billing_refuse_change();
"""
]
PG_DROP = [f"DROP TRIGGER IF EXISTS {TABLE}_append_only ON {TABLE};"]

SQLITE_STATEMENTS = [
    f"""
CREATE TRIGGER IF NOT EXISTS {table}_no_{op} BEFORE {op.upper()} ON {table}
BEGIN SELECT RAISE(ABORT, '{table} rows are append-only: {op.upper()} refused'); END;
"""
    for table in [TABLE, *REBUILT]
    for op in ("update", "delete")
]
SQLITE_DROP = [f"DROP TRIGGER IF EXISTS {TABLE}_no_{op};" for op in ("update", "delete")]


def install_triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    statements = {"postgresql": PG_STATEMENTS, "sqlite": SQLITE_STATEMENTS}
    for statement in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement, None)


def remove_triggers(apps, schema_editor):  # type: ignore[no-untyped-def]
    statements = {"postgresql": PG_DROP, "sqlite": SQLITE_DROP}
    for statement in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement, None)


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0006_keyed_chain_and_account_opening'),
    ]

    operations = [
        migrations.CreateModel(
            name='StatementVoid',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('reason', models.TextField()),
                ('voided_by', models.CharField(max_length=150)),
                ('voided_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                'ordering': ['-voided_at', '-id'],
            },
        ),
        migrations.AlterModelOptions(
            name='upstreamstatement',
            options={'ordering': ['-imported_at', '-id']},
        ),
        migrations.RemoveConstraint(
            model_name='upstreamstatementline',
            name='statement_line_unique_task',
        ),
        migrations.AddField(
            model_name='upstreamstatement',
            name='imported_by',
            field=models.CharField(blank=True, default='', max_length=150),
        ),
        migrations.AlterField(
            model_name='upstreamstatement',
            name='sha256',
            field=models.CharField(max_length=64),
        ),
        migrations.AlterField(
            model_name='upstreamstatementline',
            name='amount',
            field=models.BigIntegerField(help_text="minor units of the line's currency"),
        ),
        migrations.AddIndex(
            model_name='upstreamstatement',
            index=models.Index(fields=['provider', 'sha256'], name='statement_provider_sha_idx'),
        ),
        migrations.AddIndex(
            model_name='upstreamstatementline',
            index=models.Index(fields=['provider', 'upstream_id'], name='statement_line_task_idx'),
        ),
        migrations.AddField(
            model_name='statementvoid',
            name='statement',
            field=models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, related_name='void', to='billing.upstreamstatement'),
        ),
        migrations.RunPython(install_triggers, remove_triggers, elidable=False),
    ]
