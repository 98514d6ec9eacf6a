"""SPECjms2007's vertical topology as a hop case study (docs/specjms.md).

    python -m topologies.specjms [--base N] > topologies/specjms_vertical.toml

writes the case-study file; the shipped file is this module's output for BASE 1
(tests/test_specjms.py checks that regenerating it gives the same bytes).

Sources, cited below by these labels:

* "004": the SPECjms2007 design document (Standard Performance Evaluation
  Corporation, 2007). Section 1.2.2 / 2.2 (the seven
  interactions), Table 1 (queues and topics), Table 2 (message types, destination
  kind, delivery mode), Table 5 (the vertical topology: locations and rates per
  BASE, message-size parameters).
* "001": Sachs, Kounev, Bacon, Buchmann, "Performance evaluation of message-oriented
  middleware using the SPECjms2007 benchmark", Performance Evaluation 2009.
  Section 4.1.2 (traffic equations: messages per interaction and per location),
  Table 2 (message-size formulas), Table 3 (message groups a-d), Table 5 (message
  sizes in KB), Table 6(b) (the vertical message mix), Table 7 and section 4.3
  (the vertical topology's rules and rate factors).

Mapping. Every JMS message becomes one event whose ``type`` is the message name of
004 Table 2 (`pShipment` is 001's `pShipInfo`) and which carries the locations it
concerns as integer attributes ``sm``, ``dc``, ``sp``, ``hq`` and its interaction
number. A queue is a subscription on the type and the receiving location
(``type = "order" and dc = 1`` is DC 1's DC_OrderQ); a topic is a subscription on
the type, and the per-family topics HQ_ProductFamily<n>T of interaction 2 are
``type = "callForOffers" and family = n``. The benchmark's interactions are
closed loops (an order causes a confirmation); a replay drives open loops: each
location publishes each message it sends as an independent Poisson stream at the
rate 001's traffic equations give, to a receiver drawn uniformly where the
benchmark picks one (the SM a DC ships to, the SP a DC orders from, the HQ
instance a statistic goes to, the DC an offer answers).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import product

# --- the vertical topology (004 Table 5; 001 section 4.3 rules (1)-(7)) ----------------

SMS = 10  # No. of SMs
SMS_PER_DC = 5  # SMs per DC, so |DC| = 10 / 5 = 2 (001 rule (2))
DCS = SMS // SMS_PER_DC
SPS = 5  # No. of SPs
HQS = 2  # No. of HQs (instances of the one HQ location; 001 section 4.1.2)
FAMILIES = 100  # No. of product families (topics)
RHO = 0.5  # product families offered per SP: 50 %
ZETA = SPS * RHO  # SPs subscribed to a family, on average (001 section 4.1.2)

# Interaction rates per BASE: lambda_i = c_i * BASE (004 Table 5, 001 Table 7). Rates of
# interactions 1, 4, 5 are per SM, of 2 per DC, of 3, 6, 7 over all HQ instances.
C = {
    1: 0.076190476,
    2: 0.106666667,
    3: 0.050000000,
    4: 0.162162162,
    5: 0.577200577,
    6: 0.142314991,
    7: 0.102564103,
}

# Message name -> (interaction, group of 001 Table 3, sizes in KB drawn 95 / 4 / 1 %).
# Groups: a = pub/sub NP NT ND, b = pub/sub P T D, c = P2P NP NT, d = P2P P T
# (delivery modes from 004 Table 2). Sizes from 001 Table 5, except statInfoSM:
# 001 Table 2's formula x * (m1 + m2 * y) + b with x = 5 cash desks and y = 2, 7, 13
# sales lines (004 Table 5: SM_Interaction5DR.msg.size.1-3), which gives 001's
# "between 4.7 and 24.78 KB, average 5.27 KB".
MESSAGES: dict[str, tuple[int, str, tuple[float, ...]]] = {
    "order": (1, "d", (1.74, 7.10, 41.01)),
    "orderConf": (1, "d", (2.02, 7.39, 41.29)),
    "shipDep": (1, "d", (1.12, 8.59, 55.79)),
    "statInfoOrderDC": (1, "c", (0.22, 1.67, 10.83)),
    "shipInfo": (1, "d", (1.28, 8.76, 55.95)),
    "shipConf": (1, "d", (0.81, 2.73, 14.83)),
    "callForOffers": (2, "b", (1.35, 7.06, 36.52)),
    "offer": (2, "d", (1.69, 9.65, 50.71)),
    "pOrder": (2, "d", (1.86, 9.85, 51.07)),
    "pOrderConf": (2, "d", (2.07, 9.79, 49.56)),
    "invoice": (2, "d", (1.70, 7.92, 39.95)),
    "pShipment": (2, "d", (0.98, 3.62, 17.26)),
    "pShipConf": (2, "d", (1.01, 3.65, 17.29)),
    "statInfoShipDC": (2, "c", (1.02, 3.68, 17.38)),
    "priceUpdate": (3, "b", (0.24,)),
    "inventoryInfo": (4, "d", (1.48, 10.22, 49.03)),
    "statInfoSM": (5, "c", (4.70, 13.83, 24.78)),
    "productAnnouncement": (6, "a", (1.21, 0.28, 10.51)),
    "creditCardHL": (7, "a", (1.01, 8.49, 50.00)),
}
SIZE_WEIGHTS = (95, 4, 1)  # 004 Table 5: *.msg.prob.1-3

# Scenarios: BASE values. The file's own rates are BASE 1; base40 is the loaded one
# (replayed on a 2-core machine without loss: docs/specjms.md).
SCENARIO_BASES = (1, 5, 20, 40)
LOADED_BASE = 40

BASE_PORT = 7400


# --- locations, brokers, clients ---------------------------------------------------------


def dc_of(sm: int) -> int:
    return (sm - 1) // SMS_PER_DC + 1


def sms_of(dc: int) -> list[int]:
    return [sm for sm in range(1, SMS + 1) if dc_of(sm) == dc]


def sps_offering(family: int) -> list[int]:
    """SPs subscribed to a family: 3 consecutive SPs for odd families, 2 for even ones,
    starting at SP (family mod 5) + 1, so every SP offers exactly 50 of the 100 families
    (rho = 50 %) and zeta = 2.5 SPs answer a call for offers on average (001 4.1.2)."""
    count = 3 if family % 2 else 2
    return [(family + k) % SPS + 1 for k in range(count)]


def families_of(sp: int) -> list[int]:
    return [f for f in range(1, FAMILIES + 1) if sp in sps_offering(f)]


# Broker ids: the HQ at the root, a broker per DC below it with a broker per SM
# below that, and a broker per SP (external companies) below the HQ.
HQ_BROKER = 1


def dc_broker(dc: int) -> int:
    return 1 + dc


def sm_broker(sm: int) -> int:
    return 1 + DCS + sm


def sp_broker(sp: int) -> int:
    return 1 + DCS + SMS + sp


def parent(broker: int) -> int | None:
    if broker == HQ_BROKER:
        return None
    if broker <= 1 + DCS:
        return HQ_BROKER
    if broker <= 1 + DCS + SMS:
        return dc_broker(dc_of(broker - 1 - DCS))
    return HQ_BROKER


BROKERS = list(range(1, 2 + DCS + SMS + SPS))
ROLE = (
    {HQ_BROKER: "HQ"}
    | {dc_broker(d): f"DC {d}" for d in range(1, DCS + 1)}
    | {sm_broker(s): f"SM {s}" for s in range(1, SMS + 1)}
    | {sp_broker(p): f"SP {p}" for p in range(1, SPS + 1)}
)

# One publisher and one subscriber (same id) per location: SMs 1-10, DCs 11-12,
# SPs 13-17, HQ instances 18-19 (all HQ instances on the HQ broker).
LOCATIONS: list[tuple[str, int]] = (
    [("sm", s) for s in range(1, SMS + 1)]
    + [("dc", d) for d in range(1, DCS + 1)]
    + [("sp", p) for p in range(1, SPS + 1)]
    + [("hq", h) for h in range(1, HQS + 1)]
)


def client_id(kind: str, number: int) -> int:
    return LOCATIONS.index((kind, number)) + 1


def broker_of(kind: str, number: int) -> int:
    return {"sm": sm_broker, "dc": dc_broker, "sp": sp_broker, "hq": lambda _: HQ_BROKER}[kind](
        number
    )


@dataclass
class Flow:
    """One message a location sends, as a Poisson stream: rate per BASE, attributes."""

    message: str
    rate: float
    attributes: dict[str, int]
    choose: dict[str, list[int]] = field(default_factory=dict)
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    note: str = ""

    def events(self) -> Iterator[tuple[float, dict[str, object]]]:
        """(probability, attributes) over every equally likely draw of choose / ranges."""
        axes = [[(n, v) for v in values] for n, values in self.choose.items()]
        axes += [[(n, v) for v in range(lo, hi + 1)] for n, (lo, hi) in self.ranges.items()]
        combos = list(product(*axes))
        for combo in combos:
            yield 1 / len(combos), {"type": self.message, **self.attributes, **dict(combo)}


def flows(kind: str, number: int) -> list[Flow]:
    """What a location sends, per BASE (001 section 4.1.2, chi equations)."""
    c = C
    hqs = list(range(1, HQS + 1))
    if kind == "sm":  # chi_SM: sends c: lambda5, d: 2 lambda1 + lambda4
        d = dc_of(number)
        return [
            Flow("order", c[1], {"interaction": 1, "sm": number, "dc": d}, note="to its DC"),
            Flow("shipConf", c[1], {"interaction": 1, "sm": number, "dc": d}, note="to its DC"),
            Flow("inventoryInfo", c[4], {"interaction": 4, "sm": number}, note="to itself"),
            Flow("statInfoSM", c[5], {"interaction": 5, "sm": number}, {"hq": hqs}),
        ]
    if kind == "dc":  # chi_DC: sends b: lambda2, c: delta l1 + l2, d: 3 l1 delta + 2 l2
        delta = SMS_PER_DC
        sms = sms_of(number)
        sps = list(range(1, SPS + 1))
        at = {"interaction": 1, "dc": number}
        at2 = {"interaction": 2, "dc": number}
        return [
            Flow("orderConf", delta * c[1], at, {"sm": sms}, note="to the SM that ordered"),
            Flow("shipDep", delta * c[1], at, {"sm": sms}, note="to itself (RFID, leaving DC)"),
            Flow("shipInfo", delta * c[1], at, {"sm": sms}, note="to the SM shipped to"),
            Flow("statInfoOrderDC", delta * c[1], at, {"sm": sms, "hq": hqs}),
            Flow("callForOffers", c[2], at2, ranges={"family": (1, FAMILIES)}, note="topic"),
            Flow("pOrder", c[2], at2, {"sp": sps}, note="to the SP whose offer won"),
            Flow("pShipConf", c[2], at2, {"sp": sps}, note="to the SP that shipped"),
            Flow("statInfoShipDC", c[2], at2, {"sp": sps, "hq": hqs}),
        ]
    if kind == "sp":  # chi_SP: sends d: rho l2 |DC| + 3 l2 |DC| / |SP|
        dcs = list(range(1, DCS + 1))
        at = {"interaction": 2, "sp": number}
        won = c[2] * DCS / SPS  # offers accepted per SP
        return [
            Flow("offer", RHO * c[2] * DCS, at, {"dc": dcs}, note="answers a callForOffers"),
            Flow("pOrderConf", won, at, {"dc": dcs}),
            Flow("invoice", won, at, {"dc": dcs, "hq": hqs}, note="to the HQ"),
            Flow("pShipment", won, at, {"dc": dcs}, note="arrives at the DC (RFID)"),
        ]
    # HQ: chi_HQ sends a: lambda6 + lambda7, b: lambda3, over all HQ instances
    return [
        Flow(
            "priceUpdate",
            c[3] / HQS,
            {"interaction": 3, "hq": number},
            ranges={"family": (1, FAMILIES)},
            note="topic",
        ),
        Flow(
            "productAnnouncement",
            c[6] / HQS,
            {"interaction": 6, "hq": number},
            ranges={"family": (1, FAMILIES)},
            note="topic",
        ),
        Flow("creditCardHL", c[7] / HQS, {"interaction": 7, "hq": number}, note="topic"),
    ]


def filters(kind: str, number: int) -> list[str]:
    """A location's queues (type and its own id) and topics (004 Table 1)."""

    def queues(*messages: str) -> list[str]:
        return [f'type = "{m}" and {kind} = {number}' for m in messages]

    if kind == "sm":
        topics = ("priceUpdate", "productAnnouncement", "creditCardHL")
        return queues("orderConf", "shipInfo", "inventoryInfo") + [f'type = "{t}"' for t in topics]
    if kind == "dc":
        return queues("order", "shipDep", "shipConf", "offer", "pOrderConf", "pShipment")
    if kind == "sp":
        return queues("pOrder", "pShipConf") + [
            f'type = "callForOffers" and family = {f}' for f in families_of(number)
        ]
    return queues("statInfoOrderDC", "statInfoShipDC", "invoice", "statInfoSM")


