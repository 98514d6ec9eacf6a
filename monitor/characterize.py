"""What the performance model needs from one characterization run, read from its
traces and manifest (the measurement window only).

Everything here stays constant when only the publication rates change (thesis
4.1: the workload is characterized once, rates are the model's input):

* per broker, the time one event holds it (decoding and routing, from the hop
  rows), and its *overhead*: the rest of the process's CPU per event (process
  CPU in the window / events, minus the held time). Measured on tree7 at ~90
  events/s the process used about five times the routing CPU per event: waking
  up, reading and writing sockets, trio's scheduler. That work is not on the
  event's own path (the traced link delays are tens of microseconds), so the
  model does not add it to the event's service; it loads the host's cores
  instead (a background load proportional to the brokers' throughput);
* the dissemination trees of each publisher, with the subscribers each tree
  delivers to at each broker, and their frequencies;
* the delays that are not CPU queues: broker-to-broker links (done at one broker
  to arrival at the next), publish (client hand-over to arrival at the home
  broker) and delivery (done at the last broker to the subscriber's receipt);
* the CPU the client process spends per event (a background load on the host);
* with every service time and delay sample, the idle gap its receiving process had
  before it, and each process's event rate: `monitor.warmth` uses them to carry
  samples taken at a low rate over to a higher one.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from monitor.errors import InputError
from monitor.measured import in_measurement
from monitor.traces import MEASURE_WINDOW, read_manifest, read_table
from monitor.warmth import gaps_since, idle_gaps

Tree = tuple[tuple[tuple[str, str], ...], tuple[tuple[str, tuple[str, ...]], ...]]
"""(sorted (from, to) edges, sorted (broker, subscribers delivered there))."""

CHARACTERIZED = (*MEASURE_WINDOW, "phases.cpu_s", "host.cores")
"""The manifest fields a characterization reads (`monitor.traces.MANIFEST_FIELDS`)."""


@dataclass
class Characterization:
    run_dir: Path
    manifest: dict[str, Any]
    brokers: list[str]
    service_ns: dict[str, np.ndarray]
    service_by_fanout: dict[str, dict[int, np.ndarray]]
    overhead_ns: dict[str, float]  # CPU per event off the event's path (see module doc)
    home: dict[str, str]  # publisher -> its broker
    trees: dict[str, list[tuple[float, Tree]]]  # publisher -> (share, tree)
    link_delay_ns: np.ndarray
    publish_delay_ns: np.ndarray
    deliver_delay_ns: np.ndarray
    # The receiving process's idle gap before each sample (aligned with the samples
    # above); which broker sent and received each link sample, received each publish
    # sample, and which publisher's event each delivery sample took to which subscriber.
    service_gap_ns: dict[str, np.ndarray]
    service_by_fanout_gap_ns: dict[str, dict[int, np.ndarray]]
    link_gap_ns: np.ndarray
    link_broker: np.ndarray
    publish_gap_ns: np.ndarray
    publish_broker: np.ndarray
    deliver_gap_ns: np.ndarray
    link_sender: np.ndarray
    deliver_subscriber: np.ndarray
    deliver_publisher: np.ndarray
    client_cpu_per_event_s: float  # client process CPU per publication (with its deliveries)
    # CPU seconds per second the run's processes (brokers and the client process) spent
    # in the window: how busy the host's cores were (`monitor.carry`); NaN when the
    # manifest has no per-process CPU figures.
    busy_cores: float
    rates: dict[str, float]  # measured publications per second, per publisher
    cores: int
    window_s: float
    problems: list[str] = field(default_factory=list)

    def stage_means_us(self) -> dict[str, float]:
        """The mean of each stage of an event's path (us): the link, publish and
        delivery delays, and each broker's service time (`service BROKER`)."""
        means = {
            "link": self.link_delay_ns.mean(),
            "publish": self.publish_delay_ns.mean(),
            "deliver": self.deliver_delay_ns.mean(),
            **{f"service {b}": samples.mean() for b, samples in self.service_ns.items()},
        }
        return {stage: float(mean) / 1e3 for stage, mean in means.items()}


