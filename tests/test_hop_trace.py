"""The broker's hop recorder and its writer process: per-read values spread over their
events, done times from what followed, CPU shares, outcome codes, losing the writer."""

from __future__ import annotations

import marshal
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from broker.protocol import Ping, Publish, encode_frame
from broker.trace import hop_trace
from broker.trace.arrow_writer import TraceFileError, TraceWriter
from broker.trace.hop_trace import (
    BLOB_HEADER,
    BLOCKED,
    DROPPED,
    EVENT_FIELDS,
    EVENT_ROW,
    MARK,
    WRITER_READY,
    HopRecorder,
    _write_all,
)
from broker.trace.hop_writer import Links, hop_batch
from broker.trace.schema import HOPS
from monitor.traces import read_table


def publish(n: int, path: tuple[str, ...] = (), event_type: Any = "quote") -> bytes:
    return encode_frame(Publish(f"p:{n}", "p", {"type": event_type, "n": n}, list(path), 0))


def event(t_start: int, outcome: int, bytes_out: int = 200) -> bytes:
    values = {
        "t_start_ns": t_start,
        "outcome": outcome,
        "filters_matched": 1,
        "bytes_out": bytes_out,
    }
    return EVENT_ROW.pack(*(values[f] for f in EVENT_FIELDS))


def end(batch: int, t: int) -> list[Any]:
    """The note of a read's end."""
    return [MARK, batch, t]


def one_event_blob() -> bytes:
    """A blob as the broker ships it to its writer: one read of one event, p:1."""
    frames = publish(1)
    meta = marshal.dumps(({}, {1: ()}, [(("client:p", 1, 1, 10, 0, 0), len(frames), 1, end(1, 9))]))
    rows = event(5, 1)
    return BLOB_HEADER.pack(len(meta), len(rows)) + meta + rows + frames


def recorded(tmp_path: Path, recorder: HopRecorder) -> dict[str, dict[str, Any]]:
    assert recorder.close() == 0
    table = read_table(tmp_path, "hops").table
    assert table.schema.equals(HOPS, check_metadata=False)
    return {r["event_id"]: r for r in table.to_pylist()}


def test_reads_become_rows(tmp_path: Path) -> None:
    recorder = HopRecorder(tmp_path / "traces", "run", "4")
    recorder.name_link("broker:2", "2", "broker")
    recorder.name_link("client:s#1", "s", "client")
    to_client = recorder.outcome_of(("client:s#1",))
    to_both = recorder.outcome_of(("broker:2", "client:s#1", "client:t#9"))  # t#9 unnamed
    # read 1: event, Ping (a control message that began at 1_450), event; ends at 2_000
    frames = publish(1) + encode_frame(Ping(1)) + publish(2, path=("7", "8"))
    recorder.add_read(
        ("client:p", 900, 3, 8_000, 5, 3),
        frames,
        event(1_000, to_client) + event(1_500, to_both, bytes_out=203),
        [MARK, 1, 1_450, BLOCKED, 2, 1_600, *end(3, 2_000)],  # event 2 waited for room
    )
    # read 2: one event, dropped; the read's CPU time all its own
    recorder.add_read(
        ("2", 5_000, 1, 999, 6, 0),
        publish(3, event_type=7),
        event(5_050, to_client),
        [DROPPED, 0, "cycle", *end(1, 5_100)],
    )
    rows = recorded(tmp_path, recorder)

    one, two, three = rows["p:1"], rows["p:2"], rows["p:3"]
    assert (one["t_start_ns"], one["t_done_ns"]) == (1_000, 1_450)  # done when the Ping began
    assert (two["t_start_ns"], two["t_done_ns"]) == (1_500, 2_000)  # done at the read's end
    assert (three["t_done_ns"], three["wait_ns"]) == (5_100, 50)
    # CPU shares by routing time: 450 and 100 (routed at 1_600, then blocked)
    assert (one["cpu_ns"] + two["cpu_ns"], three["cpu_ns"]) == (8_000, 999)
    assert one["cpu_ns"] == pytest.approx(8_000 * 450 / 550, abs=1)
    assert (one["from_node"], three["from_node"]) == ("client:p", "2")
    assert (one["t_arrival_ns"], one["wait_ns"], one["batch"], two["batch_index"]) == (
        900,
        100,
        3,
        2,
    )
    assert (one["subscriptions"], three["subscriptions"], two["queue_len"]) == (5, 6, 3)
    assert three["queue_len"] == 0
    assert (one["to_nodes"], one["delivered_to"]) == ([], ["s"])
    assert (two["to_nodes"], two["delivered_to"]) == (["2"], ["s", "client:t#9"])
    assert (two["hops_before"], two["bytes_in"], two["bytes_out"]) == (
        2,
        len(publish(2, ("7", "8"))),
        203,
    )
    assert three["event_type"] == "7"  # `type` need not be a string
    assert (three["decision"], three["drop_reason"], one["decision"]) == (
        "dropped",
        "cycle",
        "routed",
    )
    assert {r["run_id"] for r in rows.values()} == {"run"}
    assert {r["broker"] for r in rows.values()} == {"4"}