def receivers(event: dict[str, object]) -> list[tuple[str, int]]:
    """The locations an event goes to, from the message's destination (004 Table 1)."""
    kind = {
        "order": "dc",
        "shipDep": "dc",
        "shipConf": "dc",
        "offer": "dc",
        "pOrderConf": "dc",
        "pShipment": "dc",
        "orderConf": "sm",
        "shipInfo": "sm",
        "inventoryInfo": "sm",
        "pOrder": "sp",
        "pShipConf": "sp",
        "statInfoOrderDC": "hq",
        "statInfoShipDC": "hq",
        "invoice": "hq",
        "statInfoSM": "hq",
    }.get(str(event["type"]))
    if kind is not None:
        return [(kind, int(event[kind]))]  # type: ignore[call-overload]
    if event["type"] == "callForOffers":
        return [("sp", p) for p in sps_offering(int(event["family"]))]  # type: ignore[call-overload]
    return [("sm", s) for s in range(1, SMS + 1)]  # the HQ's topics reach every SM


# --- expected traffic (acyclic routing) ---------------------------------------------------


def tree_path(a: int, b: int) -> list[int]:
    def up(x: int) -> list[int]:
        path = [x]
        while (p := parent(path[-1])) is not None:
            path.append(p)
        return path

    ua, ub = up(a), up(b)
    meet = next(x for x in ua if x in ub)
    return ua[: ua.index(meet) + 1] + ub[: ub.index(meet)][::-1]


