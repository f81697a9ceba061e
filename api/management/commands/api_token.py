"""`manage.py api_token USERNAME [--name WHAT] [--days N]`: print a new API token for the user
(shown only now); it expires after N days (GEO_API_TOKEN_DAYS by default)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from api.auth import TokenLifetimeError, issue_token


class Command(BaseCommand):
    help = (
        "Create an API token for USERNAME and print it once (only its hash is stored). It "
        "expires after --days (default GEO_API_TOKEN_DAYS); the stderr line says when."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="what the token is for (shown in lists)")
        parser.add_argument("--days", type=int, default=None, help="lifetime in days")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user {options['username']!r}")
        if not user.is_active:
            raise CommandError(f"user {options['username']!r} is inactive")
        try:
            token, raw = issue_token(user=user, name=options["name"], days=options["days"])
        except TokenLifetimeError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(raw)
        # stderr, so `TOKEN=$(manage.py api_token anna)` still captures the token alone.
        self.stderr.write(f"token {token.prefix}… expires at {token.expires_at:%Y-%m-%d %H:%M} UTC")
