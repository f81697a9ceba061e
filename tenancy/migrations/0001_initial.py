"""Tenant (from sampling) and TenantMembership (from evidence) move here by state only: the
tables `sampling_tenant` and `evidence_tenantmembership` stay as they are, with their rows,
and the models name them in `db_table` (docs/decisions.md "Tenancy at the bottom"). The old
apps drop the models from their state in sampling/0004 and evidence/0003; the foreign keys of
the other apps are pointed here, again by state only, in billing/0005 and api/0002."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        # The tables exist from here on (a fresh database creates them there).
        ("sampling", "0003_sample_run_unsucceeded_idx"),
        ("evidence", "0002_capture_run_citation_identity"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    state_operations = [
        migrations.CreateModel(
            name="Tenant",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("slug", models.SlugField(max_length=64, unique=True)),
                ("name", models.CharField(max_length=200)),
                ("max_concurrency", models.PositiveIntegerField(default=50)),
                ("max_calls_per_second", models.FloatField(blank=True, null=True)),
                ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={"db_table": "sampling_tenant"},
        ),
        migrations.CreateModel(
            name="TenantMembership",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("role", models.CharField(choices=[("operator", "Operator"), ("analyst", "Analyst"), ("finance", "Finance")], max_length=16)),
                ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("tenant", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="members", to="tenancy.tenant")),
                ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="tenant_memberships", to=settings.AUTH_USER_MODEL)),
            ],
            options={
                "db_table": "evidence_tenantmembership",
                "constraints": [
                    models.UniqueConstraint(fields=("user", "tenant"), name="membership_one_per_tenant")
                ],
            },
        ),
    ]

    operations = [migrations.SeparateDatabaseAndState(state_operations=state_operations)]
