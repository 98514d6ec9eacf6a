"""`python -m bench.startup` times a network's start, untraced and traced."""

from __future__ import annotations

import pytest

from bench import startup

pytestmark = pytest.mark.integration


def test_one_repetition_times_both_kinds_of_start() -> None:
    result = startup.run(["tree7"], reps=1)
    assert set(result["median_s"]) == {"tree7, untraced", "tree7, traced"}
    for key, values in result["seconds"].items():
        assert len(values) == 1 and 0 < values[0] < 20  # wait_listening's own limit
        assert result["median_s"][key] == values[0]
