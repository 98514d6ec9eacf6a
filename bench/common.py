"""Shared helpers for benchmarks: machine facts, medians, JSON results."""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
"""The repository root (the working directory of the processes benchmarks start)."""
RESULTS_DIR = Path(__file__).resolve().parent / "results"


def short_revision(checkout: Path) -> str:
    """The short git revision checked out at ``checkout`` ("" when git cannot say)."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            cwd=checkout,
        ).stdout.strip()
    except OSError:
        return ""


def modified_files(checkout: Path) -> list[str] | None:
    """The tracked files of ``checkout`` that differ from its revision (None when git
    cannot say): numbers measured with them came from code the revision does not hold."""
    try:
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=False,
            cwd=checkout,
        )
    except OSError:
        return None
    if status.returncode != 0:
        return None
    return [line[3:] for line in status.stdout.splitlines()]


@contextlib.contextmanager
def worktree(revision: str) -> Iterator[tuple[Path, str]]:
    """A temporary git worktree of ``revision`` (removed afterwards) and its short
    revision: the other side of a comparison run in alternation with this checkout."""
    with tempfile.TemporaryDirectory(prefix="bench-against-") as tmp:
        checkout = Path(tmp) / "against"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(checkout), revision],
                       cwd=REPO, check=True)  # fmt: skip
        try:
            yield checkout, short_revision(checkout)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(checkout)], cwd=REPO,
                           check=False)  # fmt: skip


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on (the code: its revision, and the files that
    differed from it when the result was written)."""
    revision = short_revision(REPO)
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        # Fewer than `cpus` when the run was confined (e.g. `taskset -c 0 python -m
        # bench`); the processes a benchmark starts inherit it.
        "cpus_allowed": sorted(os.sched_getaffinity(0)),
        "cpu_model": _cpu_model(),
        "cpu_idle": cpu_idle(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_revision": revision or None,
        "git_modified": modified_files(REPO),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


CPU_IDLE_FILES = {
    "driver": "/sys/devices/system/cpu/cpuidle/current_driver",
    "governor": "/sys/devices/system/cpu/cpuidle/current_governor_ro",
    "guest_halt_poll_ns": "/sys/module/haltpoll/parameters/guest_halt_poll_ns",
}


def cpu_idle() -> dict[str, str]:
    """How idle CPUs wait (Linux cpuidle; on a KVM guest, how long a vCPU polls before it
    halts): what a wake-up at low load costs depends on it (`bench.awake`). Only what
    this machine exposes."""
    found = {}
    for name, path in CPU_IDLE_FILES.items():
        with contextlib.suppress(OSError):
            found[name] = Path(path).read_text().strip()
    return found


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of `fn` takes (wall clock, perf_counter)."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def lookup(tree: Any, *path: str) -> Any:
    """``tree[path[0]][path[1]]...`` of nested result dicts; None where a key is missing
    (a benchmark not run, or failed)."""
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return tree


def median(values: list[float]) -> float:
    return statistics.median(values)


def alternating(rounds: int, systems: Sequence[str]) -> Iterator[tuple[int, str]]:
    """(round, system) for ``rounds`` rounds of ``systems``, in their order in even
    rounds and reversed in odd ones, so that running first or last evens out."""
    for r in range(rounds):
        yield from ((r, system) for system in (systems if r % 2 == 0 else systems[::-1]))


def paired_ratios(
    ours: list[dict[str, Any]],
    base: list[dict[str, Any]],
    value: Callable[[dict[str, Any]], float | None],
) -> list[float]:
    """``value`` of ours over the baseline's, per repetition both measured (the two ran
    next to each other in it): what to compare on a host whose speed drifts from one
    repetition to the next. Runs are paired by their ``repetition``; runs without one
    are numbered in order (result files written before it was recorded, which kept
    every repetition)."""

    def by_rep(runs: list[dict[str, Any]]) -> dict[int, float]:
        values = {}
        for position, run in enumerate(runs):
            measured = value(run)
            if measured is not None:
                values[run.get("repetition", position)] = measured
        return values

    a, b = by_rep(ours), by_rep(base)
    return [round(a[rep] / b[rep], 3) for rep in sorted(a.keys() & b.keys()) if b[rep]]


def paired_summary(
    ours: list[dict[str, Any]],
    theirs: list[dict[str, Any]],
    value: Callable[[dict[str, Any]], float | None],
) -> dict[str, Any]:
    """A measure (lower is better) of this checkout's runs against another's, every run
    having it: each side's median, this side's over the other's per pair
    (`paired_ratios`), their median and range, and in how many pairs this side's was
    lower (what `paired_cost_text` prints)."""
    a = [v for v in map(value, ours) if v is not None]
    b = [v for v in map(value, theirs) if v is not None]
    paired = paired_ratios(ours, theirs, value)
    return {
        "median": round(median(a), 2), "median_against": round(median(b), 2),
        "paired": paired, "paired_median": median(paired),
        "paired_range": [min(paired), max(paired)],
        "lower_in": sum(p < 1 for p in paired),
    }  # fmt: skip


def paired_cost(
    ours: list[dict[str, Any]],
    theirs: list[dict[str, Any]],
    value: Callable[[dict[str, Any]], float | None],
) -> dict[str, Any] | None:
    """A cost per event of this checkout's runs against another's: each side's values
    and their `paired_summary`; None when some run did not measure it."""
    a = [v for v in map(value, ours) if v is not None]
    b = [v for v in map(value, theirs) if v is not None]
    if not a or len(a) < len(ours) or len(b) < len(theirs):
        return None
    return {"us_per_event": a, "us_per_event_against": b, **paired_summary(ours, theirs, value)}


def paired_cost_text(cost: dict[str, Any]) -> str:
    """How a report prints a `paired_cost`'s pairing: "paired 0.913 (0.78-1.067), lower
    in 7 of 8 (p = 0.07)"."""
    low, high = cost["paired_range"]
    n, lower = len(cost["paired"]), cost["lower_in"]
    return (
        f"paired {cost['paired_median']:.3f} ({low}-{high}), lower in {lower} of {n} "
        f"({p_text(sign_test_p(lower, n))})"
    )


def run_from(checkout: Path, module: str, args: list[str], out: Path) -> dict[str, Any]:
    """``python -m MODULE ARGS --out OUT`` run from ``checkout``, with its code; the
    result it wrote. RuntimeError with the end of its stderr if it fails."""
    cmd = [sys.executable, "-m", module, *args, "--out", str(out)]
    done = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{module} from {checkout} exited with {done.returncode}: {done.stderr.strip()[-2000:]}"
        )
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def read_result(file: Path) -> dict[str, Any]:
    """A JSON result file's content; ValueError naming the file when it cannot be read
    or is not a JSON object."""
    try:
        text = file.read_text()
    except OSError as exc:
        raise ValueError(f"{file}: cannot be read ({exc.strerror})") from exc
    try:
        result = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{file}: not JSON ({exc})") from exc
    if not isinstance(result, dict):
        raise ValueError(f"{file}: not a result (a JSON object)")
    return result


def sign_test_p(wins: int, n: int) -> float:
    """The two-sided sign test's p-value for ours the better in ``wins`` of ``n`` paired
    repetitions: the chance that a fair coin tossed ``n`` times comes out at least as
    lopsided. Printed beside each such count, so that "better in 21 of 30" reads as
    the evidence it is (p = 0.043) and a tie as a tie (15 of 30: p = 1)."""
    if n <= 0:
        return 1.0
    fewer = min(wins, n - wins)
    tail = sum(math.comb(n, k) for k in range(fewer + 1)) / 2**n
    return min(1.0, 2 * tail)


def p_text(p: float) -> str:
    """A p-value as the docs quote it: two significant digits, or "p < 0.0001"."""
    return "p < 0.0001" if p < 0.0001 else f"p = {p:.2g}"


def write_result(name: str, result: dict[str, Any], out: Path | None = None) -> Path:
    """Write `result` (with machine facts) as JSON to bench/results/NAME.json."""
    path = out or RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "machine": machine_info(), **result}
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    return path
