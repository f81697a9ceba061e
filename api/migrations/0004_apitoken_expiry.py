"""API tokens expire and say who revoked them (issue 28, point 5). Tokens made before this get
the default lifetime from now (GEO_API_TOKEN_DAYS), not from their creation: an integration
holding one is not cut off by the upgrade, and no token lives on without an end."""

import datetime

import django.db.models.deletion

from django.conf import settings
from django.db import migrations, models
from django.db.models.functions import Now


def give_existing_tokens_an_end(apps, schema_editor):
    token = apps.get_model("api", "ApiToken")
    days = int(getattr(settings, "GEO_API_TOKEN_DAYS", 90))
    token.objects.filter(expires_at=None).update(expires_at=Now() + datetime.timedelta(days=days))


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0003_webhookdelivery_redeliveries"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="name",
            field=models.CharField(blank=True, default="", help_text="what it is for", max_length=100),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(null=True),
        ),
        migrations.RunPython(give_existing_tokens_an_end, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="revoked_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
    ]
