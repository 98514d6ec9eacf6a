"""`bench.demo`'s steps (a Makefile target run, timed, reported, stopped) and summary,
on Makefiles of the test's own instead of the repository's."""

from __future__ import annotations

from pathlib import Path

import pytest

import bench.demo
from bench.demo import last_lines, run_step, summarize
from tests.processes import running_after


def makefile(folder: Path, recipes: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{target}:\n\t{recipe}\n" for target, recipe in recipes.items())
    (folder / "Makefile").write_text(text)
    return folder


def test_a_step_is_timed_and_its_output_kept(tmp_path: Path) -> None:
    clone = makefile(tmp_path / "clone", {"demo": "@sleep 0.3; echo report at runs/x; echo ok"})
    log = tmp_path / "make.log"
    seconds = run_step("demo", clone, log)
    assert 0.3 <= seconds < 30
    assert last_lines(log, 2) == "report at runs/x\nok"


def test_a_failed_step_is_named_with_the_end_of_its_output(tmp_path: Path) -> None:
    clone = makefile(tmp_path / "clone", {"setup": "@echo pip could not install; exit 3"})
    with pytest.raises(RuntimeError, match=r"make setup exited with 2") as failed:
        run_step("setup", clone, tmp_path / "make.log")
    assert "pip could not install" in str(failed.value)


def test_a_step_over_its_time_is_stopped_with_what_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clone = makefile(tmp_path / "clone", {"demo": "sleep 60 & echo $$! > child.pid; wait"})
    monkeypatch.setattr(bench.demo, "STEP_TIMEOUT_S", 1.0)
    with pytest.raises(RuntimeError, match=r"make demo ran over 1.0 s"):
        run_step("demo", clone, tmp_path / "make.log")
    child = int((clone / "child.pid").read_text())
    assert running_after([child], 10) == []


def test_the_summary_gives_each_steps_median_and_range() -> None:
    runs = [
        {"setup_s": 60.0, "demo_s": 200.0, "total_s": 260.0},
        {"setup_s": 70.0, "demo_s": 180.0, "total_s": 250.0},
        {"setup_s": 65.0, "demo_s": 240.0, "total_s": 305.0},
    ]
    assert summarize(runs) == {
        "setup_s": {"median": 65.0, "range": [60.0, 70.0]},
        "demo_s": {"median": 200.0, "range": [180.0, 240.0]},
        "total_s": {"median": 260.0, "range": [250.0, 305.0]},
    }
