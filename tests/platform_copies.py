"""The hand-written copies of the worker queue lists, checked against the platform
declarations (connectors/platforms.py): the Procfile's worker processes, the systemd worker
groups' env files and the README's worker commands. Each check returns its disagreements, each
naming the platform (or queue) and the file; empty when the copy agrees."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path

from connectors.platforms import worker_groups, worker_queues

ROOT = Path(__file__).resolve().parents[1]
PROCFILE = ROOT / "Procfile"
SYSTEMD = ROOT / "deploy" / "systemd"
README = ROOT / "README.md"


def procfile_problems(path: Path = PROCFILE) -> list[str]:
    """`worker_<group>: ... --queues a,b` per worker group, with exactly that group's queues."""
    found = {
        match["group"]: match["queues"].split(",")
        for match in re.finditer(
            r"^worker_(?P<group>\w+):.*--queues (?P<queues>[\w.,]+)", path.read_text(), re.M
        )
    }
    return _group_problems(found, where=lambda group: f"Procfile worker_{group}")


def systemd_problems(directory: Path = SYSTEMD) -> list[str]:
    """`QUEUES=a,b` in worker-<group>.env per worker group, with exactly that group's queues."""
    found: dict[str, list[str]] = {}
    for env in directory.glob("worker-*.env"):
        match = re.search(r"^QUEUES=([\w.,]+)$", env.read_text(), re.M)
        found[env.stem.removeprefix("worker-")] = match.group(1).split(",") if match else []
    return _group_problems(found, where=lambda group: f"deploy/systemd/worker-{group}.env")


def readme_problems(path: Path = README) -> list[str]:
    """Every worker command in the README (`-Q a,b,...`) names every queue: an operator copies
    it, and a queue no worker consumes holds its work forever."""
    commands = re.findall(r"-Q ([\w.,]+)", path.read_text())
    if not commands:
        return ["README.md: no worker command (`celery -A geo_collect worker -Q ...`)"]
    problems: list[str] = []
    for number, queues in enumerate(commands, start=1):
        where = f"README.md worker command {number}"
        problems += _disagreements(queues.split(","), worker_queues(), where=where)
    return problems


def _group_problems(found: dict[str, list[str]], *, where: Callable[[str], str]) -> list[str]:
    problems: list[str] = []
    for group, expected in worker_groups().items():
        if group not in found:
            problems.append(f"{where(group)}: missing (worker group {group!r})")
            continue
        problems += _disagreements(found[group], expected, where=where(group))
    problems += [f"{where(group)}: not a worker group" for group in found.keys() - worker_groups()]
    return problems


def _disagreements(found: Iterable[str], expected: Iterable[str], *, where: str) -> list[str]:
    found, expected = set(found), set(expected)
    return [f"{where}: {_named(q)} missing" for q in sorted(expected - found)] + [
        f"{where}: {_named(q)} not expected here" for q in sorted(found - expected)
    ]


def _named(queue: str) -> str:
    platform = queue.removeprefix("platform.")
    return f"platform {platform!r} (queue {queue})" if platform != queue else f"queue {queue}"