def expected_rates(base: float = 1.0) -> dict[str, dict]:
    """Per BASE-scaled rates: events published, delivered (per message group of 001
    Table 3) and arriving at each broker under acyclic routing (an event visits its
    home broker and the tree paths from it to the brokers of its receivers)."""
    published = 0.0
    delivered = {g: 0.0 for g in "abcd"}
    kb_delivered = {g: 0.0 for g in "abcd"}
    brokers = {b: 0.0 for b in BROKERS}
    for kind, number in LOCATIONS:
        home = broker_of(kind, number)
        for flow in flows(kind, number):
            rate = flow.rate * base
            published += rate
            _, group, sizes = MESSAGES[flow.message]
            mean_kb = sum(s * w for s, w in zip(sizes, SIZE_WEIGHTS, strict=False)) / sum(
                SIZE_WEIGHTS[: len(sizes)]
            )
            for p, event in flow.events():
                targets = receivers(event)
                delivered[group] += rate * p * len(targets)
                kb_delivered[group] += rate * p * len(targets) * mean_kb
                visits = {home}
                for t in targets:
                    visits.update(tree_path(home, broker_of(*t)))
                for b in visits:
                    brokers[b] += rate * p
    return {
        "published": {"total": published},
        "delivered": delivered,
        "kb_delivered": kb_delivered,
        "brokers": brokers,
    }


