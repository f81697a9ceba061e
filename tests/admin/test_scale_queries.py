"""The console pages that must stay fast at a million samples and 10,000 questions (issue 15):
their query counts do not grow with the number of runs, samples, batches or questions, and no
query counts a whole table. Timings are measured in bench/status_report.py, not here."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from console.admin.sampling.campaigns import QUESTION_INLINE_LIMIT
from pipeline.launch import launch_run
from sampling.models import Campaign, Run
from sampling.services import save_campaign
from tests.conftest import BASE_CAMPAIGN, fund_tenant, spec_with_tenant

pytestmark = pytest.mark.django_db

RUN_LIST_QUERIES = 12
RUN_PAGE_QUERIES = 30
SAMPLE_LIST_QUERIES = 14
CAMPAIGN_PAGE_QUERIES = 30


def _campaign(*, questions: int, repeats: int = 2, name: str = "scale") -> Campaign:
    data: dict[str, Any] = copy.deepcopy(BASE_CAMPAIGN)
    data["name"] = name
    data["questions"] = [f"Which CRM is best for team {i}?" for i in range(questions)]
    data["repeats"] = repeats
    campaign = save_campaign(spec=spec_with_tenant(data))
    fund_tenant(campaign.tenant)
    return campaign


def _launch(*, questions: int, repeats: int = 2, name: str = "scale") -> Run:
    return launch_run(campaign=_campaign(questions=questions, repeats=repeats, name=name))


def _queries(client: Client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, url
    return [q["sql"] for q in captured.captured_queries]


def _reads_samples(sql: str) -> bool:
    return "sampling_sample" in sql.replace("sampling_samplecount", "")


def _no_unbounded_count(queries: list[str]) -> None:
    for sql in queries:
        if "COUNT(" in sql.upper() and _reads_samples(sql):
            assert "LIMIT" in sql.upper() or "GROUP BY" in sql.upper(), sql


def test_run_list_queries_do_not_grow_with_runs_or_samples(admin_client: Client) -> None:
    url = reverse("admin:sampling_run_changelist")
    small = _campaign(questions=1, repeats=1, name="small")
    bigger = _campaign(questions=30, repeats=3, name="bigger")
    launch_run(campaign=small)
    one_run = _queries(admin_client, url)
    launch_run(campaign=small)
    launch_run(campaign=bigger)
    three_runs = _queries(admin_client, url)
    assert len(three_runs) == len(one_run)
    assert len(three_runs) <= RUN_LIST_QUERIES
    assert not any(_reads_samples(sql) for sql in three_runs), "statuses come from counters"


def test_run_page_queries_do_not_grow_with_samples_or_batches(admin_client: Client) -> None:
    small = _launch(questions=1, repeats=1, name="small")
    large = _launch(questions=40, repeats=5, name="large")
    assert large.batches.count() > small.batches.count()
    admin_client.get(reverse("admin:sampling_run_change", args=[small.pk]))  # warm caches
    small_page = _queries(admin_client, reverse("admin:sampling_run_change", args=[small.pk]))
    large_page = _queries(admin_client, reverse("admin:sampling_run_change", args=[large.pk]))
    assert len(large_page) == len(small_page)
    assert len(large_page) <= RUN_PAGE_QUERIES
    _no_unbounded_count(large_page)


def test_sample_list_counts_at_most_a_capped_number_of_rows(admin_client: Client) -> None:
    run = _launch(questions=20, repeats=3)
    url = reverse("admin:sampling_sample_changelist")
    every = _queries(admin_client, url)
    of_run = _queries(admin_client, f"{url}?run={run.pk}")
    for queries in (every, of_run):
        assert len(queries) <= SAMPLE_LIST_QUERIES
        _no_unbounded_count(queries)


def test_a_campaign_with_many_questions_lists_them_apart_paginated(admin_client: Client) -> None:
    few = _campaign(questions=2, name="few")
    many = _campaign(questions=QUESTION_INLINE_LIMIT + 50, name="many")
    few_page = _queries(admin_client, reverse("admin:sampling_campaign_change", args=[few.pk]))
    response = admin_client.get(reverse("admin:sampling_campaign_change", args=[many.pk]))
    page = response.content.decode()
    assert "the question list" in page
    assert "questions-0-text" not in page  # no form per question
    many_page = _queries(admin_client, reverse("admin:sampling_campaign_change", args=[many.pk]))
    assert len(many_page) <= CAMPAIGN_PAGE_QUERIES
    assert len(many_page) <= len(few_page) + 2

    listed = admin_client.get(
        reverse("admin:sampling_question_changelist") + f"?campaign__id__exact={many.pk}"
    )
    assert listed.status_code == 200
    assert listed.context["cl"].result_list.count() == 100  # one page of the questions
    question = many.questions.order_by("position").first()
    assert question is not None
    change = admin_client.get(reverse("admin:sampling_question_change", args=[question.pk]))
    assert change.status_code == 200


def test_editing_a_question_in_its_list_makes_a_new_revision(admin_client: Client) -> None:
    many = _campaign(questions=QUESTION_INLINE_LIMIT + 1, name="many")
    question = many.questions.order_by("position").first()
    assert question is not None and question.current_revision is not None
    response = admin_client.post(
        reverse("admin:sampling_question_change", args=[question.pk]),
        {
            "campaign": many.pk,
            "position": question.position,
            "text": "Which CRM is best for a large team?",
            "is_active": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    question.refresh_from_db()
    assert question.current_revision is not None
    assert question.current_revision.revision_no == 2
    assert question.current_revision.text == "Which CRM is best for a large team?"
