"""Thin Celery entry points of billing: ids in, a service call."""

from __future__ import annotations

from celery import shared_task

from . import imports


@shared_task(name=imports.TASK)
def import_statement(import_id: int, outbox_id: int | None = None) -> str:
    return imports.run_import(import_id=import_id, outbox_id=outbox_id)
