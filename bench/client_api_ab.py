"""The client benchmark from this checkout and from another revision, in alternation:
what a change to the broker or the clients buys in `bench.client_api`'s setting, on a
host whose speed drifts by tens of percent within minutes.

``python -m bench.client_api_ab --against REV [--runs N] [--events N] [--only SYSTEM ...]``
checks REV out in a temporary git worktree (removed afterwards), then runs ``python -m
bench.client_api --repeats 1 --only SYSTEMS`` N times from each checkout, this one
first in even runs and REV first in odd ones. Every run measures the MQTT baseline
beside ours, so a target's ratio (ours / baseline, `bench.client_api.targets`) carries
less of the hour than ours alone. Writes bench/results/client_api_ab.json (``--out``):
every run's summaries and, per target measured, each side's ratios and values, their
medians, and per pair of runs next to each other the ratio of this side's ratio to
REV's (below 1 is better for a latency, above 1 for a rate); and the same pairing of
the CPU per event of our broker, publisher and subscriber at 1-to-1 and at 500/s, which
a change to one of them moves directly.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.client_api import SYSTEMS, TARGETS
from bench.common import (
    REPO,
    lookup,
    median,
    p_text,
    paired_cost,
    paired_cost_text,
    paired_ratios,
    run_from,
    short_revision,
    sign_test_p,
    worktree,
    write_result,
)

DEFAULT_SYSTEMS = ("hop-trio", "mosquitto-gmqtt")


def run_once(checkout: Path, systems: list[str], events: int | None, out: Path) -> dict[str, Any]:
    """One ``bench.client_api`` run of one repetition from ``checkout``; its result."""
    args = ["--repeats", "1", "--only", *systems]
    return run_from(
        checkout, "bench.client_api", args + (["--events", str(events)] if events else []), out
    )


def summary(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per target measured in every run of both sides: each side's ratio and our value
    per run, their medians, and the paired quotient of the two sides' ratios."""
    higher = {(what, system): up for what, system, _, _, up in TARGETS}
    out = []
    for target in ours[0]["targets"] if ours else []:
        key = (target["what"], target["ours"])

        def measured(runs: list[dict[str, Any]], key: tuple[str, str] = key) -> list[Any]:
            return [t for run in runs for t in run["targets"] if (t["what"], t["ours"]) == key]

        a, b = measured(ours), measured(theirs)
        if len(a) != len(ours) or len(b) != len(theirs) or not all(t["ratios"] for t in a + b):
            continue  # not measured in some run (a system skipped or failed)
        ratio_a = [t["ratios"][0] for t in a]
        ratio_b = [t["ratios"][0] for t in b]
        paired = paired_ratios(a, b, lambda t: t["ratios"][0])  # (run by run, in order)
        better = sum(p > 1 if higher[key] else p < 1 for p in paired)
        values_a = [t["ours_value"] for t in a]
        values_b = [t["ours_value"] for t in b]
        out.append({
            "what": target["what"], "ours": target["ours"], "baseline": target["baseline"],
            "higher_is_better": higher[key],
            "ratios": ratio_a, "ratios_against": ratio_b,
            "ratio_median": median(ratio_a), "ratio_median_against": median(ratio_b),
            "values": values_a, "values_against": values_b,
            "value_median": median(values_a), "value_median_against": median(values_b),
            "paired": paired, "paired_median": median(paired),
            "paired_range": [min(paired), max(paired)], "better_in": better,
        })  # fmt: skip
    return out


PROCESSES = {"broker": "broker", "publisher": "pub", "subscriber": "sub"}
"""The processes whose CPU per event `cpu_per_event` pairs: the name in the result
file's ``{name}_cpu`` and the prefix of the run's ``{prefix}_cpu_us_per_event``."""

PHASES = {"fanout1": ("at 1-to-1", ""), "latency_500": ("at 500/s", "_500")}
"""The runs whose CPU per event `cpu_per_event` pairs: a phase of `bench.client_api`'s
result, what the report calls it, and its suffix to ``{name}_cpu`` in the result file
(saturation, where a per-event cost is the warm one, and the paced latency run, where
each event wakes every process)."""


