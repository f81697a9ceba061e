"""A circuit per platform and egress: when a platform stops answering, its steps back off
together instead of each sample spending its attempts in seconds (docs/decisions.md, "An
outage is not a verdict").

The circuit is a row (`pipeline.models.Circuit`) shared by the workers and the dispatcher,
separate processes; every change is a conditional UPDATE whose row count says who made it:

    closed --(GEO_CIRCUIT_FAILURES connection failures within the window)--> open
    open --(cooldown passed, the dispatcher releases GEO_CIRCUIT_PROBES probe steps)--> half_open
    half_open --(a probe fails to connect)--> open, with a cooldown twice as long
    half_open --(the probes reached the platform: finished without reopening it)--> closed
    any --(a worker that saw a failure reaches the platform)--> closed

Workers (`unreachable`, `reached`): a connection failure (ErrorClass.UNREACHABLE) is counted
and may open the circuit; an answer closes it only when this process has counted a failure
there, so the happy path costs no statement. The dispatcher (`CircuitGate`) reads the circuits
that are not closed (one statement, at most every GEO_CIRCUIT_REFRESH_SECONDS) and claims no
upstream step of a platform whose every egress is open, except the half-open probes.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Now

from connectors.registry import connector_config, get_connector
from connectors.transport import choose_egress, egress_label
from geo_collect import metrics
from pipeline.models import Circuit, CircuitState
from sampling.models import QueueState, Sample, Step

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (platform, egress label)


def cooldown_seconds(opens: int) -> float:
    """How long a circuit stays open after its `opens`-th opening (1-based): doubling."""
    base, ceiling = settings.GEO_CIRCUIT_OPEN_SECONDS, settings.GEO_CIRCUIT_MAX_OPEN_SECONDS
    return float(min(ceiling, base * 2 ** max(0, opens - 1)))


@functools.cache
def egresses(platform: str) -> frozenset[str]:
    """Every egress the platform's requests take (direct, or each configured proxy)."""
    return frozenset(egress_label(proxy) for proxy in connector_config(platform).egress_proxies)


def default_egress(platform: str) -> str:
    """The egress of the calls that do not rotate (polls, lookups, fetches: attempt 1)."""
    return egress_label(choose_egress(connector_config(platform).egress_proxies, 1))


# --- workers --------------------------------------------------------------------------------

# The circuits this process counted a failure on and has not seen closed since: an answer
# there closes the circuit (one statement); elsewhere an answer costs nothing.
_counted: set[Key] = set()
_counted_lock = threading.Lock()


def _row(key: Key) -> Q:
    return Q(platform=key[0], egress=key[1])


def unreachable(*, platform: str, egress: str | None) -> str:
    """A call made no connection to the platform. Counted in the circuit's window; the failure
    that reaches the threshold opens it; one during the half-open probes opens it again.
    Returns the circuit's state after it."""
    key = (platform, egress or default_egress(platform))
    with _counted_lock:
        _counted.add(key)
    Circuit.objects.bulk_create(
        [Circuit(platform=key[0], egress=key[1])], ignore_conflicts=True
    )  # the row, once
    window = timedelta(seconds=settings.GEO_CIRCUIT_WINDOW_SECONDS)
    new_window = Q(window_started_at=None) | Q(window_started_at__lt=Now() - window)
    Circuit.objects.filter(_row(key)).update(
        failures=Case(When(new_window, then=Value(1)), default=F("failures") + 1),
        window_started_at=Case(When(new_window, then=Now()), default=F("window_started_at")),
        last_failure_at=Now(),
    )
    state, failures, opens = (
        Circuit.objects.filter(_row(key)).values_list("state", "failures", "opens").get()
    )
    if state == CircuitState.HALF_OPEN or (
        state == CircuitState.CLOSED and failures >= settings.GEO_CIRCUIT_FAILURES
    ):
        return _open(key, was=state, opens=opens + 1, failures=failures)
    return str(state)


