"""How this host's costs move with the rate: one workload replayed at a sequence of
rates, each stage's mean per run.

A model that characterizes at one rate and predicts another must know how the cost
of each stage (the hop between brokers, the publish and delivery hand-overs, the
brokers' service times) changes with the load. This replays a case study (default
`topologies/tree7.toml`, the model validation's) with `hop replay`, each run a process
of its own, once per rate scale in the order given (a palindrome such as 1 1.5 3 3
1.5 1 shows whether the order matters). Every run publishes the same events (same
seed, gaps divided by the scale, the duration too). Per run it prints and records the
stage means (`Characterization.stage_means_us`), the host's busy share and CPU per
publication (`monitor.carry`) and each publisher's mean latency (`monitor.measured`).
Traces go to a temporary folder.
Run: ``python -m bench.rate_response [--study FILE] [--scales S ...] [--seconds T]``
(T: the duration at scale 1; 24 s by default, as the validation's calibration).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from bench.common import median, write_result
from broker.local_network import REPO, on_free_ports
from broker.process import unwind_on_termination
from hop.command import run_hop
from monitor.carry import total_rate
from monitor.characterize import characterize
from monitor.measured import window_figures

WARMUP_FRACTION = 1 / 8  # of the measured duration, as in the model validation


def replay(study: Path, workdir: Path, name: str, seconds: float, scale: float) -> Path:
    """One `hop replay` of `study` at `scale` for `seconds / scale`; its run folder."""
    out = workdir / name
    duration = seconds / scale
    result = run_hop(
        "replay",
        str(on_free_ports(study, workdir / f"{name}.toml")),
        "--out",
        str(out),
        "--duration",
        str(duration),
        "--warmup",
        str(duration * WARMUP_FRACTION),
        "--rate-scale",
        str(scale),
        "--quiet",
        timeout=duration * (1 + WARMUP_FRACTION) + 120,
    )
    if result.returncode != 0:
        raise RuntimeError(f"hop replay at x{scale} failed: {result.stderr[-2000:]}")
    return out


def run(study: Path, scales: list[float], seconds: float) -> dict[str, Any]:
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, scale in enumerate(scales):
            run_dir = replay(study, Path(tmp), f"run{i}", seconds, scale)
            char = characterize(run_dir)
            stages = char.stage_means_us()
            services = [v for k, v in stages.items() if k.startswith("service ")]
            _, latency_ms = window_figures(run_dir)
            row: dict[str, Any] = {
                "scale": scale,
                **{k: round(v, 1) for k, v in stages.items()},
                "service_mean_us": round(sum(services) / len(services), 1),
                # the axis `monitor.carry` carries the stages along
                "busy_cores": round(char.busy_cores, 4),
                "cpu_ms_per_event": round(char.busy_cores / total_rate(char) * 1e3, 3),
                "latency_ms": {p: round(v, 3) for p, v in sorted(latency_ms.items())},
            }
            runs.append(row)
            print(_line(row), flush=True)
    by_scale = {
        scale: {
            stage: median([r[stage] for r in runs if r["scale"] == scale])
            for stage in (
                "link",
                "publish",
                "deliver",
                "service_mean_us",
                "busy_cores",
                "cpu_ms_per_event",
            )
        }
        for scale in sorted(set(scales))
    }
    return {"study": study.name, "seconds_at_scale_1": seconds, "runs": runs, "medians": by_scale}


def _line(row: dict[str, Any]) -> str:
    latency = ", ".join(f"{p} {v}" for p, v in row["latency_ms"].items())
    return (
        f"x{row['scale']}: link {row['link']:.0f} us, publish {row['publish']:.0f} us, "
        f"deliver {row['deliver']:.0f} us, service (mean of brokers) "
        f"{row['service_mean_us']:.0f} us; host busy {row['busy_cores']:.3f} cores, "
        f"{row['cpu_ms_per_event']:.2f} ms CPU per publication; latency (ms) {latency}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", type=Path, default=REPO / "topologies" / "tree7.toml")
    parser.add_argument(
        "--scales", type=float, nargs="+", default=[1, 1.5, 3, 3, 1.5, 1], help="in order"
    )
    parser.add_argument("--seconds", type=float, default=24.0, help="duration at scale 1")
    args = parser.parse_args(argv)
    unwind_on_termination()  # stop what it started also when killed with SIGTERM
    result = run(args.study, args.scales, args.seconds)
    print(write_result("rate_response", result))


if __name__ == "__main__":
    main()
