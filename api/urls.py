from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerView

from .views import alerts, billing, campaigns, evidence, hooks, runs, series, tokens
from .views.schema import SchemaView

app_name = "api"

campaign = [
    path("", campaigns.CampaignDetail.as_view(), name="campaign"),
    path("preview", campaigns.CampaignPreview.as_view(), name="preview"),
    path("launch", campaigns.CampaignLaunch.as_view(), name="launch"),
    path("series", series.CampaignSeries.as_view(), name="series"),
]

run = [
    path("", runs.RunDetail.as_view(), name="run"),
    path("cancel", runs.RunCancel.as_view(), name="cancel"),
    path("resume", runs.RunResume.as_view(), name="resume"),
    path("samples/", runs.RunSamples.as_view(), name="samples"),
    path("report", runs.RunReport.as_view(), name="report"),
    path("reconciliation", billing.RunReconciliation.as_view(), name="reconciliation"),
]

webhook = [
    path("", hooks.WebhookDetail.as_view(), name="webhook"),
    path("rotate-secret", hooks.WebhookRotateSecret.as_view(), name="webhook-rotate-secret"),
    path("deliveries/", hooks.WebhookDeliveries.as_view(), name="webhook-deliveries"),
    path(
        "deliveries/<int:delivery_id>/redeliver",
        hooks.WebhookRedeliver.as_view(),
        name="webhook-redeliver",
    ),
]

v1: list[URLPattern | URLResolver] = [
    path("campaigns/", campaigns.CampaignList.as_view(), name="campaigns"),
    path("campaigns/<int:pk>/", include(campaign)),
    path("runs/", runs.RunList.as_view(), name="runs"),
    path("runs/<uuid:run_id>/", include(run)),
    path("samples/<int:pk>/", runs.SampleDetail.as_view(), name="sample"),
    path("ledger/entries/", billing.LedgerEntries.as_view(), name="ledger-entries"),
    path("accounts/", billing.Accounts.as_view(), name="accounts"),
    path("statements/", billing.Statements.as_view(), name="statements"),
    path(
        "statement-imports/<int:pk>",
        billing.StatementImportDetail.as_view(),
        name="statement-import",
    ),
    path("webhooks/", hooks.Webhooks.as_view(), name="webhooks"),
    path("webhooks/<int:pk>/", include(webhook)),
    path("alerts/", alerts.AlertList.as_view(), name="alerts"),
    path(
        "alerts/<int:pk>/acknowledge", alerts.AlertAcknowledge.as_view(), name="alert-acknowledge"
    ),
    path("tokens/", tokens.ApiTokens.as_view(), name="tokens"),
    path("tokens/<int:pk>/revoke", tokens.ApiTokenRevoke.as_view(), name="token-revoke"),
    path(
        "evidence/<int:pk>/download", evidence.EvidenceDownload.as_view(), name="evidence-download"
    ),
]

urlpatterns = [
    path("v1/", include(v1)),
    path("schema/", SchemaView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api:schema"), name="redoc"),
]
