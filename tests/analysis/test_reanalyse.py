"""`manage.py reanalyse` through the analysis queue and a real worker process: a new
revision, earlier ones untouched, the same version reproducing every stored result."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from analysis.models import AnalysisResult, AnalysisRevision, Mention
from analysis.reports import build_run_report
from analysis.selectors import COMPARED_FIELDS
from sampling.models import OutboxMessage, Run
from tests.dispatching import tick_until
from tests.e2e import conftest as e2e
from tests.reports.conftest import collected_run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def finished_run(celery_worker: Any) -> Iterator[Callable[..., Run]]:
    """A collected run driven to its end by a real worker; then the dispatcher's tick (its
    outbox relay publishes the analysis messages) in a thread while `reanalyse` waits."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def loop() -> None:
        try:  # until the test ends: no deadline
            tick_until(stop.is_set, timeout=float("inf"), owner="test-relay")
        finally:
            connection.close()

    def make(**kwargs: Any) -> Run:
        run = collected_run(**kwargs)
        celery_worker(concurrency=2)
        status = e2e.drive_until_finished(run.pk)
        assert status.finished, status.as_dict()
        threads.append(threading.Thread(target=loop, daemon=True))
        threads[-1].start()
        return run

    yield make
    stop.set()
    for thread in threads:
        thread.join(timeout=10)


def _snapshot(revision: AnalysisRevision) -> dict[tuple[int, str], tuple[Any, ...]]:
    return {
        (m.sample_id, m.entity): (m.pk, *(getattr(m, f) for f in COMPARED_FIELDS))
        for m in Mention.objects.filter(revision=revision)
    }


def _reanalyse(run_id: Any, *args: str) -> str:
    out = io.StringIO()
    call_command("reanalyse", str(run_id), "--timeout", "120", *args, stdout=out)
    return out.getvalue()


def test_reanalyse_reproduces_every_stored_result_as_a_new_revision(
    simulator: Any, finished_run: Callable[..., Run]
) -> None:
    run = finished_run(questions=3, repeats=2)
    first = AnalysisRevision.objects.get(run=run, number=1)
    before = _snapshot(first)
    assert len(before) == 12 * 3

    output = _reanalyse(run.pk)

    second = AnalysisRevision.objects.get(run=run, number=2)
    assert second.state == "done" and second.source_id == first.pk
    assert "[##############################] 12/12" in output
    assert "revision 2 reproduces revision 1 exactly (12 samples, rules" in output
    assert _snapshot(first) == before  # never overwritten
    after = {key: row[1:] for key, row in _snapshot(second).items()}
    assert after == {key: row[1:] for key, row in before.items()}
    assert AnalysisResult.objects.filter(revision=second).count() == 12
    results = AnalysisResult.objects.filter(revision=second)
    assert {(r.analyser, r.analyser_version) for r in results} == {
        ("rules", first.analyser_version)
    }
    messages = OutboxMessage.objects.filter(task="analysis.reanalyse_batch")
    assert all(set(m.payload) == {"revision_id", "sample_ids"} for m in messages)
    assert build_run_report(run_id=run.pk).revision["number"] == 2


def test_reanalyse_names_every_result_it_does_not_reproduce(
    simulator: Any, finished_run: Callable[..., Run]
) -> None:
    run = finished_run(questions=1, repeats=2)
    victim = Mention.objects.filter(sample__run=run, entity="Acme").order_by("id").first()
    assert victim is not None
    Mention.objects.filter(pk=victim.pk).update(sentence="tampered")

    with pytest.raises(CommandError) as failed:
        _reanalyse(run.pk)

    assert f"sample {victim.sample_id}: Acme: sentence stored 'tampered'" in str(failed.value)
    assert Mention.objects.get(pk=victim.pk).sentence == "tampered"  # revision 1 untouched


def test_reanalyse_with_the_llm_judge_records_its_prompt_version(
    simulator: Any, finished_run: Callable[..., Run]
) -> None:
    run = finished_run(questions=1, repeats=2)

    output = _reanalyse(run.pk, "--analyser", "llm_judge")

    revision = AnalysisRevision.objects.get(run=run, number=2)
    assert (revision.analyser, revision.analyser_version) == ("llm_judge", "judge-v1+openai_chat")
    assert "revision 2 done" in output
    rows = Mention.objects.filter(revision=revision)
    assert rows.exists()
    assert {(m.analyser, m.analyser_version) for m in rows} == {
        ("llm_judge", "judge-v1+openai_chat")
    }
    report = build_run_report(run_id=run.pk)
    assert report.checks[-1].detail.startswith("not re-derived: llm_judge is not deterministic")


def test_reanalyse_refuses_an_unknown_run() -> None:
    with pytest.raises(CommandError, match="no run 'nope'"):
        call_command("reanalyse", "nope")
