"""The performance model: operational analysis and simulation against queueing theory.

Simulations stop on precision (or a generous wall-clock limit), so their results
do not depend on the machine's speed; each check allows the larger of the 95 %
confidence interval and 3 %.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from monitor.model import (
    EventClass,
    Host,
    Network,
    Station,
    Tree,
    analyze,
    simulate,
    visit_ratios,
)
from monitor.model.simulation import SimulationResult, t975

MS = 1e6  # one millisecond in ns
WALL = 60.0  # the wall-clock limit for simulations that must stop on precision


@pytest.fixture(scope="module")
def exp_ms() -> np.ndarray:
    """200k exponential service times with mean about 1 ms."""
    return np.random.default_rng(42).exponential(MS, 200_000)


def rate_for(utilization: float, service_ns: float) -> float:
    """Events per second that load a station of mean service `service_ns` to `utilization`."""
    return utilization * 1e9 / service_ns


def close(measured: float, expected: float, ci: float, rel: float = 0.03) -> bool:
    """`measured` is within its CI half-width, or within `rel`, of `expected`."""
    return abs(measured - expected) <= max(ci, rel * abs(expected))


def chain(*stations: str, subscriber: str = "sub") -> Tree:
    """A path through `stations`, delivering to `subscriber` at the last."""
    return Tree(
        stations[0],
        children={a: [b] for a, b in zip(stations, stations[1:], strict=False)},
        deliveries={stations[-1]: [subscriber]},
    )


def single_station(samples: np.ndarray, utilization: float, arrival: str = "poisson") -> Network:
    rate = rate_for(utilization, float(samples.mean()))
    return Network(
        stations=[Station("a", "h", samples)],
        hosts=[Host("h", cores=1)],
        classes=[EventClass("c", rate, arrival, [(1.0, chain("a"))])],
    )


def two_on_one_host(samples: np.ndarray, cores: float) -> Network:
    """Two stations on one host, each at 40 % load from its own Poisson publisher."""
    rate = rate_for(0.4, float(samples.mean()))
    return Network(
        stations=[Station("a", "h", samples), Station("b", "h", samples)],
        hosts=[Host("h", cores=cores)],
        classes=[
            EventClass("ca", rate, "poisson", [(1.0, chain("a", subscriber="sa"))]),
            EventClass("cb", rate, "poisson", [(1.0, chain("b", subscriber="sb"))]),
        ],
    )


def hierarchical_tree(leaf: int, wants: dict[int, list[str]]) -> Tree:
    """SIENA's hierarchical routing in a 15-broker binary tree (children of n: 2n, 2n+1):
    an event published at `leaf` climbs to the root and, from every broker on the way,
    descends into the subtrees with subscribers that want it (`wants`: leaf -> them)."""
    up = [leaf]
    while up[-1] > 1:
        up.append(up[-1] // 2)
    children: dict[str, list[str]] = {f"b{a}": [f"b{b}"] for a, b in zip(up, up[1:], strict=False)}
    deliveries = {f"b{n}": subs for n, subs in wants.items() if subs}

    def wanted(n: int) -> bool:
        return bool(wants[n]) if n >= 8 else wanted(2 * n) or wanted(2 * n + 1)

    def down(n: int) -> None:
        for c in (2 * n, 2 * n + 1) if n < 8 else ():
            if c not in up and wanted(c):
                children.setdefault(f"b{n}", []).append(f"b{c}")
                down(c)

    for n in up:
        down(n)
    return Tree(f"b{leaf}", children, deliveries)


def binary_tree_network(cores: float, seed: int = 0, trees_per_publisher: int = 20) -> Network:
    """The thesis' case study shape: 15 brokers in a binary tree, a publisher on each of
    the 8 leaves (94.7 events/s in all), 2 subscribers per leaf each wanting an event
    with probability 0.3, hierarchical routing, gamma service times of mean 1 ms, all
    brokers on one host."""
    rng = np.random.default_rng(seed)
    stations = [Station(f"b{j}", "h", rng.gamma(2.0, MS / 2, 5000)) for j in range(1, 16)]
    classes = []
    for leaf in range(8, 16):
        trees = [
            (
                1 / trees_per_publisher,
                hierarchical_tree(
                    leaf,
                    {n: [f"s{n}.{i}" for i in (1, 2) if rng.random() < 0.3] for n in range(8, 16)},
                ),
            )
            for _ in range(trees_per_publisher)
        ]
        classes.append(EventClass(f"p{leaf - 7}", 94.7 / 8, "poisson", trees))
    return Network(
        stations,
        [Host("h", cores)],
        classes,
        link_delay_ns=rng.exponential(0.1 * MS, 1000),
        publish_delay_ns=0.1 * MS,
        deliver_delay_ns=rng.exponential(0.2 * MS, 1000),
    )


# ---- M/M/1


@pytest.mark.parametrize("utilization", [0.5, 0.8])
def test_mm1_operational_is_exact(exp_ms: np.ndarray, utilization: float) -> None:
    s = float(exp_ms.mean())
    result = analyze(single_station(exp_ms, utilization))
    station = result.stations["a"]
    assert station.utilization == pytest.approx(utilization, rel=1e-12)
    assert station.service_ns == pytest.approx(s, rel=1e-12)
    assert station.response_ns == pytest.approx(s / (1 - utilization), rel=1e-12)
    assert result.latency_ns[("c", "sub")] == pytest.approx(s / (1 - utilization), rel=1e-12)
    assert result.bottleneck == "a"
    assert result.saturated_hosts == []


@pytest.mark.parametrize("utilization", [0.5, 0.8])
def test_mm1_simulation_matches_theory(exp_ms: np.ndarray, utilization: float) -> None:
    s = float(exp_ms.mean())
    network = single_station(exp_ms, utilization)
    result = simulate(network, seed=7, max_wall_s=WALL)
    assert result.stop_reason == "precision"
    assert result.max_relative_ci <= 0.02
    station = result.stations["a"]
    assert close(station.response_ns, s / (1 - utilization), station.response_ci_ns)
    assert close(station.utilization, utilization, station.utilization_ci)
    assert close(station.throughput, network.classes[0].rate_per_s, station.throughput_ci)
    assert station.busy == pytest.approx(station.utilization)  # a core of its own
    latency = result.latency_ns[("c", "sub")]
    assert latency == pytest.approx(station.response_ns)  # no delays: latency = response
    # M/M/1 response times are exponential: median ln 2 R, 99th percentile ln 100 R.
    percentiles = result.latency_percentiles_ns[("c", "sub")]
    assert percentiles.p50 == pytest.approx(math.log(2) * latency, rel=0.05)
    assert percentiles.p99 == pytest.approx(math.log(100) * latency, rel=0.05)
    samples = result.latency_samples_ns[("c", "sub")]
    assert samples.mean() == pytest.approx(latency, rel=1e-9)
    assert result.warmup_ns > 0
    assert result.simulated_ns > result.warmup_ns
    assert 27 <= result.batches <= 59


def test_saturation_is_reported(exp_ms: np.ndarray) -> None:
    result = analyze(single_station(exp_ms, 1.2))
    assert result.stations["a"].response_ns == math.inf
    assert result.latency_ns[("c", "sub")] == math.inf
    assert result.saturated_hosts == ["h"]
    assert result.hosts["h"].demand == pytest.approx(1.2)


# ---- networks


def test_tandem_latency_is_the_sum_of_response_times(exp_ms: np.ndarray) -> None:
    """Jackson: each station of a Poisson-fed tandem behaves as an M/M/1."""
    scaled = {"a": exp_ms, "b": exp_ms * 0.6, "c": exp_ms * 1.2}
    rate = rate_for(0.5, float(exp_ms.mean()))
    network = Network(
        stations=[Station(n, n, samples) for n, samples in scaled.items()],
        hosts=[Host(n, cores=1) for n in scaled],
        classes=[EventClass("c", rate, "poisson", [(1.0, chain("a", "b", "c"))])],
        link_delay_ns=0.2 * MS,
        publish_delay_ns=0.1 * MS,
        deliver_delay_ns=0.3 * MS,
    )
    responses = {n: float(s.mean()) / (1 - rate * float(s.mean()) / 1e9) for n, s in scaled.items()}
    expected = 0.1 * MS + sum(responses.values()) + 2 * 0.2 * MS + 0.3 * MS

    predicted = analyze(network)
    for name, response in responses.items():
        assert predicted.stations[name].response_ns == pytest.approx(response, rel=1e-12)
    assert predicted.latency_ns[("c", "sub")] == pytest.approx(expected, rel=1e-12)
    assert predicted.bottleneck == "c"

    result = simulate(network, seed=3, max_wall_s=WALL)
    assert result.stop_reason == "precision"
    for name, response in responses.items():
        station = result.stations[name]
        assert close(station.response_ns, response, station.response_ci_ns)
    assert close(result.latency_ns[("c", "sub")], expected, result.latency_ci_ns[("c", "sub")])


def test_visit_ratios_times_rates_are_the_throughputs(exp_ms: np.ndarray) -> None:
    """The root forwards to A always and to B with probability 0.3; a second class
    publishes at B directly."""
    short = exp_ms * 0.5
    network = Network(
        stations=[Station(n, n, short) for n in ("root", "A", "B")],
        hosts=[Host(n, cores=1) for n in ("root", "A", "B")],
        classes=[
            EventClass(
                "tree",
                400.0,
                "poisson",
                [
                    (0.7, Tree("root", {"root": ["A"]}, {"A": ["s1"]})),
                    (0.3, Tree("root", {"root": ["A", "B"]}, {"A": ["s1"], "B": ["s2"]})),
                ],
            ),
            EventClass("direct", 100.0, "constant", [(1.0, chain("B", subscriber="s2"))]),
        ],
    )
    ratios = visit_ratios(network)
    assert ratios == pytest.approx(
        {("tree", "root"): 1.0, ("tree", "A"): 1.0, ("tree", "B"): 0.3, ("direct", "B"): 1.0}
    )
    expected = {"root": 400.0, "A": 400.0, "B": 400.0 * 0.3 + 100.0}
    predicted = analyze(network)
    result = simulate(network, seed=5, max_wall_s=WALL)
    assert result.stop_reason == "precision"
    for name, throughput in expected.items():
        assert predicted.stations[name].throughput == pytest.approx(throughput)
        station = result.stations[name]
        assert close(station.throughput, throughput, station.throughput_ci)
    assert set(result.latency_ns) == {("tree", "s1"), ("tree", "s2"), ("direct", "s2")}


def test_fork_gives_one_latency_per_subscriber(exp_ms: np.ndarray) -> None:
    rate = rate_for(0.4, float(exp_ms.mean()))
    network = Network(
        stations=[Station(n, n, exp_ms) for n in ("root", "A", "B")],
        hosts=[Host(n, cores=1) for n in ("root", "A", "B")],
        classes=[
            EventClass(
                "c",
                rate,
                "poisson",
                [(1.0, Tree("root", {"root": ["A", "B"]}, {"A": ["s1"], "B": ["s2"]}))],
            )
        ],
    )
    r = float(exp_ms.mean()) / (1 - 0.4)
    predicted = analyze(network)
    assert predicted.latency_ns == pytest.approx({("c", "s1"): 2 * r, ("c", "s2"): 2 * r})
    result = simulate(network, seed=11, max_wall_s=WALL)
    assert set(result.latency_ns) == {("c", "s1"), ("c", "s2")}
    for name in ("root", "A", "B"):
        station = result.stations[name]
        assert close(station.throughput, rate, station.throughput_ci)
    for pair in (("c", "s1"), ("c", "s2")):
        assert close(result.latency_ns[pair], 2 * r, result.latency_ci_ns[pair])
    # both copies of an event leave the root at once: as many deliveries of each
    counts = {pair: samples.size for pair, samples in result.latency_samples_ns.items()}
    assert abs(counts[("c", "s1")] - counts[("c", "s2")]) <= 0.01 * counts[("c", "s1")]


def test_service_by_fanout_is_used_for_the_events_fanout() -> None:
    station = Station(
        "root", "h", np.array([5.0 * MS]), service_by_fanout={1: np.array([MS]), 2: [2 * MS]}
    )
    network = Network(
        stations=[station, Station("A", "h", [MS]), Station("B", "h", [MS])],
        hosts=[Host("h", cores=3)],
        classes=[
            EventClass(
                "c",
                100.0,
                "poisson",
                [
                    (0.7, Tree("root", {"root": ["A"]})),
                    (0.3, Tree("root", {"root": ["A", "B"]})),
                ],
            )
        ],
    )
    predicted = analyze(network)
    assert predicted.stations["root"].service_ns == pytest.approx(1.3 * MS)
    result = simulate(network, seed=2, max_events=200_000)
    assert result.stations["root"].service_ns == pytest.approx(1.3 * MS, rel=0.02)


# ---- processor sharing


def test_processor_sharing_one_core_pools_the_load(exp_ms: np.ndarray) -> None:
    """Exponential service, one core shared by two stations at 40 % each: the pooled
    system is an M/M/1 at 80 %, so each station's mean response is S / (1 - 0.8)."""
    s = float(exp_ms.mean())
    network = two_on_one_host(exp_ms, cores=1)
    assert analyze(network, "mm1").stations["a"].response_ns == pytest.approx(s / 0.6)
    assert analyze(network, "mm1-ps").stations["a"].response_ns == pytest.approx(s / 0.2, rel=1e-6)
    result = simulate(network, seed=1, precision=0.03, max_wall_s=WALL)
    assert result.stop_reason == "precision"
    for name in ("a", "b"):
        station = result.stations[name]
        assert station.response_ns > 1.5 * s / 0.6  # well above a core of its own
        assert close(station.response_ns, s / 0.2, station.response_ci_ns)
        assert close(station.utilization, 0.4, station.utilization_ci)
        assert station.slowdown > 1.2


