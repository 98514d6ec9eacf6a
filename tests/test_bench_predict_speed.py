"""bench.predict_speed: `hop predict` timed as whole commands on a short replay."""

from __future__ import annotations

import pytest

from bench import predict_speed
from broker.local_network import REPO

# Real replays and predictions, about a minute: make soak runs it.
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_each_command_is_timed_on_a_short_replay() -> None:
    result = predict_speed.run(REPO / "topologies" / "tree7.toml", seconds=2.0, repeats=1)
    assert set(result["seconds"]) == set(predict_speed.COMMANDS)
    for name, values in result["seconds"].items():
        assert len(values) == 1 and values[0] > 0
        assert result["median_s"][name] == values[0]
    assert result["target_met"] == (result["median_s"]["sim"] < predict_speed.LIMIT_S)
