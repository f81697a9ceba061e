"""A worker moves its start-up objects out of the cycle collector's reach once it is ready
(docs/decisions.md, "Workers freeze their start-up objects")."""

from __future__ import annotations

import gc
import weakref

from celery.signals import worker_ready

from geo_collect.celery import _freeze_startup_objects


def test_the_worker_freezes_what_exists_when_it_is_ready() -> None:
    receivers = [r() if isinstance(r, weakref.ref) else r for _, r in worker_ready.receivers]
    assert _freeze_startup_objects in receivers
    gc.unfreeze()
    try:
        _freeze_startup_objects()
        assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()
