"""bench.rate_response: short replays at two rates give each stage's mean and each
publisher's latency per run, in the order asked."""

from __future__ import annotations

import pytest

from bench import rate_response
from broker.local_network import REPO

# Real replays at two rates, about half a minute: make soak runs it.
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_two_short_replays_are_characterized_in_order() -> None:
    result = rate_response.run(REPO / "topologies" / "tree7.toml", [2.0, 1.0], seconds=4.0)
    assert [r["scale"] for r in result["runs"]] == [2.0, 1.0]
    for row in result["runs"]:
        assert row["link"] > 0 and row["publish"] > 0 and row["deliver"] > 0
        assert row["service_mean_us"] > 0
        assert 0 < row["busy_cores"] <= 2 and row["cpu_ms_per_event"] > 0
        assert set(row["latency_ms"]) == {"pub1", "pub2", "pub3", "pub4"}
        assert all(v > 0 for v in row["latency_ms"].values())
    # One run per scale: each median is that run's figure.
    assert set(result["medians"]) == {1.0, 2.0}
    for row in result["runs"]:
        medians = result["medians"][row["scale"]]
        assert medians == {stage: row[stage] for stage in medians}
        assert set(medians) >= {"link", "publish", "deliver", "busy_cores"}
        services = [v for k, v in row.items() if k.startswith("service ")]
        assert len(services) == 7  # one per broker of tree7
        assert row["service_mean_us"] == pytest.approx(sum(services) / len(services), abs=0.1)
