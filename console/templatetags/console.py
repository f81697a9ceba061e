"""What the console's frame says to whoever reads it: the header and the home page's title by
the reader's role (an operator, an analyst and finance do different work here)."""

from __future__ import annotations

from typing import Any

from django import template

from tenancy.roles import ANALYST, FINANCE, OPERATOR
from tenancy.scope import user_scope

register = template.Library()

CONSOLE = "GEO console"
ROLE_TEXTS: dict[str, tuple[str, str]] = {
    OPERATOR: ("GEO operator console", "Campaigns, runs and evidence"),
    ANALYST: ("GEO analyst console", "Runs, evidence and the review queue"),
    FINANCE: ("GEO finance console", "Accounts, the ledger and reconciliation"),
}
SUPERUSER_HOME = "Every tenant: campaigns, runs, evidence, billing and operations"


def console_texts_for(user: Any) -> dict[str, str]:
    """`header` and `home` for `user`; one who holds several roles reads them all."""
    if user is None or not getattr(user, "is_authenticated", False):
        return {"header": CONSOLE, "home": ""}
    if user.is_superuser:
        return {"header": CONSOLE, "home": SUPERUSER_HOME}
    roles = [role for role in ROLE_TEXTS if role in set(user_scope(user).roles.values())]
    if len(roles) == 1:
        header, home = ROLE_TEXTS[roles[0]]
        return {"header": header, "home": home}
    return {"header": CONSOLE, "home": "; ".join(ROLE_TEXTS[role][1] for role in roles)}


@register.simple_tag(takes_context=True)
def console_texts(context: template.Context) -> dict[str, str]:
    request = context.get("request")
    return console_texts_for(getattr(request, "user", None) or context.get("user"))
