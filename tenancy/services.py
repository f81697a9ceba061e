"""Write operations on who belongs to a tenant (the console's and the API's users)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from .models import Tenant, TenantMembership
from .roles import PLATFORM_FINANCE, ROLES


def grant_role(*, username: str, tenant: Tenant, role: str, password: str | None = None) -> str:
    """Make `username` a staff user with `role` in `tenant` (one role per tenant: a different
    earlier role is replaced). Returns a one-line account of what changed.

    The password of an existing user is set only when it differs from theirs: setting it
    rehashes it, and Django ends every session of a user whose password hash changed, so
    repeating the same command must not log them out. A changed password says so."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    user_model = get_user_model()
    with transaction.atomic():
        user, created = user_model.objects.get_or_create(
            username=username, defaults={"is_staff": True, "is_active": True}
        )
        password_changed = False
        if created:
            if password:
                user.set_password(password)
            else:
                user.set_unusable_password()
            user.save()
        else:
            password_changed = bool(password) and not user.check_password(password or "")
            if not user.is_staff or password_changed:
                user.is_staff = True
                if password_changed:
                    user.set_password(password)
                user.save()
        user.groups.add(Group.objects.get(name=role))
        membership, new_membership = TenantMembership.objects.get_or_create(
            user=user, tenant=tenant, defaults={"role": role}
        )
        previous = membership.role
        if membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
            _drop_unused_groups(user)
    what = "created user" if created else "user"
    if new_membership:
        outcome = f"{what} {username}: {role} in {tenant.slug}"
    elif previous != role:
        outcome = f"{what} {username}: {role} in {tenant.slug} (was {previous})"
    else:
        outcome = f"{what} {username} is already {role} in {tenant.slug}"
    if password_changed:
        outcome += "; password changed: their open sessions are logged out"
    return outcome


def _drop_unused_groups(user: Any) -> None:
    """A role group stays only while some membership still holds that role."""
    held = set(TenantMembership.objects.filter(user=user).values_list("role", flat=True))
    for role in ROLES:
        if role not in held:
            user.groups.remove(Group.objects.get(name=role))


def grant_platform_finance(*, username: str, password: str | None = None) -> str:
    """Make `username` a staff user of the platform operator's finance (provider statements:
    import, read, void), a group with no tenant. Idempotent; a new user without a password
    gets an unusable one."""
    user_model = get_user_model()
    with transaction.atomic():
        user, created = user_model.objects.get_or_create(
            username=username, defaults={"is_staff": True, "is_active": True}
        )
        if created:
            if password:
                user.set_password(password)
            else:
                user.set_unusable_password()
            user.save()
        elif not user.is_staff:
            user.is_staff = True
            user.save(update_fields=["is_staff"])
        group = Group.objects.get(name=PLATFORM_FINANCE)
        already = user.groups.filter(pk=group.pk).exists()
        user.groups.add(group)
    what = "created user" if created else "user"
    if already:
        return f"{what} {username} is already platform finance"
    return f"{what} {username}: platform finance (provider statements)"
