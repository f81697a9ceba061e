"""The `--password-env VAR` option of the commands that create console users (`grant_role`,
`grant_platform_finance`): the password read from the environment, never from argv (where
`ps` and shell history would show it), and checked by the settings' password validators as
the console's password forms check it."""

from __future__ import annotations

import os

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError


def password_from_env(variable: str | None, *, username: str) -> str | None:
    """The password in `variable` (None when no variable is named), validated for `username`."""
    if not variable:
        return None
    password = os.environ.get(variable)
    if not password:
        raise CommandError(f"environment variable {variable} is empty")
    user_model = get_user_model()
    user = user_model.objects.filter(username=username).first() or user_model(username=username)
    try:
        validate_password(password, user)
    except ValidationError as error:
        raise CommandError("password refused: " + " ".join(error.messages)) from None
    return password
