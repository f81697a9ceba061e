from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from evidence.models import Capture
from sampling.models import Sample
from simulator import SimulatorHandle
from tests.conftest import launch_funded, make_campaign_data
from tests.inprocess import drive_in_process
from tests.services import simulator_fixture

simulator = simulator_fixture(seed=5)


@pytest.mark.django_db
def test_reparse_sample_adds_a_revision_equal_to_the_live_derivation(
    simulator: SimulatorHandle,
) -> None:
    targets = [{"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}]
    data = make_campaign_data(questions=1, targets=targets, repeats=1)
    run = launch_funded(data)
    drive_in_process(run.pk)
    sample = Sample.objects.get(run=run)
    original = Capture.objects.get(sample=sample)

    out = StringIO()
    call_command("reparse", sample=sample.pk, stdout=out)
    printed = json.loads(out.getvalue())

    assert printed["revision"] == original.revision + 1
    again = Capture.objects.get(sample=sample, revision=printed["revision"])
    assert again.answer_text == original.answer_text == printed["answer_text"]
    assert list(again.citations.values_list("url", "start", "end")) == list(
        original.citations.values_list("url", "start", "end")
    )
    assert Capture.objects.filter(sample=sample).count() == 2  # the original is untouched


@pytest.mark.django_db
def test_reparse_of_an_unknown_sample_is_a_clear_error() -> None:
    with pytest.raises(CommandError, match="no sample with id 999999"):
        call_command("reparse", sample=999999)
