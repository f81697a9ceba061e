"""Runs of one campaign whose counts the test sets (a figures source of its own, the seam
alerts/figures.py exposes), and subscribers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db.models.functions import Now

from alerts import figures as figures_module
from alerts.figures import FiguresSource
from alerts.models import AlertSubscription
from alerts.rules import ALL, Counts, RunFigures
from pipeline.launch import launch_run
from sampling.models import Run
from tenancy.services import grant_role
from tests.factories import ended_run


class FakeSeries:
    """run id -> (figures, comparability key)."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[RunFigures, str]] = {}

    def set(
        self, run: Run, rates: dict[str, tuple[int, int]], *, key: str = "k1", **more: Any
    ) -> None:
        counts = [
            Counts(p, "Brand", True, planned=n, valid=n, mentioned=m) for p, (m, n) in rates.items()
        ]
        total = (sum(m for m, _ in rates.values()), sum(n for _, n in rates.values()))
        counts.append(
            Counts(ALL, "Brand", True, planned=total[1], valid=total[1], mentioned=total[0])
        )
        self.rows[str(run.pk)] = (RunFigures(str(run.pk), counts, **more), key)

    def key(self, run: Run) -> str:
        return self.rows[str(run.pk)][1]

    def comparable(self, run: Run, limit: int) -> list[Run]:
        """As the series does: earlier runs with the run's key, stopped at a break."""
        out: list[Run] = []
        earlier = Run.objects.filter(campaign_id=run.campaign_id, created_at__lt=run.created_at)
        for other in earlier.order_by("-created_at"):
            if (
                len(out) >= limit
                or str(other.pk) not in self.rows
                or self.key(other) != self.key(run)
            ):
                break
            out.append(other)
        return out

    def source(self) -> FiguresSource:
        return FiguresSource(
            figures=lambda run: self.rows[str(run.pk)][0],
            segment_key=self.key,
            comparable=self.comparable,
        )


@pytest.fixture
def series() -> Iterator[FakeSeries]:
    fake = FakeSeries()
    previous = figures_module.source()
    figures_module.use_source(fake.source())
    yield fake
    figures_module.use_source(previous)


@pytest.fixture
def new_run(db: None) -> Callable[[], Run]:
    """Each call: another finished run of the same campaign (tenant "acme", funded)."""
    made: list[Run] = []

    def make() -> Run:
        if not made:
            run = ended_run(tenant="acme", finished=True)
        else:
            run = launch_run(campaign=made[0].campaign)
            Run.objects.filter(pk=run.pk).update(finished_at=Now())
            run.refresh_from_db()
        made.append(run)
        return run

    return make


def subscriber(
    tenant: Any, username: str, *, role: str = "analyst", **fields: Any
) -> AlertSubscription:
    grant_role(username=username, tenant=tenant, role=role, password="pw")
    user = get_user_model().objects.get(username=username)
    user.email = f"{username}@example.com"
    user.save(update_fields=["email"])
    return AlertSubscription.objects.create(user=user, tenant=tenant, **fields)
