"""What a replay measured in its measurement window, straight from its traces: each
broker's throughput and each publisher's mean delivery latency (what the model's
predictions are compared with)."""

from __future__ import annotations

from pathlib import Path

from monitor.traces import read_manifest, read_table


def window_figures(run_dir: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Per broker, the hops that arrived in the window per second; per publisher, the
    mean latency (ms) of the deliveries of the events it published in the window."""
    phases = read_manifest(run_dir)["phases"]
    lo, hi = phases["measure_start_ns"], phases["measure_end_ns"]
    hops = read_table(run_dir, "hops").table.select(["broker", "t_arrival_ns"]).to_pandas()
    hops = hops[hops["t_arrival_ns"].between(lo, hi)]
    throughput = (hops.groupby("broker").size() / ((hi - lo) / 1e9)).to_dict()
    dels = read_table(run_dir, "deliveries").table.to_pandas()
    dels = dels[dels["t_publish_ns"].between(lo, hi)]
    latency_ms = (dels["t_deliver_ns"] - dels["t_publish_ns"]) / 1e6
    return throughput, latency_ms.groupby(dels["publisher"]).mean().to_dict()
