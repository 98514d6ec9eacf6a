"""Tests for the topologies package: shipped files, validation, generators, siena15 design."""

from __future__ import annotations

import codecs
import re
from pathlib import Path

import pytest

from routing import Filter, parse_filter
from topologies import (
    SHIPPED,
    BrokerSpec,
    CaseStudy,
    Topology,
    TopologyError,
    Workload,
    binary_tree,
    chain,
    kary_tree,
    load_case_study,
    load_topology,
    shipped_path,
    to_toml,
)

VALID = """\
name = "t"
host = "127.0.0.1"
base_port = 7000
routing = "hierarchical"

[[brokers]]
id = 1

[[brokers]]
id = 2
parent = 1

[[brokers]]
id = 3
parent = 1

[workload]
families = 10
duration_s = 5

[[publishers]]
id = 1
broker = 2
rate = 5.0

[[publishers]]
id = 2
broker = 3
rate = 1.5
arrival = "constant"

[[subscribers]]
id = 1
broker = 3
filters = ["family = 1", "family = 2"]

[[scenarios]]
name = "s"
rate_scale = 2.0
rates = { 1 = 2.0 }
"""


def write(tmp_path: Path, text: str, name: str = "case.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def edited(*replacements: tuple[str, str]) -> str:
    text = VALID
    for old, new in replacements:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


# --- shipped files --------------------------------------------------------------------


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_files_load(name: str) -> None:
    study = load_case_study(shipped_path(name))
    assert study.topology.name == name
    assert study.publishers and study.subscribers and study.workload is not None
    assert load_topology(shipped_path(name)) == study.topology


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_filters_parse_with_routing(name: str) -> None:
    """Every filter text of every subscriber goes through the parser, and parses to a
    filter that prints back to an equal one."""
    parsed: list[str] = []

    def parser(text: str) -> Filter:
        parsed.append(text)
        return parse_filter(text)

    study = load_case_study(shipped_path(name), filter_parser=parser)
    texts = [text for s in study.subscribers.values() for text in s.filters]
    assert texts and parsed == texts
    for text in texts:
        f = parse_filter(text)
        assert f.constraints and parse_filter(str(f)) == f, text


def test_shipped_path_unknown_name_lists_shipped() -> None:
    with pytest.raises(TopologyError, match="shipped: siena15, tree7, chain5, specjms_vertical"):
        shipped_path("nope")


def test_generators_reproduce_shipped_topologies() -> None:
    assert binary_tree(3, name="siena15", base_port=7100) == load_topology(shipped_path("siena15"))
    assert binary_tree(2, name="tree7", base_port=7300) == load_topology(shipped_path("tree7"))
    assert chain(5, name="chain5", base_port=7200) == load_topology(shipped_path("chain5"))


def test_siena15_layout() -> None:
    study = load_case_study(shipped_path("siena15"))
    topo = study.topology
    assert topo.routing == "hierarchical"
    assert topo.root() == 1
    assert [topo.address(j) for j in (1, 15)] == [("127.0.0.1", 7101), ("127.0.0.1", 7115)]
    assert study.workload == Workload("callForOffers", 40, 60.0, 5.0)
    assert {p.id: p.broker for p in study.publishers.values()} == {k: 7 + k for k in range(1, 9)}
    assert {p.arrival for p in study.publishers.values()} == {"poisson"}
    assert {s.id: s.broker for s in study.subscribers.values()} == {
        s: 7 + (s + 1) // 2 for s in range(1, 17)
    }
    filter_text = re.compile(r'type = "callForOffers" and family = ([1-9]|[1-3][0-9]|40)')
    for sub in study.subscribers.values():
        assert len(sub.filters) > 1
        assert all(filter_text.fullmatch(text) for text in sub.filters)


def test_tree_navigation_on_siena15() -> None:
    topo = load_topology(shipped_path("siena15"))
    assert topo.tree_path(8, 15) == [8, 4, 2, 1, 3, 7, 15]
    assert topo.tree_path(15, 8) == [15, 7, 3, 1, 2, 4, 8]
    assert topo.tree_path(8, 9) == [8, 4, 9]
    assert topo.tree_path(8, 8) == [8]
    assert topo.tree_path(1, 10) == [1, 2, 5, 10]
    assert topo.tree_path(11, 2) == [11, 5, 2]
    assert topo.children(1) == [2, 3]
    assert topo.children(8) == []
    assert topo.neighbours(2) == [1, 4, 5]
    assert topo.neighbours(1) == [2, 3]
    assert topo.ancestors(13) == [13, 6, 3, 1]


# --- siena15 subscription design (see the comment block in siena15.toml) ----------------

FAMILY = re.compile(r"\bfamily = (\d+)")

# Thesis Table 6.1, model column (msg/s), broker -> (scenario 1, scenario 2).
TABLE_6_1 = {
    1: (94.66, 61.88),
    2: (94.65, 61.88),
    3: (89.93, 59.28),
    4: (90.40, 58.27),
    5: (83.42, 56.42),
    6: (85.24, 56.35),
    7: (71.90, 48.63),
    8: (78.91, 51.12),
    9: (67.15, 43.49),
    10: (67.14, 47.01),
    11: (59.54, 41.72),
    12: (58.26, 40.01),
    13: (73.09, 48.23),
    14: (56.35, 38.49),
    15: (63.11, 42.97),
}


def wanted_families(study: CaseStudy, broker: int) -> set[int]:
    """Families some subscriber in `broker`'s subtree subscribes to."""
    return {
        int(number)
        for sub in study.subscribers.values()
        if broker in study.topology.ancestors(sub.broker)
        for text in sub.filters
        for number in FAMILY.findall(text)
    }


def expected_throughput(study: CaseStudy, rates: dict[int, float]) -> dict[int, float]:
    """Hierarchical routing: own subtree's events plus the wanted share of the rest."""
    assert study.workload is not None
    throughput = {}
    for broker in study.topology.brokers:
        share = len(wanted_families(study, broker)) / study.workload.families
        throughput[broker] = sum(
            rate
            if broker in study.topology.ancestors(study.publishers[pid].broker)
            else rate * share
            for pid, rate in rates.items()
        )
    return throughput


def test_siena15_leaves_want_half_to_four_fifths_of_families() -> None:
    study = load_case_study(shipped_path("siena15"))
    for leaf in range(8, 16):
        assert 0.5 <= len(wanted_families(study, leaf)) / 40 <= 0.8, leaf
    assert wanted_families(study, 2) == set(range(1, 41))


@pytest.mark.parametrize(("scenario", "column"), [("s1", 0), ("s2", 1)])
def test_siena15_expected_throughput_follows_table_6_1(scenario: str, column: int) -> None:
    study = load_case_study(shipped_path("siena15"))
    throughput = expected_throughput(study, study.rates_for(scenario))
    for broker, thesis in TABLE_6_1.items():
        assert throughput[broker] == pytest.approx(thesis[column], rel=0.04), broker


def test_siena15_scenario_rates() -> None:
    study = load_case_study(shipped_path("siena15"))
    s1, s2 = study.rates_for("s1"), study.rates_for("s2")
    assert s1 == study.rates_for(None)
    assert sum(s1.values()) == pytest.approx(94.7, abs=0.5)
    assert sum(s2.values()) == pytest.approx(61.9, abs=0.5)
    assert len(set(s1.values())) > 1
    # scenario 2 shifts load towards publishers 3 and 4 (thesis Table 6.2)
    for pid in (3, 4):
        assert s2[pid] / sum(s2.values()) > s1[pid] / sum(s1.values())
    assert study.rates_for("s1-heavy") == pytest.approx({k: 2.5 * r for k, r in s1.items()})
    assert study.rates_for("s2-heavy") == pytest.approx({k: 3.8 * r for k, r in s2.items()})


# --- loading: positive cases ------------------------------------------------------------


def test_valid_case_study(tmp_path: Path) -> None:
    study = load_case_study(write(tmp_path, VALID))
    assert study.topology.brokers[2] == BrokerSpec(2, 1, "127.0.0.1", 7002)
    assert study.topology.source == str(tmp_path / "case.toml")
    assert study.workload == Workload(families=10, duration_s=5.0)
    assert study.publishers[2].arrival == "constant"
    assert study.publishers[1].arrival == "poisson"
    assert study.subscribers[1].filters == ("family = 1", "family = 2")
    assert study.rates_for("s") == {1: 2.0, 2: 3.0}


def test_rates_for_unknown_scenario_lists_known_ones(tmp_path: Path) -> None:
    study = load_case_study(write(tmp_path, VALID))
    with pytest.raises(TopologyError, match=r"scenarios: unknown scenario 'x'; known scenarios: s"):
        study.rates_for("x")


def test_topology_only_file_and_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "base_port = 8000\n[[brokers]]\nid = 1\n", name="solo.toml")
    topo = load_topology(path)
    assert topo == Topology(
        "solo", "127.0.0.1", 8000, "hierarchical", {1: BrokerSpec(1, None, "127.0.0.1", 8001)}
    )
    study = load_case_study(path)
    assert study.workload is None
    assert not study.publishers and not study.subscribers and not study.scenarios


