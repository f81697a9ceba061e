"""Row locks go through sampling/locking.py, in its order.

The sources are read with `ast`: a `select_for_update` anywhere in production code outside the
locks module fails, and so does a function that takes a lower level after a higher one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from sampling.locking import Level
from tests.sources import python_sources

LOCKS_MODULE = Path("sampling/locking.py")
NOT_PRODUCTION = frozenset({"tests", "bench"})
# The typed helpers of the locks module, by the level each takes.
HELPER_LEVELS = {
    "lock_campaign": Level.CAMPAIGN,
    "lock_run": Level.RUN,
    "lock_sample": Level.SAMPLE,
    "lock_leased_sample": Level.SAMPLE,
}


def production_sources() -> Iterator[tuple[Path, ast.Module]]:
    return python_sources(skip=NOT_PRODUCTION)


def select_for_update_lines(tree: ast.AST) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "select_for_update"
    ]


def lock_levels(function: ast.AST) -> list[tuple[int, Level]]:
    """(line, level) of every lock a function's body takes, in source order."""
    taken = []
    for node in ast.walk(function):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name in HELPER_LEVELS:
            taken.append((node.lineno, HELPER_LEVELS[name]))
        elif name == "locked":
            level = next(k.value for k in node.keywords if k.arg == "level")
            assert isinstance(level, ast.Attribute), ast.unparse(node)
            taken.append((node.lineno, Level[level.attr]))
    return sorted(taken)


def out_of_order(tree: ast.AST) -> list[str]:
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        highest: Level | None = None
        for line, level in lock_levels(function):
            if highest is not None and level < highest:
                found.append(f"{function.name}:{line} takes {level.name} after {highest.name}")
            highest = level if highest is None else max(highest, level)
    return found


def test_no_select_for_update_outside_the_locks_module() -> None:
    outside = [
        f"{path}:{line}"
        for path, tree in production_sources()
        if path != LOCKS_MODULE
        for line in select_for_update_lines(tree)
    ]
    assert outside == [], "lock rows through sampling.locking.locked (its docstring: the order)"


def test_every_function_takes_its_locks_in_the_documented_order() -> None:
    wrong = [
        f"{path}: {problem}"
        for path, tree in production_sources()
        for problem in out_of_order(tree)
    ]
    assert wrong == []


def test_the_scan_finds_a_lock_taken_by_hand() -> None:
    tree = ast.parse("def f():\n    return Run.objects.select_for_update().get(pk=1)\n")
    assert select_for_update_lines(tree) == [2]


def test_the_order_check_finds_a_level_taken_after_a_higher_one() -> None:
    source = """
def settle(run_id):
    samples = locked(Sample.objects.filter(run_id=run_id), level=Level.SAMPLE)
    run = lock_run(run_id)
    hold = locked(Account.objects.all(), level=Level.HOLD_ACCOUNT)
"""
    assert out_of_order(ast.parse(source)) == [
        "settle:4 takes RUN after SAMPLE",
        "settle:5 takes HOLD_ACCOUNT after SAMPLE",
    ]


def test_the_scan_reads_the_locks_every_site_takes() -> None:
    """The sites the order check reads are really there (a scan that finds nothing passes)."""
    taken = {
        str(path)
        for path, tree in production_sources()
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef) and lock_levels(function)
    }
    assert {
        "billing/services/posting.py",
        "billing/services/runs.py",
        "billing/rehold.py",
        "evidence/services.py",
        "analysis/services.py",
        "pipeline/preview.py",
        "pipeline/runs.py",
        "pipeline/schedules.py",
    } <= taken
