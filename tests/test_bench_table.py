"""`python -m bench.table` renders benchmark results as the tables of docs/performance.md."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from bench.common import read_result
from bench.table import main, render, render_runs
from bench.targets import targets

REPO = Path(__file__).resolve().parent.parent
RUNS_HEAD = "| result file | machine | revision | written (UTC) | 1-to-1 over amqtt's"


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


def test_full_runs_are_set_side_by_side_oldest_first(tmp_path: Path) -> None:
    older, newer = datetime(2000, 1, 1, 8, 30), datetime(2000, 1, 2, 9, 45)

    def run(written: datetime, cpu: str, hop_us: float, cost: float) -> dict[str, object]:
        return {
            "machine": {"date": f"{written:%Y-%m-%dT%H:%M:%S}Z", "cpu_model": cpu,
                        "git_revision": "r1"},
            "results": {
                "chain": {"hop": {"per_hop_us": hop_us}, "relay": {"per_hop_us": 120.0}},
                "memory": {"subscriptions": {"rss_mb": 198.8}},
                "tracing_overhead": {"throughput_cost_percent": cost},
            },
        }  # fmt: skip

    new_file, old_file = tmp_path / "full_new.json", tmp_path / "full_old.json"
    new_file.write_text(json.dumps(run(newer, "Intel(R) Xeon(R) Processor", 100.4, 6.0)))
    old_file.write_text(json.dumps(run(older, "AMD EPYC", 130.0, 4.0)))
    lines = render_runs([new_file, old_file]).splitlines()
    assert lines[0].startswith(RUNS_HEAD)
    assert lines[2:] == [
        f"| `full_old.json` | AMD EPYC | r1 | {older:%Y-%m-%d %H:%M} | n/a | n/a | n/a | n/a "
        "| 130 / 120 | 199 | 4.0 % |",
        f"| `full_new.json` | Intel Xeon | r1 | {newer:%Y-%m-%d %H:%M} | n/a | n/a | n/a | n/a "
        "| 100 / 120 | 199 | 6.0 % |",
    ]


def test_the_docs_broker_tables_are_the_tools_output_for_the_committed_files() -> None:
    """docs/performance.md's table of the latest full run and its table of every full
    run are what `python -m bench.table` prints for the files they name."""
    doc = (REPO / "docs" / "performance.md").read_text()
    results = REPO / "bench" / "results"
    runs = next(block for block in doc.split("\n\n") if block.startswith(RUNS_HEAD))
    files = [line.split("`")[1] for line in runs.splitlines()[2:]]
    assert len(files) >= 2
    assert render_runs([results / name for name in files]) in doc
    written = [read_result(results / name) for name in files]
    result = max(written, key=lambda run: run["machine"]["date"])
    result["targets"] = targets(result["results"])
    assert render(result).split("\n", 2)[2] in doc  # the tables, without the run's line


def test_a_file_that_is_not_a_result_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = tmp_path / "full_cut.json"
    cut.write_text('{"machine": {"date": ')  # cut short, as by a full disk
    gone = tmp_path / "full_gone.json"
    for argv, named in (
        (["--runs", str(cut)], "full_cut.json: not JSON"),
        ([str(cut)], "full_cut.json: not JSON"),
        (["--runs", str(gone)], "full_gone.json"),
    ):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
        assert named in capsys.readouterr().err
