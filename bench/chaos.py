"""Chaos run (`make chaos`): real processes, real faults, then the invariants.

Starts, all on loopback and all its own: a PostgreSQL database `geo_chaos` (dropped and
recreated), a redis-server on a free port (no persistence, so a restart loses every message),
the platform simulator with a fault profile, four Celery workers on different queue subsets
and the dispatcher. Launches runs of more than 2,000 samples over seven platforms and four
tenants, and while they execute:

* SIGKILLs a random worker now and then and starts it again;
* arms every failpoint once (a worker, or the dispatcher, restarted with GEO_FAILPOINTS set
  dies at that point; it is then started again unarmed);
* SIGKILLs and restarts the dispatcher once;
* pauses the provider worker (SIGSTOP) past its leases once, then resumes it;
* restarts Redis once (SIGKILL; no persistence, so every queued message is lost);
* a scheduled campaign whose one slot falls during the run: the dispatcher launches it once,
  however often it is killed (the slot is recorded once per campaign and time);
* once every run has ended, resumes the runs that did not fully succeed
  (`manage.py resume_run`, after its dry run) and lets the redone samples run too.

When no sample has automatic work left it runs check_invariants and check_ledger, checks the
simulator's own log against our records (every upstream task and answer is recorded, or its
sample is marked uncertain), prints what was injected and what was found, and exits non-zero
on any violation, a failpoint that never fired, or a timeout.

Samples whose submission was in flight on a direct model API when its worker was killed
cannot be resolved automatically (those APIs cannot be asked "did you run this?"): they end
uncertain and parked for review, never re-submitted; the harness then acts as the reviewer
and keeps them as failed placeholders, so every run must finish. `--strict` is kept for replay.

    python bench/chaos.py [--seed N] [--timeout S] [--strict]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "geo_collect.settings")

CHAOS_DB = os.environ.get("GEO_CHAOS_DB", "geo_chaos")  # one per engineer sharing a server
from geo_collect.logs import messages  # noqa: E402
from geo_collect.processes import (  # noqa: E402  (needs ROOT on sys.path)
    ManagedProcess as Proc,
)
from geo_collect.processes import (  # noqa: E402
    dispatcher_command,
    redis_answers,
    redis_server_command,
    worker_command,
)

# Outside the source tree: logs, storage and the report survive a `make clean` elsewhere.
WORK = Path(os.environ.get("GEO_CHAOS_DIR", "/tmp/geo-chaos"))
# Sized for a 2-core machine: the dispatcher leases at most ~38 steps at once (7 platforms x 4,
# analysis 8, evidence 2) for 20 worker threads, so a claim rarely waits in a queue for longer
# than its lease. (A lease starts at the claim, not when a worker picks the message up.)
LEASE_SECONDS = 30
VISIBILITY_TIMEOUT = 60

# The fault profile of the simulator: something goes wrong on a few percent of calls
# everywhere, one platform is slow, the provider loses, fails and hangs tasks now and then.
PROFILE: dict[str, Any] = {
    "rates": {
        "rate_limit": 0.04,
        "server_error": 0.03,
        "truncate": 0.02,
        "midstream_error": 0.01,
        "login_page": 0.01,
    },
    "latency_ms": [10, 150],
    "retry_after_seconds": 0.5,
    "platforms": {
        "gemini": {"latency_ms": [300, 1500]},
        "collector": {
            "rates": {
                "rate_limit": 0.03,
                "server_error": 0.02,
                "hang": 0.01,
                "lose": 0.01,
                "task_failed": 0.02,
                "screenshot_missing": 0.05,
            },
            "hang_seconds": 3,
        },
    },
}

BRAND = {"name": "Acme", "aliases": ["ACME", "艾克米"], "domains": ["acme.com"]}
COMPETITORS = [
    {"name": "Globex", "aliases": ["环球"], "domains": ["globex.com"]},
    {"name": "Initech", "aliases": [], "domains": ["initech.com"]},
]


# Region and mode each platform supports (capabilities are checked at plan time).
_TARGET_OVERRIDES: dict[str, dict[str, str]] = {
    "deepseek": {"mode": "no_search"},
    "gemini": {"region": "global"},
    "qwen": {"region": "cn"},
}


def _target(platform: str) -> dict[str, str]:
    target = {"platform": platform, "device": "desktop", "region": "us", "mode": "web_search"}
    return target | _TARGET_OVERRIDES.get(platform, {})


# (tenant, campaign, questions, platforms, repeats, screenshot policy)
CAMPAIGNS: list[tuple[str, str, int, list[str], int, str]] = [
    ("alpha", "alpha-direct", 36, ["openai", "anthropic", "deepseek"], 7, "none"),
    ("alpha", "alpha-provider", 36, ["collector"], 6, "optional"),
    ("beta", "beta-direct", 36, ["gemini", "perplexity", "qwen"], 7, "none"),
    ("beta", "beta-provider", 36, ["collector"], 6, "optional"),
    ("gamma", "gamma-mixed", 20, ["openai", "collector"], 5, "none"),
    ("delta", "delta-screenshots", 3, ["anthropic"], 2, "optional"),  # rendered by Chromium
]

DIRECT_A = ["platform.openai", "platform.anthropic", "platform.deepseek", "platform.gemini"]
DIRECT_B = ["platform.perplexity", "platform.qwen", "platform.gemini", "platform.openai"]
# name -> (queues, threads). Every queue has at least two consumers, so one dead worker never
# stops a platform; the provider worker takes the failpoints that need a platform with lookup.
WORKERS: dict[str, tuple[list[str], int]] = {
    "w-direct-a": ([*DIRECT_A, "analysis"], 6),
    "w-direct-b": ([*DIRECT_B, "analysis"], 6),
    "w-provider": (["platform.collector", "evidence", "default"], 4),
    "w-all": (
        [
            *sorted(set(DIRECT_A + DIRECT_B)),
            "platform.collector",
            "evidence",
            "analysis",
            "default",
        ],
        4,
    ),
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# --- processes ------------------------------------------------------------------------------


@dataclass
class Injected:
    worker_kills: Counter[str] = field(default_factory=Counter)
    dispatcher_kills: int = 0
    redis_restarts: int = 0
    pauses: int = 0
    supervisor_restarts: list[str] = field(default_factory=list)
    failpoints: dict[str, str] = field(default_factory=dict)  # point -> process it killed
    timeline: list[str] = field(default_factory=list)

    def note(self, message: str) -> None:
        self.timeline.append(f"{time.strftime('%H:%M:%S')} {message}")
        log(f"INJECT {message}")


# --- the harness ----------------------------------------------------------------------------


class Chaos:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.injected = Injected()
        self.procs: dict[str, Proc] = {}
        self.redis: subprocess.Popen[bytes] | None = None
        self.redis_port = free_port()
        self.sim_port = free_port()
        self.failpoint_dir = WORK / "failpoints"
        self.env: dict[str, str] = {}
        self.armed: dict[str, str] = {}  # failpoint -> process armed with it, until it fires
        self.problems: list[str] = []
        self.reviewed = 0
        self.upstream_answers: list[dict[str, Any]] = []  # the simulator's log, read at the end
        self.paused_until: tuple[Proc, float] | None = None
        self.redis_restarted_at = 0.0
        self.scheduled_campaign: Any = None
        self.resumed: dict[str, dict[str, Any]] = {}  # run id -> its dry-run plan

    # -- set-up --------------------------------------------------------------------------
    def prepare(self) -> None:
        if WORK.exists():
            shutil.rmtree(WORK)
        (WORK / "logs").mkdir(parents=True)
        self.failpoint_dir.mkdir()
        base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/geo_collect")
        parts = urlsplit(base)
        if parts.scheme not in ("postgres", "postgresql"):
            sys.exit("chaos needs PostgreSQL: set DATABASE_URL (make chaos does)")
        self._recreate_database(urlunsplit(parts._replace(path="/postgres")))
        chaos_url = urlunsplit(parts._replace(path=f"/{CHAOS_DB}"))
        self.env = {
            "DATABASE_URL": chaos_url,
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "GEO_UPSTREAM_BASE_URL": f"http://127.0.0.1:{self.sim_port}",
            "GEO_VAR_DIR": str(WORK / "var"),
            "GEO_LEASE_SECONDS": str(LEASE_SECONDS),
            "GEO_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT),
            "GEO_FAILPOINT_DIR": str(self.failpoint_dir),
            "GEO_FAILPOINTS": "",
            "GEO_PLATFORM_CONCURRENCY": "4",
            "GEO_EVIDENCE_CONCURRENCY": "2",
            "GEO_ANALYSIS_CONCURRENCY": "8",
            "GEO_MAX_SUBMIT_ATTEMPTS": "5",
            "GEO_LOG_LEVEL": "WARNING",
        }
        os.environ.update(self.env)  # this process reads the same database and broker
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)

    @staticmethod
    def _recreate_database(admin_url: str) -> None:
        import psycopg

        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {CHAOS_DB} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {CHAOS_DB}")

    def start_redis(self) -> None:
        data = WORK / "redis"
        data.mkdir(exist_ok=True)
        self.redis = subprocess.Popen(
            redis_server_command(
                port=self.redis_port, directory=data, logfile=WORK / "logs" / "redis.log"
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        if not redis_answers(self.redis_port, seconds=10.0, pause=0.1):
            raise RuntimeError("redis-server did not start")

    def start_simulator(self) -> None:
        profile = WORK / "profile.json"
        profile.write_text(json.dumps(PROFILE, indent=2))
        world = WORK / "world.json"
        world.write_text(json.dumps([BRAND, *COMPETITORS]))
        proc = Proc(
            "simulator",
            [
                sys.executable,
                "manage.py",
                "simulator",
                "--port",
                str(self.sim_port),
                "--seed",
                str(self.args.seed),
                "--profile",
                str(profile),
                "--world",
                str(world),
            ],
            self.env,
            WORK / "logs" / "simulator.log",
        )
        proc.start()
        self.procs["simulator"] = proc
        for _ in range(100):
            try:
                self.sim_get("/_sim/health")
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("simulator did not start")

    def sim_get(self, path: str) -> Any:
        url = f"http://127.0.0.1:{self.sim_port}{path}"
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.loads(response.read())

    def start_processes(self) -> None:
        for name, (queues, threads) in WORKERS.items():
            command = worker_command(
                name=f"{name}@chaos", queues=queues, concurrency=threads, loglevel="INFO"
            )  # INFO: each task's outcome lands in the log, counted in the summary
            env = {**self.env, "GEO_LOG_LEVEL": "INFO"}  # the product's logs follow this one
            proc = Proc(name, command, env, WORK / "logs" / f"{name}.log")
            proc.start()
            self.procs[name] = proc
        dispatcher = Proc(
            "dispatcher",
            dispatcher_command(interval=0.3),
            self.env,
            WORK / "logs" / "dispatcher.log",
        )
        self.procs["dispatcher"] = dispatcher

    def launch(self) -> list[Any]:
        from billing.services import ensure_default_price_version, top_up
        from pipeline.launch import launch_run
        from sampling.planning import parse_campaign_spec
        from sampling.services import save_campaign
        from tenancy.models import Tenant

        version = ensure_default_price_version()
        runs = []
        for tenant_slug, name, questions, platforms, repeats, shots in CAMPAIGNS:
            tenant, created = Tenant.objects.get_or_create(
                slug=tenant_slug, defaults={"name": tenant_slug.title()}
            )
            if created:
                top_up(
                    tenant=tenant,
                    amount=10**10,
                    currency=version.currency,
                    idempotency_key=f"chaos-funds-{tenant_slug}",
                )
            data = {
                "tenant": tenant_slug,
                "name": name,
                "brand": BRAND,
                "competitors": COMPETITORS,
                "questions": [
                    f"{name} question {i}: which CRM vendor is best for a team of {i + 2}?"
                    for i in range(questions)
                ],
                "targets": [_target(p) for p in platforms],
                "repeats": repeats,
                "screenshot_policy": shots,
            }
            runs.append(launch_run(campaign=save_campaign(spec=parse_campaign_spec(data))))
        self.schedule_one_slot(version)
        return runs

    def schedule_one_slot(self, version: Any) -> None:
        """A small campaign scheduled daily at the minute after next (UTC): one slot in the
        run, launched by the dispatcher whatever happens to it."""
        from datetime import timedelta

        from sampling.dbtime import db_now
        from sampling.planning import parse_campaign_spec
        from sampling.schedules import save_schedule
        from sampling.services import save_campaign

        now = db_now()
        slot = now + timedelta(minutes=2)
        data = {
            "tenant": "gamma",
            "name": "gamma-scheduled",
            "brand": BRAND,
            "competitors": COMPETITORS,
            "questions": [f"Scheduled question {i}: which CRM vendor?" for i in range(8)],
            "targets": [_target("openai"), _target("collector")],
            "repeats": 2,
            "screenshot_policy": "none",
        }
        self.scheduled_campaign = save_campaign(spec=parse_campaign_spec(data))
        save_schedule(
            campaign=self.scheduled_campaign,
            cron=f"{slot.minute} {slot.hour} * * *",
            timezone="UTC",
            missed_policy="catch_up_one",
            now=now,
        )
        self.injected.note(f"schedule slot at {slot:%H:%M} UTC for gamma-scheduled")

    def collect_scheduled(self, runs: list[Any]) -> bool:
        """Add the scheduled slot's run once launched. True once its slot was handled."""
        from sampling.models import ScheduleSlot

        slots = ScheduleSlot.objects.filter(campaign=self.scheduled_campaign)
        for slot in slots.exclude(run=None).select_related("run"):
            if all(run.pk != slot.run_id for run in runs):
                runs.append(slot.run)
                log(f"scheduled slot launched run {slot.run_id}")
        return slots.exists()

    def resume_unfinished(self, runs: list[Any]) -> int:
        """Once: resume every run that did not fully succeed, checking the dry run's count
        against what the resume re-opened. Returns how many runs were resumed."""
        from pipeline.resume import resume_run
        from sampling.selectors import run_status

        if self.resumed:
            return 0
        for run in runs:
            if run_status(run_id=run.pk).outcome.value != "partially_succeeded":
                continue
            plan = resume_run(run_id=run.pk, dry_run=True).as_dict()
            applied = resume_run(run_id=run.pk, actor="chaos").as_dict()
            if applied != plan:
                self.problems.append(f"run {run.pk}: resume did {applied}, dry run said {plan}")
            self.resumed[str(run.pk)] = plan
            self.injected.note(f"resume run {run.pk}: {json.dumps(plan)}")
        return len(self.resumed)

    # -- injections ------------------------------------------------------------------------
    def kill_random_worker(self) -> None:
        """SIGKILL a worker chosen at random (not one armed with a failpoint, which must die
        at its point) and start it again at once."""
        busy = set(self.armed.values())
        if self.paused_until is not None:
            busy.add(self.paused_until[0].name)
        candidates = sorted(set(WORKERS) - busy)
        name = self.rng.choice(candidates)
        proc = self.procs[name]
        if proc.alive():
            proc.kill()
            self.injected.worker_kills[name] += 1
            self.injected.note(f"SIGKILL {name} (random), restarted")
        proc.start()

    def arm(self, point: str, target: str) -> None:
        """Restart `target` with the failpoint armed; `watch_armed` restarts it once it died."""
        proc = self.procs[target]
        proc.kill()
        proc.start({"GEO_FAILPOINTS": point})
        self.armed[point] = target
        self.injected.note(f"SIGKILL {target}, restarted with failpoint {point} armed")

    def watch_armed(self) -> None:
        for point, target in list(self.armed.items()):
            proc = self.procs[target]
            fired = (self.failpoint_dir / f"{point}.fired").exists()
            if proc.alive():
                continue
            if not fired:
                self.problems.append(f"{target}, armed with {point}, exited {proc.returncode}")
                proc.start({"GEO_FAILPOINTS": point})
                continue
            code = proc.returncode
            self.injected.failpoints[point] = f"{target} (exit {code})"
            self.injected.note(f"failpoint {point} killed {target} (exit {code}); restarted")
            if code != -signal.SIGKILL:
                self.problems.append(f"failpoint {point}: {target} exited {code}, not SIGKILL")
            del self.armed[point]
            proc.start()

    def pause(self, name: str) -> None:
        """SIGSTOP a worker for longer than a lease, then SIGCONT it: its leases are taken
        over meanwhile, and whatever it tries to write when it wakes up must be refused."""
        proc = self.procs[name]
        assert proc.popen is not None
        seconds = LEASE_SECONDS + 10
        proc.popen.send_signal(signal.SIGSTOP)
        self.injected.note(f"SIGSTOP {name} for {seconds}s (past its {LEASE_SECONDS}s leases)")
        self.paused_until = (proc, time.monotonic() + seconds)
        self.injected.pauses += 1

    def maybe_resume(self) -> None:
        if self.paused_until is None:
            return
        proc, until = self.paused_until
        if time.monotonic() >= until:
            assert proc.popen is not None
            proc.popen.send_signal(signal.SIGCONT)
            self.injected.note(f"SIGCONT {proc.name}")
            self.paused_until = None

    def restart_redis(self) -> None:
        assert self.redis is not None
        self.redis.send_signal(signal.SIGKILL)
        self.redis.wait(timeout=30)
        self.redis_restarted_at = time.monotonic()
        self.injected.note("Redis SIGKILLed (every queued and unacknowledged message lost)")
        time.sleep(2.0)
        self.start_redis()
        self.redis_restarted_at = time.monotonic()
        self.injected.redis_restarts += 1
        self.injected.note("Redis restarted")

    def kill_dispatcher(self) -> None:
        proc = self.procs["dispatcher"]
        proc.kill()
        self.injected.dispatcher_kills += 1
        self.injected.note("SIGKILL dispatcher (random), restarted")
        proc.start()

    def keep_alive(self) -> None:
        """Act as the process supervisor production has: a process that exited by itself is
        started again. Expected only right after the Redis restart (a Celery/kombu worker can
        die on losing its broker connection); any other exit is a problem."""
        for name, proc in self.procs.items():
            if name == "simulator" or proc.alive() or name in self.armed.values():
                continue
            message = f"{name} exited by itself with {proc.returncode}; restarted"
            if time.monotonic() - self.redis_restarted_at < 60:
                self.injected.supervisor_restarts.append(f"{message} (after the Redis restart)")
                log(f"FOUND {message} (after the Redis restart)")
            else:
                self.problems.append(message)
            proc.start()

    # -- the run ---------------------------------------------------------------------------
    def progress(self) -> tuple[int, int, int, int]:
        """(samples, terminal, parked, with automatic work left)"""
        from django.db.models import Count, Q

        from sampling.models import Sample

        row = Sample.objects.aggregate(
            total=Count("id"),
            done=Count("id", filter=Q(queue_state="done")),
            parked=Count("id", filter=Q(queue_state="parked")),
            active=Count("id", filter=Q(queue_state__in=["ready", "leased"])),
        )
        return row["total"], row["done"], row["parked"], row["active"]

    def plan(self) -> list[tuple[float, str, tuple[str, ...]]]:
        """(progress fraction, action, args), in order. Failpoints first, while there is work
        of every kind; the random kills spread over the whole run."""
        events: list[tuple[float, str, tuple[str, ...]]] = [
            (0.02, "arm", ("after_complete_before_ack", self.rng.choice(sorted(WORKERS)))),
            (0.05, "arm", ("after_accept_before_record", "w-provider")),
            (0.12, "arm", ("after_store_before_complete", "w-provider")),
            (0.20, "arm", ("after_commit_before_publish", "dispatcher")),
            (self.rng.uniform(0.25, 0.35), "pause", ("w-provider",)),
            (self.rng.uniform(0.35, 0.55), "redis", ()),
            (self.rng.uniform(0.55, 0.75), "dispatcher", ()),
        ]
        for _ in range(self.args.random_kills):
            events.append((self.rng.uniform(0.05, 0.85), "kill", ()))
        return sorted(events)

    def execute(self, runs: list[Any]) -> bool:
        events = self.plan()
        deadline = time.monotonic() + self.args.timeout
        last_line = ""
        self.procs["dispatcher"].start()
        while time.monotonic() < deadline:
            total, done, parked, active = self.progress()
            fraction = done / total if total else 1.0
            for event in [e for e in events if e[0] <= fraction]:
                _, action, args = event
                target = {"arm": args[-1] if args else "", "pause": args[0] if args else ""}.get(
                    action, action
                )
                if target in self.armed.values():
                    continue  # one failpoint at a time per process: wait until it fired
                if action == "pause" and time.monotonic() - self.procs[target].started_at < 15:
                    continue  # pause a worker that is up and busy, not one still starting
                events.remove(event)
                if action == "arm":
                    self.arm(args[0], args[1])
                elif action == "kill":
                    self.kill_random_worker()
                elif action == "redis":
                    self.restart_redis()
                elif action == "dispatcher":
                    self.kill_dispatcher()
                elif action == "pause":
                    self.pause(args[0])
            self.watch_armed()
            self.maybe_resume()
            self.keep_alive()
            line = f"{done}/{total} terminal, {parked} parked, {active} with work left"
            if line != last_line:
                log(line)
                last_line = line
            slot_handled = self.collect_scheduled(runs)
            if active == 0 and self.paused_until is None and slot_handled and self.ended(runs):
                # No work left to reach a point still armed, or to reach an event's threshold:
                # the summary reports what did not happen.
                if self.review_parked(runs):
                    continue  # the reviewer's decisions let the runs finish
                self.wait_settled(runs)
                if self.resume_unfinished(runs):
                    continue  # the redone samples run like any others
                self.wait_settled(runs)
                return True
            time.sleep(1.0)
        return False

    def review_parked(self, runs: list[Any]) -> int:
        """Act as the analyst: a direct API cannot say whether it ran a request cut off by a
        crash, so each such sample waits, parked as uncertain, for a person. The decision
        recorded here is to keep it as a failed placeholder (never re-sent blindly)."""
        from pipeline.review import abandon_parked_uncertain

        parked = abandon_parked_uncertain(
            run_ids=[run.pk for run in runs],
            note="chaos reviewer: acceptance cannot be confirmed",
        )
        self.reviewed += len(parked)
        return len(parked)

    def ended(self, runs: list[Any]) -> bool:
        """No automatic work is left: every run is finished with its end relayed, or waits
        only for review (samples parked with their reason)."""
        from sampling.models import OutboxMessage, Run, Sample

        if OutboxMessage.objects.filter(sent_at=None).exists():
            return False
        for run in runs:
            unfinished = Run.objects.filter(pk=run.pk, finished_at=None).exists()
            if unfinished and not Sample.objects.filter(run=run, queue_state="parked").exists():
                return False
        return True

    def wait_settled(self, runs: list[Any], timeout: float = 60.0) -> None:
        """A finished run is settled by its run-finished message: every sample charged or
        released. A run that is not settled within `timeout` is reported."""
        from billing.selectors import unsettled_samples
        from sampling.models import Run

        deadline = time.monotonic() + timeout
        while True:
            unsettled = [
                run
                for run in runs
                if Run.objects.filter(pk=run.pk).exclude(finished_at=None).exists()
                and unsettled_samples(run).exists()
            ]
            if not unsettled or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        for run in unsettled:
            self.problems.append(
                f"run {run.pk} finished but was not settled within {timeout:.0f}s "
                f"({unsettled_samples(run).count()} of {run.planned_samples} still held)"
            )

    def shutdown(self) -> None:
        for name, proc in self.procs.items():
            if name != "simulator":
                proc.stop()
        self.procs["simulator"].stop()
        if self.redis is not None and self.redis.poll() is None:
            self.redis.terminate()
            self.redis.wait(timeout=10)