def test_broker_host_and_port_overrides(tmp_path: Path) -> None:
    text = edited(("id = 3\nparent = 1", 'id = 3\nparent = 1\nhost = "10.0.0.5"\nport = 7002'))
    topo = load_topology(write(tmp_path, text))
    assert topo.address(2) == ("127.0.0.1", 7002)
    assert topo.address(3) == ("10.0.0.5", 7002)  # same port, other host: allowed


def test_load_topology_validates_the_whole_file(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match=r"publishers\[0\]\.broker"):
        load_topology(write(tmp_path, edited(("broker = 2\nrate", "broker = 9\nrate"))))


def test_filter_parser_is_called_on_every_filter(tmp_path: Path) -> None:
    seen: list[str] = []
    load_case_study(write(tmp_path, VALID), filter_parser=seen.append)
    assert seen == ["family = 1", "family = 2"]


def test_filter_parser_errors_name_the_filter(tmp_path: Path) -> None:
    def parser(text: str) -> None:
        if text.endswith("2"):
            raise ValueError("column 10: no good")

    path = write(tmp_path, VALID)
    with pytest.raises(TopologyError) as info:
        load_case_study(path, filter_parser=parser)
    assert info.value.field == "subscribers[0].filters[1]"
    assert str(info.value) == (
        f"{path}: subscribers[0].filters[1]: bad filter 'family = 2': column 10: no good"
    )


