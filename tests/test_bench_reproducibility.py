"""bench.reproducibility's summaries: the run-to-run variation and the floor, the score a
perfect model gets under hop validate's comparison (replays against replays)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.reproducibility import floor, summary, table

PAIRS = ("pub1>sub1", "pub1>sub2", "pub2>sub1")


def _run(latencies: dict[str, float], scale: float = 1.0) -> dict[str, Any]:
    return {
        "publish_us": 400.0 * scale,
        "link_us": 450.0 * scale,
        "deliver_us": 600.0 * scale,
        "service_us": 120.0 * scale,
        "latency_mean_us": 3000.0 * scale,
        "latency_p50_us": 2900.0 * scale,
        "deliveries": 1000,
        "client_processes": 24,
        "other_cores": 0.01,
        "steal_cores": 0.0,
        "pairs_ms": {p: v * scale for p, v in latencies.items()},
    }


BASE = {"pub1>sub1": 1.0, "pub1>sub2": 2.0, "pub2>sub1": 4.0}


def test_identical_replays_give_a_perfect_score() -> None:
    got = floor([_run(BASE) for _ in range(6)], repeats=3)
    assert got is not None
    assert (got["repeats"], got["pairs"], got["splits"]) == (3, 3, 20)
    assert got["mean_err_%"] == {"median": 0.0, "min": 0.0, "max": 0.0}
    assert got["worst_err_%"]["max"] == 0.0
    assert got["inside_ci"]["min"] == 1.0 and got["within_spread"]["min"] == 1.0


def test_the_floor_scores_one_set_against_the_other_as_validate_does() -> None:
    # Four replays, alike but for one pair, which the host made twice as slow in the
    # last two; four rounds allow two replays against two, in six splits.
    runs = [
        _run(BASE),
        _run({**BASE, "pub2>sub1": 4.4}),
        _run({**BASE, "pub2>sub1": 8.0}),
        _run({**BASE, "pub2>sub1": 8.8}),
    ]
    got = floor(runs, repeats=3)
    assert got is not None and (got["repeats"], got["splits"]) == (2, 6)
    # The pair's error per split, the median of one set against the other's:
    # {0,1} vs {2,3}: 4.2 / 8.4 (50 %); {2,3} vs {0,1}: 100 %; {0,2} vs {1,3}: 6.0 / 6.6;
    # {1,3} vs {0,2}: 6.6 / 6.0; {0,3} vs {1,2}: 6.4 / 6.2; {1,2} vs {0,3}: 6.2 / 6.4.
    errors = sorted(
        [50.0, 100.0, 100 * (1 - 6.0 / 6.6), 10.0, 100 * (6.4 / 6.2 - 1), 100 * (1 - 6.2 / 6.4)]
    )
    worst = got["worst_err_%"]
    assert worst["min"] == pytest.approx(errors[0]) and worst["max"] == pytest.approx(100.0)
    assert worst["median"] == pytest.approx((errors[2] + errors[3]) / 2)
    # The other pairs are exact: the mean over the three pairs is a third of the worst.
    assert got["mean_err_%"]["max"] == pytest.approx(100.0 / 3)
    # The mixed splits lie inside the two measured values (interval and spread alike
    # with two replays); the two splits of fast against slow do not.
    for share in (got["inside_ci"], got["within_spread"]):
        assert share == {"median": 1.0, "min": pytest.approx(2 / 3), "max": 1.0}


def test_too_few_rounds_have_no_floor_and_the_table_leaves_it_out() -> None:
    runs = [_run(BASE), _run(BASE, 1.1)]
    assert floor(runs, repeats=3) is None
    result = {"modes": {"process": {"runs": runs, "summary": summary(runs), "floor": None}}}
    text = table(result)
    assert "run-to-run variation" in text and "a perfect model" not in text
    # Two replays 10 % apart: every pair's CV is that of (1, 1.1).
    assert summary(runs)["pair_cv"]["median"] == pytest.approx(0.0673, abs=1e-4)


def test_the_table_shows_the_floor_per_mode() -> None:
    runs = [_run(BASE, s) for s in (1.0, 1.02, 0.98, 1.01, 0.99, 1.03)]
    result = {
        "modes": {"process": {"runs": runs, "summary": summary(runs), "floor": floor(runs, 3)}}
    }
    text = table(result)
    assert "a perfect model, median (range) over splits (3 against 3)" in text
    assert "| latency error over pairs, worst |" in text


def test_summarize_computes_a_result_file_again_from_its_replays(tmp_path: Path) -> None:
    from bench.reproducibility import main

    runs = [_run(BASE, s) for s in (1.0, 1.02, 0.98, 1.01, 0.99, 1.03)]
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"benchmark": "x", "modes": {"process": {"runs": runs}}}))
    assert main(["--summarize", str(path)]) == 0
    again = json.loads(path.read_text())
    mode = again["modes"]["process"]
    assert mode["runs"] == runs and again["benchmark"] == "x"
    assert mode["summary"] == summary(runs) and mode["floor"] == floor(runs, 3)