def characterize(run_dir: Path) -> Characterization:
    """Read RUN_DIR's traces and manifest into model inputs."""
    manifest = read_manifest(run_dir, CHARACTERIZED)
    phases = manifest["phases"]
    lo, hi = phases["measure_start_ns"], phases["measure_end_ns"]
    window_s = (hi - lo) / 1e9
    hops_read = read_table(run_dir, "hops")
    hops = hops_read.table.to_pandas().sort_values(["broker", "t_arrival_ns"], kind="stable")
    hops["gap_ns"] = (
        np.concatenate(
            [
                idle_gaps(g["t_arrival_ns"].to_numpy(), g["t_done_ns"].to_numpy())
                for _, g in hops.groupby("broker", sort=False)
            ]
        )
        if len(hops)
        else np.array([])
    )
    pubs = read_table(run_dir, "publications").table.to_pandas()
    dels = read_table(run_dir, "deliveries").table.to_pandas()
    client_activity = np.concatenate(
        [pubs["t_publish_ns"].to_numpy(), dels["t_deliver_ns"].to_numpy()]
    )
    # Events published inside the window, followed wherever they went.
    in_window = set(pubs.loc[in_measurement(pubs["t_publish_ns"], lo, hi), "event_id"])
    hops = hops[hops["event_id"].isin(in_window)]
    dels = dels[dels["event_id"].isin(in_window)]
    pubs = pubs[pubs["event_id"].isin(in_window)]
    if hops.empty:
        raise InputError(f"{run_dir}: no events were published in the measurement window")

    hops = hops.assign(fanout=hops["to_nodes"].map(len) + hops["delivered_to"].map(len))
    brokers = sorted(hops["broker"].unique(), key=int)
    cpu_s = phases.get("cpu_s", {})
    service: dict[str, np.ndarray] = {}
    by_fanout: dict[str, dict[int, np.ndarray]] = {}
    overhead: dict[str, float] = {}
    service_gap: dict[str, np.ndarray] = {}
    by_fanout_gap: dict[str, dict[int, np.ndarray]] = {}
    for broker, rows in hops.groupby("broker"):
        # The time an event holds the broker: decoding (the wait of the first event
        # of a read) plus routing until its last send was queued.
        first = rows.loc[rows["batch_index"] == 0, "wait_ns"]
        decode = float(first.median()) if len(first) else 0.0
        held = (rows["t_done_ns"] - rows["t_start_ns"]).to_numpy(dtype=float) + decode
        service[broker] = held
        service_gap[broker] = rows["gap_ns"].to_numpy(dtype=float)
        by_fanout[broker], by_fanout_gap[broker] = {}, {}
        for k, g in rows.groupby("fanout"):
            by_fanout[broker][int(k)] = (g["t_done_ns"] - g["t_start_ns"]).to_numpy(
                dtype=float
            ) + decode
            by_fanout_gap[broker][int(k)] = g["gap_ns"].to_numpy(dtype=float)
        # Every hop row with t_arrival in the window was paid for in the window.
        arrived = in_measurement(rows["t_arrival_ns"], lo, hi).sum()
        total = cpu_s.get(broker)
        if total is not None and arrived:
            overhead[broker] = max(0.0, total * 1e9 / arrived - held.mean())
        else:
            overhead[broker] = 0.0

    home_rows = hops[hops["from_node"].str.startswith("client:")]
    home = dict(zip(home_rows["publisher"], home_rows["broker"], strict=False))
    trees = _trees(hops)
    delays = _delays(hops, home_rows, pubs, dels, client_activity)
    rates = (pubs.groupby("publisher").size() / window_s).to_dict()
    return Characterization(
        run_dir=run_dir,
        manifest=manifest,
        brokers=brokers,
        service_ns=service,
        service_by_fanout=by_fanout,
        overhead_ns=overhead,
        home=home,
        trees=trees,
        link_delay_ns=delays.link,
        publish_delay_ns=delays.publish,
        deliver_delay_ns=delays.deliver,
        service_gap_ns=service_gap,
        service_by_fanout_gap_ns=by_fanout_gap,
        link_gap_ns=delays.link_gap,
        link_broker=delays.link_broker,
        publish_gap_ns=delays.publish_gap,
        publish_broker=delays.publish_broker,
        deliver_gap_ns=delays.deliver_gap,
        link_sender=delays.link_sender,
        deliver_subscriber=delays.deliver_subscriber,
        deliver_publisher=delays.deliver_publisher,
        client_cpu_per_event_s=cpu_s.get("clients", 0.0) / max(1, len(pubs)),
        busy_cores=sum(cpu_s.values()) / window_s if cpu_s else float("nan"),
        rates=rates,
        cores=int(manifest["host"]["cores"]),
        window_s=window_s,
        problems=hops_read.problems,
    )


