"""What a replay costs beyond its traffic: a short replay timed whole, as `hop
validate` (six replays) and `make demo` pay it.

A replay of the 15-broker case study starts 15 brokers, their 15 trace writers and
24 client processes at once on the host's cores, waits for every subscription, runs
its phases, stops everything and checks the traces. With a measured phase of a
couple of seconds, what is left is that fixed cost. Each round runs ``python -m hop
replay STUDY --duration D --warmup 0 --quiet`` from a checkout, timing its wall
clock and the CPU time of the whole process tree (the command's and every process it
started and waited for: `os.wait4`), and of the command alone.

``--against REV`` checks REV out in a temporary git worktree and runs both checkouts
in alternation, taking turns to go first; each round pairs them (this checkout's over
REV's), with the count of rounds this checkout took less.

Run: ``python -m bench.replay_cost [--study siena15] [--rounds 4] [--against REV]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import (
    alternating,
    median,
    paired_cost_text,
    paired_summary,
    sign_test_p,
    worktree,
    write_result,
)
from broker.local_network import REPO
from broker.process import unwind_on_termination
from broker.procfs import process_stat

MEASURES = ("wall_s", "cpu_s")
REPLAY_TIMEOUT_S = 600.0


def replay_once(
    checkout: Path, study: str, scenario: str | None, duration_s: float
) -> dict[str, Any]:
    """One short replay run from ``checkout`` (its code: ``python -m`` there): its wall
    and whole-tree CPU seconds. RuntimeError with the end of its output if it fails."""
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        cmd = [sys.executable, "-m", "hop", "replay", study, "--out", str(Path(tmp) / "run"),
               "--duration", str(duration_s), "--warmup", "0", "--quiet"]  # fmt: skip
        if scenario:
            cmd += ["--scenario", scenario]
        log = Path(tmp) / "replay.log"
        with log.open("wb") as out:
            start = time.monotonic()
            proc = subprocess.Popen(cmd, cwd=checkout, stdout=out, stderr=subprocess.STDOUT)
            try:
                own_s, status, usage = _wait4(proc, REPLAY_TIMEOUT_S)
            except BaseException:  # a timeout, Ctrl-C or SIGTERM: the replay stops its own
                proc.terminate()
                proc.wait(60)
                raise
            wall = time.monotonic() - start
        if os.waitstatus_to_exitcode(status) != 0:
            tail = log.read_text(errors="replace").strip()[-2000:]
            raise RuntimeError(f"hop replay from {checkout} failed: {tail}")
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "cpu_command_s": round(own_s, 2),
    }


def _wait4(proc: subprocess.Popen[bytes], timeout_s: float) -> tuple[float, int, Any]:
    """Once ``proc`` has ended: its own CPU seconds (read before it is reaped), and its
    `os.wait4` status and resource use (which includes the processes it waited for);
    polling, so that a stuck replay ends in TimeoutError and signals are handled."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            own_s = _own_cpu_s(proc.pid)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            return own_s, status, usage
        time.sleep(0.05)
    raise TimeoutError(f"hop replay ran over {timeout_s} s")


def _own_cpu_s(pid: int) -> float:
    """The user and system CPU seconds of the process `pid` itself, not its children
    (/proc/PID/stat's utime and stime, still there while it is a zombie)."""
    fields = process_stat(pid)
    if fields is None:
        raise RuntimeError(f"process {pid} is gone before it was reaped")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(key: str) -> Callable[[dict[str, Any]], float]:
    return lambda run: float(run[key])


def compare(ours: list[dict[str, Any]], against: list[dict[str, Any]]) -> dict[str, Any]:
    """Per measure: its `paired_summary` (this side over the other, round by round) and
    the sign test's p for the rounds this side took less."""
    out = {}
    for key in MEASURES:
        summary = paired_summary(ours, against, _measure(key))
        p = sign_test_p(summary["lower_in"], len(summary["paired"]))
        out[key] = {**summary, "sign_test_p": p}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default="siena15", help="a case study (default siena15)")
    parser.add_argument("--scenario", default="s1", help="its scenario (default s1)")
    parser.add_argument("--duration", type=float, default=2.0, help="measured seconds")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--against", help="a revision to compare with, in alternation")
    parser.add_argument("--out", type=Path, help="result file (default bench/results/...)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    unwind_on_termination()
    setting = {"study": args.study, "scenario": args.scenario, "duration_s": args.duration}
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "against": []}
    against = worktree(args.against) if args.against else contextlib.nullcontext((None, ""))
    with against as (theirs, short):
        sides = ("ours", "against") if theirs else ("ours",)
        checkouts = {"ours": REPO, "against": theirs or REPO}
        for index, side in alternating(args.rounds, sides):
            run = replay_once(checkouts[side], args.study, args.scenario, args.duration)
            runs[side].append({"repetition": index, **run})
            print(f"round {index + 1} {side}: {run['wall_s']} s wall, {run['cpu_s']} s CPU",
                  flush=True)  # fmt: skip
    result: dict[str, Any] = {**setting, "rounds": args.rounds, "runs": runs["ours"]}
    result.update({f"median_{k}": round(median([r[k] for r in runs["ours"]]), 2) for k in MEASURES})
    if args.against:
        result.update(against=short, runs_against=runs["against"])
        result["paired"] = compare(runs["ours"], runs["against"])
    print(write_result("replay_cost", result, args.out))
    for key in MEASURES:
        line = f"{key}: median {result[f'median_{key}']}"
        if args.against:
            c = result["paired"][key]
            line += f" against {c['median_against']} at {short}; {paired_cost_text(c)}"
        print(line)


if __name__ == "__main__":
    main()
