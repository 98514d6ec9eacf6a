"""How long a network of brokers takes to start: from starting its broker processes
(`hop broker`, one process each, as `hop net` and `hop replay` start them) to every
broker answering on its port, untraced and traced (`--trace-dir`: each broker then
starts its trace writer process and listens once the writer is up).

On a machine with few cores the processes' start-up work adds up: every `hop replay`
and every test that starts a network waits for it. Medians over repetitions, the
topologies taking turns; the result goes to `bench/results/startup.json`.
Run: ``python -m bench.startup [--reps R] [--topologies NAME ...]``.

``--commands`` measures instead what a user waits for at a shell: whole `hop pub`
(one event) and `hop stats` commands against a running broker, from start to exit.
With ``--baseline DIR`` (a checkout of another revision, a git worktree say) the
commands run from both checkouts in alternation, each round's order reversed in the
next, and the result has each round's ratio; it goes to `bench/results/commands.json`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import alternating, median, short_revision, write_result
from broker.local_network import REPO, on_free_ports
from broker.process import BrokerProcesses, unwind_on_termination
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


def time_command(checkout: Path, args: list[str]) -> float:
    """Seconds from starting ``python -m hop ARGS`` on ``checkout``'s code to its exit."""
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "hop", *args], cwd=checkout, check=True, capture_output=True
    )
    return time.monotonic() - started


def run_commands(checkouts: dict[str, Path], reps: int) -> dict[str, Any]:
    """`hop pub` and `hop stats` against broker 1 of a running tree7, from each checkout
    in alternation."""
    seconds: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-commands-") as tmp:
        study_file = on_free_ports(REPO / "topologies" / "tree7.toml", Path(tmp) / "t.toml")
        topology = load_case_study(study_file).topology
        address = f"127.0.0.1:{topology.brokers[1].port}"
        commands = {"pub": ["pub", address, "type=probe", "price=1.5"], "stats": ["stats", address]}
        brokers = BrokerProcesses(study_file, topology, [])
        try:
            brokers.start(log_dir=Path(tmp) / "logs")
            brokers.wait_listening()
            for _, name in alternating(reps, list(checkouts)):
                for command, args in commands.items():
                    took = round(time_command(checkouts[name], args), 3)
                    seconds.setdefault(name, {}).setdefault(command, []).append(took)
                    print(f"{name} hop {command}: {took:.3f} s", flush=True)
        finally:
            brokers.stop()
    result: dict[str, Any] = {
        "repetitions": reps,
        "checkouts": {name: short_revision(path) for name, path in checkouts.items()},
        "median_s": {
            name: {command: round(median(values), 3) for command, values in runs.items()}
            for name, runs in seconds.items()
        },
        "seconds": seconds,
    }
    if "baseline" in seconds:
        result["ratio_to_baseline"] = {
            command: [
                round(ours / base, 3)
                for ours, base in zip(
                    seconds["this"][command], seconds["baseline"][command], strict=True
                )
            ]
            for command in commands
        }
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument(
        "--topologies", nargs="+", default=list(TOPOLOGIES), help="names under topologies/"
    )
    parser.add_argument(
        "--commands", action="store_true", help="time whole hop pub and hop stats commands"
    )
    parser.add_argument(
        "--baseline", type=Path, help="with --commands: a checkout to run them from too"
    )
    parser.add_argument("--out", type=Path, help="result file (default bench/results/...)")
    args = parser.parse_args(argv)
    unwind_on_termination()  # stop the brokers also when killed with SIGTERM
    if args.commands:
        checkouts = {"this": REPO}
        if args.baseline:
            checkouts["baseline"] = args.baseline.resolve()
        commands = run_commands(checkouts, args.reps)
        print(write_result("commands", commands, args.out))
        for name, medians in commands["median_s"].items():
            print(f"{name} ({commands['checkouts'][name]}): median {medians}")
        for command, ratios in commands.get("ratio_to_baseline", {}).items():
            print(f"hop {command}, this / baseline per round: median {median(ratios):.3f}")
        return
    result = run(args.topologies, args.reps)
    print(write_result("startup", result, args.out))
    for key, value in result["median_s"].items():
        print(f"{key}: median {value:.2f} s")


if __name__ == "__main__":
    main()
