"""Every transition of the four layers, and that illegal ones raise."""

from __future__ import annotations

import pytest
from django_fsm import TransitionNotAllowed

from sampling.models import Sample

LEGAL = [
    # (layer, method, from, to)
    ("submission_state", "begin_submit", "planned", "submitting"),
    ("submission_state", "accept", "submitting", "accepted"),
    ("submission_state", "reject_submit", "submitting", "planned"),
    ("submission_state", "mark_uncertain", "submitting", "uncertain"),
    ("submission_state", "confirm_accepted", "uncertain", "accepted"),
    ("submission_state", "confirm_not_accepted", "uncertain", "planned"),
    ("collection_state", "start_collection", "queued", "running"),
    ("collection_state", "complete_collection", "running", "completed"),
    ("collection_state", "fail_collection", "queued", "failed"),
    ("collection_state", "fail_collection", "running", "failed"),
    ("evidence_state", "store_evidence", "pending", "stored"),
    ("evidence_state", "store_partial_evidence", "pending", "partial"),
    ("evidence_state", "fail_evidence", "pending", "failed"),
    ("evidence_state", "repair_evidence", "partial", "stored"),
    ("analysis_state", "accept_analysis", "pending", "accepted"),
    ("analysis_state", "send_to_review", "pending", "review"),
    ("analysis_state", "fail_analysis", "pending", "failed"),
    ("analysis_state", "approve_review", "review", "accepted"),
    ("analysis_state", "reject_review", "review", "failed"),
]

STATES = {
    "submission_state": ["planned", "submitting", "accepted", "uncertain"],
    "collection_state": ["queued", "running", "completed", "failed"],
    "evidence_state": ["pending", "stored", "partial", "failed"],
    "analysis_state": ["pending", "accepted", "review", "failed"],
}

ILLEGAL = [
    (layer, method, state)
    for layer, method in sorted({(layer, method) for layer, method, _, _ in LEGAL})
    for state in STATES[layer]
    if (layer, method, state) not in {(lay, m, src) for lay, m, src, _ in LEGAL}
]


@pytest.mark.parametrize(("layer", "method", "source", "target"), LEGAL)
def test_legal_transition_moves_only_its_layer(
    layer: str, method: str, source: str, target: str
) -> None:
    sample = Sample(**{layer: source})
    before = {other: getattr(sample, other) for other in STATES if other != layer}

    getattr(sample, method)()

    assert getattr(sample, layer) == target
    assert {other: getattr(sample, other) for other in STATES if other != layer} == before


@pytest.mark.parametrize(("layer", "method", "source"), ILLEGAL)
def test_illegal_transition_raises(layer: str, method: str, source: str) -> None:
    sample = Sample(**{layer: source})
    with pytest.raises(TransitionNotAllowed):
        getattr(sample, method)()
    assert getattr(sample, layer) == source


def test_completed_and_failed_collection_are_terminal() -> None:
    for state in ("completed", "failed"):
        sample = Sample(collection_state=state)
        for method in ("start_collection", "complete_collection", "fail_collection"):
            with pytest.raises(TransitionNotAllowed):
                getattr(sample, method)()
