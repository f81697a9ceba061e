"""Collected samples for evidence tests."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from analysis.services import analyse_sample
from connectors.base import Attachment, Citation, NormalizedResult
from connectors.citations import normalize_url
from evidence import services
from evidence.models import Capture
from sampling.models import Run, Sample
from tenancy.models import Tenant, TenantMembership
from tests.conftest import launch_funded, make_campaign_data
from tests.inprocess import drive_in_process

COLLECTOR = [{"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"}]
OPENAI = [{"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}]


def collected_run(
    targets: list[dict[str, str]], *, questions: int = 1, repeats: int = 1, **data: Any
) -> Run:
    spec = make_campaign_data(questions=questions, targets=targets, repeats=repeats)
    spec.update(data)
    run = launch_funded(spec)
    drive_in_process(run.pk)
    return run


def user(
    name: str, *, tenant: str | None = None, role: str | None = None, staff: bool = True
) -> Any:
    account = get_user_model().objects.create_user(
        name, f"{name}@example.com", "pw", is_staff=staff
    )
    if tenant and role:
        tenant_row, _ = Tenant.objects.get_or_create(slug=tenant, defaults={"name": tenant})
        TenantMembership.objects.create(user=account, tenant=tenant_row, role=role)
        account.groups.add(Group.objects.get(name=role))  # the role's permissions
    return account


def record_result(sample: Sample, result: NormalizedResult) -> Capture:
    """Archive and record a result for `sample` exactly as the pipeline does."""
    archived = services.archive_objects(
        result=result,
        tenant=sample.run.config_snapshot["tenant"],
        run_id=str(sample.run_id),
        sample_id=sample.pk,
        revision=services.next_revision(sample_id=sample.pk),
    )
    with transaction.atomic():
        return services.record_capture(sample=sample, attempt_no=1, archived=archived)


def result(
    answer: str,
    urls: list[tuple[str, str]] = (),  # type: ignore[assignment]
    *,
    attachments: list[Attachment] | None = None,
    warnings: list[str] | None = None,
) -> NormalizedResult:
    return NormalizedResult(
        sample_id=None,
        upstream_id="up-1",
        collection_state="completed",
        evidence_state="stored",
        answer_text=answer,
        raw=answer.encode(),
        raw_mime="text/markdown",
        citations=[
            Citation(id=f"c{i}", url=url, normalized_url=normalize_url(url), title=title)
            for i, (url, title) in enumerate(urls, 1)
        ],
        attachments=attachments or [],
        warnings=warnings or [],
    )


def analyse(sample: Sample) -> Sample:
    verdict = analyse_sample(sample_id=sample.pk)
    with transaction.atomic():
        fresh = Sample.objects.select_for_update().get(pk=sample.pk)
        fresh.analysis_state = "pending"
        verdict.apply(fresh)
        fresh.save()
    return fresh