def test_processor_sharing_two_cores_is_independent(exp_ms: np.ndarray) -> None:
    s = float(exp_ms.mean())
    network = two_on_one_host(exp_ms, cores=2)
    assert analyze(network, "mm1-ps").stations["a"].response_ns == pytest.approx(s / 0.6)
    result = simulate(network, seed=1, max_wall_s=WALL)
    assert result.stop_reason == "precision"
    for name in ("a", "b"):
        station = result.stations[name]
        assert close(station.response_ns, s / 0.6, station.response_ci_ns)
        assert station.busy == pytest.approx(station.utilization)


def test_processor_sharing_background_load_slows_a_lone_station(exp_ms: np.ndarray) -> None:
    """One station with half a core free (background 0.5): an M/M/1 of half the speed."""
    s = float(exp_ms.mean())
    rate = rate_for(0.2, s)
    network = Network(
        stations=[Station("a", "h", exp_ms)],
        hosts=[Host("h", cores=1, background=0.5)],
        classes=[EventClass("c", rate, "poisson", [(1.0, chain("a"))])],
    )
    expected = 2 * s / (1 - 0.4)
    assert analyze(network, "mm1-ps").stations["a"].response_ns == pytest.approx(expected)
    result = simulate(network, seed=4, max_wall_s=WALL)
    station = result.stations["a"]
    assert close(station.response_ns, expected, station.response_ci_ns)
    assert station.busy == pytest.approx(0.4, rel=0.03)


