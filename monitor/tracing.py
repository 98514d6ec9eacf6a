"""Trace writers of replay clients (publications, deliveries) and the file naming shared
with the broker's recorder (`broker.trace.hop_trace`): one file per table and process under
RUN_DIR/traces/."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from broker.trace.arrow_writer import TraceWriter
from broker.trace.files import trace_path
from broker.trace.schema import DELIVERIES, PUBLICATIONS


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
        run = {"run_id": run_id}
        self.publications = TraceWriter(
            trace_path(trace_dir, "publications", owner), PUBLICATIONS, constants=run
        )
        self.deliveries = TraceWriter(
            trace_path(trace_dir, "deliveries", owner), DELIVERIES, constants=run
        )

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
