"""bench.routing_loop: both checkouts' harnesses at once, a worktree of the other
revision made and removed, and a harness that fails is reported."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench import routing_loop
from bench.common import REPO


def test_a_short_comparison_with_this_revision(tmp_path: Path) -> None:
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    name = str(tmp_path / "routing_loop")
    routing_loop.main(["--against", "HEAD", "--rounds", "2", "--events", "3000", "--reps", "1",
                       "--name", name])  # fmt: skip
    result = json.loads(Path(name + ".json").read_text())
    assert result["against"] == head
    assert [r["ours_core"] for r in result["rounds"]] == [0, 1]  # swapped each round
    for r in result["rounds"]:
        assert r["ours_us"] > 0 and r["theirs_us"] > 0
        assert r["ratio"] == pytest.approx(r["ours_us"] / r["theirs_us"], abs=2e-3)
    assert result["ratio_range"][0] <= result["ratio_median"] <= result["ratio_range"][1]
    worktrees = subprocess.run(
        ["git", "worktree", "list"], cwd=REPO, capture_output=True, text=True
    ).stdout
    assert str(tmp_path) not in worktrees and "against" not in worktrees  # removed


def test_a_failing_harness_is_reported(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()  # a checkout whose code cannot run the harness
    (tmp_path / "bench" / "__init__.py").write_text("raise ImportError('not a checkout')\n")
    with pytest.raises(RuntimeError, match="the harness exited"):
        routing_loop.compare(REPO, tmp_path, rounds=1, events=100, reps=1)
