"""The simulator core: HTTP server, routing, seeded randomness, stats and control endpoints.

Routing: `/<platform>/<real path>` goes to the protocol its declaration names
(connectors/platforms.py, `Platform.simulator`); `/_sim/...` is the control API:
    GET  /_sim/health
    POST /_sim/config   {"seed": int, "world": [...] | {...}, "profile": {...}} (all optional)
    POST /_sim/script   {"faults": [script entries], "replace": false}
    POST /_sim/entities {"entities": [{name, aliases, domains, mention_rate?, everyday?}],
                         "replace": false}: the entities answers are about (a harness fills
                         it from a campaign file before a run; `replace` drops the others)
    GET  /_sim/entities the registry's entities
    GET  /_sim/stats    {"platforms": {name: {"requests": n, "paths": {"POST /v1/x": n}}}}
    GET  /_sim/log      every answer the simulator generated, with its intended citation spans
    POST /_sim/reset    forget counters, scripts, stats, log and platform state (config stays)

Determinism: each call draws from `Random(f"{seed}|{platform}|{text}|{call_no}")`, where
call_no counts calls with that text on that platform, so a retry of the same question is a new
draw (it can succeed where the first call failed) and a rerun with the same seed replays it all.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import defaultdict
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .content import DEFAULT_WORLD, Brand, SimAnswer, World, compose_answer
from .faults import (
    Draw,
    ScriptedFault,
    profile_for,
    random_fault,
    validate_profile,
)
from .judge import is_judge_prompt, judge_reply
from .platforms import protocol_class, serves
from .protocol import PlatformProtocol, SimRequest, SimResponse

logger = logging.getLogger(__name__)
MAX_LOG_ENTRIES = 10_000


class Simulator:
    """All simulator state; thread-safe. Protocol modules see it as a `SimContext`."""

    def __init__(
        self, *, seed: int = 0, world: Any = None, profile: dict[str, Any] | None = None
    ) -> None:
        self.lock = threading.RLock()
        self.stopping = threading.Event()
        self.seed = seed
        self._world = World.from_value(world) if world is not None else DEFAULT_WORLD
        self.profile = validate_profile(profile or {})
        self.scripts: list[ScriptedFault] = []
        self._counters: dict[tuple[str, str], int] = defaultdict(int)
        self._stats: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._log: list[dict[str, Any]] = []
        self._protocols: dict[str, PlatformProtocol] = {}

    @property
    def world(self) -> World:
        return self._world

    # --- control -----------------------------------------------------------------------
    def configure(
        self, *, seed: int | None = None, world: Any = None, profile: dict[str, Any] | None = None
    ) -> None:
        with self.lock:
            if seed is not None:
                self.seed = int(seed)
            if world is not None:
                self._world = World.from_value(world)
            if profile is not None:
                self.profile = validate_profile(profile)

    def register_entities(self, entities: list[dict[str, Any]], *, replace: bool = False) -> None:
        brands = [Brand.from_dict(entity) for entity in entities]
        with self.lock:
            self._world = self._world.with_brands(brands, replace=replace)

    def add_scripts(self, entries: list[dict[str, Any]], *, replace: bool = False) -> None:
        parsed = [ScriptedFault.from_dict(entry) for entry in entries]
        with self.lock:
            if replace:
                self.scripts = []
            self.scripts.extend(parsed)

    def reset(self) -> None:
        with self.lock:
            self.scripts = []
            self._counters.clear()
            self._stats.clear()
            self._log.clear()
            for protocol in self._protocols.values():
                protocol.reset()

    def stats(self) -> dict[str, Any]:
        with self.lock:
            platforms = {
                name: {"requests": sum(paths.values()), "paths": dict(paths)}
                for name, paths in self._stats.items()
            }
            scripts = [script.as_dict() for script in self.scripts]
        return {"platforms": platforms, "scripts": scripts}

    def answer_log(self, platform: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(e) for e in self._log if platform in (None, e["platform"])]

    # --- what protocols call ------------------------------------------------------------
    def protocol(self, platform: str) -> PlatformProtocol | None:
        if not serves(platform):
            return None
        with self.lock:
            if platform not in self._protocols:
                self._protocols[platform] = protocol_class(platform)(self)
            return self._protocols[platform]

    def platform_profile(self, platform: str) -> dict[str, Any]:
        with self.lock:
            return profile_for(self.profile, platform)

    def draw(self, platform: str, text: str, allowed: frozenset[str]) -> Draw:
        with self.lock:
            self._counters[(platform, text)] += 1
            call_no = self._counters[(platform, text)]
            profile = profile_for(self.profile, platform)
            rng = random.Random(f"{self.seed}|{platform}|{text}|{call_no}")
            fault, params = self._scripted(platform, text, allowed)
            if fault is None:
                fault = random_fault(profile.get("rates", {}), allowed, rng)
        low, high = (float(v) for v in profile.get("latency_ms", [0, 0]))
        latency = rng.uniform(low, high) / 1000.0 if high > 0 else 0.0
        return Draw(rng, call_no, fault, params, profile, latency, platform)

    def _scripted(
        self, platform: str, text: str, allowed: frozenset[str]
    ) -> tuple[str | None, dict[str, Any]]:
        for script in self.scripts:
            if script.applies(platform, text, allowed):
                script.used += 1
                return script.fault, dict(script.params)
        return None, {}

    def answer_for(self, question: str, draw: Draw) -> SimAnswer:
        if is_judge_prompt(question):  # the analysis LLM judge asking (analysis/judge.py)
            noise = float(draw.profile.get("judge_noise", 0.1))
            return SimAnswer(text=judge_reply(question, draw.rng, noise))
        return compose_answer(
            question,
            self.world,
            draw.rng,
            platform=draw.platform,
            emoji_rate=float(draw.profile["emoji_rate"]),
            cjk_rate=float(draw.profile["cjk_rate"]),
            citation_rate=float(draw.profile["citation_rate"]),
        )

    def record_answer(
        self, platform: str, question: str, draw: Draw, answer: SimAnswer, **extra: Any
    ) -> None:
        entry = {
            "platform": platform,
            "question": question,
            "call_no": draw.call_no,
            "fault": draw.fault,
            "answer_text": answer.text,
            "citations": [c.as_dict() for c in answer.citations],
            "mentioned": list(answer.mentioned),
            **extra,
        }
        with self.lock:
            self._log.append(entry)
            del self._log[:-MAX_LOG_ENTRIES]

    def count(self, platform: str, method: str, path: str) -> None:
        with self.lock:
            self._stats[platform][f"{method} {path}"] += 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # Clients that open a hundred connections at once (bench/collection.py) must not find a
    # full listen queue: a dropped SYN is retried a second later, and shows as upstream latency.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], sim: Simulator) -> None:
        self.sim = sim
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked streaming and keep-alive, like real upstreams
    server: _Server

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("simulator: " + format, *args)

    def _dispatch(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        platform, _, rest = url.path.lstrip("/").partition("/")
        request = SimRequest(
            method=self.command,
            path="/" + rest,
            query=parse_qs(url.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        try:
            response = self._route(platform, request)
        except Exception:  # a simulator bug must show as a 500, not a hung client
            logger.exception("simulator handler failed")
            response = SimResponse.json(500, {"error": {"code": "simulator_bug"}})
        try:
            self._write(response)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _route(self, platform: str, request: SimRequest) -> SimResponse:
        sim = self.server.sim
        if platform == "_sim":
            return _control(sim, request)
        protocol = sim.protocol(platform)
        if protocol is None:
            return SimResponse.json(404, {"error": {"code": "unknown_platform"}})
        sim.count(platform, request.method, request.path)
        return protocol.handle(request)

    def _write(self, response: SimResponse) -> None:
        stopping = self.server.sim.stopping
        if response.delay_seconds:
            stopping.wait(response.delay_seconds)
        if response.hang_seconds:
            stopping.wait(response.hang_seconds)
            self.close_connection = True  # drop without a byte: the client times out
            return
        self.send_response(response.status)
        for name, value in response.headers.items():
            self.send_header(name, value)
        if response.chunks is None:
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            self.wfile.write(response.body)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for piece in response.chunks:
            if isinstance(piece, float):
                stopping.wait(piece)
                continue
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


def _control(sim: Simulator, request: SimRequest) -> SimResponse:
    payload = request.json() or {}
    try:
        if request.path == "/health":
            return SimResponse.json(200, {"ok": True})
        if request.path == "/config" and request.method == "POST":
            sim.configure(
                seed=payload.get("seed"), world=payload.get("world"), profile=payload.get("profile")
            )
            return SimResponse.json(200, {"ok": True})
        if request.path == "/script" and request.method == "POST":
            entries = payload if isinstance(payload, list) else payload.get("faults", [])
            replace = isinstance(payload, dict) and bool(payload.get("replace"))
            sim.add_scripts(entries, replace=replace)
            return SimResponse.json(200, {"ok": True, "scripts": len(sim.scripts)})
        if request.path == "/entities" and request.method == "POST":
            entities = payload if isinstance(payload, list) else payload.get("entities", [])
            replace = isinstance(payload, dict) and bool(payload.get("replace"))
            sim.register_entities(entities, replace=replace)
            return SimResponse.json(200, {"ok": True, "entities": sim.world.as_dict()["brands"]})
        if request.path == "/entities":
            return SimResponse.json(200, {"entities": sim.world.as_dict()["brands"]})
        if request.path == "/stats":
            return SimResponse.json(200, sim.stats())
        if request.path == "/log":
            platform = request.query.get("platform", [None])[0]
            return SimResponse.json(200, {"answers": sim.answer_log(platform)})
        if request.path == "/reset" and request.method == "POST":
            sim.reset()
            return SimResponse.json(200, {"ok": True})
    except (ValueError, KeyError, TypeError) as exc:
        return SimResponse.json(
            400, {"error": {"code": "bad_control_request", "message": str(exc)}}
        )
    return SimResponse.json(404, {"error": {"code": "unknown_control_endpoint"}})


@dataclass
class SimulatorHandle:
    """A simulator running in a background thread (tests, the demo)."""

    sim: Simulator
    server: _Server
    thread: threading.Thread

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def url(self, platform: str) -> str:
        """The base URL a connector for `platform` should use."""
        return f"{self.base_url}/{platform}"

    def configure(
        self, *, seed: int | None = None, world: Any = None, profile: dict[str, Any] | None = None
    ) -> None:
        self.sim.configure(seed=seed, world=world, profile=profile)

    def register_entities(self, *entities: dict[str, Any], replace: bool = False) -> None:
        self.sim.register_entities(list(entities), replace=replace)

    def script(self, *entries: dict[str, Any], replace: bool = False) -> None:
        self.sim.add_scripts(list(entries), replace=replace)

    def stats(self) -> dict[str, Any]:
        return self.sim.stats()

    def answers(self, platform: str | None = None) -> list[dict[str, Any]]:
        return self.sim.answer_log(platform)

    def reset(self) -> None:
        self.sim.reset()

    def stop(self) -> None:
        self.sim.stopping.set()  # wakes hanging handlers and pending callbacks
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> SimulatorHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def make_server(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    seed: int = 0,
    world: Any = None,
    profile: dict[str, Any] | None = None,
) -> _Server:
    return _Server((host, port), Simulator(seed=seed, world=world, profile=profile))


def start_simulator(**options: Any) -> SimulatorHandle:
    """Start a simulator (`options` as `make_server` takes them) on a background thread;
    `port=0` picks a free port."""
    server = make_server(**options)
    thread = threading.Thread(target=server.serve_forever, name="platform-simulator", daemon=True)
    thread.start()
    return SimulatorHandle(sim=server.sim, server=server, thread=thread)