def cpu_per_event(
    ours: list[dict[str, Any]],
    theirs: list[dict[str, Any]],
    process: str = "broker",
    phase: str = "fanout1",
) -> list[dict[str, Any]]:
    """Per system of ours measured in every run of both sides: the CPU per event of its
    ``process`` (a key of PROCESSES) in ``phase`` (a key of PHASES) per run, their
    medians, and the paired quotient (this side's over REV's, run by run): a change to
    one process's per-event work shows here before it shows in a rate the three
    processes share."""
    field = f"{PROCESSES[process]}_cpu_us_per_event"
    out = []
    for system in ours[0]["systems"] if ours else []:
        if not system.startswith("hop-"):
            continue

        def cpu(run: dict[str, Any], system: str = system) -> Any:
            """Its CPU us per event in ``phase`` of ``run``; None if not measured."""
            return lookup(run["systems"], system, phase, field)

        cost = paired_cost(ours, theirs, cpu)
        if cost is not None:
            out.append({"system": system, **cost})
    return out


def compare(
    against: Path, runs: int, systems: list[str], events: int | None
) -> dict[str, list[dict[str, Any]]]:
    """``runs`` runs from this checkout and from ``against``, alternating."""
    results: dict[str, list[dict[str, Any]]] = {"ours": [], "against": []}
    with tempfile.TemporaryDirectory(prefix="bench-client-api-ab-") as tmp:
        for index in range(runs):
            order = (("ours", REPO), ("against", against))
            for side, checkout in order if index % 2 == 0 else order[::-1]:
                result = run_once(checkout, systems, events, Path(tmp) / f"{side}{index}.json")
                results[side].append(result)
                print(f"run {index + 1} {side}: " + ", ".join(
                    f"{t['ours']} {t['what']} {t['ratios'][0]}"
                    for t in result["targets"] if t["ratios"]
                ), file=sys.stderr, flush=True)  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the revision to compare with")
    parser.add_argument("--runs", type=int, default=6, help="runs from each checkout")
    parser.add_argument("--events", type=int, help="events per saturation run")
    parser.add_argument("--only", nargs="+", choices=SYSTEMS, default=list(DEFAULT_SYSTEMS))
    parser.add_argument("--out", type=Path, help="result file (default bench/results/...)")
    args = parser.parse_args(argv)
    with worktree(args.against) as (theirs, revision):
        results = compare(theirs, args.runs, args.only, args.events)
    keep = ("machine", "systems", "targets", "errors", "skipped")
    result: dict[str, Any] = {
        "against": revision,
        "ours_revision": short_revision(REPO),
        "command": f"python -m bench.client_api --repeats 1 --only {' '.join(args.only)}"
        + (f" --events {args.events}" if args.events else ""),
        "summary": summary(results["ours"], results["against"]),
        **{
            f"{process}_cpu{suffix}": cpu_per_event(
                results["ours"], results["against"], process, phase
            )
            for phase, (_, suffix) in PHASES.items()
            for process in PROCESSES
        },
        "runs": {
            side: [{k: r.get(k) for k in keep} for r in runs] for side, runs in results.items()
        },  # fmt: skip
    }
    print(write_result("client_api_ab", result, args.out))
    for s in result["summary"]:
        print(
            f"{s['ours']} {s['what']}: ratio to {s['baseline']} {s['ratio_median']:.3f} here, "
            f"{s['ratio_median_against']:.3f} at {revision}; paired {s['paired_median']:.3f} "
            f"({s['paired_range'][0]}-{s['paired_range'][1]}), better in {s['better_in']} "
            f"of {len(s['paired'])} ({p_text(sign_test_p(s['better_in'], len(s['paired'])))})"
        )
    for where, suffix in PHASES.values():
        for process in PROCESSES:
            for c in result[f"{process}_cpu{suffix}"]:
                print(
                    f"{c['system']} {process} CPU per event {where}: {c['median']:.2f} us "
                    f"here, {c['median_against']:.2f} at {revision}; {paired_cost_text(c)}"
                )


if __name__ == "__main__":
    main()
