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

from monitor.traces import MEASURE_WINDOW, WHOLE_RUN, TraceError, read_manifest

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
    (start_ns .. drain_end_ns), from RUN_DIR/manifest.json (`read_manifest` checks
    that the window's end is after its start)."""
    if name not in WINDOWS:
        raise TraceError(f"unknown window {name!r}; choose one of {', '.join(WINDOWS)}")
    fields = MEASURE_WINDOW if name == "measure" else WHOLE_RUN
    phases = read_manifest(run_dir, fields)["phases"]
    start, end = (phases[field.removeprefix("phases.")] for field in fields)
    return Window(name, start, end)
