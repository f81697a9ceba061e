"""Response shapes (documented in the schema). Reads only: writes go through services."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from rest_framework import serializers

from billing.services import format_amount
from sampling.services import campaign_spec_data

# The four layers of a sample's state machine and its queue state (docs/architecture.md).
LAYERS = ("submission", "collection", "evidence", "analysis", "queue")


class EntitySerializer(serializers.Serializer):
    name = serializers.CharField()
    aliases = serializers.ListField(child=serializers.CharField(), required=False)
    domains = serializers.ListField(child=serializers.CharField(), required=False)


class TargetSerializer(serializers.Serializer):
    platform = serializers.CharField()
    device = serializers.CharField(required=False, default="desktop")
    region = serializers.CharField(required=False, default="us")
    mode = serializers.CharField(required=False, default="web_search")


class CampaignBodySerializer(serializers.Serializer):
    """The launch file's shape (sampling/planning.py `parse_campaign_spec` validates it)."""

    tenant = serializers.CharField()
    name = serializers.CharField()
    brand = EntitySerializer()
    competitors = EntitySerializer(many=True, required=False)
    questions = serializers.ListField(child=serializers.CharField())
    topics = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text=(
            "question text -> its topics (tags), each frozen with every run and usable as a "
            "filter of the series; a question left out has none"
        ),
    )
    targets = TargetSerializer(many=True)
    repeats = serializers.IntegerField(min_value=1, max_value=100, required=False)
    screenshot_policy = serializers.CharField(required=False)
    priority = serializers.IntegerField(min_value=-10, max_value=10, required=False)


class CampaignSerializer(CampaignBodySerializer):
    id = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def to_representation(self, instance: Any) -> dict[str, Any]:
        return {
            "id": instance.pk,
            **campaign_spec_data(campaign=instance),
            "created_at": instance.created_at,
            "updated_at": instance.updated_at,
        }


class RunSerializer(serializers.Serializer):
    run_id = serializers.UUIDField(source="pk")
    tenant = serializers.CharField(source="tenant.slug")
    campaign = serializers.IntegerField(source="campaign_id")
    planned_samples = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    cancelled_at = serializers.DateTimeField(allow_null=True)
    resumes = serializers.IntegerField()
    status = serializers.SerializerMethodField()

    def get_status(self, run: Any) -> str:
        """running, finished or cancelled (the outcome is in the run's detail)."""
        if run.cancelled_at is not None:
            return "cancelled"
        return "running" if run.finished_at is None else "finished"


def evidence_links(sample: Any) -> list[dict[str, Any]]:
    links = []
    for capture in sample.captures.all():
        for obj in capture.evidence_objects.all():
            links.append(
                {
                    "id": obj.pk,
                    "kind": obj.kind,
                    "mime": obj.mime,
                    "size": obj.size,
                    "sha256": obj.sha256,
                    "url": reverse("api:evidence-download", args=[obj.pk]),
                }
            )
    return links


class SampleSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    run_id = serializers.UUIDField()
    batch_id = serializers.IntegerField()
    question_revision = serializers.IntegerField(source="question_revision_id")
    platform = serializers.CharField()
    device = serializers.CharField()
    region = serializers.CharField()
    mode = serializers.CharField()
    repeat_index = serializers.IntegerField()
    layers = serializers.SerializerMethodField()
    validity = serializers.CharField()
    validity_reason = serializers.CharField()
    failure_reason = serializers.CharField()
    attempts = serializers.IntegerField()
    resumes = serializers.IntegerField()
    evidence = serializers.SerializerMethodField()

    def get_layers(self, sample: Any) -> dict[str, str]:
        return {layer: getattr(sample, f"{layer}_state") for layer in LAYERS}

    def get_evidence(self, sample: Any) -> list[dict[str, Any]]:
        return evidence_links(sample)


class CitationSerializer(serializers.Serializer):
    position = serializers.IntegerField()
    url = serializers.CharField()
    domain = serializers.CharField()
    title = serializers.CharField()


class MentionSerializer(serializers.Serializer):
    entity = serializers.CharField()
    is_brand = serializers.BooleanField()
    mentioned = serializers.BooleanField()
    count = serializers.IntegerField()
    first_position = serializers.IntegerField(allow_null=True)
    rank = serializers.IntegerField(allow_null=True)
    sentiment = serializers.CharField()
    recommended = serializers.BooleanField()
    sentence = serializers.CharField()


class SampleDetailSerializer(SampleSerializer):
    question = serializers.CharField(source="question_revision.text")
    answer_text = serializers.SerializerMethodField()
    citations = serializers.SerializerMethodField()
    mentions = serializers.SerializerMethodField()

    def _capture(self, sample: Any) -> Any:
        captures = sorted(sample.captures.all(), key=lambda c: c.revision)
        return captures[-1] if captures else None

    def get_answer_text(self, sample: Any) -> str:
        capture = self._capture(sample)
        return capture.answer_text if capture is not None else ""

    def get_citations(self, sample: Any) -> list[dict[str, Any]]:
        capture = self._capture(sample)
        if capture is None:
            return []
        rows = sorted(capture.citations.all(), key=lambda c: c.position)
        return CitationSerializer(rows, many=True).data  # type: ignore[return-value]

    def get_mentions(self, sample: Any) -> list[dict[str, Any]]:
        mentions = list(sample.mentions.all())
        newest = max((m.revision_id or 0 for m in mentions), default=0)
        rows = [m for m in mentions if (m.revision_id or 0) == newest]
        return MentionSerializer(rows, many=True).data  # type: ignore[return-value]


class PostingSerializer(serializers.Serializer):
    account = serializers.CharField(source="account.code")
    amount = serializers.IntegerField(help_text="signed minor units")
    currency = serializers.CharField(source="account.currency")


class JournalEntrySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    tenant = serializers.CharField(source="tenant.slug", allow_null=True)
    run_id = serializers.UUIDField(allow_null=True)
    sample_id = serializers.IntegerField(allow_null=True)
    platform = serializers.CharField()
    upstream_id = serializers.CharField()
    memo = serializers.CharField()
    created_at = serializers.DateTimeField()
    postings = PostingSerializer(many=True)


class AccountSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    code = serializers.CharField()
    kind = serializers.CharField()
    currency = serializers.CharField()
    tenant = serializers.CharField(source="tenant.slug", allow_null=True)
    run_id = serializers.UUIDField(allow_null=True)
    balance = serializers.IntegerField(
        source="ledger_balance",
        help_text="minor units: the sum of the account's postings, for every kind of account",
    )
    balance_display = serializers.SerializerMethodField()

    def get_balance_display(self, account: Any) -> str:
        """Major units with the currency code."""
        return format_amount(account.ledger_balance, account.currency)
