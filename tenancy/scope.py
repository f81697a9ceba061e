"""The one tenant-and-role scope. Every query that serves a person (admin changelists, change
views, search, filters, autocomplete, foreign-key choices, inlines, custom views, exports,
evidence downloads, reports and any API view) takes its rows from here.

    scope = user_scope(request.user)
    runs = scoped(Run.objects.all(), request.user)                # view permission
    run = scoped_get_or_404(Run.objects.all(), request.user, pk=run_id)

A user's rows are those of the tenants where their role (their `tenancy.TenantMembership`)
grants the model's permission (`tenancy.roles.ROLE_PERMISSIONS`). Superusers see everything.
Rows of another tenant are simply absent, so a lookup of one is a 404, never a 403 that would
confirm it exists. Platform-wide rows (price lists, statements) have no tenant and follow the
model permission alone; platform-internal rows (outbox, platform accounts) are superuser-only;
the platform's finance rows (provider statements) are platform finance's and superusers'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from django.core.exceptions import ObjectDoesNotExist, PermissionDenied
from django.db.models import Model, Q, QuerySet
from django.http import Http404

from .models import Tenant, TenantMembership
from .roles import PLATFORM_FINANCE, ROLES, role_allows

M = TypeVar("M", bound=Model)

GLOBAL = "*"  # rows with no tenant, readable by anyone the model permission lets in
SUPERUSER_ONLY = "-"
PLATFORM = "platform"  # the platform operator's finance rows: platform finance and superusers

# Model label -> the path from a row to its tenant id.
TENANT_PATHS: dict[str, str] = {
    "tenancy.tenant": "id",
    "sampling.brand": "tenant_id",
    "sampling.campaign": "tenant_id",
    "sampling.competitor": "campaign__tenant_id",
    "sampling.platformtarget": "campaign__tenant_id",
    "sampling.question": "campaign__tenant_id",
    "sampling.questionrevision": "question__campaign__tenant_id",
    "sampling.run": "tenant_id",
    "sampling.batch": "run__tenant_id",
    "sampling.sample": "tenant_id",
    "sampling.attempt": "sample__tenant_id",
    "sampling.stalewrite": "sample__tenant_id",
    "sampling.schedule": "campaign__tenant_id",
    "sampling.scheduleslot": "campaign__tenant_id",
    "sampling.samplereopen": "sample__tenant_id",
    "tenancy.tenantmembership": SUPERUSER_ONLY,
    "sampling.outboxmessage": SUPERUSER_ONLY,
    "sampling.callbackdelivery": SUPERUSER_ONLY,
    "evidence.capture": "sample__tenant_id",
    "evidence.evidenceobject": "capture__sample__tenant_id",
    "evidence.citation": "capture__sample__tenant_id",
    "evidence.reviewsample": "tenant_id",
    "evidence.reviewdecision": "sample__tenant_id",
    "analysis.mention": "sample__tenant_id",
    "analysis.analysisrevision": "run__tenant_id",
    "analysis.analysisresult": "sample__tenant_id",
    "analysis.ambiguousword": "campaign__tenant_id",
    "billing.account": "tenant_id",
    "billing.journalentry": "tenant_id",
    "billing.posting": "entry__tenant_id",
    "billing.samplesettlement": "run__tenant_id",
    "billing.priceversion": GLOBAL,
    "billing.price": GLOBAL,
    "billing.upstreamstatement": PLATFORM,
    "billing.upstreamstatementline": PLATFORM,
    "billing.statementvoid": PLATFORM,
    "api.apitoken": SUPERUSER_ONLY,
    "api.launchrequest": SUPERUSER_ONLY,
    "api.webhookendpoint": "tenant_id",
    "api.webhookdelivery": "endpoint__tenant_id",
    "alerts.alertrule": "tenant_id",
    "alerts.alert": "tenant_id",
    "alerts.alertsubscription": "tenant_id",
    "alerts.alertdelivery": "tenant_id",
    "monitoring.seriesrow": "tenant_id",
    "monitoring.comparabilitykey": SUPERUSER_ONLY,
}


@dataclass(frozen=True)
class Scope:
    """Who a user is for the console and the API: superuser, or a role per tenant id."""

    user_id: int | None
    is_superuser: bool
    roles: Mapping[int, str]

    def tenant_ids(self, perm: str) -> set[int] | None:
        """Tenants where `perm` ("app.codename") is granted; None means every tenant."""
        if self.is_superuser:
            return None
        return {tenant for tenant, role in self.roles.items() if role_allows(role, perm)}

    def tenant_ids_for_roles(self, roles: frozenset[str]) -> set[int] | None:
        if self.is_superuser:
            return None
        return {tenant for tenant, role in self.roles.items() if role in roles}

    def role(self, tenant_id: int) -> str | None:
        return self.roles.get(tenant_id)


_CACHE_ATTR = "_tenancy_scope"


def user_scope(user: Any) -> Scope:
    """The user's scope, read once per request (cached on the user object)."""
    cached = getattr(user, _CACHE_ATTR, None)
    if cached is not None:
        return cached
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        scope = Scope(user_id=None, is_superuser=False, roles={})
    else:
        roles = dict(
            TenantMembership.objects.filter(user_id=user.pk).values_list("tenant_id", "role")
        )
        scope = Scope(user_id=user.pk, is_superuser=user.is_superuser, roles=roles)
    setattr(user, _CACHE_ATTR, scope)
    return scope