# --- what was found -------------------------------------------------------------------------


def upstream_log_check(chaos: Chaos) -> tuple[list[str], dict[str, int]]:
    """The simulator's own log against our records: every task the provider accepted is
    recorded on the attempt whose key it carries (or, lost by the provider, recorded as not
    found); every answer a direct API generated is recorded on an attempt, or the attempt is
    unresolved (its sample uncertain)."""
    from django.db.models import Count, Q

    from sampling.models import Attempt
    from sampling.steps import REASKED_UNKNOWN

    problems: list[str] = []
    answers = chaos.upstream_answers
    stats = Counter(a["platform"] for a in answers)
    tasks = [a for a in answers if a["platform"] == "collector" and a.get("task_id")]
    keys = Counter(t["client_key"] for t in tasks)
    problems += [f"provider has {n} tasks for key {k}" for k, n in keys.items() if n > 1]
    attempts = {
        a.idempotency_key: a
        for a in Attempt.objects.filter(idempotency_key__in=list(keys)).only(
            "idempotency_key", "upstream_id", "status", "error_message"
        )
    }
    for task in tasks:
        attempt = attempts.get(task["client_key"])
        if attempt is None:
            problems.append(f"provider task {task['task_id']} has no attempt with its key")
        elif attempt.upstream_id != task["task_id"] and not (
            task.get("fault") == "lose" and attempt.status == "failed"
        ):
            problems.append(
                f"provider task {task['task_id']} (key {task['client_key']}) is not recorded: "
                f"attempt is {attempt.status} with upstream id {attempt.upstream_id or '-'}"
            )
    generated = Counter(
        (a["platform"], a["question"]) for a in answers if a["platform"] != "collector"
    )
    rows = (
        Attempt.objects.exclude(sample__platform="collector")
        .values("sample__platform", "sample__question_revision__text")
        .annotate(
            recorded=Count("id", filter=~Q(upstream_id="")),
            # Still unresolved, or closed by a reviewer or a resume without learning the
            # outcome (pipeline.review, pipeline.resume): an answer we may never have received.
            unresolved=Count(
                "id",
                filter=Q(status__in=["started", "unknown"])
                | Q(status="failed", error_message__startswith="reviewed: ")
                | Q(status="failed", error_message__startswith="superseded by resume")
                | Q(status="failed", error_class=REASKED_UNKNOWN),  # asked again by policy
            ),
        )
    )
    ours = {(r["sample__platform"], r["sample__question_revision__text"]): r for r in rows}
    for key, n in generated.items():
        row = ours.get(key, {"recorded": 0, "unresolved": 0})
        if n > row["recorded"] + row["unresolved"]:
            problems.append(
                f"{key[0]} generated {n} answers to {key[1]!r}; we recorded {row['recorded']} "
                f"and have {row['unresolved']} unresolved attempts"
            )
    return problems, dict(stats)


