"""The three roles a tenant's user can hold, as Django groups with their model permissions.

A person's permissions come from the group of their role (global, what pages they may open)
and their `tenancy.TenantMembership` (per tenant, which rows): `tenancy.scope` combines both.
The mapping below is the source of truth; `sync_role_groups` makes the groups equal to it
(data migrations console/0001 and console/0002, and every `migrate`, see tenancy/apps.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.apps import apps as global_apps
from django.apps.registry import Apps
from django.contrib.auth.management import create_permissions

from .models import EVIDENCE_READER_ROLES

OPERATOR = "operator"
ANALYST = "analyst"
FINANCE = "finance"
ROLES = (OPERATOR, ANALYST, FINANCE)


def _perms(app: str, actions: str, *models: str) -> set[str]:
    return {f"{app}.{action}_{model}" for action in actions.split() for model in models}


_TENANT = _perms("tenancy", "view", "tenant")
_RUNS_AND_SAMPLES = _perms("sampling", "view", "run", "batch", "sample", "attempt", "stalewrite")
_EVIDENCE = _perms("evidence", "view", "capture", "evidenceobject", "citation")
_MENTIONS = _perms("analysis", "view", "mention", "analysisrevision", "analysisresult")
_AMBIGUOUS_WORDS = _perms("analysis", "view", "ambiguousword")
# Alerts: read and acknowledge (change alert); finance reads no answers, so no alerts.
_ALERTS = _perms("alerts", "view change", "alert") | _perms("alerts", "view", "alertrule")
# The metrics series (monitoring): the dashboard and the series API; not finance's.
_SERIES = _perms("monitoring", "view", "seriesrow")

ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    # campaigns, preview, launch (add run), cancel (change run), runs, samples (change sample:
    # resolve uncertain), and the evidence behind the samples they launched.
    OPERATOR: frozenset(
        _TENANT
        | _RUNS_AND_SAMPLES
        | _EVIDENCE
        | _MENTIONS
        | _SERIES
        | _perms("sampling", "view add change", "brand", "campaign", "question")
        | _perms("sampling", "view add change delete", "competitor", "platformtarget")
        | _perms("sampling", "add change", "run", "sample")
        | _perms("analysis", "view add change delete", "ambiguousword")
        | _perms("sampling", "view add change", "schedule")
        | _perms("sampling", "view", "scheduleslot")
        | _perms("api", "view add change delete", "webhookendpoint")
        | _perms("api", "view", "webhookdelivery")
        | _ALERTS
        | _perms("alerts", "view add change delete", "alertrule", "alertsubscription")
        | _perms("alerts", "view", "alertdelivery")
    ),
    # runs, samples, evidence, review queue, mentions, reports; no billing.
    ANALYST: frozenset(
        _TENANT
        | _RUNS_AND_SAMPLES
        | _EVIDENCE
        | _MENTIONS
        | _SERIES
        | _perms("evidence", "view", "reviewsample", "reviewdecision")
        | _perms("evidence", "add", "reviewdecision")
        | _AMBIGUOUS_WORDS
        | _ALERTS
    ),
    # ledger, accounts, reconciliation, statements, exports, run money summaries; no answer
    # text, no evidence. add_journalentry is the top-up.
    FINANCE: frozenset(
        _TENANT
        | _perms("sampling", "view", "run")
        | _perms(
            "billing",
            "view",
            "account",
            "journalentry",
            "posting",
            "samplesettlement",
            "priceversion",
            "price",
        )
        | _perms("billing", "add", "journalentry")
    ),
}

# The platform operator's own finance people: provider statements are the platform's bill
# (docs/decisions.md, "Provider statements are the platform's"), imported, read and voided
# here, never by a tenant's finance. Not a tenant role: a group alone, granted by
# `manage.py grant_platform_finance`; superusers hold it implicitly.
PLATFORM_FINANCE = "platform_finance"
PLATFORM_ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    PLATFORM_FINANCE: frozenset(
        _perms("billing", "view add", "upstreamstatement", "statementvoid")
        | _perms("billing", "view", "upstreamstatementline")
    ),
}

# What a role may do beyond model permissions (checked by the views that serve them).
REPORT_ROLES = frozenset({OPERATOR, ANALYST})
EVIDENCE_ROLES = EVIDENCE_READER_ROLES
TOP_UP_PERMISSION = "billing.add_journalentry"


def role_allows(role: str, perm: str) -> bool:
    return perm in ROLE_PERMISSIONS.get(role, frozenset())


def sync_role_groups(
    *, apps: Apps = global_apps, using: str = "default", strict: bool = True
) -> None:
    """Create the role groups (the three tenant roles, platform finance) and set each one's
    permissions to exactly its mapping. Not strict (the data migrations): permissions of
    models a later migration creates are left to the sync after `migrate` (tenancy/apps.py),
    which is strict and names a missing one."""
    for config in global_apps.get_app_configs():
        # On a fresh database permissions are created only after all migrations; make them now.
        create_permissions(config, verbosity=0, apps=apps, using=using)
    group_model = apps.get_model("auth", "Group")
    permission_model = apps.get_model("auth", "Permission")
    for role, perms in {**ROLE_PERMISSIONS, **PLATFORM_ROLE_PERMISSIONS}.items():
        group, _ = group_model.objects.using(using).get_or_create(name=role)
        group.permissions.set(_permission_rows(permission_model, perms, using, strict=strict))


def _permission_rows(
    permission_model: type, perms: Iterable[str], using: str, *, strict: bool
) -> list[object]:
    rows = []
    for perm in sorted(perms):
        app_label, codename = perm.split(".", 1)
        row = (
            permission_model.objects.using(using)  # type: ignore[attr-defined]
            .filter(content_type__app_label=app_label, codename=codename)
            .first()
        )
        if row is None and strict:
            raise LookupError(f"role permission {perm} does not exist")
        if row is not None:
            rows.append(row)
    return rows
