"""The README's broker performance table, from a ``python -m bench`` result.

``python -m bench.table [bench/results/latest.json]`` prints Markdown: one row per
measurement, ours beside each baseline measured in the same run, the ratio, and the
issue's anchor figure (measured on this kind of machine on 2026-11-22 and quoted
in the issue, not by this run) for scale.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR

# The anchors (2026-11-22, 2 cores, 150-byte events, 1 -> 1, raw socket
# clients): what a baseline reached there, to compare with what it reaches here.
ANCHORS = {
    ("relay", "events_per_s"): "~500k",
    ("mosquitto", "events_per_s"): "~95k",
    ("amqtt bare", "events_per_s"): "~3.5k",
    ("relay", "p50_us"): "~200",
    ("mosquitto", "p50_us"): "~160",
    ("amqtt bare", "p50_us"): "~580",
}


def _get(tree: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return tree


def _number(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def _ratio(ours: float | None, theirs: float | None) -> str:
    return "n/a" if ours is None or not theirs else f"{ours / theirs:.2f}x"


def rows(results: dict[str, Any]) -> list[list[str]]:
    """[measurement, ours, baseline, baseline's value, ours/baseline, anchor] rows."""
    baselines = {
        "relay": ("link",),
        "Mosquitto": ("mosquitto", "with_1000_subscriptions"),
        "amqtt bare": ("amqtt", "bare"),
        "amqtt, 1000 subs": ("amqtt", "with_1000_subscriptions"),
    }
    out = []
    for fanout in (1, 4):
        key = f"fanout{fanout}"
        ours = _get(results, "hop", key, "events_per_s")
        for name, path in baselines.items():
            theirs = _get(results, *path, key, "events_per_s")
            anchor = ANCHORS.get((name.lower(), "events_per_s"), "") if fanout == 1 else ""
            out.append(
                [
                    f"1-to-{fanout} events/s",
                    _number(ours),
                    name,
                    _number(theirs),
                    _ratio(ours, theirs),
                    anchor,
                ]
            )
    ours = _get(results, "hop", "fanout1", "latency_500", "p50_us")
    for name, path in baselines.items():
        theirs = _get(results, *path, "fanout1", "latency_500", "p50_us")
        out.append(
            [
                "1-to-1 p50 latency at 500/s (us)",
                _number(ours),
                name,
                _number(theirs),
                _ratio(ours, theirs),
                ANCHORS.get((name.lower(), "p50_us"), ""),
            ]
        )
    out.append(
        [
            "chain of 5: added latency per hop (us)",
            _number(_get(results, "chain", "hop", "per_hop_us")),
            "relay chain",
            _number(_get(results, "chain", "relay", "per_hop_us")),
            _ratio(
                _get(results, "chain", "hop", "per_hop_us"),
                _get(results, "chain", "relay", "per_hop_us"),
            ),
            "",
        ]
    )
    for rate in ("400", "2000"):
        ours = _get(results, "wakeup", "systems", "hop", rate, "cpu_us_per_event")
        theirs = _get(results, "wakeup", "systems", "relay", rate, "cpu_us_per_event")
        out.append(
            [
                f"CPU per event at {rate}/s (us, process on-CPU time)",
                _number(ours),
                "relay",
                _number(theirs),
                _ratio(ours, theirs),
                "",
            ]
        )
    out.append(
        [
            "tree15 saturation (events/s, p99 <= 100 ms)",
            _number(_get(results, "tree15", "saturation_rate")),
            "",
            "",
            "",
            "",
        ]
    )
    out.append(
        [
            "RSS holding 100k subscriptions (MB)",
            _number(_get(results, "memory", "subscriptions", "rss_mb"), 1),
            "",
            "",
            "",
            "",
        ]
    )
    out.append(
        [
            "RSS growth under a slow subscriber (MB)",
            _number(_get(results, "memory", "slow_subscriber", "rss_growth_mb"), 1),
            "",
            "",
            "",
            "",
        ]
    )
    return out


def render(result: dict[str, Any]) -> str:
    machine = result.get("machine", {})
    load = _get(result, "load_average", "start")
    lines = [
        f"Run of {machine.get('date', '?')} at revision {machine.get('git_revision', '?')}, "
        f"{machine.get('cpus', '?')} cores of an {machine.get('cpu_model', '?')}, Python "
        f"{machine.get('python', '?')}, mode {result.get('mode', '?')}"
        + (f", load average at start {load[0]:.2f}" if load else "")
        + "; medians over repetitions, 150-byte events, 1000 subscriptions installed.",
        "",
        "| measurement | hop | baseline | baseline's | hop / baseline | anchor |",
        "|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows(result.get("results", {}))]
    lines += ["", "| target | value | limit | met |", "|---|---|---|---|"]
    for t in result.get("targets", []):
        met = {True: "yes", False: "**no**", None: "not measured"}[t["target_met"]]
        lines.append(f"| {t['description']} | {t['value']} | {t['limit']} | {met} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", nargs="?", type=Path, default=RESULTS_DIR / "latest.json")
    args = parser.parse_args(argv)
    print(render(json.loads(args.result.read_text())))


if __name__ == "__main__":
    main()
