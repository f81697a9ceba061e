"""The collection provider's API (designed in `connectors/adapters/collector.py`).

Tasks advance by polls, not wall time, so tests are deterministic: with `polls_until_done`
= 2 the first poll says "queued", the second says "completed". A callback, when configured,
finishes the task at once and is delivered (twice under `duplicate_callback`).
Task faults are drawn per task at submit: `lose` (accepted, then 404 / "lost" everywhere),
`task_failed`, `task_rejected` (refused inside an accepted batch: partial acceptance),
`screenshot_missing`, `screenshot_late` (missing from the first result only),
`duplicate_callback`. Every cancel request is recorded on its task (`cancels_asked`).
HTTP faults apply to a whole batch
request; `hang` on a batch accepts it first and then never answers (acceptance unknown).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ..content import SimAnswer
from ..faults import HTTP_FAULTS, TASK_FAULTS, Draw
from ..png import screenshot_png
from ..protocol import PlatformProtocol, SimRequest, SimResponse

LIMIT = 100
_COLORS = ((245, 245, 250), (236, 242, 255), (250, 247, 240))


@dataclass
class _Task:
    task_id: str
    client_key: str
    spec: dict[str, Any]
    answer: SimAnswer
    fault: str | None
    cost: int
    currency: str
    color: tuple[int, int, int]
    lost_as_status: bool = False  # accept-then-lose variant: 200 "lost" instead of 404
    polls: int = 0
    finished: bool = False
    cancelled: bool = False
    cancel_requests: int = 0  # every POST .../cancel for this task, acknowledged or not
    callbacks_sent: int = 0
    results_fetched: int = 0

    @property
    def lost(self) -> bool:
        return self.fault == "lose"

    def status(self, polls_until_done: int) -> str:
        if self.lost:
            return "lost"
        if self.cancelled:
            return "cancelled"
        if self.finished or self.polls >= polls_until_done:
            return "failed" if self.fault == "task_failed" else "completed"
        return "queued" if self.polls <= 1 else "running"


_REJECT = frozenset({"task_rejected"})


@dataclass
class _Batch:
    batch_id: str
    digest: str
    task_ids: list[str] = field(default_factory=list)
    rejected: dict[int, str] = field(default_factory=dict)  # position -> client key


def _error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> SimResponse:
    return SimResponse.json(status, {"error": {"code": code, "message": message}}, headers)


def _unit_cost(spec: dict[str, Any]) -> int:
    return (
        30
        + (10 if spec.get("screenshot") else 0)
        + (20 if spec.get("mode") == "deep_thinking" else 0)
    )


class CollectorProtocol(PlatformProtocol):
    name = "collector"
    faults = HTTP_FAULTS | TASK_FAULTS

    def __init__(self, sim: Any) -> None:
        super().__init__(sim)
        self.reset()

    def reset(self) -> None:
        self.batches: dict[str, _Batch] = {}
        self.tasks: dict[str, _Task] = {}
        self.by_client_key: dict[str, str] = {}
        self.serial = 0
        self.request_serial = 0

    # --- routing -----------------------------------------------------------------------
    def handle(self, request: SimRequest) -> SimResponse:
        response = self._route(request)
        with self.sim.lock:
            self.request_serial += 1
            response.headers.setdefault("x-request-id", f"colreq_{self.request_serial:08d}")
        return response

    def _route(self, request: SimRequest) -> SimResponse:
        if not request.bearer() or str(request.bearer()).startswith("invalid"):
            return _error(401, "unauthorized", "missing or invalid API key")
        parts = [p for p in request.path.split("/") if p]
        route = (request.method, *parts[1:]) if parts[:1] == ["v1"] else (request.method,)
        match route:
            case ("POST", "quotes"):
                return self.quote(request)
            case ("POST", "batches"):
                return self.create_batch(request)
            case ("GET", "tasks"):
                return self.lookup(request)
            case ("GET", "tasks", task_id):
                return self.task_status(task_id)
            case ("GET", "tasks", task_id, "result"):
                return self.task_result(task_id)
            case ("POST", "tasks", task_id, "cancel"):
                return self.cancel(task_id)
        return _error(404, "not_found", f"no route {request.method} {request.path}")

    @property
    def settings(self) -> dict[str, Any]:
        collector: dict[str, Any] = self.sim.platform_profile(self.name)["collector"]
        return collector

    def _next_id(self, prefix: str, draw: Draw) -> str:
        self.serial += 1
        return f"{prefix}_{self.serial:06d}{draw.rng.getrandbits(32):08x}"

    # --- endpoints ---------------------------------------------------------------------
    def quote(self, request: SimRequest) -> SimResponse:
        body = request.json()
        specs = body.get("tasks") if isinstance(body, dict) else None
        if not isinstance(specs, list) or not specs:
            return _error(400, "invalid_request", "tasks must be a non-empty list")
        costs = [_unit_cost(spec) for spec in specs if isinstance(spec, dict)]
        expires = datetime.now(UTC) + timedelta(hours=1)
        return SimResponse.json(
            200,
            {
                "quote_id": f"qt_{hashlib.sha256(request.body).hexdigest()[:16]}",
                "currency": self.settings["currency"],
                "total": sum(costs),
                "items": [{"unit_cost": cost} for cost in costs],
                "expires_at": expires.isoformat().replace("+00:00", "Z"),
            },
        )

    def create_batch(self, request: SimRequest) -> SimResponse:
        key = request.headers.get("idempotency-key")
        body = request.json()
        specs = body.get("tasks") if isinstance(body, dict) else None
        if not key:
            return _error(400, "idempotency_key_required", "Idempotency-Key header is required")
        if not isinstance(specs, list) or not specs or not all(isinstance(s, dict) for s in specs):
            return _error(400, "invalid_request", "tasks must be a non-empty list of objects")
        if len(specs) > LIMIT:
            return _error(400, "batch_too_large", f"at most {LIMIT} tasks per batch")
        questions = "\n".join(str(spec.get("question", "")) for spec in specs)
        draw = self.sim.draw(self.name, "batch\n" + questions, HTTP_FAULTS)
        if draw.fault != "hang" and (failure := self.http_fault(draw)) is not None:
            return failure
        with self.sim.lock:
            response = self._create_or_replay(key, request.body, specs, body)
        if draw.fault == "hang":  # accepted, but the answer never arrives
            return SimResponse(200, hang_seconds=float(draw.profile["hang_seconds"]))
        response.delay_seconds = draw.latency_seconds
        return response

    def _create_or_replay(
        self, key: str, raw: bytes, specs: list[dict[str, Any]], body: dict[str, Any]
    ) -> SimResponse:
        digest = hashlib.sha256(raw).hexdigest()
        if key in self.batches:
            batch = self.batches[key]
            if batch.digest != digest:
                return _error(422, "idempotency_key_reused", "key was used with another body")
            return SimResponse.json(200, self._batch_json(batch), {"Idempotent-Replayed": "true"})
        batch = _Batch(batch_id=f"bat_{digest[:16]}", digest=digest)
        for position, spec in enumerate(specs):
            question = str(spec.get("question", ""))
            if self.sim.draw(self.name, "reject\n" + question, _REJECT).fault:
                batch.rejected[position] = str(spec.get("client_key") or "")
                continue
            batch.task_ids.append(self._task_for(spec, body.get("callback_url")))
        self.batches[key] = batch
        return SimResponse.json(202, self._batch_json(batch))

    def _batch_json(self, batch: _Batch) -> dict[str, Any]:
        polls_until_done = int(self.settings["polls_until_done"])
        tasks = [self.tasks[task_id] for task_id in batch.task_ids]
        refused = [
            {
                "client_key": client_key,
                "task_id": None,
                "status": "rejected",
                "error": {"code": "region_unavailable", "message": "no capacity for this target"},
            }
            for client_key in batch.rejected.values()
        ]
        return {
            "batch_id": batch.batch_id,
            "tasks": [
                {
                    "client_key": task.client_key,
                    "task_id": task.task_id,
                    # A task about to be lost still looks accepted: that is the fault.
                    "status": "queued" if task.lost else task.status(polls_until_done),
                }
                for task in tasks
            ]
            + refused,
        }

    def _task_for(self, spec: dict[str, Any], callback_url: Any) -> str:
        client_key = str(spec.get("client_key") or "")
        existing = self.by_client_key.get(client_key)
        if existing and not self.tasks[existing].lost:
            return existing  # the provider dedupes on client_key across batches
        question = str(spec.get("question", ""))
        draw = self.sim.draw(self.name, question, TASK_FAULTS)
        answer = self.sim.answer_for(question, draw)
        if spec.get("mode") == "no_search":
            answer.citations = []
        low, high = (int(v) for v in self.settings["cost_minor"])
        task = _Task(
            task_id=self._next_id("tsk", draw),
            client_key=client_key,
            spec=dict(spec),
            answer=answer,
            fault=draw.fault,
            cost=draw.rng.randint(low, high),
            currency=str(self.settings["currency"]),
            color=draw.rng.choice(_COLORS),
            lost_as_status=draw.rng.random() < 0.5,
        )
        self.tasks[task.task_id] = task
        if client_key:
            self.by_client_key[client_key] = task.task_id
        self.sim.record_answer(
            self.name, question, draw, answer, task_id=task.task_id, client_key=client_key
        )
        if isinstance(callback_url, str) and callback_url and not task.lost:
            self._schedule_callback(task, callback_url)
        return task.task_id

    def task_status(self, task_id: str) -> SimResponse:
        with self.sim.lock:
            task = self.tasks.get(task_id)
            if task is None or (task.lost and not task.lost_as_status):
                return _error(404, "task_not_found", f"unknown task {task_id}")
            task.polls += 1
            status = task.status(int(self.settings["polls_until_done"]))
            return SimResponse.json(
                200,
                {
                    "task_id": task.task_id,
                    "client_key": task.client_key,
                    "status": status,
                    "retry_after_seconds": 0.5 if status in ("queued", "running") else None,
                    "error": self._task_error(task, status),
                },
            )

    @staticmethod
    def _task_error(task: _Task, status: str) -> dict[str, str] | None:
        if status == "failed":
            return {"code": "answer_not_found", "message": "the platform did not answer"}
        if status == "lost":
            return {"code": "task_lost", "message": "the task was lost by a worker"}
        return None

    def _live(self, task_id: str) -> tuple[_Task | None, str]:
        """The task (None when unknown or lost) and its status now. Hold the lock."""
        task = self.tasks.get(task_id)
        if task is None or task.lost:
            return None, "unknown"
        return task, task.status(int(self.settings["polls_until_done"]))

    def task_result(self, task_id: str) -> SimResponse:
        with self.sim.lock:
            task, status = self._live(task_id)
            if task is None:
                return _error(404, "task_not_found", f"unknown task {task_id}")
            if status in ("queued", "running"):
                return _error(409, "task_not_finished", f"task is {status}", {"Retry-After": "1"})
            task.results_fetched += 1
            return SimResponse.json(200, self._result_json(task, status))

    def _result_json(self, task: _Task, status: str) -> dict[str, Any]:
        completed = status == "completed"
        wants_shot = bool(task.spec.get("screenshot"))
        shot = None
        late = task.fault == "screenshot_late" and task.results_fetched <= 1
        if completed and wants_shot and task.fault != "screenshot_missing" and not late:
            png = screenshot_png(str(task.spec.get("device", "desktop")), task.color)
            shot = {"mime": "image/png", "data_base64": base64.b64encode(png).decode()}
        missing = wants_shot and shot is None
        return {
            "task_id": task.task_id,
            "client_key": task.client_key,
            "status": status,
            **{k: task.spec.get(k) for k in ("platform", "device", "region", "mode")},
            "answer_text": task.answer.text if completed else "",
            "citations": [
                {"url": c.url, "title": c.title, "start": c.start, "end": c.end}
                for c in (task.answer.citations if completed else [])
            ],
            "screenshot_requested": wants_shot,
            "screenshot": shot,
            "screenshot_error": ("capture_timeout" if completed else status) if missing else None,
            "cost": {"amount": task.cost if completed else 0, "currency": task.currency},
            "captured_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "error": self._task_error(task, status),
        }

    def cancel(self, task_id: str) -> SimResponse:
        with self.sim.lock:
            task, status = self._live(task_id)
            if task is None:
                return _error(404, "task_not_found", f"unknown task {task_id}")
            task.cancel_requests += 1
            task.cancelled = task.cancelled or status in ("queued", "running")
            _, status = self._live(task_id)
            payload = {"task_id": task_id, "status": status, "cancelled": task.cancelled}
            return SimResponse.json(200, payload)

    def cancels_asked(self) -> dict[str, int]:
        """Task id -> how many cancel requests it received (tests: the upstream side of a
        run's cancel)."""
        with self.sim.lock:
            return {t.task_id: t.cancel_requests for t in self.tasks.values() if t.cancel_requests}

    def lookup(self, request: SimRequest) -> SimResponse:
        keys = request.query.get("client_key", [])
        with self.sim.lock:
            found = [self.tasks[self.by_client_key[k]] for k in keys if k in self.by_client_key]
            polls_until_done = int(self.settings["polls_until_done"])
            tasks = [
                {"task_id": t.task_id, "client_key": t.client_key,
                 "status": t.status(polls_until_done)}
                for t in found if not t.lost
            ]  # fmt: skip
        return SimResponse.json(200, {"tasks": tasks})

    # --- callbacks ---------------------------------------------------------------------
    def _schedule_callback(self, task: _Task, url: str) -> None:
        delay = float(self.settings["callback_delay_seconds"])
        timer = threading.Timer(delay, self._deliver, args=(task.task_id, url))
        timer.daemon = True
        timer.start()

    def _deliver(self, task_id: str, url: str) -> None:
        if self.sim.stopping.is_set():
            return
        with self.sim.lock:
            task = self.tasks.get(task_id)
            if task is None or task.cancelled:
                return
            task.finished = True
            status = task.status(0)
            payload = {
                "delivery_id": f"dlv_{task.task_id}",
                "event": f"task.{status}",
                "task_id": task.task_id,
                "client_key": task.client_key,
                "status": status,
            }
            copies = 2 if task.fault == "duplicate_callback" else 1
            secret = str(self.settings["callback_secret"])
        body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        for _ in range(copies):
            self._post(url, body, secret)
            with self.sim.lock:
                task.callbacks_sent += 1

    @staticmethod
    def _post(url: str, body: bytes, secret: str) -> None:
        timestamp = int(time.time())
        mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
        request = urllib.request.Request(  # noqa: S310 (callback URLs are http(s) by contract)
            url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "X-Collector-Signature": f"t={timestamp},v1={mac.hexdigest()}",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
                response.read()
        except OSError:
            pass  # a receiver that is down misses the hint; polling still finds the result
