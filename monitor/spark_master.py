"""What Spark needs, checked without loading Spark: a master URL of a form it takes (Spark
itself refuses another only once its JVM has started, with the JVM's stack on stderr),
a Java it runs on, and a standalone master that answers. `check_spark_start` runs
before a Spark session starts, and before `hop validate`'s replays, which a Spark that
cannot start would waste."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

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


JAVA_LEAST = 17
"""The oldest Java that Spark 4 runs on."""


def check_spark_start(master: str | None) -> None:
    """SparkStartError naming what Spark would fail on: no Java, or one too old
    (`java_problem`), or a standalone master that takes no connection
    (`check_reachable`)."""
    problem = java_problem()
    if problem is not None:
        raise SparkStartError(f"Spark cannot start: {problem}")
    check_reachable(master)


def java_problem() -> str | None:
    """What is wrong with the Java that Spark would launch (JAVA_HOME's, else the
    PATH's), None if it is Java 17 or later. Without this, a missing Java shows as
    "JAVA_HOME is not set" and "Java gateway process exited before sending its port
    number", an old one as a page of UnsupportedClassVersionError."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if java is None or not os.access(java, os.X_OK):
        where = f"JAVA_HOME ({home}) holds no bin/java" if home else "no java on the PATH"
        return f"it needs Java {JAVA_LEAST} or later, and {where}"
    try:
        said = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        ).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{java} -version failed: {exc}"
    found = re.search(r'version "(\d+)(?:\.(\d+))?', said)
    if found is None:
        return None  # a Java that words its version otherwise: Spark will tell
    major = int(found[1]) if found[1] != "1" else int(found[2] or 0)  # 1.8 is Java 8
    if major < JAVA_LEAST:
        return f"it needs Java {JAVA_LEAST} or later, and {java} is Java {major}"
    return None


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
