from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from billing import services
from billing.models import JournalEntry
from tests.billing.conftest import COLLECTOR, charge, complete, launch, samples, tenant

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("prices")]


@pytest.fixture
def staff() -> Client:
    user = User.objects.create_superuser("fin", "fin@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


def test_finance_pages_render_and_export(staff: Client) -> None:
    services.top_up(tenant=tenant(), amount=1000, currency="USD", idempotency_key="p")
    run = launch(questions=1, targets=[COLLECTOR])
    (sample,) = samples(run)
    complete(sample)
    charge(sample)
    for url in [
        "/admin/billing/account/",
        "/admin/billing/journalentry/",
        "/admin/billing/samplesettlement/",
        "/admin/billing/priceversion/",
        "/admin/billing/upstreamstatement/",
        "/admin/billing/journalentry/reconciliation/",
        f"/admin/billing/journalentry/reconciliation/?run={run.pk}",
    ]:
        assert staff.get(url).status_code == 200, url
    csv = staff.get(f"/admin/billing/journalentry/reconciliation/?run={run.pk}&format=csv")
    assert csv["Content-Type"].startswith("text/csv") and b"task-" in csv.getvalue()
    xlsx = staff.get(f"/admin/billing/journalentry/reconciliation/?run={run.pk}&format=xlsx")
    assert xlsx.getvalue()[:2] == b"PK"
    entry_url = f"/admin/billing/journalentry/{JournalEntry.objects.first().pk}/change/"
    assert staff.get(entry_url).status_code == 200
    assert staff.post("/admin/billing/journalentry/add/").status_code == 403
