"""How long `make demo` takes from a fresh clone, as the README promises it.

Each repetition is what a newcomer does: a fresh clone of this checkout's HEAD in a
temporary folder, ``make setup`` (the virtual environment and the project installed
into it), then ``make demo`` (the 15-broker case study replayed, analysed with Spark,
predicted, measured and reported), each step timed by the wall clock; the clone is
removed after. Reports per repetition the two steps' seconds and the last lines the
demo printed (the report's path and its accuracy sentence), and their medians and
ranges over the repetitions.

What it cannot show of a newcomer's machine: Debian's packages (Java, Chromium, ...)
are already installed here after the first set-up, and pip takes the packages from
its cache when this machine has downloaded them before, so ``make setup`` here is
the time of the install, not of the downloads.

Run: ``python -m bench.demo [--repeats 3] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import median, write_result
from broker.local_network import REPO
from broker.process import unwind_on_termination

STEPS = ("setup", "demo")
"""The Makefile targets each repetition runs, in this order."""
TAIL_LINES = 3
"""Lines kept from the end of the demo's output: its report path and accuracy sentence."""
STEP_TIMEOUT_S = 1800.0
_NOT_INHERITED = ("VIRTUAL_ENV", "PYTHONPATH", "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")


def run_step(target: str, clone: Path, log: Path) -> float:
    """``make TARGET`` in ``clone``, its output appended to ``log``; its wall seconds.
    RuntimeError naming the target and ending with the log's last lines if it fails
    or outlasts `STEP_TIMEOUT_S`. Its processes are a session of their own, stopped
    together (by the session's id) if this one is interrupted. It runs as a newcomer's
    would, at the top level: without this process's virtual environment, Python path
    or the variables of a make it may run under."""
    env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    start = time.monotonic()
    with log.open("a") as out:
        proc = subprocess.Popen(
            ["make", target],
            cwd=clone,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            status: int | None = proc.wait(STEP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _stop_session(proc)
            status = None
        except BaseException:  # Ctrl-C or SIGTERM (`unwind_on_termination`)
            _stop_session(proc)
            raise
    seconds = round(time.monotonic() - start, 1)
    if status != 0:
        why = f"exited with {status}" if status is not None else f"ran over {STEP_TIMEOUT_S} s"
        raise RuntimeError(f"make {target} {why}; its output ends:\n{last_lines(log, 20)}")
    return seconds


def _stop_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to ``proc``'s session (make and everything it started), SIGKILL to what
    is left after 30 s."""
    for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def last_lines(log: Path, count: int) -> str:
    """The last ``count`` non-empty lines of ``log``."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return "\n".join(lines[-count:])


def repetition(work: Path) -> dict[str, Any]:
    """One fresh clone set up and its demo run, in ``work``: each step's seconds and
    the demo's last lines."""
    clone = work / "hop"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    log = work / "make.log"
    seconds = {f"{step}_s": run_step(step, clone, log) for step in STEPS}
    report = clone / "runs" / "siena15" / "report.html"
    if not report.is_file():
        raise RuntimeError(f"make demo ended without writing {report.relative_to(clone)}")
    total = round(sum(seconds.values()), 1)
    return {**seconds, "total_s": total, "demo_said": last_lines(log, TAIL_LINES)}


def summarize(repetitions: list[dict[str, Any]]) -> dict[str, Any]:
    """Per step (and both together): the median and the range over ``repetitions``."""
    out = {}
    for key in (*(f"{step}_s" for step in STEPS), "total_s"):
        values = [r[key] for r in repetitions]
        out[key] = {"median": round(median(values), 1), "range": [min(values), max(values)]}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="fresh clones (default 3)")
    parser.add_argument("--out", type=Path, help="result file (default bench/results/demo.json)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    unwind_on_termination()
    repetitions = []
    for index in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
            done = repetition(Path(tmp))
        repetitions.append(done)
        print(
            f"repetition {index + 1}: setup {done['setup_s']} s, demo {done['demo_s']} s\n"
            f"{done['demo_said']}",
            flush=True,
        )
    result = {"repeats": args.repeats, "repetitions": repetitions, **summarize(repetitions)}
    print(write_result("demo", result, args.out))
    total = result["total_s"]
    print(f"fresh clone to report: median {total['median']} s, range {total['range']}")


if __name__ == "__main__":
    main()