def test_processor_sharing_forks_are_partly_predicted_by_mm1_ps() -> None:
    """A fork to 3 stations sharing 2 cores: the copies of one event compete with each
    other, which "mm1" misses and "mm1-ps" accounts for, though not for the correlation
    of the three queues (documented: about 19 % low here)."""
    rng = np.random.default_rng(9)
    samples = rng.exponential(MS, 100_000)
    rate = rate_for(0.3, float(samples.mean()))
    leaves = ["x", "y", "z"]
    network = Network(
        stations=[Station("root", "r", samples)] + [Station(n, "h", samples) for n in leaves],
        hosts=[Host("r", cores=1), Host("h", cores=2)],
        classes=[
            EventClass(
                "c",
                rate,
                "poisson",
                [(1.0, Tree("root", {"root": leaves}, {n: [f"s{n}"] for n in leaves}))],
            )
        ],
        link_delay_ns=0.05 * MS,
    )
    result = simulate(network, seed=8, precision=0.03, max_wall_s=WALL)
    assert result.stop_reason == "precision"
    simulated = result.stations["x"].response_ns
    plain = analyze(network, "mm1").stations["x"].response_ns
    shared = analyze(network, "mm1-ps").stations["x"].response_ns
    assert plain < 0.75 * simulated
    assert plain < 1.1 * plain < shared < simulated


