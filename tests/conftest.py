"""Shared fixtures. Tests run against PostgreSQL and Redis (see Makefile `test`)."""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

BASE_CAMPAIGN: dict[str, Any] = {
    "tenant": "acme",
    "name": "Q4 visibility",
    "brand": {"name": "Acme", "aliases": ["ACME", "艾克米"], "domains": ["acme.com"]},
    "competitors": [
        {"name": "Globex", "aliases": ["环球"], "domains": ["globex.com"]},
        {"name": "Initech", "aliases": [], "domains": ["initech.com"]},
    ],
    "questions": ["Which CRM is best for a small team?", "哪个CRM最适合小团队？"],
    "targets": [{"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}],
    "repeats": 2,
    "screenshot_policy": "optional",
}


@pytest.fixture
def campaign_data() -> dict[str, Any]:
    return copy.deepcopy(BASE_CAMPAIGN)


def make_campaign_data(
    *,
    questions: int,
    targets: list[dict[str, str]],
    repeats: int,
    tenant: str = "acme",
    name: str = "plan",
) -> dict[str, Any]:
    data = copy.deepcopy(BASE_CAMPAIGN)
    data.update(
        tenant=tenant,
        name=name,
        questions=[f"Question number {i}: which vendor is best?" for i in range(questions)],
        targets=targets,
        repeats=repeats,
    )
    return data


def ensure_tenant(slug: str) -> Any:
    """Create the tenant a campaign file names, as an administrator would before launching:
    launching never creates tenants (sampling.services.save_campaign refuses unknown ones)."""
    from tenancy.models import Tenant

    tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": slug})
    return tenant


def spec_with_tenant(data: dict[str, Any], *, funded: bool = False, **options: Any) -> Any:
    """`parse_campaign_spec(data)` after creating the tenant the data names; with
    `funded=True` the tenant also gets a price list and credit (`fund_tenant`)."""
    from sampling.planning import parse_campaign_spec

    spec = parse_campaign_spec(data, **options)
    tenant = ensure_tenant(spec.tenant)
    if funded:
        fund_tenant(tenant)
    return spec


TEST_FUNDS = 10**9  # minor units: no sampling test should fail for lack of credit


def fund_tenant(tenant: Any) -> Any:
    """Give `tenant` a price list and credit, as an operator would before a launch. Idempotent:
    the top-up carries a fixed key, so funding twice posts once."""
    from billing.services import ensure_default_price_version, top_up

    version = ensure_default_price_version()
    top_up(
        tenant=tenant, amount=TEST_FUNDS, currency=version.currency, idempotency_key="test-funds"
    )
    return tenant


def launch_funded(data: dict[str, Any], **options: Any) -> Any:
    """Save the campaign `data` describes for its funded tenant and launch it (the launch holds
    the quote, so the tenant is funded first). Returns the run."""
    from pipeline.launch import launch_run
    from sampling.services import save_campaign

    return launch_run(campaign=save_campaign(spec=spec_with_tenant(data, funded=True, **options)))


@pytest.fixture
def funded_tenant(db: None) -> Any:
    """The tenant BASE_CAMPAIGN names ("acme"), with a price list and credit."""
    return fund_tenant(ensure_tenant(BASE_CAMPAIGN["tenant"]))


# --- no silent skips in CI (docs/decisions.md "No silent skips") -----------------------------
def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def pytest_configure(config: pytest.Config) -> None:
    from django.conf import settings

    # PBKDF2's default work factor costs about 0.25 s a password; tests create hundreds of
    # users. A cheap hasher for passwords set in the test process (the production setting is
    # untouched); PBKDF2 stays second so passwords that subprocesses set still verify.
    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.MD5PasswordHasher",
        "django.contrib.auth.hashers.PBKDF2PasswordHasher",
    ]
    config.addinivalue_line(
        "markers", "postgresql(why): needs PostgreSQL; fails with a clear message on SQLite"
    )
    config.addinivalue_line(
        "markers", "needs_binary(name): fails with a clear message when `name` is not on PATH"
    )


# Long tests first (real worker processes, subprocess commands, browser flows, hypothesis over
# the ledger): xdist's `load` scheduling (Makefile `test`) hands tests out in collection order,
# so the parallel workers start the long ones early and none is left alone with one at the end.
# This sort runs first; pytest-django's stable sort then still puts every transactional test
# after every test that runs in a rolled-back transaction (a flush empties the tables that
# migrations filled), keeping this order within each group. `load`, unlike `worksteal`, keeps
# that order on each worker.
LONG_FIRST = (
    "tests/durability/",
    "tests/ops/test_demo_supervision.py",
    "tests/console/test_commands.py",
    "tests/e2e/",
    "tests/billing/test_properties.py",
    "tests/console/test_browser_flows.py",
    "tests/api/",
    "tests/console/",
)


def _long_rank(item: pytest.Item) -> int:
    return next(
        (i for i, prefix in enumerate(LONG_FIRST) if item.nodeid.startswith(prefix)),
        len(LONG_FIRST),
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_long_rank)  # stable: files keep their order within a rank


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that needs PostgreSQL or a server binary refuses to run without it: it fails
    and says why, rather than skipping and leaving the run green."""
    from django.db import connection

    marker = item.get_closest_marker("postgresql")
    if marker is not None and connection.vendor != "postgresql":
        why = marker.args[0] if marker.args else "PostgreSQL features"
        pytest.fail(
            f"this test needs PostgreSQL ({why}) but the database is {connection.vendor}: "
            "run it with DATABASE_URL=postgres://... (see Makefile `test`)",
            pytrace=False,
        )
    for marker in item.iter_markers("needs_binary"):
        name = marker.args[0]
        if shutil.which(name) is None:
            pytest.fail(
                f"this test needs the `{name}` binary on PATH "
                "(scripts/ensure_services.sh installs it)",
                pytrace=False,
            )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _SKIPPED_REPORTS.append(report)


def _unexplained(reports: list[pytest.TestReport]) -> list[pytest.TestReport]:
    from tests.allowed_skips import ALLOWED_SKIPS

    return [r for r in reports if r.nodeid.split("[")[0] not in ALLOWED_SKIPS]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    report_path = os.environ.get("GEO_SKIP_REPORT")
    # In a parallel run the controller sees every worker's reports and writes the count.
    if report_path and not os.environ.get("PYTEST_XDIST_WORKER"):
        Path(report_path).parent.mkdir(parents=True, exist_ok=True)
        Path(report_path).write_text(f"{len(_SKIPPED_REPORTS)}\n")
    if _in_ci() and _unexplained(_SKIPPED_REPORTS) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(f"skipped tests: {len(_SKIPPED_REPORTS)}")
    unexplained = _unexplained(_SKIPPED_REPORTS)
    if _in_ci() and unexplained:
        terminalreporter.write_line(
            "CI=true: these tests skipped and are not in tests/allowed_skips.py; the run fails:",
            red=True,
        )
        for report in unexplained:
            reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else ""
            terminalreporter.write_line(f"  {report.nodeid}: {reason}", red=True)


_SKIPPED_REPORTS: list[pytest.TestReport] = []
