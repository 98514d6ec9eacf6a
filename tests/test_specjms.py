"""The SPECjms2007 vertical case study (topologies/specjms_vertical.toml, docs/specjms.md) and
the event mixes ([[publishers.events]]) it needs from the loader and the generator.

Numbers are checked against the two sources the file cites: 004 (the SPECjms2007
design document) and 001 (Sachs et al., Performance Evaluation 2009). The expected
traffic is recomputed here from the file alone: every equally likely draw of each
publisher's event kinds, matched against every subscriber's parsed filters.
"""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
from collections import Counter, defaultdict
from contextlib import redirect_stdout
from itertools import product
from pathlib import Path

import pytest

from broker.local_network import REPO, free_base_port
from monitor.replay import check_deliveries
from monitor.traces import read_table
from monitor.tracing import attributes_from_json
from monitor.workload import EventGenerator
from routing import parse_filter
from topologies import (
    SHIPPED,
    CaseStudy,
    TopologyError,
    load_case_study,
    publisher_name,
    shipped_path,
    specjms,
    subscriber_name,
    to_toml,
)
from topologies.model import EventSpec, PublisherSpec, Workload

FILE = REPO / "topologies" / "specjms_vertical.toml"

# 001 Table 7 (= 004 Table 5): lambda_i = c_i * BASE.
C = {
    1: 0.076190476,
    2: 0.106666667,
    3: 0.05,
    4: 0.162162162,
    5: 0.577200577,
    6: 0.142314991,
    7: 0.102564103,
}
N_SM, N_DC, N_SP, DELTA, RHO = 10, 2, 5, 5, 0.5  # 004 Table 5 / 001 section 4.3
ZETA = N_SP * RHO

# Message groups of 001 Table 3 from the delivery modes of 004 Table 2:
# a = pub/sub NP NT ND, b = pub/sub P T D, c = P2P NP NT, d = P2P P T.
GROUP = {
    "order": "d",
    "orderConf": "d",
    "shipInfo": "d",
    "shipDep": "d",
    "shipConf": "d",
    "callForOffers": "b",
    "offer": "d",
    "pOrder": "d",
    "pOrderConf": "d",
    "pShipment": "d",
    "pShipConf": "d",
    "invoice": "d",
    "statInfoOrderDC": "c",
    "statInfoShipDC": "c",
    "priceUpdate": "b",
    "inventoryInfo": "d",
    "statInfoSM": "c",
    "productAnnouncement": "a",
    "creditCardHL": "a",
}
# 001 Table 6(b), vertical topology, achieved: % of messages received, % of bandwidth.
TABLE_6B_COUNT = {"a": 14.19, "b": 5.99, "c": 39.09, "d": 40.74}
TABLE_6B_BYTES = {"a": 7.19, "b": 2.25, "c": 61.03, "d": 29.52}
# 001 Table 5, "Avg. size" column, KB (pShipment is 001's pShipInfo).
AVG_KB = {
    "orderConf": 2.63,
    "statInfoOrderDC": 0.39,
    "shipInfo": 2.13,
    "shipDep": 1.96,
    "order": 2.34,
    "shipConf": 1.03,
    "callForOffers": 1.93,
    "offer": 2.50,
    "pOrder": 2.67,
    "pShipConf": 1.28,
    "statInfoShipDC": 1.29,
    "pOrderConf": 2.86,
    "invoice": 2.33,
    "pShipment": 1.24,
    "priceUpdate": 0.24,
    "inventoryInfo": 2.31,
    "statInfoSM": 5.27,
    "productAnnouncement": 1.26,
    "creditCardHL": 1.80,
}


@pytest.fixture(scope="module")
def study() -> CaseStudy:
    return load_case_study(FILE, filter_parser=parse_filter)


# --- expected traffic, from the file alone ------------------------------------------------


