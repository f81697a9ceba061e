"""Topics: tags of a campaign's questions, frozen in the run's snapshot, with series rows of
their own, and a filter of the series."""

from __future__ import annotations

import pytest

from monitoring import selectors
from monitoring.models import SeriesRow
from sampling.models import Campaign
from sampling.planning import PlanError, parse_campaign_spec
from sampling.services import campaign_spec_data
from sampling.snapshots import RunConfig
from simulator import SimulatorHandle
from tests.conftest import make_campaign_data
from tests.monitoring.conftest import series_run
from tests.reports.conftest import TARGETS

pytestmark = pytest.mark.django_db


def test_topics_are_frozen_with_the_run_and_have_series_rows(simulator: SimulatorHandle) -> None:
    run = series_run(questions=3, repeats=1, topics={0: ["pricing"], 1: ["pricing", "support"]})
    config = RunConfig.of(run)
    assert config.questions is not None
    assert [q.topics for q in config.questions] == [("pricing",), ("pricing", "support"), ()]
    campaign = Campaign.objects.get(pk=run.campaign_id)
    assert campaign_spec_data(campaign=campaign)["topics"] == {
        config.questions[0].text: ["pricing"],
        config.questions[1].text: ["pricing", "support"],
    }

    brand = config.brand.name
    rows = SeriesRow.objects.filter(run=run, entity=brand, question__isnull=True)
    by_topic = {
        topic: sum(r.planned for r in rows if r.topic == topic)
        for topic in ("", "pricing", "support")
    }
    assert by_topic == {"": 6, "pricing": 4, "support": 2}  # 2 targets x questions x 1 repeat

    pricing = selectors.series(campaign=campaign, metric="mention_rate", topic="pricing")
    (point,) = pricing.points
    assert point.n == 4
    per_question = SeriesRow.objects.filter(run=run, entity=brand, question__isnull=False)
    assert point.hits == sum(
        r.mentioned
        for r in per_question
        if r.question_id in {config.questions[0].question_id, config.questions[1].question_id}
    )
    # the campaign's topics changing later does not change what the run froze
    campaign.questions.update(topics=["other"])
    run.refresh_from_db()
    assert RunConfig.of(run).questions[0].topics == ("pricing",)  # type: ignore[index]


def test_a_topic_names_one_of_the_questions_and_is_a_short_name() -> None:
    data = make_campaign_data(questions=1, targets=TARGETS, repeats=1)
    data["topics"] = {"not a question": ["x"], data["questions"][0]: ["", "y" * 101]}
    with pytest.raises(PlanError) as refused:
        parse_campaign_spec(data)
    text = " ".join(refused.value.problems)
    assert "not one of the campaign's questions" in text
    assert "a topic is a name of 1 to 100 characters" in text
    data["topics"] = {data["questions"][0]: ["  price   plans ", "price plans"]}
    assert parse_campaign_spec(data).topics == {data["questions"][0]: ("price plans",)}
