from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0002_tenant_to_tenancy"),
    ]

    operations = [
        migrations.AddField(
            model_name="webhookdelivery",
            name="redeliveries",
            field=models.PositiveIntegerField(default=0),
        ),
    ]