def draws(kind: EventSpec) -> list[tuple[float, dict]]:
    """Every equally likely event of a kind (without size and payload), with probability."""
    axes = [[(name, v) for v in values] for name, values in kind.choose.items()]
    for name, (lo, hi) in kind.ranges.items():
        assert isinstance(lo, int) and isinstance(hi, int), "only integer ranges here"
        axes.append([(name, v) for v in range(lo, hi + 1)])
    combos = list(product(*axes))
    return [
        (1 / len(combos), {"type": kind.type, **kind.attributes, **dict(combo)}) for combo in combos
    ]


def visits(study: CaseStudy, home: int, targets: set[int]) -> set[int]:
    """Brokers an event from `home` visits to reach the brokers `targets`."""
    topology = study.topology
    if topology.routing == "flooding":
        return set(topology.brokers)
    if topology.routing == "hierarchical":
        root = topology.root()
        out = set(topology.tree_path(home, root))
        for t in targets:
            out |= set(topology.tree_path(t, root))
        return out
    out = {home}
    for t in targets:
        out |= set(topology.tree_path(home, t))
    return out


@dataclasses.dataclass
class Traffic:
    published: float = 0.0
    sent: Counter = dataclasses.field(default_factory=Counter)  # subscriber id -> events/s
    received: Counter = dataclasses.field(default_factory=Counter)  # (sub id, group) -> /s
    by_type: Counter = dataclasses.field(default_factory=Counter)  # type -> deliveries/s
    kb: Counter = dataclasses.field(default_factory=Counter)  # group -> delivered KB/s
    broker: Counter = dataclasses.field(default_factory=Counter)  # broker -> arrivals/s
    matched: list = dataclasses.field(default_factory=list)  # (type, n matched) per draw


def expected_traffic(study: CaseStudy, rates: dict[int, float]) -> Traffic:
    filters = {
        s.id: (s.broker, [parse_filter(text) for text in s.filters])
        for s in study.subscribers.values()
    }
    out = Traffic()
    for pid, publisher in study.publishers.items():
        total_weight = sum(kind.weight for kind in publisher.events)
        for kind in publisher.events:
            rate = rates[pid] * kind.weight / total_weight
            mean_kb = sum(
                s * w for s, w in zip(kind.sizes_kb, kind.size_weights, strict=True)
            ) / sum(kind.size_weights)
            out.published += rate
            out.sent[pid] += rate
            for p, event in draws(kind):
                wanted = [
                    sid for sid, (_, fs) in filters.items() if any(f.matches(event) for f in fs)
                ]
                out.matched.append((kind.type, len(wanted)))
                for sid in wanted:
                    out.received[(sid, GROUP[kind.type])] += rate * p
                    out.by_type[kind.type] += rate * p
                    out.kb[GROUP[kind.type]] += rate * p * mean_kb
                for b in visits(study, publisher.broker, {filters[s][0] for s in wanted}):
                    out.broker[b] += rate * p
    return out


# --- the file -----------------------------------------------------------------------------


def test_file_is_the_generators_output() -> None:
    assert FILE.read_text() == specjms.render(1.0), (
        "regenerate: python -m topologies.specjms > topologies/specjms_vertical.toml"
    )


def test_generator_base_option_scales_the_rates(tmp_path: Path) -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert specjms.main(["--base", "5"]) == 0
    path = tmp_path / "base5.toml"
    path.write_text(out.getvalue())
    five = load_case_study(path, filter_parser=parse_filter)
    one = load_case_study(FILE)
    assert five.rates_for("base5") == pytest.approx(one.rates_for("base5"), rel=1e-6)
    assert five.rates_for(None) == pytest.approx(one.rates_for("base5"), rel=1e-6)
    assert five.rates_for("base1") == pytest.approx(one.rates_for(None), rel=1e-6)


