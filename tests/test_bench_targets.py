"""bench.targets: the targets of `python -m bench` from its results, with the ratio
of ours to each baseline within every repetition, and the table's column of them."""

from __future__ import annotations

from typing import Any

from bench.table import render
from bench.targets import targets


def _runs(rates: list[float], p50s: list[float], reps: list[int] | None = None) -> list[Any]:
    runs = [
        {"saturation": {"events_per_s": rate}, "latency_500": {"p50_us": p50}}
        for rate, p50 in zip(rates, p50s, strict=True)
    ]
    for run, rep in zip(runs, reps or [], strict=False):
        run["repetition"] = rep
    return runs


def test_ratio_targets_pair_the_repetitions() -> None:
    results = {
        "hop": {"fanout1": {"runs": _runs([100.0, 90.0, 120.0], [200.0, 300.0, 250.0], [0, 1, 2])}},
        # the relay's repetition 1 failed:
        "link": {"fanout1": {"runs": _runs([400.0, 400.0], [100.0, 250.0], [0, 2])}},
        "amqtt": {
            "hop_over_amqtt_bare": {"fanout1": {"events_per_s": 10.5}},
            "bare": {"fanout1": {"runs": _runs([10.0, 10.0, 10.0], [0.0, 0.0, 0.0])}},  # older file
        },
    }
    by_name = {t["name"]: t for t in targets(results)}
    amqtt = by_name["hop_1to1_vs_amqtt"]
    assert (amqtt["value"], amqtt["target_met"]) == (10.5, True)
    assert (amqtt["per_repetition"], amqtt["repetitions_met"]) == ([10.0, 9.0, 12.0], 2)
    relay = by_name["hop_1to1_vs_relay"]
    assert (relay["per_repetition"], relay["repetitions_met"]) == ([0.25, 0.3], 2)
    latency = by_name["hop_latency_500_vs_relay"]  # at most 1.5: lower is better
    assert (latency["per_repetition"], latency["repetitions_met"]) == ([2.0, 1.0], 1)
    assert by_name["hop_1to4_vs_amqtt"]["per_repetition"] == []  # not measured
    table = render({"machine": {}, "results": {}, "targets": list(by_name.values())})
    assert (
        "| hop 1-to-1 events/s over amqtt's (bare), at least 10x | 10.5 | 10.0 | yes "
        "| 10.00 (9.00-12.00), 2 of 3 |"
    ) in table
    assert "| chain of 5 brokers: added latency per broker hop (median, us), under 150 | None" in (
        table
    )
