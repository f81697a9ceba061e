"""The only tests a CI run may skip, each with the reason it may (tests/conftest.py enforces it).

With CI=true a session that skips any test not listed here fails: a skip in CI hides a missing
dependency (a browser, a server binary, PostgreSQL) behind a green run. Keys are pytest node ids
(without parameters, which cover every parametrisation). Keep this list short; prefer making the
dependency guaranteed (scripts/ensure_services.sh, scripts/ensure_chromium.sh).
"""

from __future__ import annotations

ALLOWED_SKIPS: dict[str, str] = {}