def test_shipped_and_layout(study: CaseStudy) -> None:
    assert "specjms_vertical" in SHIPPED and shipped_path("specjms_vertical") == FILE
    topo = study.topology
    assert topo.routing == "acyclic" and topo.root() == 1
    assert topo.children(1) == [2, 3, 14, 15, 16, 17, 18]  # 2 DCs, 5 SPs
    assert topo.children(2) == [4, 5, 6, 7, 8] and topo.children(3) == [9, 10, 11, 12, 13]
    assert len(study.publishers) == len(study.subscribers) == N_SM + N_DC + N_SP + 2
    assert set(study.scenarios) == {"base1", "base5", "base20", "base40"}
    for publisher in study.publishers.values():
        assert publisher.events, publisher.id
        assert publisher.rate == pytest.approx(sum(k.weight for k in publisher.events), abs=1e-6)
        for kind in publisher.events:
            mean = sum(s * w for s, w in zip(kind.sizes_kb, kind.size_weights, strict=True))
            assert mean / sum(kind.size_weights) == pytest.approx(AVG_KB[kind.type], abs=0.011)
    # every SP offers 50 % of the 100 families (rho), one subscription per family topic
    for sid in range(13, 18):
        families = [f for f in study.subscribers[sid].filters if "callForOffers" in f]
        assert len(families) == 50


def test_every_event_reaches_its_receivers(study: CaseStudy) -> None:
    traffic = expected_traffic(study, study.rates_for(None))
    for event_type, n in traffic.matched:
        if GROUP[event_type] in "cd":  # a queue: exactly one receiver
            assert n == 1, event_type
        elif event_type == "callForOffers":  # zeta = 2.5 on average, 2 or 3 each
            assert n in (2, 3)
        else:  # the HQ's topics reach every SM
            assert n == N_SM, event_type
    assert traffic.by_type["callForOffers"] == pytest.approx(ZETA * N_DC * C[2], rel=1e-6)


def test_message_mix_is_001_table_6b(study: CaseStudy) -> None:
    traffic = expected_traffic(study, study.rates_for("base1"))
    received = Counter()
    for (_, group), rate in traffic.received.items():
        received[group] += rate
    total = sum(received.values())
    total_kb = sum(traffic.kb.values())
    for group in "abcd":
        assert 100 * received[group] / total == pytest.approx(TABLE_6B_COUNT[group], abs=0.01)
        assert 100 * traffic.kb[group] / total_kb == pytest.approx(TABLE_6B_BYTES[group], abs=0.05)


def test_traffic_per_location_follows_001_equations(study: CaseStudy) -> None:
    """001 section 4.1.2's chi equations, per location type, at BASE 1."""
    lam = C
    traffic = expected_traffic(study, study.rates_for(None))
    rec = traffic.received
    for sm in range(1, N_SM + 1):
        assert traffic.sent[sm] == pytest.approx(lam[5] + 2 * lam[1] + lam[4], rel=1e-6)
        assert rec[(sm, "a")] == pytest.approx(lam[6] + lam[7], rel=1e-6)
        assert rec[(sm, "b")] == pytest.approx(lam[3], rel=1e-6)
        assert rec[(sm, "d")] == pytest.approx(2 * lam[1] + lam[4], rel=1e-6)
    for dc in (11, 12):
        sent = lam[2] + (DELTA * lam[1] + lam[2]) + (3 * lam[1] * DELTA + 2 * lam[2])
        assert traffic.sent[dc] == pytest.approx(sent, rel=1e-6)
        assert rec[(dc, "d")] == pytest.approx(3 * lam[1] * DELTA + lam[2] * (ZETA + 2), rel=1e-6)
    for sp in range(13, 18):
        sent = RHO * lam[2] * N_DC + 3 * lam[2] * N_DC / N_SP
        assert traffic.sent[sp] == pytest.approx(sent, rel=1e-6)
        assert rec[(sp, "b")] == pytest.approx(RHO * lam[2] * N_DC, rel=1e-6)
        assert rec[(sp, "d")] == pytest.approx(2 * lam[2] * N_DC / N_SP, rel=1e-6)
    hq_sent = traffic.sent[18] + traffic.sent[19]
    assert hq_sent == pytest.approx(lam[3] + lam[6] + lam[7], rel=1e-6)
    hq_c = rec[(18, "c")] + rec[(19, "c")]
    assert hq_c == pytest.approx(lam[1] * N_SM + lam[2] * N_DC + lam[5] * N_SM, rel=1e-6)
    assert rec[(18, "c")] == pytest.approx(rec[(19, "c")], rel=1e-6)  # even over instances
    assert rec[(18, "d")] + rec[(19, "d")] == pytest.approx(lam[2] * N_DC, rel=1e-6)


