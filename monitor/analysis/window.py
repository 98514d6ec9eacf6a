"""The time window an analysis covers, from the run's manifest.

An event belongs to the window when it was *published* inside it; all its hops and
deliveries count, even those that happen during the drain after the window. So
every event is counted whole: visits, forwards and deliveries of one event are
never split by the window's edge, and counted visit ratios are exact ratios of
whole events. Rates divide by the window's length.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from monitor.traces import TraceError, read_manifest

WINDOWS = ("measure", "all")


@dataclass(frozen=True)
class Window:
    name: str  # "measure": warm-up and drain excluded; "all": the whole run
    start_ns: int
    end_ns: int  # exclusive

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def run_window(run_dir: Path, name: str = "measure") -> Window:
    """The `measure` window (measure_start_ns .. measure_end_ns) or `all` of the run
    (start_ns .. drain_end_ns), from RUN_DIR/manifest.json."""
    if name not in WINDOWS:
        raise TraceError(f"unknown window {name!r}; choose one of {', '.join(WINDOWS)}")
    path = run_dir / "manifest.json"
    phases = read_manifest(run_dir)["phases"]
    try:
        start, end = (
            (phases["measure_start_ns"], phases["measure_end_ns"])
            if name == "measure"
            else (phases["start_ns"], phases["drain_end_ns"])
        )
    except KeyError as exc:
        raise TraceError(f"{path}: no usable phases ({exc!r})") from None
    if not (isinstance(start, int) and isinstance(end, int) and start < end):
        raise TraceError(f"{path}: phases give an empty {name} window ({start} .. {end})")
    return Window(name, start, end)
