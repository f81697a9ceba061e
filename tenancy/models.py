"""Tenants and who belongs to them. The tables keep the names they had in their first homes
(`sampling_tenant`, `evidence_tenantmembership`): the models moved here by state only, so an
existing database kept its rows (docs/decisions.md "Tenancy at the bottom")."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Now


class Tenant(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    # Fair share: at most this many of the tenant's samples are leased at once.
    max_concurrency = models.PositiveIntegerField(default=50)
    # Upstream calls per second for this tenant over every platform (pipeline/limits.py);
    # empty: settings.GEO_TENANT_RATE_LIMIT (unset there too: not limited per tenant).
    max_calls_per_second = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "sampling_tenant"

    def __str__(self) -> str:
        return self.slug


class TenantRole(models.TextChoices):
    """What a tenant's user may do. Evidence (raw answers, screenshots) is readable by
    operators and analysts; finance sees money, not answers."""

    OPERATOR = "operator", "Operator"
    ANALYST = "analyst", "Analyst"
    FINANCE = "finance", "Finance"


EVIDENCE_READER_ROLES = frozenset({TenantRole.OPERATOR, TenantRole.ANALYST})


class TenantMembership(models.Model):
    """A user's role in one tenant. Authorises evidence downloads and review decisions;
    superusers (the platform's own staff) are members of every tenant."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tenant_memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="members")
    role = models.CharField(max_length=16, choices=TenantRole.choices)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "evidence_tenantmembership"
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_one_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.user_id}@{self.tenant_id}: {self.role}"