@pytest.mark.parametrize(
    ("scenario", "base"), [("base1", 1), ("base5", 5), ("base20", 20), ("base40", 40)]
)
def test_expected_broker_rates_per_scenario(study: CaseStudy, scenario: str, base: int) -> None:
    traffic = expected_traffic(study, study.rates_for(scenario))
    assert traffic.published == pytest.approx(14.2866 * base, rel=1e-4)
    # Closed forms from 001's chi equations plus the events routed through a broker:
    lam = {i: c * base for i, c in C.items()}
    hq_topics = lam[3] + lam[6] + lam[7]
    sm = 4 * lam[1] + lam[4] + lam[5] + hq_topics  # sends + receives, inventoryInfo once
    dc = 6 * DELTA * lam[1] + DELTA * lam[5] + (6 + ZETA) * lam[2] + hq_topics
    sp = 4 * lam[2]
    hq = hq_topics + N_SM * (lam[1] + lam[5]) + N_DC * lam[2] * (7 + ZETA)
    expected = {1: hq, 2: dc, 3: dc} | dict.fromkeys(range(4, 14), sm)
    expected |= dict.fromkeys(range(14, 19), sp)
    assert dict(traffic.broker) == pytest.approx(expected, rel=1e-6)
    assert dict(traffic.broker) == pytest.approx(specjms.expected_rates(base)["brokers"], rel=1e-6)
    # the HQ broker is the busiest, then the DCs; SMs and SPs are light
    assert max(traffic.broker, key=traffic.broker.get) == 1
    if scenario == "base40":  # the loaded one: ~570 events/s, ~350/s at the HQ broker
        assert 565 < traffic.published < 575 and 350 < traffic.broker[1] < 360


def test_header_states_the_recomputed_numbers(study: CaseStudy) -> None:
    text = FILE.read_text()
    traffic = expected_traffic(study, study.rates_for(None))
    assert f"HQ broker 1: {traffic.broker[1]:.4f}" in text
    assert f"DC brokers 2-3: {traffic.broker[2]:.4f}" in text
    assert f"SM brokers 4-13: {traffic.broker[4]:.4f}" in text
    assert f"SP brokers 14-18: {traffic.broker[14]:.4f}" in text
    assert f"published {traffic.published:.4f} events/s" in text


# --- event mixes: loader, TOML writer, generator -------------------------------------------

MIX = """\
base_port = 7000
[[brokers]]
id = 1
[workload]
seed = 7
[[publishers]]
id = 1
broker = 1
rate = 2.0
[[publishers.events]]
type = "order"
weight = 3
attributes = {sm = 2, "a.b" = "x", ok = true}
choose = {hq = [1, 2]}
ranges = {family = [1, 4], price = [1, 2.5]}
sizes_kb = [1.0, 2.0]
size_weights = [1, 0]
[[publishers.events]]
type = "ping"
weight = 1
[[subscribers]]
id = 1
broker = 1
filters = ["type exists"]
"""


def test_event_mix_loads_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "mix.toml"
    path.write_text(MIX)
    study = load_case_study(path)
    order, ping = study.publishers[1].events
    assert order == EventSpec(
        "order",
        3.0,
        {"sm": 2, "a.b": "x", "ok": True},
        {"hq": (1, 2)},
        {"family": (1, 4), "price": (1, 2.5)},
        (1.0, 2.0),
        (1.0, 0.0),
    )
    assert ping.sizes_kb == (1.35, 7.06, 36.52) and ping.attributes == {}
    again = tmp_path / "again.toml"
    again.write_text(to_toml(study))
    assert load_case_study(again) == study


