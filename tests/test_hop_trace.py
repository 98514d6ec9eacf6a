"""The broker's hop recorder: per-read values spread over their events, CPU shares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from monitor.hop_trace import EVENT_FIELDS, HopRecorder
from monitor.schema import HOPS
from monitor.traces import read_table


def event(
    n: int, t_start: int, routing_ns: int, *, index: int, to: tuple[str, ...] = ()
) -> list[Any]:
    values = {
        "event_id": f"p:{n}",
        "event_type": "quote",
        "publisher": "p",
        "to_nodes": to,
        "delivered_to": ("client:s#1",) if not to else (),
        "t_start_ns": t_start,
        "t_routed_ns": t_start + routing_ns,
        "t_done_ns": t_start + routing_ns + 7,
        "batch_index": index,
        "queue_len": n,
        "bytes_in": 100 + n,
        "bytes_out": 200 + n,
        "filters_matched": 1,
        "hops_before": 0,
    }
    return [values[f] for f in EVENT_FIELDS]


def test_reads_become_rows_with_shared_values_and_cpu_shares(tmp_path: Path) -> None:
    recorder = HopRecorder(tmp_path / "traces", "run", "4")
    recorder.peers.update({"broker:2": "2", "client:s#1": "s"})  # broker:3 left unnamed
    first = event(1, 1_000, 300, index=0) + event(
        2, 1_400, 100, index=1, to=("broker:2", "broker:3")
    )
    recorder.add_read("client:p", 900, 2, 8_000, 5, first)
    recorder.add_read("2", 5_000, 3, 999, 6, event(3, 5_050, 0, index=2))
    recorder.close()

    table = read_table(tmp_path, "hops").table
    assert table.schema.equals(HOPS, check_metadata=False)
    rows = {r["event_id"]: r for r in table.to_pylist()}
    one, two, three = rows["p:1"], rows["p:2"], rows["p:3"]
    # the read's CPU time, shared 3:1 by routing time; a read with no routing time
    # gives its events equal shares
    assert (one["cpu_ns"], two["cpu_ns"], three["cpu_ns"]) == (6_000, 2_000, 999)
    assert (one["from_node"], three["from_node"]) == ("client:p", "2")
    assert (one["t_arrival_ns"], one["wait_ns"]) == (900, 100)
    assert (three["t_arrival_ns"], three["wait_ns"]) == (5_000, 50)
    assert (one["batch"], three["batch"], two["batch_index"]) == (2, 3, 1)
    assert (one["subscriptions"], three["subscriptions"]) == (5, 6)
    assert two["to_nodes"] == ["2", "broker:3"] and two["delivered_to"] == []
    assert one["to_nodes"] == [] and one["delivered_to"] == ["s"]
    assert (two["t_done_ns"], two["bytes_in"], two["bytes_out"]) == (1_507, 102, 202)
    assert {r["run_id"] for r in rows.values()} == {"run"}
    assert {r["broker"] for r in rows.values()} == {"4"}
    assert {r["decision"] for r in rows.values()} == {"routed"}


def test_dropped_rows_and_non_string_types(tmp_path: Path) -> None:
    recorder = HopRecorder(tmp_path / "traces", "run", "1")
    routed = event(1, 10, 5, index=0)
    routed[EVENT_FIELDS.index("event_type")] = 7  # `type` need not be a string
    recorder.add_read("client:p", 5, 1, 50, 0, routed)
    names = [f.name for f in recorder.writer.row_fields]
    dropped = dict.fromkeys(names, 0) | {
        "event_id": "p:2",
        "event_type": "quote",
        "publisher": "p",
        "from_node": "3",
        "to_nodes": (),
        "delivered_to": (),
        "decision": "dropped",
        "drop_reason": "cycle",
    }
    recorder.dropped(tuple(dropped[n] for n in names))
    recorder.close()
    rows = {r["event_id"]: r for r in read_table(tmp_path, "hops").table.to_pylist()}
    assert rows["p:1"]["event_type"] == "7"
    assert (rows["p:2"]["decision"], rows["p:2"]["drop_reason"]) == ("dropped", "cycle")


def test_flushes_when_full(tmp_path: Path) -> None:
    recorder = HopRecorder(tmp_path / "traces", "run", "1", flush_rows=4)
    for n in range(5):
        recorder.add_read("client:p", n, 1, 10, 0, event(n, n, 1, index=0))
    assert recorder.writer.rows_written == 4 and recorder.buffered == 1
    recorder.close()
    with pytest.raises(ValueError, match="closed"):
        recorder.writer.write_batch(pa.RecordBatch.from_pylist([], schema=HOPS))
