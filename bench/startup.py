"""How long a network of brokers takes to start: from starting its broker processes
(`hop broker`, one process each, as `hop net` and `hop replay` start them) to every
broker answering on its port, untraced and traced (`--trace-dir`: each broker then
starts its trace writer process and listens once the writer is up).

On a machine with few cores the processes' start-up work adds up: every `hop replay`
and every test that starts a network waits for it. Medians over repetitions, the
topologies taking turns; the result goes to `bench/results/startup.json`.
Run: ``python -m bench.startup [--reps R] [--topologies NAME ...]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import median, write_result
from broker.local_network import REPO, on_free_ports
from broker.process import BrokerProcesses, unwind_on_sigterm
from topologies import load_case_study

TOPOLOGIES = ("tree7", "siena15")


def time_start(topology: str, traced: bool) -> float:
    """Seconds from starting the brokers of topologies/TOPOLOGY.toml to all listening."""
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        study_file = on_free_ports(REPO / "topologies" / f"{topology}.toml", Path(tmp) / "t.toml")
        extra = ["--trace-dir", str(Path(tmp) / "traces")] if traced else []
        brokers = BrokerProcesses(study_file, load_case_study(study_file).topology, extra)
        started = time.monotonic()
        try:
            brokers.start(log_dir=Path(tmp) / "logs")
            brokers.wait_listening()
            return time.monotonic() - started
        finally:
            brokers.stop()


def run(topologies: list[str], reps: int) -> dict[str, Any]:
    seconds: dict[str, list[float]] = {}
    for _ in range(reps):
        for topology in topologies:
            for traced in (False, True):
                key = f"{topology}, {'traced' if traced else 'untraced'}"
                seconds.setdefault(key, []).append(round(time_start(topology, traced), 3))
                print(f"{key}: {seconds[key][-1]:.2f} s", flush=True)
    return {
        "repetitions": reps,
        "median_s": {key: round(median(values), 3) for key, values in seconds.items()},
        "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument(
        "--topologies", nargs="+", default=list(TOPOLOGIES), help="names under topologies/"
    )
    args = parser.parse_args(argv)
    unwind_on_sigterm()  # stop the brokers also when killed with SIGTERM
    result = run(args.topologies, args.reps)
    print(write_result("startup", result))
    for key, value in result["median_s"].items():
        print(f"{key}: median {value:.2f} s")


if __name__ == "__main__":
    main()