def test_event_mix_generator(tmp_path: Path) -> None:
    path = tmp_path / "mix.toml"
    path.write_text(MIX)
    study = load_case_study(path)
    assert study.workload is not None
    generator = EventGenerator(study.workload, study.publishers[1], 2.0)
    events = [generator.event() for _ in range(2000)]
    types = Counter(e["type"] for e in events)
    assert 0.7 < types["order"] / 2000 < 0.8  # weights 3 : 1
    for e in events:
        assert len(e["payload"]) == round(e["size_kb"] * 1024)
        if e["type"] == "order":
            assert {k: e[k] for k in ("sm", "a.b", "ok")} == {"sm": 2, "a.b": "x", "ok": True}
            assert e["hq"] in (1, 2) and e["family"] in range(1, 5)
            assert isinstance(e["price"], float) and 1 <= e["price"] <= 2.5
            assert e["size_kb"] == 1.0  # size weight 0 for 2.0
        else:
            assert set(e) == {"type", "size_kb", "payload"}
    assert {e["family"] for e in events if e["type"] == "order"} == {1, 2, 3, 4}
    # same seed, same events
    again = EventGenerator(study.workload, study.publishers[1], 2.0)
    assert [again.event() for _ in range(2000)] == events


def test_publisher_without_mix_keeps_the_classic_event() -> None:
    spec = PublisherSpec(id=3, broker=1, rate=1.0)
    event = EventGenerator(Workload(), spec, 1.0).event()
    assert event["type"] == "callForOffers" and event["dc"] == 3
    assert set(event) == {"type", "family", "size_kb", "dc", "price", "payload"}


BAD_MIXES = [
    ("weight = 1\n", "weight = 0\n", "publishers[0].events[1].weight", "must be more than 0"),
    ('type = "ping"\n', "", "publishers[0].events[1].type", "missing required key"),
    ('type = "ping"\n', 'type = "ping"\ncolour = 1\n', "publishers[0].events[1].colour", "unknown"),
    ("sm = 2,", "type = 2,", "publishers[0].events[0].attributes.type", "set by the event"),
    ("sm = 2,", "hq = 2,", "publishers[0].events[0].choose.hq", "also given in attributes"),
    ("sm = 2,", "2x = 2,", "publishers[0].events[0].attributes.2x", "not an attribute name"),
    ("sm = 2,", "sm = [2],", "publishers[0].events[0].attributes.sm", "got an array"),
    ("hq = [1, 2]", "hq = []", "publishers[0].events[0].choose.hq", "non-empty array"),
    ("family = [1, 4]", "family = [4, 1]", "publishers[0].events[0].ranges.family", "lo must"),
    ("family = [1, 4]", "family = [1]", "publishers[0].events[0].ranges.family", "[lo, hi]"),
    ("family = [1, 4]", 'family = [1, "z"]', "ranges.family[1]", "must be a number"),
    ("sizes_kb = [1.0, 2.0]", "sizes_kb = [0, 2.0]", "sizes_kb[0]", "must be more than 0"),
    ("size_weights = [1, 0]", "size_weights = [1]", "size_weights", "needs 2 weights"),
    ("size_weights = [1, 0]", "size_weights = [0, 0]", "size_weights", "more than 0"),
]


@pytest.mark.parametrize(("old", "new", "field", "problem"), BAD_MIXES)
def test_bad_event_mix_names_the_field(
    tmp_path: Path, old: str, new: str, field: str, problem: str
) -> None:
    assert MIX.count(old) == 1
    path = tmp_path / "bad.toml"
    path.write_text(MIX.replace(old, new))
    with pytest.raises(TopologyError) as info:
        load_case_study(path)
    assert info.value.field is not None and info.value.field.endswith(field)
    assert problem in str(info.value)


