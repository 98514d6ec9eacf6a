"""bench.common: a result names the code it measured, and the files that differed
from that code's revision; rounds alternate the order of the systems."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.common import (
    alternating,
    machine_info,
    modified_files,
    p_text,
    paired_cost,
    paired_cost_text,
    short_revision,
    sign_test_p,
)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_checkout_names_its_revision_and_its_modified_files(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "kept.py").write_text("a = 1\n")
    (tmp_path / "changed.py").write_text("b = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    assert short_revision(tmp_path) == _git(tmp_path, "rev-parse", "--short", "HEAD")
    assert modified_files(tmp_path) == []
    (tmp_path / "changed.py").write_text("b = 2\n")
    (tmp_path / "untracked.py").write_text("c = 1\n")  # not the revision's code either way
    assert modified_files(tmp_path) == ["changed.py"]


def test_outside_a_checkout_git_cannot_say(tmp_path: Path) -> None:
    assert short_revision(tmp_path) == ""
    assert modified_files(tmp_path) is None


def test_every_result_records_the_modified_files() -> None:
    info = machine_info()
    assert info["git_revision"]
    assert isinstance(info["git_modified"], list)


def test_rounds_alternate_the_order_of_the_systems() -> None:
    assert list(alternating(3, ("a", "b", "c"))) == [
        (0, "a"), (0, "b"), (0, "c"),
        (1, "c"), (1, "b"), (1, "a"),
        (2, "a"), (2, "b"), (2, "c"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("wins", "n", "p"),
    [
        (21, 30, 0.0428),  # the exact binomial tails, to four places
        (22, 30, 0.0161),
        (25, 30, 0.000325),
        (20, 30, 0.0987),
        (15, 30, 1.0),
        (0, 5, 0.0625),
        (5, 5, 0.0625),
        (11, 12, 0.00635),
    ],
)
def test_the_sign_test_gives_the_two_sided_binomial_tail(wins: int, n: int, p: float) -> None:
    assert sign_test_p(wins, n) == pytest.approx(p, rel=2e-3)
    assert sign_test_p(n - wins, n) == sign_test_p(wins, n)  # either way lopsided


def test_a_sign_test_of_nothing_proves_nothing() -> None:
    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(1, 1) == 1.0  # one toss cannot be lopsided enough


def test_p_values_read_as_the_docs_quote_them() -> None:
    assert p_text(0.0428) == "p = 0.043"
    assert p_text(1.0) == "p = 1"
    assert p_text(0.00002) == "p < 0.0001"


def test_a_paired_cost_and_how_it_is_printed() -> None:
    """Runs paired by repetition; a run without the value leaves the cost out."""
    ours = [{"repetition": 0, "cpu": 90.0}, {"repetition": 1, "cpu": 110.0}]
    theirs = [{"repetition": 1, "cpu": 100.0}, {"repetition": 0, "cpu": 100.0}]
    cost = paired_cost(ours, theirs, lambda run: run.get("cpu"))
    assert cost is not None
    assert (cost["paired"], cost["lower_in"], cost["median"]) == ([0.9, 1.1], 1, 100.0)
    assert paired_cost_text(cost) == "paired 1.000 (0.9-1.1), lower in 1 of 2 (p = 1)"
    assert paired_cost(ours, [{"repetition": 0}, *theirs[:1]], lambda run: run.get("cpu")) is None