# --- the TOML file ----------------------------------------------------------------------


def _num(x: float, digits: int = 9) -> str:
    return repr(round(x, digits))


def render(base: float = 1.0) -> str:
    """The case-study file with the rates of `base` and scenarios for SCENARIO_BASES."""
    unit = expected_rates(1.0)
    lines = _header(base, unit)
    lines += [
        'name = "specjms_vertical"',
        'host = "127.0.0.1"',
        f"base_port = {BASE_PORT}",
        'routing = "acyclic"',
        "",
        "# HQ at the root; DC brokers below it with their SMs' brokers below them;",
        "# the SPs (external companies) each on a broker below the HQ.",
    ]
    for b in BROKERS:
        lines += ["", "[[brokers]]", f"id = {b}  # {ROLE[b]}"]
        if parent(b) is not None:
            lines.append(f"parent = {parent(b)}")
    lines += [
        "",
        "# event_type and families only apply to publishers without an event mix (none",
        "# here); the families of the events below are in their `ranges`.",
        "[workload]",
        'event_type = "callForOffers"',
        f"families = {FAMILIES}",
        "duration_s = 60",
        "warmup_s = 5",
        "drain_s = 2.0",
        "seed = 1",
        "",
        f"# One publisher per location; `rate` is BASE {base:g}. Each [[publishers.events]]",
        "# is one message the location sends; its weight is its rate per BASE (events/s",
        "# at BASE 1), from 001's chi equations with the c_i of 001 Table 7.",
    ]
    for kind, number in LOCATIONS:
        fl = flows(kind, number)
        total = sum(f.rate for f in fl) * base
        lines += [
            "",
            "[[publishers]]",
            f"id = {client_id(kind, number)}  # {kind.upper()} {number}",
            f"broker = {broker_of(kind, number)}",
            f"rate = {_num(total)}",
            'arrival = "poisson"',
        ]
        for f in fl:
            interaction, group, sizes = MESSAGES[f.message]
            note = f", {f.note}" if f.note else ""
            lines += [
                "",
                "[[publishers.events]]",
                f'type = "{f.message}"  # interaction {interaction}, group {group}{note}',
                f"weight = {_num(f.rate)}",
                "attributes = {" + ", ".join(f"{k} = {v}" for k, v in f.attributes.items()) + "}",
            ]
            if f.choose:
                lines.append(
                    "choose = {"
                    + ", ".join(f"{k} = [{', '.join(map(str, v))}]" for k, v in f.choose.items())
                    + "}"
                )
            if f.ranges:
                lines.append(
                    "ranges = {"
                    + ", ".join(f"{k} = [{lo}, {hi}]" for k, (lo, hi) in f.ranges.items())
                    + "}"
                )
            lines.append(f"sizes_kb = [{', '.join(f'{s:.2f}' for s in sizes)}]")
            lines.append(f"size_weights = [{', '.join(map(str, SIZE_WEIGHTS[: len(sizes)]))}]")
    lines += [
        "",
        "# One subscriber per location: a filter per queue (type and the location's own",
        "# id) and per topic; SPs subscribe to the families they offer.",
    ]
    for kind, number in LOCATIONS:
        fs = filters(kind, number)
        lines += [
            "",
            "[[subscribers]]",
            f"id = {client_id(kind, number)}  # {kind.upper()} {number}",
            f"broker = {broker_of(kind, number)}",
            "filters = [",
        ]
        queues = [t for t in fs if "family" not in t]
        topics = [t for t in fs if "family" in t]
        lines += [f"    '{text}'," for text in queues]
        lines += [
            "    " + " ".join(f"'{text}'," for text in topics[i : i + 2])
            for i in range(0, len(topics), 2)
        ]
        lines.append("]")
    lines += ["", "# Scenarios: BASE values (rates are linear in BASE)."]
    for b in SCENARIO_BASES:
        lines += ["", "[[scenarios]]", f'name = "base{b}"', f"rate_scale = {_num(b / base)}"]
    return "\n".join(lines) + "\n"


