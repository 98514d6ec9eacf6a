"""`python -m bench`'s command line: where a run's result goes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import bench.__main__ as bench_main
import bench.common


def test_name_keeps_a_run_beside_the_latest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench.common, "RESULTS_DIR", tmp_path)

    def matching_run(sizes: list[int], reps: int) -> dict[str, Any]:
        return {"sizes": sizes, "reps": reps}

    monkeypatch.setattr(bench_main.matching, "run", matching_run)
    monkeypatch.setattr(bench_main, "unwind_on_termination", lambda: None)  # pytest's SIGTERM
    assert bench_main.main(["--quick", "--only", "matching", "--name", "one_cpu-1"]) == 0
    written = json.loads((tmp_path / "one_cpu-1.json").read_text())
    assert written["results"]["matching"] == {"sizes": [1_000, 10_000], "reps": 1}
    assert written["machine"]["cpus_allowed"]
    assert not (tmp_path / "latest.json").exists()


@pytest.mark.parametrize("name", ["../latest", "a/b", "", "x.json"])
def test_a_name_that_is_not_a_plain_stem_is_refused(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench_main.main(["--only", "matching", "--name", name])
    assert exit_.value.code == 2
    assert "is not a result name" in capsys.readouterr().err
