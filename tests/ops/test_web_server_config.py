"""The shipped web process command lines (Procfile, deploy/systemd/geo-web.service) give
gunicorn its timeouts (issue 28, point 8: the unit set none, so a stuck worker was noticed only
at gunicorn's implicit default). Read with gunicorn's own parser, as gunicorn reads them."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from gunicorn.app.wsgiapp import WSGIApplication

ROOT = Path(settings.BASE_DIR)


def _procfile_web() -> list[str]:
    line = next(
        line for line in (ROOT / "Procfile").read_text().splitlines() if line.startswith("web:")
    )
    return shlex.split(line.removeprefix("web:").replace("${PORT:-8000}", "8000"))


def _unit_web() -> list[str]:
    unit = (ROOT / "deploy" / "systemd" / "geo-web.service").read_text()
    line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


def _gunicorn(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> WSGIApplication:
    assert Path(argv[0]).name == "gunicorn", argv
    monkeypatch.chdir(ROOT)  # the unit's WorkingDirectory and honcho's: the checkout
    monkeypatch.setattr(sys, "argv", argv)
    return WSGIApplication()


@pytest.mark.parametrize("where", [_procfile_web, _unit_web], ids=["Procfile", "geo-web.service"])
def test_the_web_command_lines_set_gunicorns_timeouts(
    where: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GEO_WEB_TIMEOUT_SECONDS", "GEO_WEB_GRACEFUL_TIMEOUT_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("GUNICORN_CMD_ARGS", raising=False)
    app = _gunicorn(where(), monkeypatch)
    assert app.app_uri == "geo_collect.wsgi"
    cfg = app.cfg
    assert (cfg.timeout, cfg.graceful_timeout, cfg.keepalive) == (60, 30, 5)
    assert cfg.workers == 3 and cfg.accesslog == "-"


def test_the_timeouts_follow_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEO_WEB_TIMEOUT_SECONDS", "120")
    monkeypatch.setenv("GEO_WEB_GRACEFUL_TIMEOUT_SECONDS", "45")
    cfg = _gunicorn(_unit_web(), monkeypatch).cfg
    assert (cfg.timeout, cfg.graceful_timeout) == (120, 45)


def test_systemd_waits_for_gunicorns_graceful_stop_before_it_kills() -> None:
    unit = (ROOT / "deploy" / "systemd" / "geo-web.service").read_text()
    stop = next(line for line in unit.splitlines() if line.startswith("TimeoutStopSec="))
    assert int(stop.removeprefix("TimeoutStopSec=")) > 30  # graceful_timeout's default
