"""bench.client_api_ab: the two checkouts alternate, each target's ratios are paired
run by run in the right direction, and a run that fails is reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import client_api_ab
from bench.common import REPO


def _result(one: float, p50: float) -> dict[str, Any]:
    """A `bench.client_api` result of one repetition with these two ratios to gmqtt."""
    return {"targets": [
        {"what": "1-to-1 events/s", "ours": "hop-trio", "baseline": "mosquitto-gmqtt",
         "ours_value": 100_000 * one, "ratios": [one]},
        {"what": "p50 at 500/s", "ours": "hop-trio", "baseline": "mosquitto-gmqtt",
         "ours_value": 200 * p50, "ratios": [p50]},
        {"what": "1-to-1 events/s", "ours": "hop-blocking", "baseline": "mosquitto-paho",
         "ours_value": None, "ratios": []},  # not measured
    ]}  # fmt: skip


def test_each_targets_ratios_are_paired_run_by_run() -> None:
    ours = [_result(1.0, 1.2), _result(0.9, 1.1), _result(1.1, 1.3)]
    theirs = [_result(0.8, 1.3), _result(1.0, 1.0), _result(1.0, 1.3)]
    one, p50 = client_api_ab.summary(ours, theirs)  # the unmeasured target left out
    assert (one["what"], one["higher_is_better"]) == ("1-to-1 events/s", True)
    assert one["paired"] == [1.25, 0.9, 1.1]
    assert (one["paired_median"], one["better_in"]) == (1.1, 2)
    assert (one["ratio_median"], one["ratio_median_against"]) == (1.0, 1.0)
    assert one["value_median"] == pytest.approx(100_000)
    assert (p50["what"], p50["higher_is_better"]) == ("p50 at 500/s", False)
    assert p50["paired"] == [0.923, 1.1, 1.0]
    assert (p50["paired_range"], p50["better_in"]) == ([0.923, 1.1], 1)  # lower is better


def _cpu(hop: float | None, mqtt: float = 3.0, pub: float = 3.5) -> dict[str, Any]:
    """A run whose brokers needed these CPU us per event at 1-to-1 (None: not measured),
    and our publisher ``pub``."""
    fanout1 = {"pub_cpu_us_per_event": pub}
    if hop is not None:
        fanout1["broker_cpu_us_per_event"] = hop
    theirs = {"fanout1": {"broker_cpu_us_per_event": mqtt, "pub_cpu_us_per_event": 4.0}}
    return {"systems": {"hop-trio": {"fanout1": fanout1}, "mosquitto-gmqtt": theirs}}


def test_our_brokers_cpu_is_paired_run_by_run() -> None:
    """Only our systems' brokers, lower is better; one run without it leaves it out."""
    (cpu,) = client_api_ab.cpu_per_event([_cpu(6.0), _cpu(5.5), _cpu(6.6)],
                                         [_cpu(6.4), _cpu(5.0), _cpu(7.2)])  # fmt: skip
    assert cpu["system"] == "hop-trio"
    assert cpu["paired"] == [0.938, 1.1, 0.917]
    assert (cpu["paired_median"], cpu["lower_in"]) == (0.938, 2)
    assert (cpu["median"], cpu["median_against"]) == (6.0, 6.4)
    assert client_api_ab.cpu_per_event([_cpu(6.0), _cpu(None)], [_cpu(6.0), _cpu(6.0)]) == []


def test_the_publishers_cpu_is_paired_like_the_brokers() -> None:
    (cpu,) = client_api_ab.cpu_per_event([_cpu(6.0, pub=3.0), _cpu(6.0, pub=4.4)],
                                         [_cpu(6.0, pub=3.3), _cpu(6.0, pub=4.0)],
                                         "publisher")  # fmt: skip
    assert cpu["paired"] == [0.909, 1.1]
    assert (cpu["median"], cpu["median_against"]) == (3.7, 3.65)


def test_the_cpu_at_500_per_second_is_paired_from_the_latency_run() -> None:
    """The latency run's CPU per event, not the 1-to-1 run's, for the 500/s pairing."""

    def run(at_500: float) -> dict[str, Any]:
        result = _cpu(6.0)
        result["systems"]["hop-trio"]["latency_500"] = {"broker_cpu_us_per_event": at_500}
        return result

    (cpu,) = client_api_ab.cpu_per_event([run(80.0), run(90.0)], [run(100.0), run(90.0)],
                                         "broker", "latency_500")  # fmt: skip
    assert cpu["paired"] == [0.8, 1.0]
    assert (cpu["median"], cpu["median_against"], cpu["lower_in"]) == (85.0, 95.0, 1)
    assert client_api_ab.cpu_per_event([_cpu(6.0)], [_cpu(6.0)], "broker", "latency_500") == []


def test_a_target_missing_from_a_run_is_left_out() -> None:
    ours, theirs = [_result(1.0, 1.0)], [_result(1.0, 1.0)]
    theirs[0]["targets"] = theirs[0]["targets"][:1]  # its p50 run failed
    assert [s["what"] for s in client_api_ab.summary(ours, theirs)] == ["1-to-1 events/s"]


def test_the_checkouts_alternate_which_runs_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[Path] = []

    def run_once(
        checkout: Path, systems: list[str], events: int | None, out: Path
    ) -> dict[str, Any]:
        order.append(checkout)
        return _result(1.0, 1.0)

    monkeypatch.setattr(client_api_ab, "run_once", run_once)
    results = client_api_ab.compare(tmp_path, 3, ["hop-trio", "mosquitto-gmqtt"], None)
    assert order == [REPO, tmp_path, tmp_path, REPO, REPO, tmp_path]
    assert [len(runs) for runs in results.values()] == [3, 3]


def test_a_failing_run_is_reported(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()  # a checkout whose code cannot run the benchmark
    (tmp_path / "bench" / "__init__.py").write_text("raise ImportError('not a checkout')\n")
    why = r"(?s)bench.client_api from .* exited with 1: .*ImportError: not a checkout"
    with pytest.raises(RuntimeError, match=why):
        client_api_ab.run_once(tmp_path, ["hop-trio"], 100, tmp_path / "out.json")
