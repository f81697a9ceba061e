"""Mentions stored before revisions belong to their run's revision 1 (literal matching)."""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models


def assign_revision_one(apps: Any, schema_editor: Any) -> None:
    Mention = apps.get_model("analysis", "Mention")
    AnalysisRevision = apps.get_model("analysis", "AnalysisRevision")
    run_ids = Mention.objects.filter(revision=None).values_list("sample__run_id", flat=True)
    for run_id in set(run_ids):
        revision, _ = AnalysisRevision.objects.get_or_create(
            run_id=run_id,
            number=1,
            defaults={"analyser": "literal", "analyser_version": "0", "state": "pipeline"},
        )
        Mention.objects.filter(revision=None, sample__run_id=run_id).update(
            revision=revision, context="listed", analyser="literal", analyser_version="0"
        )
        Mention.objects.filter(revision=revision, mentioned=False).update(context="")


class Migration(migrations.Migration):
    dependencies = [("analysis", "0002_revisions")]

    operations = [
        migrations.RunPython(assign_revision_one, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="mention",
            name="revision",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="mentions",
                to="analysis.analysisrevision",
            ),
        ),
    ]
