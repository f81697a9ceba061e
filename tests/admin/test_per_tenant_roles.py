"""Every console action on a row is decided by the user's role in that row's tenant, never by
the union of their roles: users with a different role in each of the two tenants act on a
row of either tenant (object tools, actions, deletes, change views, inline edits), and only
the role in the row's own tenant lets them. Every change they make names them in the admin
log (the object's history)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.db.models import Model
from django.test import Client
from django.urls import reverse

from analysis.models import AmbiguousWord
from api.models import WebhookEndpoint
from billing.models import JournalEntry
from console.admin_base import TenantScopedAdmin
from evidence.models import ReviewDecision
from pipeline.launch import launch_run
from sampling.models import Run, Sample, Schedule
from tenancy.roles import ROLE_PERMISSIONS, ROLES, role_allows
from tenancy.services import grant_role
from tests import world
from tests.admin.conftest import TOKEN
from tests.world import TenantWorld

two_tenants = world.two_tenants
pytestmark = pytest.mark.django_db

# (role in alpha, role in bravo): every pair of two different roles.
PAIRS = [(a, b) for a in ROLES for b in ROLES if a != b]
TARGETS = ("alpha", "bravo")


@dataclass
class Case:
    client: Client
    user: Any
    world: TenantWorld  # the tenant whose row is acted on


def _case(two_tenants: tuple[TenantWorld, TenantWorld], pair: tuple[str, str], target: str) -> Case:
    alpha, bravo = two_tenants
    username = f"mixed-{pair[0]}-{pair[1]}"
    grant_role(username=username, tenant=alpha.tenant, role=pair[0])
    grant_role(username=username, tenant=bravo.tenant, role=pair[1])
    user = get_user_model().objects.get(username=username)
    client = Client()
    client.force_login(user)
    return Case(client, user, alpha if target == "alpha" else bravo)


def _logged(user: Any, obj: Model) -> bool:
    return LogEntry.objects.filter(user_id=user.pk, object_id=str(obj.pk)).exists()


def _action(case: Case, model: type[Model], action: str, obj: Model, **extra: str) -> Any:
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    return case.client.post(url, {"action": action, "_selected_action": [obj.pk], **extra})


def _open_run(case: Case) -> Run:
    return launch_run(campaign=case.world.run.campaign)


# --- each operation: does it, and says whether the row changed ------------------------------


def cancel_button(case: Case) -> bool:
    run = _open_run(case)
    response = case.client.post(reverse("admin:sampling_run_cancel", args=[run.pk]))
    run.refresh_from_db()
    if run.cancelled_at is not None:
        assert response.status_code == 302 and _logged(case.user, run)
        return True
    assert response.status_code in (403, 404)
    return False


def cancel_action(case: Case) -> bool:
    run = _open_run(case)
    _action(case, Run, "cancel_runs", run, confirm="yes")  # past the confirmation page
    run.refresh_from_db()
    changed = run.cancelled_at is not None
    assert _logged(case.user, run) == changed
    return changed


def cancel_offered_on_run_page(case: Case) -> bool:
    run = _open_run(case)
    response = case.client.get(reverse("admin:sampling_run_change", args=[run.pk]))
    return response.status_code == 200 and bool(response.context["can_cancel"])


def _parked_uncertain(case: Case) -> Sample:
    sample = Sample.objects.filter(run=case.world.run).order_by("id").first()
    assert sample is not None
    Sample.objects.filter(pk=sample.pk).update(
        queue_state="parked",
        submission_state="uncertain",
        collection_state="running",
        evidence_state="pending",
        analysis_state="pending",
        validity="",
    )
    return sample


def resolve_uncertain_action(case: Case) -> bool:
    sample = _parked_uncertain(case)
    _action(case, Sample, "resolve_abandon", sample)
    sample.refresh_from_db()
    changed = sample.queue_state != "parked"
    assert _logged(case.user, sample) == changed
    return changed


def _word(case: Case) -> AmbiguousWord:
    return AmbiguousWord.objects.create(
        campaign=case.world.run.campaign, entity=f"{case.world.marker} brand", word="apple"
    )


def ambiguous_word_change_view_editable(case: Case) -> bool:
    word = _word(case)
    response = case.client.get(reverse("admin:analysis_ambiguousword_change", args=[word.pk]))
    return response.status_code == 200 and bool(response.context["has_change_permission"])


def delete_ambiguous_word(case: Case) -> bool:
    word = _word(case)
    url = reverse("admin:analysis_ambiguousword_delete", args=[word.pk])
    response = case.client.post(url, {"post": "yes"})
    gone = not AmbiguousWord.objects.filter(pk=word.pk).exists()
    assert gone == (response.status_code == 302)
    assert _logged(case.user, word) == gone
    return gone


def delete_selected_ambiguous_words(case: Case) -> bool:
    word = _word(case)
    _action(case, AmbiguousWord, "delete_selected", word, post="yes")
    return not AmbiguousWord.objects.filter(pk=word.pk).exists()


def save_campaign(case: Case) -> bool:
    """A POST of the change form: refused before the form is read (403), or read and found
    incomplete (200): nothing is saved either way, the status tells who may."""
    campaign = case.world.run.campaign
    response = case.client.post(reverse("admin:sampling_campaign_change", args=[campaign.pk]))
    assert response.status_code in (200, 403, 404)
    return response.status_code == 200


def campaign_inlines_editable(case: Case) -> bool:
    campaign = case.world.run.campaign
    response = case.client.get(reverse("admin:sampling_campaign_change", args=[campaign.pk]))
    if response.status_code != 200:
        return False
    inlines = response.context["inline_admin_formsets"]
    editable = {bool(inline.has_change_permission) for inline in inlines}
    assert len(editable) == 1, "inlines of one campaign disagree"
    return editable.pop()


def launch_offered_in_preview(case: Case) -> bool:
    campaign = case.world.run.campaign
    response = case.client.get(reverse("admin:sampling_campaign_preview", args=[campaign.pk]))
    return response.status_code == 200 and TOKEN.search(response.content.decode()) is not None


def launch(case: Case) -> bool:
    campaign = case.world.run.campaign
    before = Run.objects.filter(campaign=campaign).count()
    url = reverse("admin:sampling_campaign_launch", args=[campaign.pk])
    response = case.client.post(url, {"token": "stale"})
    assert Run.objects.filter(campaign=campaign).count() == before
    assert response.status_code in (302, 403, 404)
    return response.status_code == 302  # allowed: back to the preview, the token is stale


def review_decision(case: Case) -> bool:
    sample = Sample.objects.filter(run=case.world.run).order_by("id").last()
    assert sample is not None
    Sample.objects.filter(pk=sample.pk).update(analysis_state="review", queue_state="done")
    url = reverse("admin:evidence_reviewsample_decide", args=[sample.pk])
    case.client.post(url, {"decision": "accepted"})
    return ReviewDecision.objects.filter(sample=sample, reviewer=case.user).exists()


def deactivate_webhook(case: Case) -> bool:
    endpoint = WebhookEndpoint.objects.create(
        tenant=case.world.tenant, url="https://hooks.example.com/geo", secret="s" * 32
    )
    _action(case, WebhookEndpoint, "deactivate", endpoint)
    endpoint.refresh_from_db()
    assert _logged(case.user, endpoint) == (not endpoint.active)
    return not endpoint.active


def pause_schedule(case: Case) -> bool:
    schedule = Schedule.objects.create(
        campaign=case.world.run.campaign,
        cron="0 * * * *",
        next_slot_at=datetime(2030, 1, 1, tzinfo=UTC),
    )
    _action(case, Schedule, "pause", schedule)
    schedule.refresh_from_db()
    assert _logged(case.user, schedule) == schedule.paused
    return schedule.paused


def export_ledger(case: Case) -> bool:
    entry = JournalEntry.objects.filter(tenant=case.world.tenant).order_by("id").first()
    assert entry is not None
    response = _action(case, JournalEntry, "export_csv", entry)
    return response.status_code == 200 and response["Content-Type"].startswith("text/csv")


def top_up(case: Case) -> bool:
    tenant = case.world.tenant
    before = JournalEntry.objects.filter(tenant=tenant).count()
    data = {"tenant": tenant.pk, "amount": "5.00", "currency": "USD", "key": f"pay-{tenant.pk}"}
    case.client.post(reverse("admin:billing_top_up"), data)
    entries = JournalEntry.objects.filter(tenant=tenant).order_by("-id")
    changed = entries.count() > before
    assert not changed or _logged(case.user, entries[0])
    return changed


# operation -> (it, the permission the row's tenant must grant)
OPERATIONS: dict[str, tuple[Callable[[Case], bool], str]] = {
    "cancel button": (cancel_button, "sampling.change_run"),
    "cancel action": (cancel_action, "sampling.change_run"),
    "cancel offered": (cancel_offered_on_run_page, "sampling.change_run"),
    "resolve uncertain action": (resolve_uncertain_action, "sampling.change_sample"),
    "word change view": (ambiguous_word_change_view_editable, "analysis.change_ambiguousword"),
    "delete ambiguous word": (delete_ambiguous_word, "analysis.delete_ambiguousword"),
    "delete selected words": (delete_selected_ambiguous_words, "analysis.delete_ambiguousword"),
    "save campaign": (save_campaign, "sampling.change_campaign"),
    "campaign inline edits": (campaign_inlines_editable, "sampling.change_question"),
    "launch offered": (launch_offered_in_preview, "sampling.add_run"),
    "launch": (launch, "sampling.add_run"),
    "review decision": (review_decision, "evidence.add_reviewdecision"),
    "deactivate webhook": (deactivate_webhook, "api.change_webhookendpoint"),
    "pause schedule": (pause_schedule, "sampling.change_schedule"),
    "export ledger": (export_ledger, "billing.view_journalentry"),
    "top up": (top_up, "billing.add_journalentry"),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("pair", PAIRS, ids="-".join)
@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_only_the_role_in_the_rows_tenant_allows_the_console_action(
    two_tenants: tuple[TenantWorld, TenantWorld],
    operation: str,
    pair: tuple[str, str],
    target: str,
) -> None:
    do, perm = OPERATIONS[operation]
    role_there = pair[TARGETS.index(target)]
    case = _case(two_tenants, pair, target)
    assert do(case) == role_allows(role_there, perm), (operation, pair, target)


def test_the_matrix_covers_a_role_that_may_and_one_that_may_not_for_each_operation() -> None:
    for name, (_, perm) in OPERATIONS.items():
        allowed = {role for role in ROLES if perm in ROLE_PERMISSIONS[role]}
        assert allowed and allowed != set(ROLES), name


def test_every_console_action_says_which_permission_each_rows_tenant_must_grant() -> None:
    """An action without `permissions` would be open to anyone who may view the list."""
    for model, model_admin in admin.site._registry.items():
        for action in model_admin.actions or ():
            if action == "delete_selected":
                continue
            func = getattr(type(model_admin), action)
            if model._meta.app_label == "axes":
                continue  # django-axes's own lock-out pages: superusers only (no role has them)
            assert getattr(func, "allowed_permissions", None), f"{model.__name__}.{action}"
            if isinstance(model_admin, TenantScopedAdmin):
                assert model_admin.action_perms(func)  # every name maps to a permission