def test_reads_of_events_only_become_rows_in_bulk(tmp_path: Path) -> None:
    """Reads with no note but their end (the common case, computed for a whole blob at
    once) next to one with a control message (patched on its own)."""
    recorder = HopRecorder(tmp_path / "traces", "run", "1")
    code = recorder.outcome_of(("client:s#1",))
    recorder.add_read(
        ("client:p", 100, 2, 40, 1, 0),
        publish(1) + publish(2),
        event(110, code) + event(120, code),
        end(2, 130),
    )
    recorder.add_read(
        ("client:p", 200, 2, 20, 1, 0),
        encode_frame(Ping(1)) + publish(3),
        event(220, code),
        [MARK, 0, 205, *end(2, 230)],
    )
    recorder.add_read(("client:q", 300, 1, 10, 1, 0), publish(4), event(310, code), end(1, 330))
    rows = recorded(tmp_path, recorder)
    assert [(r["t_start_ns"], r["t_done_ns"], r["batch_index"]) for r in rows.values()] == [
        (110, 120, 0),
        (120, 130, 1),  # done at its read's end, not when the next read began
        (220, 230, 1),
        (310, 330, 0),
    ]
    assert [r["event_id"] for r in rows.values()] == ["p:1", "p:2", "p:3", "p:4"]
    assert {(r["decision"], r["drop_reason"]) for r in rows.values()} == {("routed", "")}
    assert rows["p:4"]["from_node"] == "client:q"


def test_ships_when_full_and_at_close(tmp_path: Path) -> None:
    recorder = HopRecorder(tmp_path / "traces", "run", "1", flush_rows=4)
    code = recorder.outcome_of(())
    for n in range(5):
        recorder.add_read(("client:p", n, 1, 10, 0, 0), publish(n), event(n, code), end(1, n + 1))
    assert recorder.buffered == 1
    rows = recorded(tmp_path, recorder)
    assert sorted(rows) == [f"p:{n}" for n in range(5)]
    assert recorder.rows_shipped == 5 and recorder.rows_lost == 0


def test_the_writer_reports_the_rows_in_its_file_while_the_broker_runs(tmp_path: Path) -> None:
    """What the broker's stats say of its trace (`rows_recorded`, `rows_written`): once
    the writer has caught up, the open file holds every row recorded."""
    recorder = HopRecorder(tmp_path / "traces", "run", "1", flush_rows=3)
    code = recorder.outcome_of(())
    for n in range(5):
        recorder.add_read(("client:p", n, 1, 10, 0, 0), publish(n), event(n, code), end(1, n + 1))
    assert (recorder.rows_recorded, recorder.buffered) == (5, 2)
    recorder.flush()
    deadline = time.monotonic() + 30
    while recorder.rows_written < recorder.rows_recorded and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (recorder.rows_written, recorder.rows_lost) == (5, 0)
    assert read_table(tmp_path, "hops").table.num_rows == 5  # the file is still open
    assert recorder.close() == 0