def _header(base: float, unit: dict[str, dict]) -> list[str]:
    total_delivered = sum(unit["delivered"].values())
    total_kb = sum(unit["kb_delivered"].values())
    mix = "  ".join(f"{g} {100 * unit['delivered'][g] / total_delivered:.2f}" for g in "abcd")
    kb = "  ".join(f"{g} {100 * unit['kb_delivered'][g] / total_kb:.2f}" for g in "abcd")
    lines = [
        "# SPECjms2007's supermarket supply chain, vertical topology, as content-based",
        f"# events (docs/specjms.md). Generated: `python -m topologies.specjms --base {base:g}`;",
        "# edit topologies/specjms.py, not this file. Sources:",
        "#   004 = SPECjms2007 design document; 001 = Sachs et al., Performance Evaluation",
        "#   2009 (section 4 and Tables 2-7).",
        "#",
        "# Locations (004 Table 5, 001 section 4.3 rules (1)-(6)): 10 SMs, 5 SMs per DC",
        "# so 2 DCs, 5 SPs, 2 HQ instances, 100 product families, each SP offering 50 %",
        "# of them. Brokers: 1 = HQ (root, both HQ instances), 2-3 = DC 1-2, 4-8 = SMs",
        "# 1-5 (under DC 1), 9-13 = SMs 6-10 (under DC 2), 14-18 = SPs 1-5 (under HQ).",
        "# Acyclic routing: events travel only towards subscribers, so an order from SM",
        "# 3 to DC 1 crosses brokers 6 -> 2 and never reaches the HQ.",
        "#",
        "# Interactions (004 section 2.2, 001 section 3.3) and their rates per BASE,",
        "# lambda_i = c_i * BASE (004 Table 5 = 001 Table 7): 1 order/shipment SM-DC",
        "# (c1 = 0.076190476 per SM), 2 purchase order DC-SP with callForOffers on a",
        "# topic per product family (c2 = 0.106666667 per DC), 3 priceUpdate topic",
        "# (c3 = 0.05), 4 SM inventoryInfo (c4 = 0.162162162 per SM), 5 statInfoSM to",
        "# HQ (c5 = 0.577200577 per SM), 6 productAnnouncement topic (c6 = 0.142314991),",
        "# 7 creditCardHL topic (c7 = 0.102564103); 3, 6, 7 over all HQ instances.",
        "# Messages per interaction and location: 001 section 4.1.2 (xi / chi equations).",
        "# Event types, destinations, delivery modes: 004 Tables 1-2 (group a = pub/sub",
        "# NP NT ND, b = pub/sub P T D, c = P2P NP NT, d = P2P P T: 001 Table 3). Sizes:",
        "# 001 Table 5 (95 / 4 / 1 %, 004 Table 5's msg.prob), statInfoSM from 001 Table 2.",
        "#",
        "# Event attributes: type (message name), interaction, the locations concerned",
        "# (sm, dc, sp, hq: integers), family (callForOffers, priceUpdate,",
        "# productAnnouncement), size_kb and an opaque payload of that size. A queue is",
        '# `type = "order" and dc = 1`, a topic `type = "priceUpdate"`, family topic n',
        '# `type = "callForOffers" and family = n`. Open loops: each location publishes',
        "# each message it sends as its own Poisson stream (see topologies/specjms.py).",
        "#",
        "# Expected at BASE 1 (tests/test_specjms.py recomputes these from this file):",
        f"#   published {unit['published']['total']:.4f} events/s, delivered "
        f"{total_delivered:.4f}/s ({total_kb:.2f} KB/s);",
        f"#   delivery mix by group, %: {mix}",
        "#     (001 Table 6(b), achieved: a 14.19  b 5.99  c 39.09  d 40.74)",
        f"#   bandwidth mix, %:         {kb}",
        "#     (001 Table 6(b):           a 7.19  b 2.25  c 61.03  d 29.52)",
        "#   events arriving per broker per BASE, acyclic routing:",
    ]
    rates = unit["brokers"]
    groups = [
        ("HQ", [HQ_BROKER]),
        ("DC", [dc_broker(d) for d in range(1, DCS + 1)]),
        ("SM", [sm_broker(s) for s in range(1, SMS + 1)]),
        ("SP", [sp_broker(p) for p in range(1, SPS + 1)]),
    ]
    for role, ids in groups:
        values = sorted({round(rates[b], 4) for b in ids})
        which = f"broker {ids[0]}" if len(ids) == 1 else f"brokers {ids[0]}-{ids[-1]}"
        lines.append(f"#     {role} {which}: " + " / ".join(f"{v:.4f}" for v in values))
    lines += [
        "#   (multiply by BASE; the scenarios below give BASE "
        + ", ".join(map(str, SCENARIO_BASES[:-1]))
        + f" and {SCENARIO_BASES[-1]}, and",
        "#   `hop replay ... --scenario base1 --rate-scale N` runs any BASE N).",
        f"# base{LOADED_BASE} is the loaded scenario: "
        f"{unit['published']['total'] * LOADED_BASE:.0f} events/s published, "
        f"{rates[HQ_BROKER] * LOADED_BASE:.0f}/s at the HQ broker",
        "# (replays on a 2-core machine: docs/specjms.md).",
        "",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m topologies.specjms", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--base", type=float, default=1.0, help="SPECjms2007's BASE for the file's rates"
    )
    args = parser.parse_args(argv)
    if not args.base > 0:
        parser.error("--base must be positive")
    sys.stdout.write(render(args.base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
