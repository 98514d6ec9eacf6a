"""Run the benchmarks: ``python -m bench [--quick] [--only NAME ...] [--name NAME]``.

Writes ``bench/results/latest.json`` (``--name NAME``: ``NAME.json``): the machine,
the mode, every selected benchmark's results under ``results``, the targets
with the measured value and ``target_met`` each, what was skipped (and why) and what
failed (and how). A failing benchmark does not stop the others; the exit code is 1
when one failed.

Benchmarks (see each module's doc for what is measured and how):

* ``link``, ``hop`` (bench.throughput): the relay baseline and one broker, 1-to-1
  and 1-to-4, saturation and latency;
* ``amqtt``, ``mosquitto`` (bench.mqtt): the same workloads through MQTT brokers.
  These four share one alternating comparison: every selected system is measured in
  each repetition, our broker included whenever one of the others is selected;
* ``chain`` (bench.throughput): per-hop latency of 5 brokers against 5 relays, on the
  machine as it is and with its CPUs kept from idling (bench.awake);
* ``wakeup`` (bench.wakeup): CPU per event at 400 and 2000 events/s, one broker
  against the relay: what a process wake-up costs on this machine;
* ``memory`` (bench.throughput): RSS with 100k subscriptions and under a slow
  subscriber;
* ``tree15`` (bench.tree15): saturation rate of the 15-broker case study;
* ``matching`` (bench.matching) and ``tracing_overhead`` (bench.tracing_overhead).

``--quick`` (fewer events and repetitions, shorter steps; matching up to 10k
subscriptions) finishes in under 5 minutes on the 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import matching, mqtt, throughput, tracing_overhead, tree15, wakeup
from bench.common import write_result
from bench.targets import targets
from broker.process import unwind_on_termination

NAMES = (
    "link",
    "hop",
    "amqtt",
    "mosquitto",
    "chain",
    "wakeup",
    "memory",
    "tree15",
    "matching",
    "tracing_overhead",
)
FANOUT_NAMES = ("link", "hop", "amqtt", "mosquitto")
MQTT_NAMES = ("amqtt", "mosquitto")


class Run:
    """Collects sections, skips, errors and timings of one ``python -m bench``."""

    def __init__(self) -> None:
        self.results: dict[str, Any] = {}
        self.skipped: dict[str, str] = {}
        self.errors: dict[str, str] = {}
        self.timings: dict[str, float] = {}

    def attempt(self, label: str, names: list[str], fn: Callable[[], dict[str, Any]]) -> None:
        """Run one benchmark; on failure record the error under each of ``names``."""
        print(f"bench: == {label}", file=sys.stderr, flush=True)
        start = time.monotonic()
        try:
            sections = fn()
        except Exception as exc:
            traceback.print_exc()
            for name in names:
                self.errors[name] = f"{type(exc).__name__}: {exc}"
        else:
            self.results.update(sections)
            for name, section in sections.items():
                if problems := _errors(section):
                    self.errors[name] = "; ".join(problems)
        self.timings[label] = round(time.monotonic() - start, 1)


def _errors(section: Any) -> list[str]:
    """The failed repetitions reported in a section (``errors`` lists, two levels deep)."""
    if not isinstance(section, dict):
        return []
    found = list(section.get("errors", []))
    for value in section.values():
        if isinstance(value, dict):
            found += value.get("errors", [])
    return found


def fanout(
    selected: list[str], settings: throughput.Settings, workdir: Path, run: Run
) -> dict[str, Any]:
    """link / hop / amqtt / mosquitto in one alternating comparison."""
    mqtt_names = [n for n in MQTT_NAMES if n in selected]
    mqtt_systems, skipped = mqtt.mqtt_systems(mqtt_names)
    run.skipped.update(skipped)
    systems: list[throughput.System] = []
    if "link" in selected or "hop" in selected:
        systems.append(throughput.RelaySystem())
    if "hop" in selected or mqtt_systems:
        systems.append(throughput.HopSystem())
    systems += mqtt_systems
    if not systems:
        return {}
    measured = throughput.compare_fanout(systems, settings, workdir)
    return {**throughput.fanout_sections(measured), **mqtt.sections(measured, mqtt_names)}


def result_name(text: str) -> str:
    """``--name``: a file name stem of letters, digits, '-' and '_' (not a path)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a result name (letters, digits, '-' and '_')"
        )
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the under-5-minutes version")
    parser.add_argument("--only", nargs="+", choices=NAMES, metavar="NAME", help=", ".join(NAMES))
    parser.add_argument(
        "--name",
        type=result_name,
        default="latest",
        help="write bench/results/NAME.json (default: latest), to keep a run beside the latest one",
    )
    args = parser.parse_args(argv)
    unwind_on_termination()  # stop what it started also when killed with SIGTERM
    selected = [n for n in NAMES if n in (args.only or NAMES)]
    settings = throughput.Settings.quick() if args.quick else throughput.Settings.full()
    run = Run()
    started = time.monotonic()
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        workdir = Path(tmp)
        if any(n in selected for n in FANOUT_NAMES):
            names = [n for n in FANOUT_NAMES if n in selected]
            run.attempt("fanout", names, lambda: fanout(selected, settings, workdir, run))
        if "chain" in selected:
            run.attempt(
                "chain", ["chain"], lambda: {"chain": throughput.run_chain(settings, workdir)}
            )
        if "wakeup" in selected:
            run.attempt("wakeup", ["wakeup"], lambda: {"wakeup": wakeup.run(args.quick, workdir)})
        if "memory" in selected:
            run.attempt(
                "memory", ["memory"], lambda: {"memory": throughput.run_memory(settings, workdir)}
            )
        if "tree15" in selected:
            run.attempt("tree15", ["tree15"], lambda: {"tree15": tree15.run(args.quick, workdir)})
    if "matching" in selected:
        sizes, reps = ([1_000, 10_000], 1) if args.quick else ([1_000, 10_000, 100_000], 5)
        run.attempt("matching", ["matching"], lambda: {"matching": matching.run(sizes, reps)})
    if "tracing_overhead" in selected:
        shape = (10_000, 1, 3) if args.quick else (30_000, 4, 8)
        run.attempt(
            "tracing_overhead",
            ["tracing_overhead"],
            lambda: {"tracing_overhead": tracing_overhead.run(*shape)},
        )
    checked = targets(run.results)
    path = write_result(
        args.name,
        {
            "mode": "quick" if args.quick else "full",
            "selected": selected,
            "duration_s": round(time.monotonic() - started, 1),
            # Other work shares the machine: its 1/5/15-minute load averages.
            "load_average": {"start": load_start, "end": os.getloadavg()},
            "timings_s": run.timings,
            "targets": checked,
            "skipped": run.skipped,
            "errors": run.errors,
            "results": run.results,
        },
    )
    for t in checked:
        verdict = {True: "met", False: "MISSED", None: "not measured"}[t["target_met"]]
        ratios = t.get("per_repetition") or []
        paired = f", met in {t['repetitions_met']} of {len(ratios)} repetitions" if ratios else ""
        print(f"target {t['name']}: {t['value']} (limit {t['limit']}): {verdict}{paired}")
    for name, why in run.skipped.items():
        print(f"skipped {name}: {why}")
    for name, error in run.errors.items():
        print(f"FAILED {name}: {error}")
    print(path)
    return 1 if run.errors else 0


if __name__ == "__main__":
    sys.exit(main())
