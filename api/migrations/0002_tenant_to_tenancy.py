"""Tenant moved to tenancy (tenancy/0001): the foreign key points there, by state only (same
table, same column, same constraint)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0001_initial"),
        ("tenancy", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="webhookendpoint",
                    name="tenant",
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="webhook_endpoints", to="tenancy.tenant"),
                )
            ]
        )
    ]
