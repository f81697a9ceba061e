"""Tenant moved to tenancy (tenancy/0001): this app's foreign keys point there and the model
leaves this app's state; the table `sampling_tenant` and its rows stay. Every other app's
foreign key to it moves first (the dependencies), so no state ever points at a missing model."""

import django.db.models.deletion
from django.db import migrations, models


def _tenant(related_name: str) -> models.ForeignKey:
    return models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name=related_name, to="tenancy.tenant")


class Migration(migrations.Migration):
    dependencies = [
        ("sampling", "0003_sample_run_unsucceeded_idx"),
        ("tenancy", "0001_initial"),
        ("evidence", "0003_tenantmembership_to_tenancy"),
        ("billing", "0005_tenant_to_tenancy"),
        ("api", "0002_tenant_to_tenancy"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(model_name="brand", name="tenant", field=_tenant("brands")),
                migrations.AlterField(model_name="campaign", name="tenant", field=_tenant("campaigns")),
                migrations.AlterField(model_name="run", name="tenant", field=_tenant("runs")),
                migrations.AlterField(model_name="sample", name="tenant", field=_tenant("+")),
                migrations.DeleteModel(name="Tenant"),
            ]
        )
    ]