def test_empty_event_mix_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        "base_port = 7000\n[[brokers]]\nid = 1\n"
        "[[publishers]]\nid = 1\nbroker = 1\nrate = 1.0\nevents = []\n"
    )
    with pytest.raises(TopologyError, match=r"publishers\[0\]\.events: must not be empty"):
        load_case_study(path)


# --- a short replay on real brokers --------------------------------------------------------


@pytest.mark.integration
@pytest.mark.slow  # make soak; make test replays base5 in tests/test_end_to_end.py
def test_replay_base5_delivers_exactly_the_matching_set(tmp_path: Path, study: CaseStudy) -> None:
    base = free_base_port(len(study.topology.brokers))
    topology = dataclasses.replace(
        study.topology,
        base_port=base,
        brokers={
            b: dataclasses.replace(s, port=base + b) for b, s in study.topology.brokers.items()
        },
    )
    assert study.workload is not None
    workload = dataclasses.replace(study.workload, duration_s=4.0, warmup_s=0.5, drain_s=1.0)
    moved = dataclasses.replace(study, topology=topology, workload=workload)
    path = tmp_path / "specjms.toml"
    path.write_text(to_toml(moved))
    moved = load_case_study(path)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "hop", "replay", str(path), "--out", str(out)]
    result = subprocess.run(
        [*cmd, "--scenario", "base5", "--quiet"],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]

    manifest = json.loads((out / "manifest.json").read_text())
    counts = manifest["counts"]
    assert counts["lost"] == 0 and counts["unexpected"] == 0
    assert counts["delivered"] == counts["expected_deliveries"]
    # ~71 events/s for 4.5 s; deliveries per publication ~ 17.26 / 14.29
    assert 200 < counts["published"] < 450
    assert 1.0 < counts["delivered"] / counts["published"] < 1.5
    recount = check_deliveries(out, moved)  # brute-force matching, from the traces alone
    assert (recount.lost, recount.unexpected) == (0, 0)
    assert (recount.published, recount.delivered) == (counts["published"], counts["delivered"])

    publications = read_table(out, "publications").table.to_pylist()
    deliveries = read_table(out, "deliveries").table.to_pylist()
    hops = read_table(out, "hops").table.to_pylist()
    filters = {
        subscriber_name(s.id): (s.broker, [parse_filter(f) for f in s.filters])
        for s in moved.subscribers.values()
    }
    home = {publisher_name(p.id): p.broker for p in moved.publishers.values()}
    delivered: dict[str, list[str]] = defaultdict(list)
    for d in deliveries:
        delivered[d["event_id"]].append(d["subscriber"])
    rows: dict[str, list[dict]] = defaultdict(list)
    for row in hops:
        rows[row["event_id"]].append(row)
    types = Counter()
    for pub in publications:
        event = attributes_from_json(pub["attributes"])
        types[event["type"]] += 1
        wanted = {n for n, (_, fs) in filters.items() if any(f.matches(event) for f in fs)}
        assert sorted(delivered[pub["event_id"]]) == sorted(wanted), event
        # acyclic routing: exactly the brokers on the way to the receivers, once each
        targets = {filters[n][0] for n in wanted}
        seen = Counter(int(r["broker"]) for r in rows[pub["event_id"]])
        assert set(seen) == visits(moved, home[pub["publisher"]], targets), event
        assert max(seen.values()) == 1
        assert {r["event_type"] for r in rows[pub["event_id"]]} == {event["type"]}
        if event["type"] in ("order", "orderConf", "shipInfo", "shipConf", "shipDep"):
            assert 1 not in seen  # stays in the DC's subtree
        if event["type"] == "inventoryInfo":
            assert set(seen) == {home[pub["publisher"]]}  # never leaves the SM's broker
    # the frequent types all occur (statInfoSM is 40 % of the events)
    assert {"statInfoSM", "inventoryInfo", "order", "orderConf", "callForOffers"} <= set(types)
    assert types.most_common(1)[0][0] == "statInfoSM"
