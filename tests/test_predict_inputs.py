"""What `hop predict` hands the model from a characterization: delays by link, home
broker, subscriber and (publisher, subscriber) pair; and the target workloads, rates
and options it refuses, naming them (monitor.predict)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from broker.local_network import REPO
from monitor.characterize import Characterization
from monitor.errors import InputError
from monitor.predict import (
    KEYED_MIN_SAMPLES,
    Target,
    build_network,
    predict,
    target_workload,
    warmed,
)
from monitor.warmth import matched
from tests.test_carry import run
from topologies import PublisherSpec, Scenario, load_case_study, study_path, to_toml

TREE = ((("1", "2"),), (("2", ("sub1",)),))  # pub1 at broker 1, forwarded to 2, delivered


def two_links() -> Characterization:
    """A run whose link samples are 1 us on 1->2 and 1 ms on 2->1, a few (fewer than
    `KEYED_MIN_SAMPLES`) 50 us on 1->3, with idle gaps spread over each."""
    char = run(45.0, brokers=("1", "2", "3"))
    n = len(char.link_delay_ns)
    few = KEYED_MIN_SAMPLES - 1
    sender = np.array(["1"] * (n // 2) + ["2"] * (n - n // 2 - few) + ["1"] * few)
    receiver = np.array(["2"] * (n // 2) + ["1"] * (n - n // 2 - few) + ["3"] * few)
    delay = np.where(sender == "1", 1e3, 1e6)
    delay[receiver == "3"] = 5e4
    return dataclasses.replace(
        char,
        trees={"pub1": [(1.0, TREE)], "pub2": [(1.0, TREE)]},
        home={"pub1": "1", "pub2": "1"},
        link_delay_ns=delay,
        link_sender=sender,
        link_broker=receiver,
        link_gap_ns=np.random.default_rng(1).exponential(1e7, n),
    )


def test_each_link_with_enough_samples_gets_its_own() -> None:
    char = two_links()
    target = Target(char.rates, {"pub1": "poisson", "pub2": "poisson"}, same_as_run=True)
    network = build_network(char, target)
    assert set(network.link_delays_ns) == {("1", "2"), ("2", "1")}  # not the few on 1->3
    assert np.all(network.link_samples("1", "2") == 1e3)
    assert np.all(network.link_samples("2", "1") == 1e6)
    assert np.array_equal(network.link_samples("1", "3"), char.link_delay_ns)  # pooled
    assert set(network.deliver_delays_ns) == {"sub1", ("pub1", "sub1")}
    assert set(network.publish_delays_ns) == {"1"}


def test_redrawn_by_idle_gaps_a_link_keeps_its_own_samples() -> None:
    char = two_links()
    faster = {p: 3 * r for p, r in char.rates.items()}
    drawn = warmed(char, Target(faster, {}, same_as_run=False))
    for sender, value in (("1", 1e3), ("2", 1e6)):
        rows = (char.link_sender == sender) & (char.link_broker != "3")
        assert np.all(drawn.link_delay_ns[rows] == value)
        # drawn from all links alike, the rows would get the other link's delays
        pooled = matched(char.link_delay_ns, char.link_gap_ns, 3.0, np.random.default_rng(1))
        assert np.any(pooled[rows] != value)


# -- what hop predict refuses -------------------------------------------------------------

TREE7 = REPO / "topologies" / "tree7.toml"
RATES = {"1": 20.0, "2": 10.0, "3": 10.0, "4": 5.0}  # tree7's, as its manifest has them


def tree7_run(folder: Path, manifest: dict[str, Any]) -> Characterization:
    """A characterization of a tree7 run in `folder` (its case study copied there, as
    `hop replay` does) whose manifest is `manifest`."""
    shutil.copy(TREE7, folder / "case_study.toml")
    return dataclasses.replace(run(45.0), run_dir=folder, manifest=manifest)


@pytest.mark.parametrize(
    ("rates", "said"),
    [
        ("fast", 'rates must be a table (a JSON object), got "fast"'),
        ({**RATES, "1": -5}, "rates.1 must be a finite number at least 0, got -5"),
        ({**RATES, "2": "x"}, 'rates.2 must be a finite number at least 0, got "x"'),
        ({"pub1": 20.0}, 'rates has the key "pub1", not a publisher id'),
    ],
)
def test_the_runs_rates_in_its_manifest_are_checked(
    tmp_path: Path, rates: object, said: str
) -> None:
    char = tree7_run(tmp_path, {"rates": rates})
    with pytest.raises(InputError) as refused:
        target_workload(char, None, "double")
    assert str(refused.value) == f"{tmp_path / 'manifest.json'}: {said}"
    # as hop replay writes them, the run's rates are the target by default
    own = target_workload(dataclasses.replace(char, manifest={"rates": RATES}), None, None)
    assert own.rates == {"pub1": 20.0, "pub2": 10.0, "pub3": 10.0, "pub4": 5.0}
    assert own.same_as_run


def test_the_runs_copy_may_name_secret_files_this_host_lacks(tmp_path: Path) -> None:
    char = tree7_run(tmp_path, {"rates": RATES})
    copy = tmp_path / "case_study.toml"
    copy.write_text('auth_secret_file = "/on/the/lab/host/secret"\n' + copy.read_text())
    assert target_workload(char, None, None).rates == target_workload(char, TREE7, None).rates


PUBLISHERS = load_case_study(TREE7).publishers


def _publishers(**changes: Any) -> dict[int, PublisherSpec]:
    """tree7's publishers, publisher 1 with `changes` (its key follows its id)."""
    first = dataclasses.replace(PUBLISHERS[1], **changes)
    return {first.id: first, **{k: p for k, p in PUBLISHERS.items() if k != 1}}


