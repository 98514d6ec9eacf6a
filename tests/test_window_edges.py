"""The measurement window [start, end) is the same for the model's inputs
(`monitor.characterize`) and for what a replay measured (`monitor.measured`): an event
published exactly at the window's start counts, one published exactly at its end does
not, in both."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from monitor.characterize import characterize
from monitor.measured import in_measurement, in_window
from tests.test_analysis import EVENTS, E, Event, S, hop, write_run

AT_START = Event("pubB:10", "pubB", S, [hop("3", "client:pubB", deliver="sub3a")])
AT_END = Event("pubB:11", "pubB", E, [hop("3", "client:pubB", deliver="sub3a")])


def _run(tmp_path: Path) -> Path:
    run = write_run(tmp_path / "run", [*EVENTS, AT_START, AT_END])
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["host"] = {"cores": 2}
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def test_the_window_includes_its_start_and_excludes_its_end() -> None:
    times = pd.Series([S - 1, S, E - 1, E, E + 1])
    assert in_measurement(times, S, E).tolist() == [False, True, True, False, False]


def test_characterize_and_measured_count_the_same_events(tmp_path: Path) -> None:
    run = _run(tmp_path)
    char = characterize(run)
    throughput, latency = in_window(run)
    window_s = (E - S) / 1e9
    # pubB published pubB:1 and pubB:10 in the window (pubB:2 and pubB:11 after it).
    assert round(char.rates["pubB"] * window_s) == 2
    assert round(char.rates["pubA"] * window_s) == 3
    # Broker 3 saw pubA:1, pubA:3, pubB:1 and pubB:10 of them.
    assert round(throughput["3"] * window_s) == 4
    assert (char.service_ns["3"].size, char.service_ns["4"].size) == (4, 4)
    # Deliveries: pubA:1 3, pubA:2 1, pubA:3 2; pubB:1 3, pubB:10 1.
    assert latency.groupby("publisher").size().to_dict() == {"pubA": 6, "pubB": 4}
