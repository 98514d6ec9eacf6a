"""What a replay measured in its measurement window, straight from its traces: each
broker's throughput and the delivery latencies of the events published in the window
(what the model's predictions are compared with)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from monitor.traces import read_manifest, read_table


def in_measurement(times: pd.Series, lo: int, hi: int) -> pd.Series:
    """Which of ``times`` (ns) fall in the measurement window [lo, hi), the window of
    every measured and characterized figure (and of `monitor.analysis.queries`)."""
    return times.ge(lo) & times.lt(hi)


def in_window(run_dir: Path) -> tuple[pd.Series, pd.DataFrame]:
    """Per broker, the hops of the events published in the window, per second of it;
    and the deliveries of those events (`publisher`, `subscriber`, `latency_ms`). The
    window is [measure_start_ns, measure_end_ns), and events count by their
    publication time, as in the Spark analysis (`monitor.analysis.queries.in_window`):
    an event published just before the window's end counts at every broker it
    reaches, one published just before its start at none."""
    phases = read_manifest(run_dir)["phases"]
    lo, hi = phases["measure_start_ns"], phases["measure_end_ns"]
    published = read_table(run_dir, "publications").table.select(["event_id", "t_publish_ns"])
    published = published.to_pandas()
    events = published.loc[in_measurement(published["t_publish_ns"], lo, hi)]
    hops = read_table(run_dir, "hops").table.select(["broker", "event_id"]).to_pandas()
    hops = hops[hops["event_id"].isin(events["event_id"])]
    throughput = hops.groupby("broker").size() / ((hi - lo) / 1e9)
    dels = read_table(run_dir, "deliveries").table.to_pandas()
    dels = dels[in_measurement(dels["t_publish_ns"], lo, hi)]
    latency = pd.DataFrame(
        {
            "publisher": dels["publisher"],
            "subscriber": dels["subscriber"],
            "latency_ms": (dels["t_deliver_ns"] - dels["t_publish_ns"]) / 1e6,
        }
    )
    return throughput, latency


def window_figures(run_dir: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Per broker, the hops that arrived in the window per second; per publisher, the
    mean latency (ms) of the deliveries of the events it published in the window."""
    throughput, latency = in_window(run_dir)
    return throughput.to_dict(), latency.groupby("publisher")["latency_ms"].mean().to_dict()
