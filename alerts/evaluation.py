"""A run's alert evaluation: after its end, every active rule of its campaign is evaluated on
the latest run and its comparable predecessors, and alerts are fired or resolved.

    a run's series rows written (monitoring/services.py, after its end and after each
    finished re-analysis) -> `record_series_written` (a follower: one outbox row, the run id)
    -> the task `alerts.evaluate_run` -> `evaluate_run`: the counts are read (alerts/figures.py)
    outside any transaction, then in one transaction each rule's findings fire alerts (once
    per condition: alerts/services.py `fire`), open alerts that no longer hold are resolved,
    and the outbox row is completed.

Comparable runs are the earlier runs of the latest run's segment of the series
(monitoring/selectors.py `comparable_runs`, through alerts/figures.py): a segment break is
never crossed (docs/decisions.md, "Alerts fire once per condition"). An alert fired in another
segment than the latest run's is resolved as no longer comparable.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django.db import transaction
from django.urls import reverse

from monitoring.services import SeriesWritten
from sampling.locking import Level, locked
from sampling.models import Run
from sampling.services import complete_outbox, enqueue_outbox

from . import figures as figures_module
from .models import UNRESOLVED, Alert, AlertRule, Window
from .rules import ALL, Finding, RunFigures, evaluate, still_holds
from .services import fire, resolve

log = logging.getLogger(__name__)

TASK = "alerts.evaluate_run"
MAX_BASELINE = 50  # the most comparable runs a baseline pools


def record_series_written(written: SeriesWritten) -> None:
    """A follower of the series writer: the run's evaluation, one outbox row per write (ids
    only), when its campaign has an active rule."""
    campaign_id = Run.objects.values_list("campaign_id", flat=True).get(pk=written.run_id)
    if not AlertRule.objects.filter(campaign_id=campaign_id, active=True).exists():
        return
    enqueue_outbox(
        task=TASK,
        payload={"run_id": str(written.run_id)},
        dedupe_key=f"alerts-evaluate:{written.run_id}:{written.write}",
    )


@dataclass(frozen=True)
class Evaluated:
    fired: list[int]
    kept: list[int]
    resolved: list[int]


def evaluate_run(*, run_id: UUID | str, outbox_id: int | None = None) -> Evaluated:
    run = Run.objects.get(pk=run_id)
    rules = list(AlertRule.objects.filter(campaign_id=run.campaign_id, active=True))
    if not rules:
        complete_outbox(outbox_id=outbox_id)
        return Evaluated([], [], [])
    depth = max(
        min(rule.baseline_runs, MAX_BASELINE) if rule.window == Window.BASELINE else 1
        for rule in rules
    )
    source = figures_module.source()
    segment = source.segment_key(run)
    history_runs = source.comparable(run, depth)
    latest = source.figures(run)
    history = [source.figures(other) for other in history_runs]
    findings = {rule.pk: _findings(rule, run, segment, latest, history) for rule in rules}
    fired: list[int] = []
    kept: list[int] = []
    resolved: list[int] = []
    with transaction.atomic():
        for rule in rules:
            found = findings[rule.pk]
            for finding in found:
                alert, created = fire(
                    rule=rule,
                    run=run,
                    condition_key=finding.condition_key,
                    summary=finding.summary,
                    details=finding.details,
                )
                (fired if created else kept).append(alert.pk)
            keys = {finding.condition_key for finding in found}
            # A run without series rows (segment "") measured nothing: it resolves nothing.
            for alert in _open_alerts(rule, run, exclude=keys) if segment else []:
                reason = _resolution(rule, alert, segment, latest)
                if reason is None:
                    Alert.objects.filter(pk=alert.pk).update(last_run=run)
                    kept.append(alert.pk)
                elif resolve(alert=alert, run=run, reason=reason):
                    resolved.append(alert.pk)
        complete_outbox(outbox_id=outbox_id)
    log.info(
        "alerts evaluated run=%s rules=%s fired=%s kept=%s resolved=%s",
        run.pk,
        len(rules),
        len(fired),
        len(kept),
        len(resolved),
    )
    return Evaluated(fired, kept, resolved)


def _findings(
    rule: AlertRule, run: Run, segment: str, latest: RunFigures, history: Sequence[RunFigures]
) -> list[Finding]:
    window = history[: rule.baseline_runs] if rule.window == Window.BASELINE else history[:1]
    out = []
    for finding in evaluate(rule.kind, rule.params, latest, window):
        details = {
            **finding.details,
            "kind": rule.kind,
            "window": rule.window,
            "segment": segment,
            "links": sample_links(run, finding.details.get("platform", ALL)),
        }
        out.append(Finding(finding.condition_key, finding.summary, details))
    return out


def _open_alerts(rule: AlertRule, run: Run, *, exclude: set[str]) -> list[Alert]:
    """The rule's unresolved alerts this run may resolve: not the ones it just found, nor
    those last seen by a later run (an older run evaluated late changes nothing)."""
    alerts = locked(
        Alert.objects.filter(rule=rule, state__in=UNRESOLVED)
        .exclude(condition_key__in=exclude)
        .select_related("last_run"),
        level=Level.ALERTS,
        of=("self",),
    )
    return [
        alert
        for alert in alerts
        if alert.last_run is None or alert.last_run.created_at <= run.created_at
    ]


def _resolution(rule: AlertRule, alert: Alert, segment: str, latest: RunFigures) -> str | None:
    """Why the alert no longer holds on `latest`, or None while it does."""
    if alert.details.get("segment") != segment:
        return "the series changed segment: no longer comparable"
    if still_holds(
        rule.kind,
        rule.params,
        condition_key=alert.condition_key,
        details=alert.details,
        latest=latest,
    ):
        return None
    return f"recovered on run {latest.run_id}"


def sample_links(run: Run, platform: str) -> list[dict[str, Any]]:
    """The console's sample list of the run (and platform): the answers behind the figures,
    and from there their evidence."""
    filters = {"run": str(run.pk), **({"platform": platform} if platform else {})}
    url = f"{reverse('admin:sampling_sample_changelist')}?{urlencode(filters)}"
    label = f"samples of run {str(run.pk)[:8]}" + (f" on {platform}" if platform else "")
    return [{"label": label, "url": url}]