def _open(key: Key, *, was: str, opens: int, failures: int) -> str:
    cooldown = cooldown_seconds(opens)
    opened = Circuit.objects.filter(_row(key), state=was).update(
        state=CircuitState.OPEN,
        opens=opens,
        opened_at=Now() if was == CircuitState.CLOSED else F("opened_at"),
        retry_at=Now() + timedelta(seconds=cooldown),
    )
    if opened:
        verb = "opened" if was == CircuitState.CLOSED else "opened again (probe failed)"
        log.warning(
            "circuit %s platform=%s egress=%s after %s connection failures: steps held %.0fs",
            verb, key[0], key[1], failures, cooldown,
        )  # fmt: skip
        metrics.circuit_changed(platform=key[0], egress=key[1], state=CircuitState.OPEN)
    return CircuitState.OPEN


def reached(*, platform: str, egress: str | None) -> None:
    """A call reached the platform (an answer, or an error it sent). Free unless this process
    counted a failure on the circuit: then the circuit is closed and its count cleared."""
    if not _counted:  # the happy path: no lock, no statement
        return
    key = (platform, egress or default_egress(platform))
    with _counted_lock:
        if key not in _counted:
            return
        _counted.discard(key)
    was = Circuit.objects.filter(_row(key)).values_list("state", flat=True).first()
    closed = (
        Circuit.objects.filter(_row(key))
        .exclude(state=CircuitState.CLOSED, failures=0)
        .update(state=CircuitState.CLOSED, failures=0, opens=0, window_started_at=None)
    )
    if closed and was != CircuitState.CLOSED:
        _log_closed(key)


def _log_closed(key: Key) -> None:
    log.warning("circuit closed platform=%s egress=%s: the platform answers", *key)
    metrics.circuit_changed(platform=key[0], egress=key[1], state=CircuitState.CLOSED)


def forget_counted() -> None:
    """Tests: this process has counted no failure."""
    with _counted_lock:
        _counted.clear()


# --- the dispatcher -------------------------------------------------------------------------

# The steps that call the platform: held while its circuit is open. A provider's evidence is
# fetched from the provider; a direct API's evidence step is a local rendering.
_CALLING_STEPS = frozenset({Step.SUBMIT, Step.VERIFY, Step.POLL})


@functools.cache
def _fetches_evidence(platform: str) -> bool:
    return get_connector(platform).capabilities().asynchronous


def calls_platform(*, platform: str, step: str) -> bool:
    return step in _CALLING_STEPS or (step == Step.EVIDENCE and _fetches_evidence(platform))


@dataclass
class _Seen:
    state: str
    retry_due: bool
    probe_stale: bool


