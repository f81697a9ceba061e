"""The ready index keyed by what a claim names: platform, step, tenant, then due time
(docs/decisions.md, "Due work found by skipping from key to key")."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("sampling", "0010_sample_fillfactor")]

    operations = [
        migrations.RemoveIndex(model_name="sample", name="sample_ready_idx"),
        migrations.AddIndex(
            model_name="sample",
            index=models.Index(
                condition=models.Q(("queue_state", "ready")),
                fields=["platform", "step", "tenant", "due_at"],
                name="sample_ready_idx",
            ),
        ),
    ]