# --- loading: every validation error names the file and the field -------------------------

BAD_CASES = [
    # unknown keys at every level
    (
        [("base_port = 7000", 'base_port = 7000\ncolour = "red"')],
        "colour",
        "unknown key; allowed keys: name, host, base_port, routing, brokers",
    ),
    (
        [("id = 3\nparent = 1", "id = 3\nparent = 1\nweight = 2")],
        "brokers[2].weight",
        "unknown key; allowed keys: id, parent, host, port",
    ),
    ([("families = 10", "familys = 10")], "workload.familys", "unknown key"),
    ([("rate = 5.0", "rate = 5.0\nburst = 3")], "publishers[0].burst", "unknown key"),
    (
        [("broker = 3\nfilters", "broker = 3\nqos = 1\nfilters")],
        "subscribers[0].qos",
        "unknown key",
    ),
    ([("rate_scale = 2.0", "rate_scale = 2.0\nrepeat = 2")], "scenarios[0].repeat", "unknown key"),
    # wrong types (bools are not ints)
    (
        [("[[brokers]]\nid = 1\n", "[[brokers]]\nid = true\n")],
        "brokers[0].id",
        "must be an integer, got a boolean",
    ),
    ([("base_port = 7000", 'base_port = "7000"')], "base_port", "must be an integer, got a string"),
    (
        [("id = 2\nparent = 1", "id = 2\nparent = 1.0")],
        "brokers[1].parent",
        "must be an integer, got a float",
    ),
    ([("rate = 5.0", "rate = true")], "publishers[0].rate", "must be a number, got a boolean"),
    ([('name = "t"', "name = 3")], "name", "must be a string, got an integer"),
    ([('host = "127.0.0.1"', 'host = ""')], "host", "must not be empty"),
    ([("families = 10", "families = 0")], "workload.families", "must be at least 1"),
    ([("duration_s = 5", "duration_s = 0")], "workload.duration_s", "must be more than 0"),
    (
        [
            ("[workload]\nfamilies = 10\nduration_s = 5\n", ""),
            ("base_port = 7000", "base_port = 7000\nworkload = 3"),
        ],
        "workload",
        "must be a table, got an integer",
    ),
    (
        [
            ('[[scenarios]]\nname = "s"\nrate_scale = 2.0\nrates = { 1 = 2.0 }\n', ""),
            ("base_port = 7000", 'base_port = 7000\nscenarios = ["s"]'),
        ],
        "scenarios[0]",
        "must be a table, got a string",
    ),
    (
        [
            ('[[subscribers]]\nid = 1\nbroker = 3\nfilters = ["family = 1", "family = 2"]\n', ""),
            ("base_port = 7000", "base_port = 7000\nsubscribers = 3"),
        ],
        "subscribers",
        "must be an array of tables ([[subscribers]]), got an integer",
    ),
    # missing required keys
    ([("base_port = 7000\n", "")], "base_port", "missing required key"),
    ([("id = 2\nparent = 1", "parent = 1")], "brokers[1].id", "missing required key"),
    ([("rate = 5.0\n", "")], "publishers[0].rate", "missing required key"),
    (
        [('filters = ["family = 1", "family = 2"]\n', "")],
        "subscribers[0].filters",
        "missing required key",
    ),
    # the brokers must form one tree
    (
        [("id = 3\nparent = 1", "id = 2\nparent = 1")],
        "brokers[2].id",
        "duplicate broker id 2 (also brokers[1])",
    ),
    (
        [("id = 3\nparent = 1", "id = 3\nparent = 99")],
        "brokers[2].parent",
        "broker 99 does not exist",
    ),
    (
        [("id = 3\nparent = 1", "id = 3")],
        "brokers",
        "a topology is one tree, but brokers 1, 3 have no parent",
    ),
    (
        [
            ("id = 2\nparent = 1", "id = 2\nparent = 3"),
            ("id = 3\nparent = 1", "id = 3\nparent = 2"),
        ],
        "brokers[1].parent",
        "cycle 2 -> 3 -> 2",
    ),
    ([("id = 3\nparent = 1", "id = 3\nparent = 3")], "brokers[2].parent", "cycle 3 -> 3"),
    (
        [("[[brokers]]\nid = 1\n", "[[brokers]]\nid = 1\nparent = 2\n")],
        "brokers",
        "no root: every broker has a parent",
    ),
    # ports and addresses
    (
        [("id = 3\nparent = 1", "id = 3\nparent = 1\nport = 70000")],
        "brokers[2].port",
        "must be at most 65535",
    ),
    (
        [("id = 3\nparent = 1", "id = 3\nparent = 1\nport = 0")],
        "brokers[2].port",
        "must be at least 1",
    ),
    (
        [("base_port = 7000", "base_port = 65534")],
        "brokers[1]",
        "port base_port + id = 65536 is out of range 1..65535",
    ),
    (
        [("id = 3\nparent = 1", "id = 3\nparent = 1\nport = 7002")],
        "brokers[2]",
        "address 127.0.0.1:7002 is also used by broker 2 (brokers[1])",
    ),
    (
        [('routing = "hierarchical"', 'routing = "gossip"')],
        "routing",
        "must be one of 'hierarchical', 'acyclic', 'flooding', got 'gossip'",
    ),
    # clients
    ([("broker = 2\nrate", "broker = 9\nrate")], "publishers[0].broker", "broker 9 does not exist"),
    (
        [("broker = 3\nfilters", "broker = 0\nfilters")],
        "subscribers[0].broker",
        "broker 0 does not exist",
    ),
    (
        [("id = 2\nbroker = 3\nrate", "id = 1\nbroker = 3\nrate")],
        "publishers[1].id",
        "duplicate publisher id 1",
    ),
    (
        [
            (
                "[[scenarios]]",
                '[[subscribers]]\nid = 1\nbroker = 2\nfilters = ["true"]\n[[scenarios]]',
            )
        ],
        "subscribers[1].id",
        "duplicate subscriber id 1",
    ),
    ([("rate = 5.0", "rate = -1.0")], "publishers[0].rate", "must be at least 0"),
    ([("rate = 5.0", "rate = nan")], "publishers[0].rate", "must be finite"),
    ([("rate = 5.0", "rate = inf")], "publishers[0].rate", "must be finite"),
    (
        [('arrival = "constant"', 'arrival = "bursty"')],
        "publishers[1].arrival",
        "must be one of 'poisson', 'constant', got 'bursty'",
    ),
    (
        [('filters = ["family = 1", "family = 2"]', "filters = []")],
        "subscribers[0].filters",
        "must be a non-empty list of filter strings",
    ),
    (
        [('filters = ["family = 1", "family = 2"]', 'filters = "family = 1"')],
        "subscribers[0].filters",
        "must be a non-empty list of filter strings",
    ),
    (
        [('filters = ["family = 1", "family = 2"]', 'filters = ["family = 1", 2]')],
        "subscribers[0].filters[1]",
        "must be a string, got an integer",
    ),
    (
        [('filters = ["family = 1", "family = 2"]', 'filters = ["family = 1", " "]')],
        "subscribers[0].filters[1]",
        "must not be empty",
    ),
    # scenarios
    (
        [("rates = { 1 = 2.0 }", "rates = { 7 = 2.0 }")],
        "scenarios[0].rates.7",
        "publisher 7 does not exist",
    ),
    (
        [("rates = { 1 = 2.0 }", "rates = { x = 2.0 }")],
        "scenarios[0].rates",
        "key 'x' is not a publisher id (an integer)",
    ),
    (
        [("rates = { 1 = 2.0 }", "rates = { 1 = -2.0 }")],
        "scenarios[0].rates.1",
        "must be at least 0",
    ),
    (
        [("rates = { 1 = 2.0 }", "rates = { 1 = 2.0, 01 = 3.0 }")],
        "scenarios[0].rates.01",
        "publisher 1 is given twice",
    ),
    (
        [("rates = { 1 = 2.0 }", "rates = 3")],
        "scenarios[0].rates",
        "must be a table, got an integer",
    ),
    ([("rate_scale = 2.0", "rate_scale = 0")], "scenarios[0].rate_scale", "must be more than 0"),
    ([("rate_scale = 2.0", "rate_scale = -1.5")], "scenarios[0].rate_scale", "must be more than 0"),
    (
        [("rates = { 1 = 2.0 }\n", 'rates = { 1 = 2.0 }\n\n[[scenarios]]\nname = "s"\n')],
        "scenarios[1].name",
        "duplicate scenario name 's'",
    ),
]


