"""What a replay measured in its measurement window, straight from its traces: each
broker's throughput and the delivery latencies of the events published in the window
(what the model's predictions are compared with)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from monitor.traces import read_manifest, read_table


def in_window(run_dir: Path) -> tuple[pd.Series, pd.DataFrame]:
    """Per broker, the hops that arrived in the window per second; and the deliveries
    of the events published in the window (`publisher`, `subscriber`, `latency_ms`)."""
    phases = read_manifest(run_dir)["phases"]
    lo, hi = phases["measure_start_ns"], phases["measure_end_ns"]
    hops = read_table(run_dir, "hops").table.select(["broker", "t_arrival_ns"]).to_pandas()
    hops = hops[hops["t_arrival_ns"].between(lo, hi)]
    throughput = hops.groupby("broker").size() / ((hi - lo) / 1e9)
    dels = read_table(run_dir, "deliveries").table.to_pandas()
    dels = dels[dels["t_publish_ns"].between(lo, hi)]
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
