"""The project's Python sources, for tests that read the code itself (with `ast`)."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def python_sources(*, skip: frozenset[str] = frozenset()) -> Iterator[tuple[Path, ast.Module]]:
    """(path relative to the root, parsed module) of every .py file, outside hidden
    directories (.venv, .git), node_modules and the top-level directories in `skip`."""
    for directory, subdirectories, files in os.walk(ROOT):
        relative_dir = Path(directory).relative_to(ROOT)
        subdirectories[:] = sorted(
            d
            for d in subdirectories
            if not d.startswith(".")
            and d != "node_modules"
            and not (relative_dir == Path(".") and d in skip)
        )
        for name in sorted(files):
            if name.endswith(".py"):
                relative = relative_dir / name
                yield relative, ast.parse((ROOT / relative).read_text(), filename=str(relative))
