"""The one table `make bench` prints (bench/run_all.py): every figure is measured side by side
with its reference in the same run, so a noisy machine moves both and the ratio stays honest.

A benchmark module exposes `measure() -> list[BenchRow]`; run_all.py lists the modules.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class BenchRow:
    name: str  # what is measured, e.g. "plan 1,000,000 samples vs raw COPY"
    product: str  # the product's figure with its unit, e.g. "12.1 s"
    reference: str  # the reference's figure, or "" where the target is absolute
    ratio: str  # e.g. "0.62 x", or "" where there is no reference
    target: str  # the target from the issue, e.g. ">= 0.5 x"
    met: bool


def render(rows: Iterable[BenchRow]) -> str:
    header = ("benchmark", "product", "reference", "ratio", "target", "met")
    lines = [header] + [
        (r.name, r.product, r.reference, r.ratio, r.target, "yes" if r.met else "NO") for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for index, line in enumerate(lines):
        out.append(" | ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
        if index == 0:
            out.append("-+-".join("-" * width for width in widths))
    return "\n".join(out)