_PLATFORM_ATTR = "_tenancy_platform_finance"


def is_platform_finance(user: Any) -> bool:
    """Whether the user is the platform operator's finance (its group, or a superuser): who
    imports, reads and voids provider statements. Read once per request."""
    cached = getattr(user, _PLATFORM_ATTR, None)
    if cached is not None:
        return bool(cached)
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        answer = False
    else:
        answer = user.is_superuser or user.groups.filter(name=PLATFORM_FINANCE).exists()
    setattr(user, _PLATFORM_ATTR, answer)
    return answer


def require_platform_finance(user: Any) -> None:
    """Provider statements are the platform's: anyone else is refused (403)."""
    if not is_platform_finance(user):
        raise PermissionDenied("provider statements are kept by the platform's finance")


def forget_scope(user: Any) -> None:
    """After a membership change in the same request (tests, commands)."""
    for attr in (_CACHE_ATTR, _PLATFORM_ATTR):
        if hasattr(user, attr):
            delattr(user, attr)


def model_label(model: type[Model]) -> str:
    return model._meta.label_lower


def permission(model: type[Model], action: str = "view") -> str:
    opts = model._meta
    return f"{opts.app_label}.{action}_{opts.model_name}"


def tenant_filter(model: type[Model], tenant_ids: set[int] | None) -> Q | None:
    """The Q restricting `model` to `tenant_ids` (None: no restriction)."""
    if tenant_ids is None:
        return None
    path = TENANT_PATHS.get(model_label(model), SUPERUSER_ONLY)
    if path == GLOBAL:
        return None
    if path in (SUPERUSER_ONLY, PLATFORM):
        return Q(pk__in=[])
    return Q(**{f"{path}__in": sorted(tenant_ids)})


def scoped(queryset: QuerySet[M], user: Any, *, action: str = "view") -> QuerySet[M]:
    """`queryset` restricted to the tenants where the user's role may `action` its model."""
    return scoped_by(queryset, user, permission(queryset.model, action))


def scoped_by(queryset: QuerySet[M], user: Any, perm: str) -> QuerySet[M]:
    """`queryset` restricted to the rows of tenants where the user's role grants `perm`
    ("app.codename", of this model or another: redelivering a delivery is a change of its
    endpoint). Rows without a tenant: all of them when some role grants `perm`."""
    model = queryset.model
    scope = user_scope(user)
    if not scope.is_superuser and TENANT_PATHS.get(model_label(model)) == GLOBAL:
        return queryset if _any_role_allows(scope, perm) else queryset.none()
    if TENANT_PATHS.get(model_label(model)) == PLATFORM:
        return queryset if is_platform_finance(user) else queryset.none()
    condition = tenant_filter(model, scope.tenant_ids(perm))
    return queryset if condition is None else queryset.filter(condition)


def _any_role_allows(scope: Scope, perm: str) -> bool:
    return any(role_allows(role, perm) for role in scope.roles.values())


def scoped_get_or_404(queryset: QuerySet[M], user: Any, **lookup: Any) -> M:
    obj = scoped(queryset, user).filter(**lookup).first()
    if obj is None:
        raise Http404(f"no such {queryset.model._meta.verbose_name}")
    return obj


