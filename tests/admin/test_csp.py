"""The console's Content-Security-Policy (console/csp.py): on every console page, not on the
API; in real Chromium the console's scripts and styles still work under it (run progress,
inline rows, the action checkboxes, the report frame) with no violation, and a script
injected into a page does not run."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from pipeline.launch import launch_run
from sampling.models import Run
from tests.admin.conftest import make_campaign
from tests.chromium import chromium, log_in, needs_browser

HEADER = "Content-Security-Policy"

# Every violation the page reports, kept where the test can read it.
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  const where = `${e.sourceFile}:${e.lineNumber}`;
  window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI} ${where}`);
});
"""
INJECT_INLINE_SCRIPT = """() => {
  const script = document.createElement("script");
  script.textContent = "window.__injectedRan = true";
  document.body.appendChild(script);
  return window.__injectedRan === true;
}"""


@pytest.mark.django_db
def test_console_pages_carry_the_policy_and_the_api_does_not(admin_client: Client) -> None:
    for url in ("/admin/", "/admin/login/", "/admin/sampling/run/", "/admin/does-not-exist/"):
        response = admin_client.get(url, follow=False)
        assert response[HEADER] == settings.GEO_CONSOLE_CSP, url
    assert "script-src 'self'" in settings.GEO_CONSOLE_CSP
    assert "'unsafe-inline'" not in settings.GEO_CONSOLE_CSP.split("script-src")[1].split(";")[0]
    assert HEADER not in admin_client.get("/api/v1/runs/")
    assert HEADER not in admin_client.get("/healthz")


def _violations(page: Any) -> list[str]:
    return list(page.evaluate("() => window.__cspViolations || []"))


@needs_browser[0]
@needs_browser[1]
@pytest.mark.django_db(transaction=True)
def test_the_console_works_under_its_policy_in_chromium(
    live_server: Any, django_user_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    django_user_model.objects.create_superuser("operator", "ops@example.com", "correct horse")
    run: Run = launch_run(campaign=make_campaign())
    base = live_server.url
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    seen: dict[str, list[str]] = {}
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.add_init_script(RECORD_VIOLATIONS)
        log_in(page, f"{base}/admin/login/", "operator", "correct horse")
        page.wait_for_selector("#site-name")

        # The run page: its progress script polls and fills the status.
        page.goto(f"{base}/admin/sampling/run/{run.pk}/change/")
        page.locator("#run-status .geo-badge").wait_for(state="visible")
        page.wait_for_load_state("networkidle")
        seen["run page"] = _violations(page)
        injected_ran = page.evaluate(INJECT_INLINE_SCRIPT)
        blocked = _violations(page)

        # Inline rows: the admin's "Add another" script adds a row.
        page.goto(f"{base}/admin/sampling/campaign/{run.campaign_id}/change/")
        rows = page.locator("#competitors-group .form-row:not(.empty-form)")
        before = rows.count()
        page.locator("#competitors-group .add-row a").click()
        after = rows.count()
        seen["campaign page"] = _violations(page)

        # The changelist's action checkboxes: "select all" checks every row.
        page.goto(f"{base}/admin/sampling/run/")
        page.locator("#action-toggle").check()
        all_checked = page.evaluate(
            "() => [...document.querySelectorAll('input.action-select')].every(c => c.checked)"
        )
        seen["run list"] = _violations(page)

        # The report page frames the report (inline styles in both).
        page.goto(f"{base}/admin/sampling/run/{run.pk}/report/")
        page.wait_for_load_state("networkidle")
        seen["report"] = _violations(page)

    assert not injected_ran and any("script-src" in v for v in blocked), blocked
    assert after == before + 1, (before, after)
    assert all_checked
    assert all(not v for v in seen.values()), seen


def test_no_console_template_carries_an_inline_event_handler() -> None:
    """The policy forbids inline handlers, so an `onsubmit="return confirm(...)"` silently never
    asks (the statement void did: its confirmation never appeared). A form that must ask says
    so with data-confirm (console/static/console/confirm.js)."""
    import re
    from pathlib import Path

    handler = re.compile(r"<[^>]*\son[a-z]+\s*=", re.IGNORECASE)
    root = Path(settings.BASE_DIR)
    templates = [
        path
        for path in root.rglob("templates/**/*.html")
        if ".venv" not in path.parts and "site-packages" not in path.parts
    ]
    assert len(templates) > 20  # the project's own templates were found
    offenders = [str(p.relative_to(root)) for p in templates if handler.search(p.read_text())]
    assert offenders == []