def test_a_writer_whose_broker_stopped_listening_still_writes_the_file(tmp_path: Path) -> None:
    """Its progress lines go nowhere: the file is complete and the exit status 0."""
    path = tmp_path / "traces" / "hops-broker1-1.arrow"
    writer = subprocess.Popen(
        [sys.executable, "-m", "broker.trace.hop_writer", str(path), "run", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert writer.stdout is not None and writer.stdin is not None
    assert writer.stdout.readline() == WRITER_READY
    writer.stdout.close()
    blob = one_event_blob()
    writer.stdin.write(blob * 3)
    writer.stdin.close()
    assert writer.wait(60) == 0
    assert read_table(tmp_path, "hops").table.num_rows == 3


def test_a_dead_writer_loses_rows_but_nothing_fails(tmp_path: Path) -> None:
    recorder = HopRecorder(tmp_path / "traces", "run", "1", flush_rows=1)
    code = recorder.outcome_of(())
    recorder._writer.kill()
    recorder._writer.wait()
    for n in range(3):
        recorder.add_read(("client:p", n, 1, 10, 0, 0), publish(n), event(n, code), end(1, n + 1))
    assert recorder.close() != 0
    assert recorder.rows_lost == 3 and recorder.rows_shipped == 0
    assert (recorder.rows_recorded, recorder.rows_written) == (3, 0)


def test_blobs_over_the_queue_budget_are_lost_and_counted(tmp_path: Path) -> None:
    recorder = HopRecorder(tmp_path / "traces", "run", "1", queue_bytes=0)
    code = recorder.outcome_of(())
    recorder.add_read(("client:p", 1, 1, 10, 0, 0), publish(1), event(1, code), end(1, 2))
    recorder.flush()
    assert recorder.close() == 0
    assert (recorder.rows_lost, recorder.rows_shipped) == (1, 0)
    assert read_table(tmp_path, "hops").table.num_rows == 0


def test_writer_keeps_whole_blobs_of_a_cut_input(tmp_path: Path) -> None:
    """A broker killed while shipping: the writer writes what came whole, and ends."""
    path = tmp_path / "traces" / "hops-broker1-1.arrow"
    blob = one_event_blob()
    done = subprocess.run(
        [sys.executable, "-m", "broker.trace.hop_writer", str(path), "run", "1"],
        input=blob + blob[:-10],
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    rows_read = read_table(tmp_path, "hops").table.to_pylist()
    assert [r["event_id"] for r in rows_read] == ["p:1"]


def test_a_frame_that_is_not_an_event_is_refused() -> None:
    links = Links()
    links.update({}, {1: ()})
    reads = [(("client:p", 1, 1, 10, 0, 0), encode_frame(Ping(1)), 1, end(1, 9))]
    with pytest.raises(ValueError, match="event 0 of a blob: not a Publish"):
        hop_batch(links, reads, event(5, 1), encode_frame(Ping(1)), "run", "1")


def test_write_all_sends_every_part_in_order() -> None:
    """More parts than one writev takes, more bytes than the pipe holds."""
    parts = [bytes([n % 251]) * (n % 700) for n in range(3000)]
    read_end, write_end = os.pipe()
    received = bytearray()
    reader = threading.Thread(target=lambda: received.extend(_read_all(read_end)))
    reader.start()
    _write_all(write_end, parts)
    os.close(write_end)
    reader.join(30)
    os.close(read_end)
    assert bytes(received) == b"".join(parts)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.needs("raise_priority", "procfs")
def test_a_writer_finishes_at_close_on_a_host_others_keep_busy(tmp_path: Path) -> None:
    """The writer runs at idle priority; with every core busy at normal priority it
    would get next to no CPU, and a stopping broker would wait past its stop's timeout
    for the last rows. At close it gets normal priority back."""
    recorder = HopRecorder(tmp_path / "traces", "run", "1")
    writer = recorder._writer.pid
    assert os.sched_getscheduler(writer) == os.SCHED_IDLE
    code = recorder.outcome_of(())
    for n in range(2000):
        recorder.add_read(("client:p", n, 1, 10, 0, 0), publish(n), event(n, code), end(1, n + 1))
    spin = "while True: pass"
    busy = [
        subprocess.Popen([sys.executable, "-c", spin])
        for _ in range(2 * len(os.sched_getaffinity(0)))
    ]
    try:
        assert recorder.close(timeout_s=10) == 0
    finally:
        for proc in [*busy, recorder._writer]:
            if proc.poll() is None:  # (the writer: only if it missed the timeout)
                proc.kill()  # by PID
            proc.wait()
    rows = read_table(tmp_path, "hops").table
    assert rows.num_rows == 2000


FILE_LIMIT = 20_000  # bytes: a trace file that cannot grow past it, as on a full disk


def _file_limited() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))


def test_a_writer_that_cannot_write_its_file_says_so_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "traces" / "hops-broker1-1.arrow"
    blob = one_event_blob()
    done = subprocess.run(
        [sys.executable, "-m", "broker.trace.hop_writer", str(path), "run", "1"],
        input=blob * 500,  # some 500 KB of Arrow batches
        capture_output=True,
        timeout=60,
        preexec_fn=_file_limited,
        check=False,
    )
    assert done.returncode == 1
    said = done.stderr.decode()
    assert said.startswith(f"hop trace writer: {path}: File too large after "), said
    assert said.endswith(" rows\n") and said.count("\n") == 1  # no traceback


def test_rows_a_failed_writer_did_not_write_count_as_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the broker's stats and its `trace_closed` line say: every row recorded is
    written or lost, also when the writer fails after taking rows."""

    def limited_writer(args: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "broker.trace.hop_writer", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            preexec_fn=_file_limited,
        )

    monkeypatch.setattr(hop_trace, "_start_writer", limited_writer)
    recorder = HopRecorder(tmp_path / "traces", "run", "1", flush_rows=1)
    code = recorder.outcome_of(())
    for n in range(500):
        recorder.add_read(("client:p", n, 1, 10, 0, 0), publish(n), event(n, code), end(1, n + 1))
    assert recorder.close() == 1
    assert 0 < recorder.rows_written < 500
    assert recorder.rows_written + recorder.rows_lost == recorder.rows_recorded == 500


def test_a_trace_file_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    full = tmp_path / "deliveries-sub1-1.arrow"
    full.symlink_to("/dev/full")  # every write: no space left on the device
    writer = TraceWriter(full, HOPS)  # (pyarrow writes the stream's header with the first batch)
    with pytest.raises(TraceFileError) as refused:
        writer.close()
    assert str(refused.value) == f"{full}: No space left on device"
    writer.close()  # closed by the failure: nothing more to do


def test_a_writer_that_cannot_open_its_file_says_so_in_one_line(tmp_path: Path) -> None:
    """The broker then never hears it is ready: it logs so and counts every row lost."""
    folder = tmp_path / "hops-broker1-1.arrow"
    folder.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "broker.trace.hop_writer", str(folder), "run", "1"],
        input=b"",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, b"")
    said = done.stderr.decode()
    assert said.startswith(f"hop trace writer: {folder}: ") and said.endswith("is a directory\n")
    assert said.count("\n") == 1  # no traceback
