"""Benchmark: the analysers' agreement with the labelled golden set, against fixed floors.

    python bench/analysis_agreement.py [--analyser rules|llm_judge]

Prints the `analysis_eval` table and fails (exit 1) when the rule analyser falls below the
floors of issue 16: precision >= 0.90 and recall >= 0.85 on `absence` and `other_sense`,
precision >= 0.95 on counted mentions. Needs no database. Not a test (tests/analysis/ test
the behaviour; this keeps the measured quality from sliding). The LLM judge needs a platform
(`GEO_UPSTREAM_BASE_URL` or the platform's own settings) and is printed without floors.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "geo_collect.settings")

import django  # noqa: E402

django.setup()

from analysis.analysers import get_analyser  # noqa: E402
from analysis.evaluation import Evaluation, evaluate, load_golden, render_table  # noqa: E402

FLOORS = {  # class -> (minimum precision, minimum recall)
    "absence": (0.90, 0.85),
    "other_sense": (0.90, 0.85),
    "counted": (0.95, 0.0),
}


def below_floors(evaluation: Evaluation) -> list[str]:
    failures = []
    for name, (min_precision, min_recall) in FLOORS.items():
        score = evaluation.counted if name == "counted" else evaluation.score(name)
        precision, recall = score.precision or 0.0, score.recall or 0.0
        if precision < min_precision:
            failures.append(f"{name}: precision {precision:.3f} < {min_precision}")
        if recall < min_recall:
            failures.append(f"{name}: recall {recall:.3f} < {min_recall}")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--analyser", default="rules")
    args = parser.parse_args()
    analyser = get_analyser(args.analyser)
    repeats = 1 if analyser.info.deterministic else 3
    evaluation = evaluate(analyser, load_golden(ROOT / "tests/analysis/golden"), repeats=repeats)
    print(render_table(evaluation))
    if args.analyser != "rules":
        return 0
    failures = below_floors(evaluation)
    for failure in failures:
        print(f"BELOW FLOOR {failure}")
    if not failures:
        print("floors held: " + ", ".join(f"{k} P>={p} R>={r}" for k, (p, r) in FLOORS.items()))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