# ---- constant workloads, determinism, limits


def test_constant_arrivals_and_service_never_wait() -> None:
    network = Network(
        stations=[Station("a", "h", [MS]), Station("b", "h2", [2 * MS])],
        hosts=[Host("h", cores=1), Host("h2", cores=1)],
        classes=[EventClass("c", 400.0, "constant", [(1.0, chain("a", "b"))])],
        link_delay_ns=0.5 * MS,
        deliver_delay_ns=0.25 * MS,
    )
    result = simulate(network, seed=1, max_events=50_000)
    assert result.stop_reason in ("precision", "max_events")
    assert result.stations["a"].response_ns == pytest.approx(MS, rel=1e-9)
    assert result.stations["b"].response_ns == pytest.approx(2 * MS, rel=1e-9)
    assert result.stations["b"].utilization == pytest.approx(0.8, rel=1e-3)
    samples = result.latency_samples_ns[("c", "sub")]
    assert samples == pytest.approx(np.full(samples.size, 3.75 * MS), rel=1e-9)
    assert result.latency_percentiles_ns[("c", "sub")].p99 == pytest.approx(3.75 * MS)


def test_delays_of_one_link_root_or_subscriber_replace_the_pooled_ones() -> None:
    tree = Tree("root", {"root": ["A", "B"]}, {"A": ["s1"], "B": ["s2"]})
    network = Network(
        stations=[Station(n, n, [MS]) for n in ("root", "A", "B")],
        hosts=[Host(n, cores=1) for n in ("root", "A", "B")],
        classes=[EventClass("c", 100.0, "constant", [(1.0, tree)])],
        link_delay_ns=0.5 * MS,
        publish_delay_ns=0.7 * MS,
        deliver_delay_ns=0.25 * MS,
        link_delays_ns={("root", "A"): [MS], ("A", "root"): [9 * MS]},
        publish_delays_ns={"root": [0.2 * MS]},
        deliver_delays_ns={"s1": [0.3 * MS], ("c", "s1"): [0.4 * MS], ("x", "s2"): [9 * MS]},
    )
    result = simulate(network, seed=1, max_events=20_000)
    s1 = result.latency_samples_ns[("c", "s1")]
    s2 = result.latency_samples_ns[("c", "s2")]
    assert s1 == pytest.approx(np.full(s1.size, 3.6 * MS), rel=1e-9)  # 0.2+1+1+1+0.4
    assert s2 == pytest.approx(np.full(s2.size, 2.95 * MS), rel=1e-9)  # 0.2+1+0.5+1+0.25
    operational = analyze(network).latency_ns
    assert operational[("c", "s1")] - operational[("c", "s2")] == pytest.approx(0.65 * MS)
    with pytest.raises(ValueError, match="link_delays_ns\\[\\('root', 'A'\\)\\]: no samples"):
        Network(network.stations, network.hosts, [], link_delays_ns={("root", "A"): []})


