"""bench.wakeup --against: the two checkouts alternate, CPU per event is paired round
by round per system and rate, and a run that fails is reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import wakeup
from bench.common import REPO


def _run(hop_400: float | None, relay_400: float = 120.0) -> dict[str, Any]:
    """A `bench.wakeup` result whose hop and relay needed these CPU us per event at
    400/s (hop None: not measured), and 50 us each at 2000/s."""
    hop = {"2000": {"cpu_us_per_event": 50.0}}
    if hop_400 is not None:
        hop["400"] = {"cpu_us_per_event": hop_400}
    relay = {"400": {"cpu_us_per_event": relay_400}, "2000": {"cpu_us_per_event": 50.0}}
    return {"systems": {"relay": relay, "hop": hop}}


def test_cpu_per_event_is_paired_round_by_round_per_system_and_rate() -> None:
    ours = [_run(90.0, 130.0), _run(100.0), _run(110.0)]
    theirs = [_run(100.0, 100.0), _run(100.0), _run(100.0)]
    by = {(p["system"], p["rate"]): p for p in wakeup.pairs(ours, theirs)}
    assert sorted(by) == [("hop", "2000"), ("hop", "400"), ("relay", "2000"), ("relay", "400")]
    hop = by["hop", "400"]
    assert hop["paired"] == [0.9, 1.0, 1.1]
    assert (hop["median"], hop["median_against"], hop["lower_in"]) == (100.0, 100.0, 1)
    assert hop["paired_range"] == [0.9, 1.1]
    assert by["relay", "400"]["paired"] == [1.3, 1.0, 1.0]
    assert by["hop", "2000"]["paired"] == [1.0, 1.0, 1.0]


def test_a_rate_missing_from_a_run_is_left_out() -> None:
    pairs = wakeup.pairs([_run(90.0), _run(None)], [_run(100.0), _run(100.0)])
    assert ("hop", "400") not in {(p["system"], p["rate"]) for p in pairs}
    assert len(pairs) == 3


def test_the_checkouts_alternate_which_runs_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[Path] = []

    def run_once(checkout: Path, quick: bool, out: Path) -> dict[str, Any]:
        order.append(checkout)
        return _run(100.0)

    monkeypatch.setattr(wakeup, "run_once", run_once)
    runs = wakeup.compare(tmp_path, 3, quick=True)
    assert order == [REPO, tmp_path, tmp_path, REPO, REPO, tmp_path]
    assert [[run["repetition"] for run in side] for side in runs.values()] == [[0, 1, 2]] * 2


def test_a_failing_run_is_reported(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()  # a checkout whose code cannot run the benchmark
    (tmp_path / "bench" / "__init__.py").write_text("raise ImportError('not a checkout')\n")
    why = r"(?s)bench.wakeup from .* exited with 1: .*ImportError: not a checkout"
    with pytest.raises(RuntimeError, match=why):
        wakeup.run_once(tmp_path, True, tmp_path / "out.json")