@pytest.mark.parametrize(("replacements", "field", "problem"), BAD_CASES)
def test_invalid_file_names_file_and_field(
    tmp_path: Path, replacements: list[tuple[str, str]], field: str, problem: str
) -> None:
    path = write(tmp_path, edited(*replacements), name="bad.toml")
    with pytest.raises(TopologyError) as info:
        load_case_study(path)
    assert (info.value.file, info.value.field) == (str(path), field)
    assert str(info.value).startswith(f"{path}: {field}: ")
    assert problem in str(info.value)


def test_toml_syntax_error_gives_the_line(tmp_path: Path) -> None:
    line = VALID.splitlines().index("rate = 5.0") + 1
    path = write(tmp_path, edited(("rate = 5.0", "rate = = 5.0")), name="bad.toml")
    with pytest.raises(TopologyError, match=rf"bad\.toml: invalid TOML: .*\bline {line}\b"):
        load_case_study(path)


def test_a_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    plain = write(tmp_path, VALID, name="plain.toml")
    marked = tmp_path / "marked.toml"
    marked.write_bytes(codecs.BOM_UTF8 + VALID.encode())
    assert load_case_study(marked).topology.brokers == load_case_study(plain).topology.brokers


def test_toml_nested_past_the_parsers_depth_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, VALID + "deep = " + "[" * 5000 + "]" * 5000 + "\n", name="deep.toml")
    with pytest.raises(TopologyError, match=r"deep\.toml: invalid TOML: nested too deeply"):
        load_case_study(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match=r"missing\.toml: cannot read"):
        load_topology(tmp_path / "missing.toml")


