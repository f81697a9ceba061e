"""Tenant moved to tenancy (tenancy/0001): the foreign keys point there, by state only (same
table, same column, same constraint)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0004_default_price_version"),
        ("tenancy", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name=model,
                    name="tenant",
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name="+", to="tenancy.tenant"),
                )
                for model in ("account", "journalentry")
            ]
        )
    ]
