"""How long `hop predict` takes, as a user runs it: on a replay of the 15-broker case
study (target: under 30 s with `sim` at the default precision; docs/performance.md).

Replays the case study twice (`hop replay`, each a process of its own): at its rates
and at `OTHER_SCALE` of them. Then times whole `hop predict` commands (a process each,
start-up included) on the first run: `--method sim` alone, `--method all`, and `--method
sim` with the second run as `--other-runs` (costs carried to the target, as `hop
validate` predicts), each `--repeats` times; medians. The replays' traces go to a
temporary folder; the result to `bench/results/predict_speed.json`.
Run: ``python -m bench.predict_speed [--study FILE] [--seconds T] [--repeats R]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import median, write_result
from bench.rate_response import replay
from broker.local_network import REPO
from broker.process import unwind_on_termination
from hop.command import run_hop

LIMIT_S = 30.0  # the target for a 15-broker prediction (docs/performance.md)
OTHER_SCALE = 0.6  # the second run's rates, as `hop validate`'s default calibrations
PREDICT_TIMEOUT_S = 300.0

COMMANDS = {
    "sim": ["--method", "sim"],
    "all": ["--method", "all"],
    "sim, other run": ["--method", "sim", "--other-runs"],
}


def time_predict(run_dir: Path, options: list[str]) -> float:
    """Seconds one `hop predict RUN_DIR OPTIONS...` process takes."""
    started = time.monotonic()
    result = run_hop("predict", str(run_dir), *options, timeout=PREDICT_TIMEOUT_S)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        raise RuntimeError(f"hop predict {' '.join(options)} failed: {result.stderr[-2000:]}")
    return elapsed


def run(study: Path, seconds: float, repeats: int) -> dict[str, Any]:
    timings: dict[str, list[float]] = {name: [] for name in COMMANDS}
    with tempfile.TemporaryDirectory() as tmp:
        target = replay(study, Path(tmp), "target", seconds, 1.0)
        other = replay(study, Path(tmp), "other", seconds, OTHER_SCALE)
        for _ in range(repeats):
            for name, options in COMMANDS.items():
                extra = [str(other)] if options[-1] == "--other-runs" else []
                timings[name].append(round(time_predict(target, [*options, *extra]), 2))
                print(f"hop predict ({name}): {timings[name][-1]:.1f} s", flush=True)
    medians = {name: median(values) for name, values in timings.items()}
    return {
        "study": study.name,
        "replay_seconds": seconds,
        "repeats": repeats,
        "seconds": timings,
        "median_s": medians,
        "limit_s": LIMIT_S,
        "target_met": medians["sim"] < LIMIT_S,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", type=Path, default=REPO / "topologies" / "siena15.toml")
    parser.add_argument("--seconds", type=float, default=10.0, help="each replay's duration")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    unwind_on_termination()  # stop what it started also when killed with SIGTERM
    result = run(args.study, args.seconds, args.repeats)
    print(write_result("predict_speed", result))


if __name__ == "__main__":
    main()
