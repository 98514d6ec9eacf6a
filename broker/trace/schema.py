"""The trace schema (docs/traces.md), in one place, with its version.

Three tables, each written as Arrow IPC stream files under RUN_DIR/traces/:

* ``hops``: one row per event handled by a broker (the routing decision);
* ``deliveries``: one row per event received by a subscriber client;
* ``publications``: one row per event published by a publisher client.

Times are int64 nanoseconds (``time.time_ns()`` for wall clock, shared by every
process of one host; ``time.thread_time_ns()`` for CPU). There are no unsigned
integer types (Spark rejects them). The version is stored in each file's schema
metadata under ``hop.trace.version``; readers refuse other versions.
"""

from __future__ import annotations

import pyarrow as pa

TRACE_VERSION = "1"
VERSION_KEY = b"hop.trace.version"
TABLE_KEY = b"hop.trace.table"

_strings = pa.list_(pa.string())

HOPS = pa.schema(
    [
        ("run_id", pa.string()),
        ("event_id", pa.string()),
        ("event_type", pa.string()),
        ("publisher", pa.string()),
        ("broker", pa.string()),
        ("from_node", pa.string()),  # a broker's id ("3") or "client:NAME"
        ("to_nodes", _strings),  # broker ids the event was forwarded to
        ("delivered_to", _strings),  # client names it was delivered to
        ("decision", pa.string()),  # "routed" | "dropped"
        ("drop_reason", pa.string()),  # empty unless dropped
        ("t_arrival_ns", pa.int64()),  # the read that brought the bytes returned
        ("t_start_ns", pa.int64()),  # routing of this event began
        ("t_done_ns", pa.int64()),  # the broker turned to its next message (sends queued)
        ("wait_ns", pa.int64()),  # t_start_ns - t_arrival_ns: queueing inside the broker
        # CPU time of the read the event came in (decoding and routing its events),
        # shared among them by routing time: see broker.trace.hop_writer
        ("cpu_ns", pa.int64()),
        ("batch", pa.int32()),  # messages decoded from the same read
        ("batch_index", pa.int32()),  # this event's position in that read
        ("queue_len", pa.int32()),  # frames waiting in the outgoing queues when the read came
        ("bytes_in", pa.int32()),  # size of the event's frame
        ("bytes_out", pa.int64()),  # bytes of all frames sent for it
        ("filters_matched", pa.int32()),  # subscriptions the event matched here
        ("subscriptions", pa.int32()),  # subscriptions in the broker's table after the read
        ("hops_before", pa.int32()),  # brokers the event passed before this one
    ],
    metadata={VERSION_KEY: TRACE_VERSION, TABLE_KEY: b"hops"},
)

DELIVERIES = pa.schema(
    [
        ("run_id", pa.string()),
        ("event_id", pa.string()),
        ("publisher", pa.string()),
        ("subscriber", pa.string()),
        ("subscription_ids", pa.list_(pa.int64())),
        ("broker", pa.string()),  # the broker that delivered it
        ("path", _strings),  # brokers it passed, publisher's broker first
        ("t_publish_ns", pa.int64()),
        ("t_deliver_ns", pa.int64()),
    ],
    metadata={VERSION_KEY: TRACE_VERSION, TABLE_KEY: b"deliveries"},
)

PUBLICATIONS = pa.schema(
    [
        ("run_id", pa.string()),
        ("event_id", pa.string()),
        ("publisher", pa.string()),
        ("broker", pa.string()),  # the broker it was published to
        ("event_type", pa.string()),
        ("t_publish_ns", pa.int64()),
        ("size_bytes", pa.int32()),
        ("attributes", pa.string()),  # JSON; bytes values as {"$bytes": length}
    ],
    metadata={VERSION_KEY: TRACE_VERSION, TABLE_KEY: b"publications"},
)

SCHEMAS = {"hops": HOPS, "deliveries": DELIVERIES, "publications": PUBLICATIONS}