def _trees(hops: pd.DataFrame) -> dict[str, list[tuple[float, Tree]]]:
    """Per publisher, the distinct (edges, deliveries) of its events, with shares."""
    per_publisher: dict[str, Counter[Tree]] = defaultdict(Counter)
    columns = hops[["event_id", "publisher", "broker", "from_node", "delivered_to"]]
    for (publisher, _), rows in columns.groupby(["publisher", "event_id"], sort=False):
        edges = tuple(
            sorted(
                (f, b)
                for f, b in zip(rows["from_node"], rows["broker"], strict=True)
                if not f.startswith("client:")
            )
        )
        deliveries = tuple(
            sorted(
                (b, tuple(sorted(d)))
                for b, d in zip(rows["broker"], rows["delivered_to"], strict=True)
                if len(d)
            )
        )
        per_publisher[publisher][(edges, deliveries)] += 1
    out = {}
    for publisher, counter in per_publisher.items():
        total = sum(counter.values())
        out[publisher] = [(n / total, tree) for tree, n in counter.most_common()]
    return out


@dataclass
class _Delays:
    link: np.ndarray
    link_gap: np.ndarray
    link_broker: np.ndarray
    link_sender: np.ndarray
    publish: np.ndarray
    publish_gap: np.ndarray
    publish_broker: np.ndarray
    deliver: np.ndarray
    deliver_gap: np.ndarray
    deliver_subscriber: np.ndarray
    deliver_publisher: np.ndarray


def _delays(
    hops: pd.DataFrame,
    home_rows: pd.DataFrame,
    pubs: pd.DataFrame,
    dels: pd.DataFrame,
    client_activity: np.ndarray,
) -> _Delays:
    """The pure delays, each with its receiver's idle gap (and its link's brokers, its
    home broker or its publisher and subscriber)."""
    done = hops.set_index(["event_id", "broker"])["t_done_ns"]
    forwarded = hops[~hops["from_node"].str.startswith("client:")]
    sent = done.reindex(list(zip(forwarded["event_id"], forwarded["from_node"], strict=True)))
    link = forwarded["t_arrival_ns"].to_numpy() - sent.to_numpy()
    published = pubs.set_index("event_id")["t_publish_ns"]
    publish = (
        home_rows["t_arrival_ns"].to_numpy() - published.reindex(home_rows["event_id"]).to_numpy()
    )
    last = done.reindex(list(zip(dels["event_id"], dels["broker"], strict=True))).to_numpy()
    deliver = dels["t_deliver_ns"].to_numpy() - last
    link_keep, publish_keep, deliver_keep = _valid(link), _valid(publish), _valid(deliver)
    return _Delays(
        link=np.maximum(link[link_keep].astype(float), 0.0),
        link_gap=forwarded["gap_ns"].to_numpy(dtype=float)[link_keep],
        link_broker=forwarded["broker"].to_numpy()[link_keep],
        link_sender=forwarded["from_node"].to_numpy()[link_keep],
        publish=np.maximum(publish[publish_keep].astype(float), 0.0),
        publish_gap=home_rows["gap_ns"].to_numpy(dtype=float)[publish_keep],
        publish_broker=home_rows["broker"].to_numpy()[publish_keep],
        deliver=np.maximum(deliver[deliver_keep].astype(float), 0.0),
        deliver_gap=gaps_since(last.astype(float), client_activity.astype(float))[deliver_keep],
        deliver_subscriber=dels["subscriber"].to_numpy()[deliver_keep],
        deliver_publisher=dels["publisher"].to_numpy()[deliver_keep],
    )


def _valid(values: np.ndarray) -> np.ndarray:
    return ~np.isnan(values.astype(float))
