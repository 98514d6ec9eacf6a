"""The broker performance tables of docs/performance.md, from ``python -m bench`` results.

``python -m bench.table [bench/results/latest.json]`` prints Markdown: one row per
measurement, ours beside each baseline measured in the same run, the ratio, and an
anchor figure (what each baseline reached on a 2-core machine of this kind when the
targets were set, not measured by this run) for scale.

``python -m bench.table --runs FILE ...`` prints one row per full run instead, oldest
first: each target's value with the repetitions that met it, and tracing's cost, so
that runs made in different hours sit side by side.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR, lookup, median, read_result
from bench.targets import targets

# The anchors (2 cores, 150-byte events, 1 -> 1, raw socket clients, measured when
# the targets were set): what a baseline reached there, to compare with what it reaches here.
ANCHORS = {
    ("relay", "events_per_s"): "~500k",
    ("mosquitto", "events_per_s"): "~95k",
    ("amqtt bare", "events_per_s"): "~3.5k",
    ("relay", "p50_us"): "~200",
    ("mosquitto", "p50_us"): "~160",
    ("amqtt bare", "p50_us"): "~580",
}


def _number(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def _compared(
    label: str, ours: float | None, baseline: str, theirs: float | None, anchor: str = ""
) -> list[str]:
    ratio = "n/a" if ours is None or not theirs else f"{ours / theirs:.2f}x"
    return [label, _number(ours), baseline, _number(theirs), ratio, anchor]


def _alone(label: str, ours: float | None, digits: int = 0) -> list[str]:
    return [label, _number(ours, digits), "", "", "", ""]


BASELINES = {
    "relay": ("link",),
    "Mosquitto": ("mosquitto", "with_1000_subscriptions"),
    "amqtt bare": ("amqtt", "bare"),
    "amqtt, 1000 subs": ("amqtt", "with_1000_subscriptions"),
}
"""Each baseline of the fan-out comparison: its section in the results."""


def rows(results: dict[str, Any]) -> list[list[str]]:
    """[measurement, ours, baseline, baseline's value, ours/baseline, anchor] rows."""
    out = []
    for fanout in (1, 4):
        key = f"fanout{fanout}"
        ours = lookup(results, "hop", key, "events_per_s")
        for name, path in BASELINES.items():
            anchor = ANCHORS.get((name.lower(), "events_per_s"), "") if fanout == 1 else ""
            theirs = lookup(results, *path, key, "events_per_s")
            out.append(_compared(f"1-to-{fanout} events/s", ours, name, theirs, anchor))
    ours = lookup(results, "hop", "fanout1", "latency_500", "p50_us")
    for name, path in BASELINES.items():
        theirs = lookup(results, *path, "fanout1", "latency_500", "p50_us")
        anchor = ANCHORS.get((name.lower(), "p50_us"), "")
        out.append(_compared("1-to-1 p50 latency at 500/s (us)", ours, name, theirs, anchor))
    out.append(
        _compared(
            "chain of 5: added latency per hop (us)",
            lookup(results, "chain", "hop", "per_hop_us"),
            "relay chain",
            lookup(results, "chain", "relay", "per_hop_us"),
        )
    )
    out.append(
        _compared(
            "chain of 5, CPUs kept from idling: added latency per hop (us)",
            lookup(results, "chain", "cpus_kept_awake", "hop", "per_hop_us"),
            "relay chain",
            lookup(results, "chain", "cpus_kept_awake", "relay", "per_hop_us"),
        )
    )
    for rate in ("400", "2000"):
        out.append(
            _compared(
                f"CPU per event at {rate}/s (us, process on-CPU time)",
                lookup(results, "wakeup", "systems", "hop", rate, "cpu_us_per_event"),
                "relay",
                lookup(results, "wakeup", "systems", "relay", rate, "cpu_us_per_event"),
            )
        )
    out += [
        _alone(
            "tree15 saturation (events/s: p99 <= 100 ms, 95 % of the rate achieved)",
            lookup(results, "tree15", "saturation_rate"),
        ),
        _alone(
            "RSS holding 100k subscriptions (MB)",
            lookup(results, "memory", "subscriptions", "rss_mb"),
            1,
        ),
        _alone(
            "RSS growth under a slow subscriber (MB)",
            lookup(results, "memory", "slow_subscriber", "rss_growth_mb"),
            1,
        ),
    ]
    return out


def render(result: dict[str, Any]) -> str:
    machine = result.get("machine", {})
    load = lookup(result, "load_average", "start")
    allowed = machine.get("cpus_allowed")
    confined = (
        f" (the run confined to CPU {', '.join(map(str, allowed))})"
        if allowed is not None and len(allowed) < machine.get("cpus", 0)
        else ""
    )
    lines = [
        f"Run of {machine.get('date', '?')} at revision {machine.get('git_revision', '?')}, "
        f"{machine.get('cpus', '?')} cores of an {machine.get('cpu_model', '?')}{confined}, "
        f"Python {machine.get('python', '?')}, mode {result.get('mode', '?')}"
        + (f", load average at start {load[0]:.2f}" if load else "")
        + "; medians over repetitions, 150-byte events, 1000 subscriptions installed.",
        "",
        "| measurement | hop | baseline | baseline's | hop / baseline | anchor |",
        "|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows(result.get("results", {}))]
    lines += [
        "",
        "| target | value | limit | met | per repetition: ratio (range), met in |",
        "|---|---|---|---|---|",
    ]
    for t in result.get("targets", []):
        met = {True: "yes", False: "**no**", None: "not measured"}[t["target_met"]]
        ratios = t.get("per_repetition") or []
        paired = (
            f"{median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}), "
            f"{t['repetitions_met']} of {len(ratios)}"
            if ratios
            else ""
        )
        lines.append(f"| {t['description']} | {t['value']} | {t['limit']} | {met} | {paired} |")
    return "\n".join(lines)


RUN_COLUMNS = (
    # (heading, target name, format of its value)
    ("1-to-1 over amqtt's (at least 10x)", "hop_1to1_vs_amqtt", "{:.1f}x"),
    ("1-to-4 over amqtt's (at least 10x)", "hop_1to4_vs_amqtt", "{:.1f}x"),
    ("1-to-1 over the relay's (at least 0.2)", "hop_1to1_vs_relay", "{:.2f}"),
    ("p50 at 500/s over the relay's (at most 1.5)", "hop_latency_500_vs_relay", "{:.2f}"),
)


def _machine(cpu_model: str) -> str:
    """The processor's short name: "Intel Xeon" for "Intel(R) Xeon(R) Processor"."""
    words = cpu_model.replace("(R)", "").replace("(TM)", "").split()
    return " ".join(words[:2]) or "?"


def run_row(name: str, result: dict[str, Any]) -> str:
    """The row of `render_runs` for the result file ``name``."""
    machine, results = result.get("machine", {}), result.get("results", {})
    by_name = {t["name"]: t for t in targets(results)}

    def target(key: str, form: str) -> str:
        found = by_name[key]
        if found["value"] is None:
            return "n/a"
        ratios = found.get("per_repetition")
        met = f", {found['repetitions_met']} of {len(ratios)}" if ratios else ""
        return form.format(found["value"]) + met

    chain = [lookup(results, "chain", side, "per_hop_us") for side in ("hop", "relay")]
    memory = by_name["memory_100k_subscriptions_mb"]["value"]
    cost = lookup(results, "tracing_overhead", "throughput_cost_percent")
    cells = [
        f"`{name}`",
        _machine(machine.get("cpu_model", "")),
        machine.get("git_revision", "?"),
        machine.get("date", "?").replace("T", " ")[:16],
        *(target(key, form) for _, key, form in RUN_COLUMNS),
        " / ".join(_number(x) for x in chain),
        _number(memory),
        "n/a" if cost is None else f"{cost} %",
    ]
    return "| " + " | ".join(cells) + " |"


def render_runs(files: list[Path]) -> str:
    """One row per full run in ``files``, oldest first (see the module doc)."""
    runs = sorted(
        ((read_result(path), path.name) for path in files),
        key=lambda run: run[0].get("machine", {}).get("date", ""),
    )
    headings = [
        "result file",
        "machine",
        "revision",
        "written (UTC)",
        *(heading for heading, _, _ in RUN_COLUMNS),
        "chain hop, ours / the relay chain's (us; under 150)",
        "MB for 100k subscriptions (under 300)",
        "tracing's cost (at most 5 %)",
    ]
    lines = ["| " + " | ".join(headings) + " |", "|" + "---|" * len(headings)]
    return "\n".join(lines + [run_row(name, result) for result, name in runs])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", nargs="?", type=Path, default=RESULTS_DIR / "latest.json")
    parser.add_argument("--runs", nargs="+", type=Path, metavar="FILE", help="a row per run")
    args = parser.parse_args(argv)
    try:
        if args.runs:
            print(render_runs(args.runs))
            return
        result = read_result(args.result)
    except ValueError as exc:
        parser.error(f"cannot read a result: {exc}")
    if "results" in result:  # (the targets of files written before a change to them)
        result["targets"] = targets(result["results"])
    print(render(result))


if __name__ == "__main__":
    main()