@pytest.mark.parametrize(
    ("workload", "said"),
    [
        ("siena15", "brokers not in the run: 8, 9, 10, 11, 12, 13, 14, 15"),
        ({"publishers": {}, "scenarios": {}}, "the run's publishers missing: 1, 2, 3, 4"),
        ({"publishers": _publishers(id=9), "scenarios": {}}, "publishers not in the run: 9"),
        ({"publishers": _publishers(broker=5)}, "publisher 1: broker 5 here, 4 in the run"),
        ({"subscribers": {}}, "the run's subscribers missing: 1, 2, 3, 4, 5, 6, 7, 8"),
    ],
)
def test_a_workload_of_another_network_than_the_runs_is_refused_naming_the_difference(
    tmp_path: Path, workload: str | dict[str, Any], said: str
) -> None:
    """The model is the run's network: a workload file gives it rates, not brokers or
    clients it has no trees, service times or delays for."""
    char = tree7_run(tmp_path, {"rates": RATES})
    if isinstance(workload, str):
        study = study_path(workload)
    else:  # tree7 with these CaseStudy fields changed
        study = tmp_path / "workload.toml"
        study.write_text(to_toml(dataclasses.replace(load_case_study(TREE7), **workload)))
    with pytest.raises(InputError) as refused:
        target_workload(char, study, None)
    assert str(refused.value).startswith(f"{study}: {said} (the run's case study: ")
    # the run's own network, at other rates, is a workload it predicts
    assert target_workload(char, TREE7, "skewed").rates["pub1"] == 40.0


@pytest.mark.parametrize("measured_rates", [False, True])
def test_a_rate_scale_that_makes_the_rates_infinite_is_refused(
    tmp_path: Path, measured_rates: bool
) -> None:
    char = tree7_run(tmp_path, {"rates": RATES})
    with pytest.raises(InputError, match=r"rate scale 1e\+308 is too large"):
        target_workload(char, None, None, 1e308, measured_rates)


def test_a_workload_that_publishes_nothing_is_refused(tmp_path: Path) -> None:
    """A simulation of no events has nothing to say: the user's scenario is named."""
    char = tree7_run(tmp_path, {"rates": RATES})
    study = load_case_study(TREE7)
    off = Scenario("off", 1.0, {p: 0.0 for p in study.publishers})
    workload = tmp_path / "off.toml"
    workload.write_text(to_toml(dataclasses.replace(study, scenarios={"off": off})))
    with pytest.raises(InputError) as refused:
        target_workload(char, workload, "off")
    said = f"{workload}, scenario 'off': every publisher's rate is 0: there is nothing to predict"
    assert str(refused.value) == said
    silent = dataclasses.replace(char, rates={p: 0.0 for p in char.rates})
    with pytest.raises(InputError, match="its publishers published nothing in the measurement"):
        target_workload(silent, None, None, measured_rates=True)


def test_an_unknown_trend_is_refused_without_other_runs(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown trend 'bogus'"):
        predict(tmp_path, trend="bogus")  # before the run folder (empty here) is read
