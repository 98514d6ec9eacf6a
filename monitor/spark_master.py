"""Spark master URLs, checked without loading Spark: Spark itself refuses a master of
another form only once its JVM has started, with the JVM's stack on stderr."""

from __future__ import annotations

import argparse
import socket

from broker.netio import connect_failure, host_port
from monitor.errors import SparkStartError

FORMS = ("spark://", "k8s://", "local[")
"""How a master URL may begin, besides the plain `local` and `yarn`."""


def master_url(text: str) -> str:
    """An argparse type: a Spark master URL of a form Spark takes."""
    if text.startswith("spark://") and standalone_masters(text) is None:
        raise argparse.ArgumentTypeError(
            f"expected spark://HOST:PORT (or several, comma-separated), got {text!r}"
        )
    if text in ("local", "yarn") or text.startswith(FORMS):
        return text
    raise argparse.ArgumentTypeError(
        f"expected local, local[N], spark://HOST:PORT, k8s://URL or yarn, got {text!r}"
    )


def standalone_masters(master: str) -> list[tuple[str, int]] | None:
    """The (host, port) of each master a spark:// URL names (standby masters are
    comma-separated; an IPv6 host in brackets), None if it is not of that form."""
    masters = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            return None
        masters.append((host, int(port)))
    return masters


MASTER_CONNECT_S = 5.0


def check_reachable(master: str | None) -> None:
    """SparkStartError naming `master` when it is a standalone cluster's (spark://HOST:PORT,
    or several for standby masters) and none of them takes a connection. Spark itself
    would retry for about a minute and then fail with a stopped SparkContext's stack;
    `hop validate` would have run all its replays first. Other masters are Spark's to
    check."""
    masters = standalone_masters(master) if master and master.startswith("spark://") else None
    if not masters:
        return
    reasons = []
    for host, port in masters:
        try:
            socket.create_connection((host, port), timeout=MASTER_CONNECT_S).close()
            return
        except TimeoutError:
            why = f"no answer within {MASTER_CONNECT_S:g} s"
        except ConnectionRefusedError:
            why = "connection refused"
        except OSError as exc:
            why = connect_failure(exc)
        reasons.append(f"{host_port(host, port)}: {why}")
    raise SparkStartError(
        f"Spark could not start with master {master}: cannot connect to "
        f"{'; '.join(reasons)} (is a Spark master running there?)"
    )
