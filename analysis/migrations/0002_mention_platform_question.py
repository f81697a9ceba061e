"""What the report groups by, on each mention row (docs/decisions.md, "The report reads
mentions and citations per run"): added nullable, filled from the samples, made NOT NULL."""

import django.db.models.deletion
from django.db import migrations, models

POSTGRESQL = (
    "UPDATE analysis_mention m SET platform = s.platform, "
    "question_revision_id = s.question_revision_id FROM sampling_sample s "
    "WHERE s.id = m.sample_id"
)
OTHER = (
    "UPDATE analysis_mention SET platform = s.platform, "
    "question_revision_id = s.question_revision_id FROM sampling_sample s "
    "WHERE s.id = analysis_mention.sample_id"
)


def fill(apps, schema_editor):  # type: ignore[no-untyped-def]
    vendor = schema_editor.connection.vendor
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(POSTGRESQL if vendor == "postgresql" else OTHER)


def _question(*, null: bool) -> models.ForeignKey:  # type: ignore[type-arg]
    return models.ForeignKey(
        db_constraint=False,
        db_index=False,
        null=null,
        on_delete=django.db.models.deletion.DO_NOTHING,
        related_name="+",
        to="sampling.questionrevision",
    )


class Migration(migrations.Migration):
    dependencies = [
        ("analysis", "0001_initial"),
        ("sampling", "0002_sample_counters"),
    ]

    operations = [
        migrations.AddField("mention", "platform", models.CharField(max_length=32, null=True)),
        migrations.AddField("mention", "question_revision", _question(null=True)),
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=False),
        migrations.AlterField("mention", "platform", models.CharField(max_length=32)),
        migrations.AlterField("mention", "question_revision", _question(null=False)),
    ]
