"""`bench.analyze_jit`'s reading of `bench.analyze_scaling` results and its pairing of
the two settings round by round."""

from __future__ import annotations

from typing import Any

from bench.analyze_jit import compare, measures


def scaling_result(
    start: float, first: float, warm: dict[int, tuple[float, float]]
) -> dict[str, Any]:
    return {
        "spark_startup_s": start,
        "warmup_analysis_s": first,
        "runs": [
            {"hop_rows": rows, "analyze_s": s, "cpu_s": cpu} for rows, (s, cpu) in warm.items()
        ],
    }


def test_measures_name_the_cold_first_analysis_and_each_warm_size() -> None:
    got = measures(scaling_result(8.0, 20.0, {1000: (3.0, 5.0), 16_000_000: (150.0, 290.0)}))
    assert got == {
        "start_s": 8.0,
        "cold_first_s": 20.0,
        "start_and_cold_first_s": 28.0,
        "warm_1000_rows_s": 3.0,
        "warm_1000_rows_cpu_s": 5.0,
        "warm_16000000_rows_s": 150.0,
        "warm_16000000_rows_cpu_s": 290.0,
    }


def test_rounds_are_paired_c1_over_the_default() -> None:
    rounds = [
        {"default": {"cold_first_s": 30.0}, "c1-only": {"cold_first_s": 24.0}},
        {"default": {"cold_first_s": 20.0}, "c1-only": {"cold_first_s": 25.0}},  # a slow turn
        {"default": {"cold_first_s": 28.0}, "c1-only": {"cold_first_s": 21.0}},
    ]
    got = compare(rounds)["cold_first_s"]
    assert got["paired"] == [0.8, 1.25, 0.75]
    assert (got["paired_median"], got["lower_in"]) == (0.8, 2)
    assert (got["median_default"], got["median_c1_only"]) == (28.0, 24.0)
    assert got["sign_test_p"] == 1.0  # 2 of 3 is no evidence