_OUTCOME = re.compile(r"pipeline\.execute_step\[[^\]]+\] succeeded in [0-9.]+s: '([^']*)'")
# A message of several steps (or a batch submit) logs {sample id: 'outcome', ...}.
_OUTCOMES = re.compile(
    r"pipeline\.execute_(?:steps|submit_batch)\[[^\]]+\] succeeded in [0-9.]+s: (\{.*\})"
)


def outcome_counts() -> Counter[str]:
    found: Counter[str] = Counter()
    for path in (WORK / "logs").glob("w-*.log"):
        for line in messages(path.read_text(errors="replace")):  # the worker logs JSON lines
            match = _OUTCOME.search(line)
            several = _OUTCOMES.search(line)
            outcomes = [match.group(1)] if match else []
            if several:
                outcomes = re.findall(r"\d+: '([^']*)'", several.group(1))
            for outcome in outcomes:
                found[outcome.split(":")[0] if outcome.startswith("retry") else outcome] += 1
    return found


def dispatcher_requeued() -> int:
    total = 0
    text = (WORK / "logs" / "dispatcher.log").read_text(errors="replace")
    for line in text.splitlines():
        for part in line.split():
            if part.startswith("requeued="):
                total += int(part.split("=", 1)[1])
    return total


def schedule_and_resume_check(chaos: Chaos) -> list[str]:
    """The scheduled slot launched exactly one run; each resume re-opened exactly what its dry
    run counted (never-run samples need no re-open) and charged no sample twice."""
    from pipeline.invariants import check_one_charge_per_sample
    from sampling.models import SampleReopen, ScheduleSlot

    problems: list[str] = []
    slots = list(ScheduleSlot.objects.filter(campaign=chaos.scheduled_campaign))
    print(f"schedule: {[(f'{s.slot_at:%H:%M}', s.outcome, str(s.run_id)) for s in slots]}")
    if len(slots) != 1 or slots[0].run_id is None:
        problems.append(f"the scheduled slot was handled as {slots}, not as one launched run")
    for run_id, plan in chaos.resumed.items():
        reopened = SampleReopen.objects.filter(run_id=run_id).count()
        expected = plan["redo"] - plan["by_reason"].get("never_run", 0)
        print(f"resume {run_id}: dry run {json.dumps(plan)}, re-opened {reopened}")
        if reopened != expected:
            problems.append(f"run {run_id}: resume re-opened {reopened}, dry run said {expected}")
        problems += [v.message for v in check_one_charge_per_sample(run_id)]
    return problems


