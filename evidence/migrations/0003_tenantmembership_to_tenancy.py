"""TenantMembership now lives in tenancy (tenancy/0001): dropped from this app's state only,
its table and rows stay."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("evidence", "0002_capture_run_citation_identity"),
        ("tenancy", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="TenantMembership")]
        )
    ]