def _reproducible_fields(result: SimulationResult) -> dict[str, object]:
    """Every field of a result except the wall time, in a form `np.testing.assert_equal`
    compares NaN-aware (NaN equals NaN) and element-wise for the sample arrays."""
    fields = dataclasses.asdict(result)
    del fields["wall_s"]
    return fields


def test_same_seed_same_result(exp_ms: np.ndarray) -> None:
    """The same seed gives the same result in every field but the wall time; another
    seed gives a different mean latency for every pair that has samples in both runs
    (continuous service times make an equal mean by chance practically impossible)."""
    network = binary_tree_network(cores=2)
    first = simulate(network, seed=3, max_events=30_000)
    again = simulate(network, seed=3, max_events=30_000)
    other = simulate(network, seed=4, max_events=30_000)
    assert first.stop_reason == "max_events"
    assert first.events == again.events == 30_000
    np.testing.assert_equal(_reproducible_fields(first), _reproducible_fields(again))
    sampled = [
        pair
        for pair, mean in first.latency_ns.items()
        if math.isfinite(mean) and math.isfinite(other.latency_ns[pair])
    ]
    assert len(sampled) >= len(first.latency_ns) // 2, "too few pairs with samples to compare"
    same = [pair for pair in sampled if first.latency_ns[pair] == other.latency_ns[pair]]
    assert not same, f"seeds 3 and 4 gave the same mean latency for {same}"