@dataclass
class CircuitGate:
    """The dispatcher's view of the circuits, refreshed at most every
    GEO_CIRCUIT_REFRESH_SECONDS: which platforms' calling steps are held, and the probes it
    released for those whose cooldown passed."""

    refreshed_at: float = -float("inf")  # monotonic
    seen: dict[Key, _Seen] = field(default_factory=dict)
    probes: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # (sample, token)
    allowance: dict[str, int] = field(default_factory=dict)  # this tick's probes left

    def begin_tick(self) -> None:
        """Refresh when due, close the half-open circuits whose probes reached the platform,
        and work out this tick's allowance per held platform."""
        if time.monotonic() - self.refreshed_at >= settings.GEO_CIRCUIT_REFRESH_SECONDS:
            self._refresh()
        self.allowance = {}
        for platform in {platform for platform, _ in self.seen}:
            held = self._allowance(platform)
            if held is not None:
                self.allowance[platform] = held

    def take(self, *, platform: str, step: str, wanted: int) -> int:
        """How many of `wanted` claims of this platform's `step` may go out now."""
        if platform not in self.allowance or not calls_platform(platform=platform, step=step):
            return wanted
        return min(wanted, self.allowance[platform])

    def claimed(self, *, platform: str, step: str, claims: Iterable[tuple[int, int]]) -> None:
        """Claims made under a probe allowance: the held circuits go half-open with them."""
        if platform not in self.allowance or not calls_platform(platform=platform, step=step):
            return
        probes = list(claims)
        if not probes:
            return
        self.allowance[platform] -= len(probes)
        due = Circuit.objects.filter(platform=platform).filter(
            Q(state=CircuitState.OPEN, retry_at__lte=Now()) | Q(state=CircuitState.HALF_OPEN)
        )
        for egress in due.values_list("egress", flat=True):
            changed = Circuit.objects.filter(
                Q(state=CircuitState.OPEN, retry_at__lte=Now()) | Q(state=CircuitState.HALF_OPEN),
                platform=platform,
                egress=egress,
            ).update(state=CircuitState.HALF_OPEN, probed_at=Now())
            if changed:
                if (platform, egress) in self.seen:
                    self.seen[(platform, egress)].state = CircuitState.HALF_OPEN
                log.warning(
                    "circuit half-open platform=%s egress=%s: %s probe(s) released",
                    platform, egress, len(probes),
                )  # fmt: skip
                metrics.circuit_changed(platform=platform, egress=egress, state="half_open")
        self.probes[platform] = self.probes.get(platform, []) + probes

    def _refresh(self) -> None:
        stale = timedelta(seconds=settings.GEO_LEASE_SECONDS)
        rows = (
            Circuit.objects.exclude(state=CircuitState.CLOSED)
            .annotate(
                retry_due=Case(When(retry_at__lte=Now(), then=Value(True)), default=Value(False)),
                probe_stale=Case(
                    When(Q(probed_at=None) | Q(probed_at__lte=Now() - stale), then=Value(True)),
                    default=Value(False),
                ),
            )
            .values_list("platform", "egress", "state", "retry_due", "probe_stale")
        )
        self.seen = {(p, e): _Seen(s, bool(due), bool(st)) for p, e, s, due, st in rows}
        self.refreshed_at = time.monotonic()
        for platform in set(self.probes) - {platform for platform, _ in self.seen}:
            del self.probes[platform]  # closed (by a worker) meanwhile

    def _allowance(self, platform: str) -> int | None:
        """None: not held (some egress is closed). Otherwise how many probes may go now."""
        mine = {egress: seen for (p, egress), seen in self.seen.items() if p == platform}
        if not egresses(platform) <= set(mine):
            return None
        if any(seen.state == CircuitState.HALF_OPEN for seen in mine.values()):
            if self.probes.get(platform):
                if self._probes_finished(platform):
                    self._close(platform)
                    return None
                return 0
            # Probes another dispatcher released, or none could be claimed: probe again once
            # they would have finished.
            stale = all(seen.probe_stale for seen in mine.values())
            return settings.GEO_CIRCUIT_PROBES if stale else 0
        if any(seen.retry_due for seen in mine.values()):
            return settings.GEO_CIRCUIT_PROBES
        return 0

    def _probes_finished(self, platform: str) -> bool:
        """No probe is still leased under the token it was claimed with. A probe that failed
        to connect has opened the circuit again before its step released the sample."""
        still = Q()
        for sample_id, token in self.probes[platform]:
            still |= Q(pk=sample_id, fencing_token=token)
        return not Sample.objects.filter(still, queue_state=QueueState.LEASED).exists()

    def _close(self, platform: str) -> None:
        del self.probes[platform]
        for p, egress in [key for key in self.seen if key[0] == platform]:
            closed = Circuit.objects.filter(
                platform=platform, egress=egress, state=CircuitState.HALF_OPEN
            ).update(state=CircuitState.CLOSED, failures=0, opens=0, window_started_at=None)
            if closed:
                _log_closed((platform, egress))
                del self.seen[(p, egress)]
            else:  # a probe opened it again: read at the next refresh
                self.refreshed_at = -float("inf")
