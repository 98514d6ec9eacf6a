"""bench.client_api: the per-run summary, the medians and targets, the markdown table,
and one short run of our two clients through their own processes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from bench import client_api
from bench.common import lookup, paired_ratios


def _run(rate: float, events_per_s: float, p50: float | None = None) -> dict[str, Any]:
    run = {"events_per_s": events_per_s, "pub_cpu_us_per_event": 4.0,
           "sub_cpu_us_per_event": 3.0, "broker_cpu_us_per_event": 9.0, "lost": 0}  # fmt: skip
    if rate:
        run |= {"p50_us": p50, "p99_us": 2 * (p50 or 0)}
    return run


def system_sample(rates: tuple[float, float, float]) -> dict[str, Any]:
    """One repetition of a system, as `client_api.run` keeps it: its 1-to-1 and 1-to-4
    rates and its p50 at 500/s (``rates``); the CPU figures alike for all."""
    one, four, p50 = rates
    return {"fanout1": _run(0, one), "fanout4": _run(0, four), "latency_500": _run(500, 500, p50)}


def test_a_run_is_summarized_from_what_its_processes_report() -> None:
    published = {"t_first_ns": 1_000_000_000, "cpu_s": 0.5}
    received = [
        {"received": 1000, "t_last_ns": 1_100_000_000, "cpu_s": 0.2, "latencies_ns": None},
        {"received": 990, "t_last_ns": 1_200_000_000, "cpu_s": 0.4, "latencies_ns": None},
    ]
    run = client_api.summarize_run(published, received, 1000, 0.0)
    assert run["lost"] == 10
    assert run["events_per_s"] == pytest.approx(1990 / 2 / 0.2, rel=1e-3)  # to the last one
    assert (run["pub_cpu_us_per_event"], run["sub_cpu_us_per_event"]) == (500.0, 300.0)
    latency = [{"received": 3, "t_last_ns": 1_010_000_000, "cpu_s": 0.0,
                "latencies_ns": [100_000, 200_000, 300_000]}]  # fmt: skip
    run = client_api.summarize_run(published, latency, 3, 500.0)
    assert (run["p50_us"], run["p99_us"]) == (200.0, 300.0)
    assert "handoff_p50_us" not in run  # an MQTT subscriber: no hand-off measured
    latency[0]["handoffs_ns"] = [10_000, 30_000, 20_000]
    run = client_api.summarize_run(published, latency, 3, 500.0)
    assert run["handoff_p50_us"] == 20.0


def test_a_tally_notes_each_deliverys_hand_off_from_its_decoding() -> None:
    from client import Delivery

    tally = client_api.Tally(3, latencies=True)
    now = time.time_ns()
    deliveries = [Delivery(f"e{k}", "p", {"t": now - 900_000}, (1,), (), now - 900_000,
                           now - 1_000 * (k + 1)) for k in range(3)]  # fmt: skip
    assert tally.took_deliveries(deliveries)  # all three came
    result = tally.result()
    first, *_ = handoffs = result["handoffs_ns"]  # one clock reading for the batch:
    assert [h - first for h in handoffs] == [0, 1_000, 2_000]  # their decoding times apart
    assert 1_000 <= first < 50_000_000
    assert all(900_000 <= lat < 900_000 + 50_000_000 for lat in result["latencies_ns"])
    quiet = client_api.Tally(3, latencies=False)  # saturation runs note nothing
    quiet.took_deliveries(deliveries)
    assert quiet.result()["handoffs_ns"] == [] and quiet.result()["latencies_ns"] is None


def test_medians_targets_and_table() -> None:
    samples = {
        "hop-trio": [system_sample((100.0, 50.0, 220.0)), system_sample((120.0, 40.0, 240.0))],
        "mosquitto-gmqtt": [system_sample((90.0, 45.0, 210.0))],
        "hop-asyncio": [system_sample((80.0, 50.0, 200.0))],
        "hop-blocking": [system_sample((30.0, 20.0, 400.0))],
        "mosquitto-paho": [system_sample((40.0, 10.0, 300.0))],
        "hop-asyncio-uvloop": [system_sample((95.0, 50.0, 190.0))],
        "mosquitto-gmqtt-uvloop": [system_sample((100.0, 30.0, 180.0))],
    }
    systems = {name: client_api.summarize(runs) for name, runs in samples.items()}
    assert systems["hop-trio"]["fanout1"]["events_per_s"] == 110.0
    assert len(systems["hop-trio"]["samples"]) == 2
    met = {(t["ours"], t["what"]): t["target_met"] for t in client_api.targets(systems)}
    assert met == {
        ("hop-trio", "1-to-1 events/s"): True,
        ("hop-trio", "1-to-4 events/s"): True,  # 45 against 45
        ("hop-trio", "p50 at 500/s"): False,  # 230 against 210: lower is better
        ("hop-asyncio", "1-to-1 events/s"): False,
        ("hop-asyncio", "1-to-4 events/s"): True,
        ("hop-asyncio", "p50 at 500/s"): True,
        ("hop-blocking", "1-to-1 events/s"): False,
        ("hop-blocking", "1-to-4 events/s"): True,
        ("hop-asyncio-uvloop", "1-to-1 events/s"): False,  # against gmqtt on uvloop
        ("hop-asyncio-uvloop", "1-to-4 events/s"): True,
        ("hop-asyncio-uvloop", "p50 at 500/s"): False,
    }
    result = {
        "systems": systems,
        "targets": client_api.targets(systems),
        "settings": {"repeats": 2, "events": 100},
        "subscriptions_installed": 1000,
    }
    table = client_api.table(result)
    assert "| hop-trio | 110 | 45 | 230 | 460 | - | 4.00 | 3.00 | 9.00 |" in table
    assert "- hop-blocking 1-to-1 events/s: 30 vs mosquitto-paho 40: NOT met (per" in table
    assert client_api.targets({})[0]["target_met"] is None  # not measured


def test_targets_pair_the_repetitions_both_systems_ran() -> None:
    ours = [system_sample((100.0, 50.0, 300.0)) | {"repetition": r} for r in (0, 1, 2)]
    ours[1]["fanout1"]["events_per_s"] = 60.0  # a slow repetition of ours
    base = [
        system_sample((80.0, 40.0, 200.0)) | {"repetition": r} for r in (0, 2, 3)
    ]  # rep 1 failed
    base[1]["latency_500"]["p50_us"] = 400.0
    systems = {"hop-trio": client_api.summarize(ours),
               "mosquitto-gmqtt": client_api.summarize(base)}  # fmt: skip
    by_what = {t["what"]: t for t in client_api.targets(systems) if t["ours"] == "hop-trio"}
    one, p50 = by_what["1-to-1 events/s"], by_what["p50 at 500/s"]
    assert (one["ratios"], one["repetitions_won"]) == ([1.25, 1.25], 2)  # reps 0 and 2
    assert (p50["ratios"], p50["repetitions_won"]) == ([1.5, 0.75], 1)  # lower is better
    result = {"systems": systems, "targets": client_api.targets(systems), "settings": {}}
    assert (
        "- hop-trio p50 at 500/s: 300 vs mosquitto-gmqtt 200: NOT met "
        "(per repetition 1.12x, 0.75-1.50; ours better in 1 of 2, sign test p = 1)"
    ) in client_api.table(result)

    def legacy(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:  # numbered in order
        return [{k: v for k, v in run.items() if k != "repetition"} for run in runs]

    ratios = paired_ratios(
        legacy(ours[:2]), legacy(base[:2]), lambda run: lookup(run, "fanout1", "events_per_s")
    )
    assert ratios == [1.25, 0.75]


@pytest.mark.integration
def test_a_short_run_of_our_clients_in_their_own_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every system of ours delivers every event in every scenario; a handler or uvloop
    variant differs from its system only in the subscriber's loop, so it runs 1-to-1
    only (a subscriber process of each kind runs 1-to-4 in the first run)."""
    settings = client_api.Settings(repeats=1, events=300, latency_s=0.2)
    for ours, fanouts in (
        (["hop-trio", "hop-asyncio", "hop-blocking"], (1, 4)),
        (
            [
                "hop-trio-handler",
                "hop-asyncio-handler",
                "hop-blocking-handler",
                "hop-asyncio-uvloop",
            ],
            (1,),
        ),  # fmt: skip
    ):
        monkeypatch.setattr(client_api, "FANOUTS", fanouts)
        result = client_api.run(ours, settings, tmp_path)
        assert result["errors"] == {}
        for name in ours:
            system = result["systems"][name]
            for key in (*(f"fanout{f}" for f in fanouts), "latency_500"):
                assert system[key]["lost"] == 0 and system[key]["events_per_s"] > 0
            assert system["latency_500"]["p50_us"] > 0
            assert len(system["samples"]) == 1


def test_a_missing_mqtt_client_is_skipped_saying_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    from bench import mqtt

    found = importlib.util.find_spec
    monkeypatch.setattr(mqtt, "find_mosquitto", lambda: ("/usr/sbin/mosquitto", None))
    # paho is "there" whether or not this environment installed the bench extra
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name: None if name == "gmqtt" else (found(name) or (name == "paho")),
    )
    systems, skipped, path = client_api.available(list(client_api.SYSTEMS))
    assert "mosquitto-gmqtt" not in systems and "hop-trio" in systems
    why = "gmqtt is not installed: pip install -e '.[bench]'"
    assert skipped == {"mosquitto-gmqtt": why, "mosquitto-gmqtt-uvloop": why}
    assert path == "/usr/sbin/mosquitto"
    assert "skipping mosquitto-gmqtt: gmqtt is not installed" in capsys.readouterr().err
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "uvloop" else 1)
    systems, skipped, _ = client_api.available(["hop-asyncio", "hop-asyncio-uvloop"])
    assert systems == ["hop-asyncio"]
    assert skipped == {"hop-asyncio-uvloop": "uvloop is not installed: pip install -e '.[bench]'"}