# --- generators -----------------------------------------------------------------------


def test_kary_tree_numbering() -> None:
    topo = kary_tree(3, 2)
    assert len(topo.brokers) == 13 and topo.name == "tree13"
    assert topo.children(1) == [2, 3, 4]
    assert topo.children(2) == [5, 6, 7]
    assert topo.children(4) == [11, 12, 13]
    assert topo.address(13) == ("127.0.0.1", 7013)


def test_binary_tree_children_are_2j_and_2j_plus_1() -> None:
    topo = binary_tree(4)
    assert len(topo.brokers) == 31
    assert all(topo.children(j) == [2 * j, 2 * j + 1] for j in range(1, 16))
    assert binary_tree(0).brokers == {1: BrokerSpec(1, None, "127.0.0.1", 7001)}


def test_chain() -> None:
    topo = chain(4)
    assert topo.tree_path(4, 1) == [4, 3, 2, 1]
    assert topo.root() == 1


@pytest.mark.parametrize(
    "call",
    [
        lambda: kary_tree(0, 2),
        lambda: binary_tree(-1),
        lambda: chain(0),
        lambda: chain(10, base_port=65530),
    ],
)
def test_generator_arguments_are_checked(call) -> None:
    with pytest.raises(ValueError):
        call()


def odd_topology() -> Topology:
    """Quotes, escapes and per-broker host/port overrides, to stress `to_toml`."""
    base = chain(3, name='odd "name" \\ with\ttab\x7f', host="h\u00e9.example")
    brokers = dict(base.brokers)
    brokers[2] = BrokerSpec(2, 1, "10.0.0.5", 9000)
    return Topology(base.name, base.host, base.base_port, "flooding", brokers)


@pytest.mark.parametrize(
    "topology",
    [binary_tree(0), binary_tree(3), kary_tree(3, 2), chain(4), odd_topology()],
    ids=["single", "binary3", "kary3x2", "chain4", "odd"],
)
def test_topology_round_trip(tmp_path: Path, topology: Topology) -> None:
    assert load_topology(write(tmp_path, to_toml(topology))) == topology


@pytest.mark.parametrize("name", SHIPPED)
def test_case_study_round_trip(tmp_path: Path, name: str) -> None:
    study = load_case_study(shipped_path(name))
    assert load_case_study(write(tmp_path, to_toml(study))) == study


def test_valid_case_study_round_trip(tmp_path: Path) -> None:
    study = load_case_study(write(tmp_path, VALID))
    assert load_case_study(write(tmp_path, to_toml(study), name="again.toml")) == study
