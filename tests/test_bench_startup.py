"""`python -m bench.startup` times a network's start, untraced and traced, and whole
`hop` commands against a running broker."""

from __future__ import annotations

import pytest

from bench import startup
from bench.common import REPO

pytestmark = pytest.mark.integration


def test_one_repetition_times_both_kinds_of_start() -> None:
    result = startup.run(["tree7"], reps=1)
    assert set(result["median_s"]) == {"tree7, untraced", "tree7, traced"}
    for key, values in result["seconds"].items():
        assert len(values) == 1 and 0 < values[0] < 20  # wait_listening's own limit
        assert result["median_s"][key] == values[0]


def test_commands_run_from_each_checkout_in_turn_against_a_running_broker() -> None:
    """The commands must succeed (a failed one raises): a broker answered them."""
    result = startup.run_commands({"this": REPO, "baseline": REPO}, reps=2)
    assert set(result["seconds"]) == {"this", "baseline"}
    for runs in result["seconds"].values():
        assert set(runs) == {"pub", "stats"}
        assert all(len(values) == 2 and min(values) > 0 for values in runs.values())
    assert set(result["ratio_to_baseline"]) == {"pub", "stats"}
    assert all(len(ratios) == 2 for ratios in result["ratio_to_baseline"].values())
