"""A campaign's rules evaluated run after run (alerts/evaluation.py): one alert per condition
until it resolves, acknowledged by a person, never compared across a segment break; each
fired alert's deliveries written with their outbox rows in the same transaction."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, transaction

from alerts import services
from alerts.evaluation import evaluate_run, record_series_written
from alerts.models import Alert, AlertDelivery, AlertRule, AlertState, Window
from monitoring.services import SeriesWritten
from sampling.models import OutboxMessage
from tests.alerts.conftest import subscriber

pytestmark = pytest.mark.django_db

HIGH = {"openai": (40, 50), "gemini": (40, 50)}
LOW = {"openai": (10, 50), "gemini": (40, 50)}


def _rule(run: Any, **fields: Any) -> AlertRule:
    return services.create_rule(campaign=run.campaign, kind="visibility_drop", **fields)


def test_a_drop_fires_once_holds_while_low_and_resolves_when_recovered(
    series: Any, new_run: Any
) -> None:
    r1 = new_run()
    rule = _rule(r1)
    series.set(r1, HIGH)
    assert evaluate_run(run_id=r1.pk).fired == []  # nothing to compare with yet

    r2 = new_run()
    series.set(r2, LOW)
    fired = evaluate_run(run_id=r2.pk).fired
    keys = set(Alert.objects.filter(pk__in=fired).values_list("condition_key", flat=True))
    assert keys == {"visibility_drop:openai", "visibility_drop:all"}  # gemini held steady
    alert = Alert.objects.get(pk__in=fired, condition_key="visibility_drop:openai")
    assert alert.state == AlertState.OPEN
    assert alert.details["links"][0]["url"].endswith(f"?run={r2.pk}&platform=openai")
    assert alert.details["before"]["n"] == 50 and alert.details["after"]["hits"] == 10

    # The same run again (its event delivered twice) and a third run as low: nothing new.
    assert evaluate_run(run_id=r2.pk).fired == []
    r3 = new_run()
    series.set(r3, LOW)
    third = evaluate_run(run_id=r3.pk)
    assert third.fired == [] and alert.pk in third.kept and third.resolved == []
    assert Alert.objects.filter(rule=rule).count() == 2

    r4 = new_run()
    series.set(r4, HIGH)
    assert sorted(evaluate_run(run_id=r4.pk).resolved) == sorted(fired)
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED and alert.resolved_run_id == r4.pk


def test_a_segment_break_is_never_crossed(series: Any, new_run: Any) -> None:
    r1 = new_run()
    _rule(r1, window=Window.BASELINE, baseline_runs=5)
    series.set(r1, HIGH, key="old-targets")
    r2 = new_run()
    series.set(r2, LOW, key="new-targets")  # a new segment starts: no comparable run
    assert evaluate_run(run_id=r2.pk).fired == []
    r3 = new_run()
    series.set(r3, LOW, key="new-targets")
    assert evaluate_run(run_id=r3.pk).fired == []  # low against low, the old runs unseen


def test_an_alert_of_another_segment_is_resolved_as_no_longer_comparable(
    series: Any, new_run: Any
) -> None:
    r1, r2 = new_run(), new_run()
    _rule(r1)
    series.set(r1, HIGH)
    series.set(r2, LOW)
    fired = evaluate_run(run_id=r2.pk).fired
    r3 = new_run()
    series.set(r3, LOW, key="k2")
    assert sorted(evaluate_run(run_id=r3.pk).resolved) == sorted(fired)
    assert all("segment" in a.resolution for a in Alert.objects.filter(pk__in=fired))


def test_one_unresolved_alert_per_condition_is_a_database_constraint(
    series: Any, new_run: Any
) -> None:
    r1, r2 = new_run(), new_run()
    rule = _rule(r1)
    fields = {"tenant_id": rule.tenant_id, "campaign_id": rule.campaign_id, "rule": rule,
              "condition_key": "x", "run": r2, "summary": "s"}  # fmt: skip
    first = Alert.objects.create(**fields)
    with pytest.raises(IntegrityError), transaction.atomic():
        Alert.objects.create(**fields)
    services.acknowledge(alert=first, user=None)
    with pytest.raises(IntegrityError), transaction.atomic():
        Alert.objects.create(**fields)  # acknowledged is still unresolved
    assert services.resolve(alert=first, run=r2, reason="test")
    assert not services.resolve(alert=first, run=r2, reason="again")
    Alert.objects.create(**fields)  # resolved: the condition may fire again


def test_acknowledge_moves_open_to_acknowledged_once(series: Any, new_run: Any) -> None:
    r1, r2 = new_run(), new_run()
    _rule(r1)
    series.set(r1, HIGH)
    series.set(r2, LOW)
    alert = Alert.objects.filter(pk__in=evaluate_run(run_id=r2.pk).fired).first()
    assert alert is not None
    ack = subscriber(alert.tenant, "acker").user
    acknowledged = services.acknowledge(alert=alert, user=ack)
    assert acknowledged.state == AlertState.ACKNOWLEDGED and acknowledged.acknowledged_by == ack
    with pytest.raises(services.NotAcknowledgeable):
        services.acknowledge(alert=alert, user=ack)
    r3 = new_run()
    series.set(r3, LOW)
    assert evaluate_run(run_id=r3.pk).fired == []  # acknowledged: watched, not fired again


def test_a_fired_alert_writes_its_deliveries_and_outbox_rows(series: Any, new_run: Any) -> None:
    r1, r2 = new_run(), new_run()
    tenant = r1.tenant
    awake = subscriber(tenant, "awake")
    asleep = subscriber(tenant, "asleep", quiet_start=0, quiet_end=0)
    # quiet the whole day but one hour: in quiet hours now whatever the clock says
    from sampling.dbtime import db_now

    hour = db_now().hour
    asleep.quiet_start, asleep.quiet_end = hour, (hour + 1) % 24
    asleep.save()
    subscriber(tenant, "finance-person", role="finance")  # finance reads no alerts
    _rule(r1, slack_webhook_url="https://hooks.slack.example/services/T/B/secret")
    series.set(r1, HIGH)
    series.set(r2, LOW)
    alert_id = min(evaluate_run(run_id=r2.pk).fired)
    deliveries = AlertDelivery.objects.filter(alert_id=alert_id)
    assert sorted((d.channel, d.subscription_id) for d in deliveries) == [
        ("email", awake.pk),
        ("slack", None),
    ]
    for delivery in deliveries:
        message = OutboxMessage.objects.get(dedupe_key=f"alert-delivery:{delivery.pk}")
        assert message.task == "alerts.deliver" and message.payload == {"delivery_id": delivery.pk}


def test_each_series_write_queues_one_evaluation(series: Any, new_run: Any) -> None:
    r1 = new_run()
    written = SeriesWritten(run_id=r1.pk, write="41")
    record_series_written(written)
    assert not OutboxMessage.objects.filter(task="alerts.evaluate_run").exists()  # no rule
    _rule(r1)
    record_series_written(written)
    record_series_written(written)  # the same write told again
    (message,) = OutboxMessage.objects.filter(task="alerts.evaluate_run")
    assert message.payload == {"run_id": str(r1.pk)}
    record_series_written(SeriesWritten(run_id=r1.pk, write="42"))  # a re-analysis: again
    assert OutboxMessage.objects.filter(task="alerts.evaluate_run").count() == 2
