"""Denormalised columns for the report (docs/decisions.md, "The report reads mentions and
citations per run"): a capture's run and the completed capture it supersedes, a citation's
sample, run, platform and question revision. Added nullable, filled from the existing rows,
then made NOT NULL."""

import django.db.models.deletion
from django.db import migrations, models

POSTGRESQL = [
    "UPDATE evidence_capture c SET run_id = s.run_id FROM sampling_sample s "
    "WHERE s.id = c.sample_id",
    "UPDATE evidence_capture c SET supersedes_id = p.previous FROM ("
    "  SELECT id, lag(id) OVER (PARTITION BY sample_id ORDER BY revision) AS previous"
    "  FROM evidence_capture WHERE collection_state = 'completed') p "
    "WHERE p.id = c.id AND p.previous IS NOT NULL",
    "UPDATE evidence_citation ci SET sample_id = c.sample_id, run_id = s.run_id, "
    "platform = s.platform, question_revision_id = s.question_revision_id "
    "FROM evidence_capture c JOIN sampling_sample s ON s.id = c.sample_id "
    "WHERE c.id = ci.capture_id",
]
OTHER = [
    "UPDATE evidence_capture SET run_id = (SELECT s.run_id FROM sampling_sample s "
    "WHERE s.id = evidence_capture.sample_id)",
    "UPDATE evidence_capture SET supersedes_id = (SELECT p.id FROM evidence_capture p "
    "WHERE p.sample_id = evidence_capture.sample_id AND p.collection_state = 'completed' "
    "AND p.revision < evidence_capture.revision ORDER BY p.revision DESC LIMIT 1) "
    "WHERE collection_state = 'completed'",
    "UPDATE evidence_citation SET sample_id = (SELECT c.sample_id FROM evidence_capture c "
    "WHERE c.id = evidence_citation.capture_id)",
    "UPDATE evidence_citation SET run_id = s.run_id, platform = s.platform, "
    "question_revision_id = s.question_revision_id FROM sampling_sample s "
    "WHERE s.id = evidence_citation.sample_id",
]


def fill(apps, schema_editor):  # type: ignore[no-untyped-def]
    vendor = schema_editor.connection.vendor
    with schema_editor.connection.cursor() as cursor:
        for statement in POSTGRESQL if vendor == "postgresql" else OTHER:
            cursor.execute(statement)


def _fk(to: str, *, null: bool) -> models.ForeignKey:  # type: ignore[type-arg]
    return models.ForeignKey(
        db_constraint=False,
        db_index=False,
        null=null,
        blank=null,
        on_delete=django.db.models.deletion.DO_NOTHING,
        related_name="+",
        to=to,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("evidence", "0001_initial"),
        ("sampling", "0002_sample_counters"),
    ]

    operations = [
        migrations.AddField("capture", "run", _fk("sampling.run", null=True)),
        migrations.AddField("capture", "supersedes", _fk("evidence.capture", null=True)),
        migrations.AddField("citation", "run", _fk("sampling.run", null=True)),
        migrations.AddField("citation", "sample", _fk("sampling.sample", null=True)),
        migrations.AddField("citation", "platform", models.CharField(max_length=32, null=True)),
        migrations.AddField(
            "citation", "question_revision", _fk("sampling.questionrevision", null=True)
        ),
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=False),
        migrations.AlterField("capture", "run", _fk("sampling.run", null=False)),
        migrations.AlterField("citation", "run", _fk("sampling.run", null=False)),
        migrations.AlterField("citation", "sample", _fk("sampling.sample", null=False)),
        migrations.AlterField("citation", "platform", models.CharField(max_length=32)),
        migrations.AlterField(
            "citation", "question_revision", _fk("sampling.questionrevision", null=False)
        ),
        migrations.AddIndex(
            model_name="capture",
            index=models.Index(
                condition=models.Q(("supersedes__isnull", False)),
                fields=["run", "supersedes"],
                name="capture_run_superseded_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="capture",
            index=models.Index(
                condition=models.Q(("collection_state", "completed"), _negated=True),
                fields=["run", "id"],
                name="capture_run_incomplete_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="citation",
            index=models.Index(fields=["run"], name="citation_run_idx"),
        ),
    ]