def test_short_runs_still_report(exp_ms: np.ndarray) -> None:
    result = simulate(single_station(exp_ms, 0.5), max_events=100)
    assert result.stop_reason == "max_events"
    assert result.events == 100
    assert result.stations["a"].throughput > 0
    assert math.isnan(result.max_relative_ci)


def test_t_quantiles() -> None:
    exact = {1: 12.7062, 2: 4.3027, 5: 2.5706, 10: 2.2281, 29: 2.0452, 60: 2.0003, 1000: 1.9623}
    for df, value in exact.items():
        assert t975(df) == pytest.approx(value, abs=1e-3)


# ---- the 15-broker case


def test_binary_tree_operational_figures() -> None:
    network = binary_tree_network(cores=16)
    result = analyze(network)
    ratios = visit_ratios(network)
    for cls in network.classes:
        assert ratios[(cls.name, "b1")] == pytest.approx(1.0)  # every event climbs to the root
    total = sum(c.rate_per_s for c in network.classes)
    assert result.stations["b1"].throughput == pytest.approx(total)
    assert result.bottleneck == "b1"
    # with 16 cores for 15 brokers there is no sharing: both methods agree
    shared = analyze(network, "mm1-ps")
    assert shared.latency_ns == pytest.approx(result.latency_ns)


@pytest.mark.slow
def test_simulation_agrees_with_processor_sharing_on_fifteen_brokers() -> None:
    """Two cores shared by fifteen brokers: the simulated latency of every pair is the
    M/M/1-PS figure. (How fast the simulation runs is `bench.predict_speed`'s.)"""
    network = binary_tree_network(cores=2)
    result = simulate(network, seed=1, precision=1e-9, max_events=600_000)
    assert result.stop_reason == "max_events"
    predicted = analyze(network, "mm1-ps")
    for pair, latency in result.latency_ns.items():
        assert predicted.latency_ns[pair] == pytest.approx(latency, rel=0.15)


# ---- validation


def test_validation_errors_are_clear() -> None:
    a = Station("a", "h", [MS])
    host = Host("h", cores=1)
    ok = [(1.0, chain("a"))]
    with pytest.raises(ValueError, match="unknown stations \\['zz'\\]"):
        Network([a], [host], [EventClass("c", 1.0, "poisson", [(1.0, chain("a", "zz"))])])
    with pytest.raises(ValueError, match="sum to 0.9, not 1"):
        EventClass("c", 1.0, "poisson", [(0.6, chain("a")), (0.3, chain("a"))])
    with pytest.raises(ValueError, match="rate_per_s must be finite and >= 0, got -1"):
        EventClass("c", -1.0, "poisson", ok)
    with pytest.raises(ValueError, match="arrival must be one of"):
        EventClass("c", 1.0, "bursty", ok)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown host 'nope'"):
        Network([Station("a", "nope", [MS])], [host], [])
    with pytest.raises(ValueError, match="duplicate station names: \\['a'\\]"):
        Network([a, a], [host], [])
    with pytest.raises(ValueError, match="reached twice"):
        Tree("a", {"a": ["b", "c"], "b": ["c"]})
    with pytest.raises(ValueError, match="not reachable from the root"):
        Tree("a", {"a": ["b"]}, {"x": ["s"]})
    with pytest.raises(ValueError, match="must be non-negative"):
        Station("a", "h", [-1.0])
    with pytest.raises(ValueError, match="no samples"):
        Station("a", "h", [])
    with pytest.raises(ValueError, match="link_delay_ns: samples must be non-negative"):
        Network([a], [host], [], link_delay_ns=-5.0)
    with pytest.raises(ValueError, match="background must be in"):
        Host("h", cores=1, background=1)
    network = Network([a], [host], [EventClass("c", 1.0, "poisson", ok)])
    with pytest.raises(ValueError, match="method must be one of"):
        analyze(network, "mva")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="precision must be positive"):
        simulate(network, precision=0, max_events=10)
    with pytest.raises(ValueError, match="give max_wall_s or max_events"):
        simulate(network)
    with pytest.raises(ValueError, match="max_wall_s must be positive"):
        simulate(network, max_wall_s=0.0)
    with pytest.raises(ValueError, match="nothing to simulate"):
        simulate(Network([a], [host], [EventClass("c", 0.0, "poisson", ok)]), max_events=10)
