"""The brand's result on each competitor's mention row (docs/decisions.md, "The report reads
mentions and citations per run"): added nullable and filled from the brand's row of the same
sample and revision."""

from django.db import migrations, models

FILL = (
    "UPDATE analysis_mention AS m SET brand_mentioned = b.mentioned, brand_rank = b.rank "
    "FROM analysis_mention AS b WHERE b.revision_id = m.revision_id "
    "AND b.sample_id = m.sample_id AND b.is_brand AND NOT m.is_brand"
)


class Migration(migrations.Migration):
    dependencies = [
        ("analysis", "0002_mention_platform_question"),
    ]

    operations = [
        migrations.AddField(
            model_name="mention",
            name="brand_mentioned",
            field=models.BooleanField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="mention",
            name="brand_rank",
            field=models.PositiveSmallIntegerField(blank=True, null=True),
        ),
        migrations.RunSQL(FILL, migrations.RunSQL.noop),
    ]
