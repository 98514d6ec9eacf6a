"""`bench.replay_cost`: a replay timed whole (its process tree's CPU included), a failed
one named, and the pairing of two checkouts' rounds."""

from __future__ import annotations

import pytest

from bench.replay_cost import compare, replay_once
from broker.local_network import REPO


@pytest.mark.integration
def test_a_replay_is_timed_with_the_cpu_of_every_process_it_started() -> None:
    run = replay_once(REPO, "tree7", None, 0.5)
    assert run["wall_s"] > 0.5
    # 7 brokers, 7 trace writers, 12 client processes and the two fork servers that
    # started them, all counted: far more than the replay command's own CPU, which is
    # all a wait for the command alone would count.
    assert 0 < run["cpu_command_s"] < run["wall_s"]
    assert run["cpu_s"] > 2 * run["cpu_command_s"]


def test_a_failed_replay_is_reported_with_the_end_of_its_output() -> None:
    with pytest.raises(RuntimeError, match=r"hop replay from .* failed: .*no-such-study"):
        replay_once(REPO, "no-such-study", None, 0.5)


def test_two_checkouts_are_compared_round_by_round() -> None:
    ours = [
        {"repetition": 0, "wall_s": 20.0, "cpu_s": 30.0},
        {"repetition": 1, "wall_s": 18.0, "cpu_s": 28.0},
        {"repetition": 2, "wall_s": 27.0, "cpu_s": 36.0},
    ]
    against = [
        {"repetition": 0, "wall_s": 25.0, "cpu_s": 40.0},
        {"repetition": 1, "wall_s": 24.0, "cpu_s": 35.0},
        {"repetition": 2, "wall_s": 25.0, "cpu_s": 45.0},
    ]
    wall = compare(ours, against)["wall_s"]
    assert wall["median"] == 20.0 and wall["median_against"] == 25.0
    assert wall["paired"] == [0.8, 0.75, 1.08]
    assert wall["paired_median"] == 0.8 and wall["paired_range"] == [0.75, 1.08]
    assert wall["lower_in"] == 2
    assert wall["sign_test_p"] == 1.0
    assert compare(ours, against)["cpu_s"]["lower_in"] == 3
