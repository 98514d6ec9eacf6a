"""Which JIT the Spark driver's JVM should use for `hop analyze` (docs/performance.md).

A JVM compiling with C1 only (`-XX:TieredStopAtLevel=1`) starts working sooner; the
full tiered JIT (C1, then C2 for hot code) makes faster code once warm. A short run's
analysis is mostly Spark's fixed costs, a long run's mostly its rows, so each setting
is timed on both: `bench.analyze_scaling` in a fresh process per setting and round
(session start, a first analysis of a small run in the cold JVM, then each size warm),
the settings alternating and taking turns to go first. Reports per setting the medians
and per measure the paired ratios (C1 only over the default, per round) with the count
of rounds C1 only was faster.

Run: ``python -m bench.analyze_jit [--rounds 3] [--sizes 100000 1000000 16000000]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import alternating, median, p_text, run_from, sign_test_p, write_result
from broker.local_network import REPO
from monitor.spark import C1_ONLY

SETTINGS = {"default": "", "c1-only": C1_ONLY}
FIRST_ROWS = 2_000
"""Hop rows of the first (cold) analysis by default: a short replay's worth (the tests'
seven-broker study writes about 700)."""


def measures(result: dict[str, Any]) -> dict[str, float]:
    """What one `bench.analyze_scaling` result says, by name: the session's start, the
    cold first analysis, both together (what `hop analyze` of a run that size costs),
    and each size's warm analysis (wall and CPU seconds)."""
    out = {
        "start_s": result["spark_startup_s"],
        "cold_first_s": result["warmup_analysis_s"],
        "start_and_cold_first_s": round(result["spark_startup_s"] + result["warmup_analysis_s"], 2),
    }
    for run in result["runs"]:
        out[f"warm_{run['hop_rows']}_rows_s"] = run["analyze_s"]
        out[f"warm_{run['hop_rows']}_rows_cpu_s"] = run["cpu_s"]
    return out


def compare(rounds: list[dict[str, dict[str, float]]]) -> dict[str, Any]:
    """Per measure: each setting's values and median, and C1 only over the default per
    round (their median, range, and the rounds C1 only took less)."""
    out = {}
    for name in rounds[0]["default"]:
        default = [r["default"][name] for r in rounds]
        c1 = [r["c1-only"][name] for r in rounds]
        paired = [round(a / b, 3) for a, b in zip(c1, default, strict=True)]
        lower = sum(p < 1 for p in paired)
        out[name] = {
            "default": default,
            "c1-only": c1,
            "median_default": round(median(default), 2),
            "median_c1_only": round(median(c1), 2),
            "paired": paired,
            "paired_median": median(paired),
            "lower_in": lower,
            "sign_test_p": sign_test_p(lower, len(paired)),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 16_000_000])
    parser.add_argument(
        "--first-rows",
        type=int,
        default=FIRST_ROWS,
        help=f"hop rows of the cold analysis (default: {FIRST_ROWS})",
    )
    parser.add_argument("--out", type=Path, help="result JSON (default: bench/results/)")
    args = parser.parse_args(argv)
    rounds: list[dict[str, dict[str, float]]] = [{} for _ in range(args.rounds)]
    runs = []
    with tempfile.TemporaryDirectory(prefix="analyze-jit-") as tmp:
        for n, setting in alternating(args.rounds, list(SETTINGS)):
            result = run_from(
                REPO,
                "bench.analyze_scaling",
                [
                    "--sizes", *map(str, args.sizes),
                    "--warmup-rows", str(args.first_rows),
                    f"--java-options={SETTINGS[setting]}",
                ],
                Path(tmp) / f"{n}-{setting}.json",
            )  # fmt: skip
            rounds[n][setting] = measures(result)
            runs.append({"round": n, "setting": setting, **rounds[n][setting]})
            print(f"round {n} {setting}: {rounds[n][setting]}", file=sys.stderr, flush=True)
    compared = compare(rounds)
    path = write_result(
        "analyze_jit",
        {"settings": SETTINGS, "first_rows": args.first_rows, "runs": runs, "compared": compared},
        args.out,
    )
    for name, c in compared.items():
        print(
            f"{name}: default {c['median_default']}, C1 only {c['median_c1_only']}; paired "
            f"{c['paired_median']} ({min(c['paired'])}-{max(c['paired'])}), lower in "
            f"{c['lower_in']} of {len(c['paired'])} ({p_text(c['sign_test_p'])})"
        )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
