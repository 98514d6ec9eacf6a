"""A standalone Spark cluster on loopback, started once per test session and stopped
by PID (`hop analyze --master` and spark-submit are tested against it)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import children


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "Spark daemon exited"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a daemon we started and any child it left (the worker's executors), by PID."""
    leftovers = children(proc.pid)
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One master and one worker of the pyspark installation, bound to 127.0.0.1, for
    the whole test session (each test gives it work of its own)."""
    import pyspark

    tmp_path = tmp_path_factory.mktemp("spark-cluster")
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(tmp_path / "w")}
    port, master_ui, worker_ui = free_port(), free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    daemons: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> subprocess.Popen[bytes]:
        log = (tmp_path / f"{name}.log").open("wb")
        proc = subprocess.Popen([str(spark_class), *args], env=env, stdout=log, stderr=log)
        daemons.append(proc)
        return proc

    try:
        master = start(
            "master",
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(master_ui)),
        )
        wait_for_port(port, master)
        start(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            url,
            *("--host", "127.0.0.1", "--webui-port", str(worker_ui), "--cores", "2"),
            *("--memory", "1g"),
        )
        yield url
    finally:
        for proc in reversed(daemons):
            stop(proc)
