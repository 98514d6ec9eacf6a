"""The time window an analysis covers: from a run's manifest, or for a brokers' trace
folder (no manifest) the span of its publications.

An event belongs to the window when it was *published* inside it; all its hops and
deliveries count, even those that happen during the drain after the window. So
every event is counted whole: visits, forwards and deliveries of one event are
never split by the window's edge, and counted visit ratios are exact ratios of
whole events. Rates divide by the window's length.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from monitor.runfiles import local_path
from monitor.traces import MEASURE_WINDOW, WHOLE_RUN, TraceError, read_manifest

WINDOWS = ("measure", "all")


@dataclass(frozen=True)
class Window:
    name: str  # "measure": warm-up and drain excluded; "all": the whole run (recording)
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


def recording_window(published: pa.Table, staged: Path, folder: Path) -> Window:
    """The window `all` of a brokers' trace folder, which has no manifest: from its
    first publication (`published`, the staged publications) to the end of the last
    routing any broker recorded (the hops staged under `staged`, Parquet). A
    publication's time is when its home broker read it, shared by all events of one
    read, so a burst of events can arrive at one instant; the routing that follows
    gives the window its length. TraceError naming `folder` when no event came from a
    client there."""
    if not published.num_rows:
        raise TraceError(
            f"{folder}: no hop row shows an event arriving from a client; the traces of "
            "the brokers its publishers connect to are needed"
        )
    done = ds.dataset(local_path(staged / "hops")).to_table(columns=["t_done_ns"])
    first = pc.min(published["t_publish_ns"]).as_py()
    return Window("all", first, pc.max(done["t_done_ns"]).as_py() + 1)
