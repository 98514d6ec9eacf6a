"""bench.model_accuracy: the repetitions' figures summarized, the targets judged on
their median and counted per repetition."""

from __future__ import annotations

import pytest

from bench import model_accuracy
from bench.model_accuracy import FIGURES, LATENCY_TARGET, summarize


def repetition(latency: float, throughput: float = 0.01, one_run: float = 0.2) -> dict:
    figures = dict.fromkeys(FIGURES, 0.1)
    figures |= {
        "worst_latency_error": latency,
        "worst_throughput_error": throughput,
        "one_run_worst": one_run,
    }
    return figures


def test_the_median_judges_the_target_and_each_repetition_is_counted() -> None:
    summary = summarize([repetition(0.12), repetition(0.18), repetition(0.09)])
    latency = summary["figures"]["worst_latency_error"]
    assert latency["median"] == pytest.approx(0.12)
    assert (latency["min"], latency["max"]) == (0.09, 0.18)
    assert latency["spread"] == pytest.approx(0.09)
    target = summary["targets"]["worst_latency_error"]
    assert target == {
        "target": LATENCY_TARGET,
        "median": pytest.approx(0.12),
        "target_met": True,
        "met_in": 2,
        "repetitions": 3,
    }
    assert summary["targets"]["worst_throughput_error"]["met_in"] == 3


def test_a_median_over_the_target_is_missed_even_when_one_repetition_meets_it() -> None:
    summary = summarize([repetition(0.2, one_run=0.6), repetition(0.1, one_run=0.7)])
    latency = summary["targets"]["worst_latency_error"]
    assert latency["target_met"] is False and latency["met_in"] == 1
    one_run = summary["targets"]["one_run_worst"]
    assert one_run["target_met"] is False and one_run["met_in"] == 0
    assert summary["figures"]["worst_latency_error"]["stdev"] > 0


def test_the_command_refuses_no_repetitions() -> None:
    with pytest.raises(SystemExit) as exited:
        model_accuracy.main(["--repetitions", "0"])
    assert exited.value.code == 2
