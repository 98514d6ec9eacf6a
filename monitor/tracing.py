"""Trace writers used by the broker (hops) and by replay clients (publications,
deliveries): one file per table and process under RUN_DIR/traces/."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from monitor.recorder import TraceWriter
from monitor.schema import DELIVERIES, HOPS, PUBLICATIONS


def trace_path(trace_dir: Path, table: str, owner: str) -> Path:
    """RUN_DIR/traces/TABLE-OWNER-PID.arrow (a restarted process gets a new file)."""
    return trace_dir / f"{table}-{owner}-{os.getpid()}.arrow"


class HopRecorder:
    """One `hops` row per event a broker handled."""

    def __init__(self, trace_dir: Path, run_id: str, broker: str) -> None:
        self.run_id = run_id
        self.broker = broker
        self.writer = TraceWriter(trace_path(trace_dir, "hops", f"broker{broker}"), HOPS)

    def record(
        self,
        event_id: str,
        event_type: str,
        publisher: str,
        from_node: str,
        to_nodes: tuple[str, ...],
        delivered_to: tuple[str, ...],
        decision: str,
        drop_reason: str,
        t_arrival_ns: int,
        t_start_ns: int,
        t_done_ns: int,
        cpu_ns: int,
        batch: int,
        batch_index: int,
        queue_len: int,
        bytes_in: int,
        bytes_out: int,
        filters_matched: int,
        subscriptions: int,
        hops_before: int,
        /,
    ) -> None:
        """One row; the arguments are the `HOPS` columns after run_id and broker, in
        order (positional: this runs once per event)."""
        self.writer.append(
            (
                self.run_id,
                event_id,
                event_type,
                publisher,
                self.broker,
                from_node,
                to_nodes,
                delivered_to,
                decision,
                drop_reason,
                t_arrival_ns,
                t_start_ns,
                t_done_ns,
                t_start_ns - t_arrival_ns,
                cpu_ns,
                batch,
                batch_index,
                queue_len,
                bytes_in,
                bytes_out,
                filters_matched,
                subscriptions,
                hops_before,
            )
        )

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def attributes_json(attributes: Mapping[str, Any]) -> str:
    """Event attributes as JSON; a bytes payload becomes {"$bytes": length}."""
    return json.dumps(
        {k: ({"$bytes": len(v)} if isinstance(v, bytes) else v) for k, v in attributes.items()},
        sort_keys=True,
    )


def attributes_from_json(text: str) -> dict[str, Any]:
    """Inverse of `attributes_json`, with zero bytes standing for a payload."""
    out = json.loads(text)
    return {
        k: (bytes(v["$bytes"]) if isinstance(v, dict) and "$bytes" in v else v)
        for k, v in out.items()
    }


class ClientRecorder:
    """Publication and delivery rows of the clients driven by one replay process."""

    def __init__(self, trace_dir: Path, run_id: str, owner: str = "clients") -> None:
        self.run_id = run_id
        self.publications = TraceWriter(trace_path(trace_dir, "publications", owner), PUBLICATIONS)
        self.deliveries = TraceWriter(trace_path(trace_dir, "deliveries", owner), DELIVERIES)

    def published(
        self,
        event_id: str,
        publisher: str,
        broker: str,
        attributes: Mapping[str, Any],
        t_publish_ns: int,
        size_bytes: int,
    ) -> None:
        self.publications.append(
            (
                self.run_id,
                event_id,
                publisher,
                broker,
                str(attributes.get("type", "")),
                t_publish_ns,
                size_bytes,
                attributes_json(attributes),
            )
        )

    def delivered(
        self,
        event_id: str,
        publisher: str,
        subscriber: str,
        subscription_ids: list[int],
        broker: str,
        path: list[str],
        t_publish_ns: int,
        t_deliver_ns: int,
    ) -> None:
        self.deliveries.append(
            (
                self.run_id,
                event_id,
                publisher,
                subscriber,
                subscription_ids,
                broker,
                path,
                t_publish_ns,
                t_deliver_ns,
            )
        )

    def close(self) -> None:
        self.publications.close()
        self.deliveries.close()
