"""`python -m bench.table` renders a benchmark result as the table of docs/performance.md."""

from __future__ import annotations

from bench.table import render


def test_rows_put_ours_beside_each_baseline_with_the_ratio() -> None:
    point = {"events_per_s": 2000.0, "latency_500": {"p50_us": 300.0}}
    result = {
        "machine": {"date": "2026-11-23T00:00:00Z", "cpus": 2},
        "results": {
            "hop": {"fanout1": {"events_per_s": 6000.0, "latency_500": {"p50_us": 450.0}}},
            "link": {"fanout1": point},
            "amqtt": {"bare": {"fanout1": {"events_per_s": 500.0}}},
            "chain": {
                "hop": {"per_hop_us": 190.0},
                "relay": {"per_hop_us": 200.0},
                "cpus_kept_awake": {"hop": {"per_hop_us": 120.0}, "relay": {"per_hop_us": 100.0}},
            },
            "wakeup": {
                "systems": {
                    "hop": {"400": {"cpu_us_per_event": 250.0}},
                    "relay": {"400": {"cpu_us_per_event": 200.0}},
                }
            },
        },
        "targets": [
            {"description": "d", "value": 3.0, "limit": 10.0, "target_met": False},
        ],
    }
    text = render(result)
    assert "| 1-to-1 events/s | 6,000 | relay | 2,000 | 3.00x | ~500k |" in text
    assert "| 1-to-1 events/s | 6,000 | amqtt bare | 500 | 12.00x | ~3.5k |" in text
    assert "| 1-to-1 p50 latency at 500/s (us) | 450 | relay | 300 | 1.50x | ~200 |" in text
    assert "| 1-to-4 events/s | n/a | relay | n/a | n/a |  |" in text  # not measured
    assert "| chain of 5: added latency per hop (us) | 190 | relay chain | 200 | 0.95x |" in text
    assert (
        "| chain of 5, CPUs kept from idling: added latency per hop (us) | 120 | relay chain "
        "| 100 | 1.20x |" in text
    )
    assert (
        "| CPU per event at 400/s (us, process on-CPU time) | 250 | relay | 200 | 1.25x |" in text
    )
    assert "| d | 3.0 | 10.0 | **no** |" in text


def test_a_run_confined_to_fewer_cpus_says_so() -> None:
    machine = {"date": "2026-11-25T00:00:00Z", "cpus": 2, "cpu_model": "X"}
    assert "confined" not in render({"machine": {**machine, "cpus_allowed": [0, 1]}})
    assert "2 cores of an X (the run confined to CPU 0)," in render(
        {"machine": {**machine, "cpus_allowed": [0]}}
    )
    assert "confined" not in render({"machine": machine})  # results from before the field