def report(chaos: Chaos, runs: list[Any], finished_in_time: bool, seconds: float) -> int:
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import CommandError

    from pipeline.invariants import check_all
    from sampling.models import Run, Sample, StaleWrite
    from sampling.selectors import run_status
    from sampling.snapshots import RunConfig

    out = print
    failures: list[str] = list(chaos.problems)
    if not finished_in_time:
        failures.append(f"timed out after {chaos.args.timeout:.0f}s with work left")
    out("")
    out("=" * 78)
    out(f"CHAOS RUN — seed {chaos.args.seed}, {seconds:.0f} s")
    out("=" * 78)
    samples = Sample.objects.count()
    platforms = sorted(set(Sample.objects.values_list("platform", flat=True)))
    tenants = sorted(set(Sample.objects.values_list("tenant__slug", flat=True)))
    out(f"samples {samples} in {len(runs)} runs, platforms {', '.join(platforms)}")
    out(f"tenants {', '.join(tenants)}")
    totals: Counter[str] = Counter()
    waiting_review = 0
    for run in runs:
        status = run_status(run_id=run.pk)
        fresh = Run.objects.get(pk=run.pk)
        for key in ("succeeded", "failed", "invalid", "review", "pending", "uncertain", "parked"):
            totals[key] += getattr(status, key)
        state = "finished" if fresh.finished_at else "waiting for review"
        waiting_review += fresh.finished_at is None
        out(
            f"  {RunConfig.of(fresh).campaign_name:<18} {status.planned:>5} planned: "
            f"{status.succeeded} succeeded, {status.failed} failed, {status.invalid} invalid, "
            f"{status.review} review, {status.pending} pending ({status.parked} parked) — {state}"
        )
    out(
        "outcomes: "
        + ", ".join(f"{k} {totals[k]}" for k in ("succeeded", "failed", "invalid", "review"))
        + f"; left for review: {totals['parked']} parked ({totals['uncertain']} uncertain)"
    )
    for sample in Sample.objects.filter(queue_state="parked").order_by("pk"):
        out(f"    parked sample {sample.pk} {sample.platform}: {sample.failure_reason}")
    failures += schedule_and_resume_check(chaos)
    poison = Sample.objects.filter(queue_state="parked", failure_reason__startswith="poison")
    if poison.exists():
        failures.append(f"{poison.count()} samples parked as poison messages")
    out(
        f"  uncertain samples resolved by the reviewer (kept as failed placeholders): "
        f"{chaos.reviewed}"
    )
    if waiting_review:
        failures.append(f"{waiting_review} runs did not finish")

    out("")
    out("injected:")
    kills = chaos.injected.worker_kills
    out(
        f"  worker SIGKILLs at random: {sum(kills.values())} "
        f"({', '.join(f'{k} {v}' for k, v in sorted(kills.items()))})"
    )
    for point in sorted(
        {
            "after_commit_before_publish",
            "after_accept_before_record",
            "after_store_before_complete",
            "after_complete_before_ack",
        }
    ):
        fired = chaos.injected.failpoints.get(point)
        out(f"  failpoint {point:<28} {'killed ' + fired if fired else 'DID NOT FIRE'}")
        if not fired:
            failures.append(f"failpoint {point} did not fire")
    out(f"  dispatcher SIGKILLs at random: {chaos.injected.dispatcher_kills}")
    out(f"  Redis restarts (state lost): {chaos.injected.redis_restarts}")
    out(f"  worker paused (SIGSTOP past its leases, then SIGCONT): {chaos.injected.pauses}")
    out(
        f"  simulator fault profile: {json.dumps(PROFILE['rates'])}, platform overrides for "
        f"{', '.join(PROFILE['platforms'])}"
    )

    out("")
    out("found:")
    outcomes = outcome_counts()
    out("  step outcomes: " + ", ".join(f"{k} {v}" for k, v in outcomes.most_common()))
    out(f"  leases expired and requeued by the sweeper: {dispatcher_requeued()}")
    out(f"  stale writes refused and recorded: {StaleWrite.objects.count()}")
    for restart in chaos.injected.supervisor_restarts:
        out(f"  {restart}")
    upstream_problems, answers = upstream_log_check(chaos)
    out(
        "  upstream log: "
        + ", ".join(f"{p} {n}" for p, n in sorted(answers.items()))
        + f" answers/tasks generated; {len(upstream_problems)} not accounted for"
    )
    for problem in upstream_problems[:20]:
        out(f"    UPSTREAM {problem}")
    failures += upstream_problems

    violations = check_all()
    buffer = StringIO()
    try:
        call_command("check_invariants", stdout=buffer)
    except CommandError as error:
        buffer.write(f"{error}\n")
    for line in buffer.getvalue().splitlines():
        out(f"  {line}")
    failures += [str(v) for v in violations]
    buffer = StringIO()
    try:
        call_command("check_ledger", stdout=buffer, stderr=buffer)
    except CommandError as error:
        buffer.write(f"{error}\n")
        failures.append(f"check_ledger: {error}")
    for line in buffer.getvalue().splitlines():
        out(f"  {line}")
    if chaos.problems:
        for problem in chaos.problems:
            out(f"  PROBLEM {problem}")

    summary = {
        "seed": chaos.args.seed,
        "seconds": round(seconds, 1),
        "samples": samples,
        "outcomes": dict(totals),
        "injected": {
            "worker_kills": dict(kills),
            "failpoints": chaos.injected.failpoints,
            "dispatcher_kills": chaos.injected.dispatcher_kills,
            "redis_restarts": chaos.injected.redis_restarts,
            "pauses": chaos.injected.pauses,
            "supervisor_restarts": chaos.injected.supervisor_restarts,
            "timeline": chaos.injected.timeline,
        },
        "step_outcomes": dict(outcomes),
        "violations": [str(v) for v in violations],
        "failures": failures,
    }
    (WORK / "report.json").write_text(json.dumps(summary, indent=2))
    out("")
    if failures:
        out(f"CHAOS FAILED ({len(failures)} problems; logs in {WORK / 'logs'}):")
        for failure in failures[:30]:
            out(f"  - {failure}")
        return 1
    out(f"CHAOS PASSED in {seconds:.0f} s (report: {WORK / 'report.json'})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--random-kills", type=int, default=6)
    parser.add_argument("--strict", action="store_true", help="fail if a run waits for review")
    args = parser.parse_args()
    chaos = Chaos(args)
    # SIGTERM / SIGINT end the run through `finally`, so no child process is left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    try:
        chaos.prepare()
        chaos.start_redis()
        chaos.start_simulator()
        chaos.start_processes()
        runs = chaos.launch()
        total = sum(r.planned_samples for r in runs)
        log(f"launched {len(runs)} runs, {total} samples; chaos seed {args.seed}")
        finished = chaos.execute(runs)
        seconds = time.monotonic() - started
        chaos.upstream_answers = chaos.sim_get("/_sim/log")["answers"]
    finally:
        chaos.shutdown()
    return report(chaos, runs, finished, seconds)


if __name__ == "__main__":
    sys.exit(main())
