"""A consumer surface is a platform of its own: a campaign targets it like any platform, and
what its vendor cannot do (a region, a language, a device) is refused at preview, naming the
target; a language reaches the vendor through the run's frozen targets."""

from __future__ import annotations

import pytest

from connectors.platforms import PLATFORMS, _surface
from pipeline.step_context import request_for
from sampling.models import Sample
from sampling.planning import PlanError, parse_campaign_spec
from tests.conftest import make_campaign_data

from .test_planning import _launch


def _refusals(*targets: dict[str, str]) -> list[str]:
    data = make_campaign_data(questions=1, targets=list(targets), repeats=1)
    with pytest.raises(PlanError) as refused:
        parse_campaign_spec(data)
    return refused.value.problems


def test_a_language_the_vendor_does_not_support_is_refused_naming_the_target() -> None:
    problems = _refusals({"platform": "google_ai_mode", "region": "us", "language": "tlh"})
    assert len(problems) == 1
    assert problems[0].startswith("targets[0]: platform 'google_ai_mode' does not support")
    assert "language 'tlh'" in problems[0]


def test_a_region_and_a_device_the_vendor_lacks_are_each_refused() -> None:
    problems = _refusals({"platform": "chatgpt_web", "region": "zz", "device": "mobile"})
    assert any("does not support region 'zz'" in p for p in problems)
    assert any("does not support device 'mobile'" in p for p in problems)


def test_a_platform_of_its_own_api_takes_no_language() -> None:
    [problem] = _refusals({"platform": "openai", "language": "de"})
    assert problem == "targets[0]: platform 'openai' does not take a language ('de')"


def test_a_surface_no_vendor_serves_yet_is_refused_by_name() -> None:
    unserved = _surface("unserved_web", {}, price=(60, 20, 10))
    PLATFORMS[unserved.key] = unserved
    try:
        [problem] = _refusals({"platform": "unserved_web"})
    finally:
        del PLATFORMS[unserved.key]
    assert "unserved_web" in problem and "no collection vendor" in problem


def test_bright_data_takes_a_country_but_no_language_nor_a_mobile_device() -> None:
    problems = _refusals(
        {"platform": "copilot_web", "region": "de", "language": "de"},
        {"platform": "perplexity_web", "region": "zz", "device": "mobile"},
    )
    assert problems[0] == "targets[0]: platform 'copilot_web' does not take a language ('de')"
    assert any("targets[1]" in p and "does not support region 'zz'" in p for p in problems)
    assert any("targets[1]" in p and "does not support device 'mobile'" in p for p in problems)


def test_two_targets_differing_only_by_language_are_one_target_twice() -> None:
    problems = _refusals(
        {"platform": "google_ai_mode", "language": "en"},
        {"platform": "google_ai_mode", "language": "es"},
    )
    assert problems[0].startswith("targets[1]: duplicate target")


@pytest.mark.django_db
def test_the_targets_language_is_frozen_with_the_run_and_asked_of_the_vendor() -> None:
    targets = [
        {"platform": "google_ai_mode", "region": "us", "language": "es"},
        {"platform": "chatgpt_web", "region": "de"},
    ]
    run = _launch(make_campaign_data(questions=1, targets=targets, repeats=1))

    asked = {
        s.platform: request_for(s, "key").language
        for s in Sample.objects.filter(run=run).select_related("run", "question_revision")
    }
    assert asked == {"google_ai_mode": "es", "chatgpt_web": ""}