def allows(user: Any, perm: str, tenant_id: int) -> bool:
    """Whether the user's role in `tenant_id` grants `perm` (superusers: always)."""
    tenant_ids = user_scope(user).tenant_ids(perm)
    return tenant_ids is None or tenant_id in tenant_ids


def allows_on(user: Any, perm: str, obj: Model | None) -> bool:
    """Whether the user's role in the tenant of `obj` grants `perm`: never the union of
    their roles (finance in A and operator in B may not cancel A's run). Without an object:
    whether some role of theirs grants it (what a list page may offer). Rows without a tenant
    follow the permission of any role; platform-internal rows are superuser-only."""
    scope = user_scope(user)
    if scope.is_superuser:
        return True
    if obj is None:
        return _any_role_allows(scope, perm) or _platform_finance_allows(user, perm)
    path = TENANT_PATHS.get(model_label(type(obj)), SUPERUSER_ONLY)
    if path == PLATFORM:
        return _platform_finance_allows(user, perm)
    if path == GLOBAL:
        return _any_role_allows(scope, perm)
    tenant_id = None if path == SUPERUSER_ONLY else tenant_id_of(obj)
    if tenant_id is None and path != SUPERUSER_ONLY and obj._state.adding:
        return _any_role_allows(scope, perm)  # a new row's tenant is checked when it is saved
    role = scope.role(tenant_id) if tenant_id is not None else None
    return role is not None and role_allows(role, perm)


def _platform_finance_allows(user: Any, perm: str) -> bool:
    """The platform operator's finance rows (provider statements) by its group's permissions:
    no tenant role grants them."""
    return is_platform_finance(user) and bool(user.has_perm(perm))


def tenants_where(user: Any, perm: str) -> QuerySet[Tenant]:
    """The tenants where the user's role grants `perm` (e.g. the top-up form's choices)."""
    tenant_ids = user_scope(user).tenant_ids(perm)
    tenants = Tenant.objects.all()
    return tenants if tenant_ids is None else tenants.filter(pk__in=sorted(tenant_ids))


def visible_tenant_ids(user: Any, roles: frozenset[str]) -> set[int] | None:
    return user_scope(user).tenant_ids_for_roles(roles)


# --- role-checked lookups (the API and custom views) ------------------------------------------


def tenant_id_of(obj: Model) -> int | None:
    """The tenant id of a row, following its TENANT_PATHS path (None: no tenant)."""
    path = TENANT_PATHS.get(model_label(type(obj)), SUPERUSER_ONLY)
    if path in (GLOBAL, SUPERUSER_ONLY, PLATFORM):
        return None
    if path == "id":
        return int(obj.pk)
    value: Any = obj
    parts = path.split("__")
    try:
        for part in parts[:-1]:
            value = getattr(value, part)
    except ObjectDoesNotExist:  # an unsaved row without its parent yet
        return None
    tenant_id = getattr(value, parts[-1])
    return None if tenant_id is None else int(tenant_id)


def role_checked_get(
    queryset: QuerySet[M],
    user: Any,
    *,
    perm: str | None = None,
    roles: frozenset[str] | None = None,
    **lookup: Any,
) -> M:
    """One row for a person: a row outside every tenant where they hold a role is a 404 (as
    an unknown id); a row of one of their tenants whose role does not grant `perm` (default:
    view the model) or is not one of `roles` is a PermissionDenied (403)."""
    scope = user_scope(user)
    condition = tenant_filter(queryset.model, scope.tenant_ids_for_roles(frozenset(ROLES)))
    rows = queryset if condition is None else queryset.filter(condition)
    obj = rows.filter(**lookup).first()
    if obj is None:
        raise Http404(f"no such {queryset.model._meta.verbose_name}")
    if scope.is_superuser:
        return obj
    tenant_id = tenant_id_of(obj)
    role = scope.role(tenant_id) if tenant_id is not None else None
    needed = perm or permission(queryset.model, "view")
    if role is None or not role_allows(role, needed) or (roles is not None and role not in roles):
        raise PermissionDenied(f"your role may not do this ({needed})")
    return obj


def require_somewhere(user: Any, perm: str) -> None:
    """A list or a tenant-less action needs `perm` in at least one of the user's tenants."""
    tenant_ids = user_scope(user).tenant_ids(perm)
    if tenant_ids is not None and not tenant_ids:
        raise PermissionDenied(f"no tenant of yours grants {perm}")
