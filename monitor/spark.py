"""The Spark session used by `hop analyze`, its benchmark and its tests.

Defaults fit one small machine: `local[*]`, few shuffle partitions, no web UI,
error-level logs, Python workers on the running interpreter (not whatever
`python3` is first on PATH), and, when the master is local or on loopback, every
Spark socket bound to 127.0.0.1. `master` passes through to a real cluster
(`spark://HOST:7077`, `yarn`, ...).

Under `spark-submit` the JVM is already running with the submitter's
configuration (`--master`, `--conf`, `--driver-memory`): then only the settings
the submitter did not make are added.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlparse

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from monitor.errors import SparkStartError
from monitor.spark_master import check_spark_start

SHUFFLE_PARTITIONS = 4
C1_ONLY = "-XX:TieredStopAtLevel=1"
"""The driver JVM compiles with C1 only: it starts working sooner, and its code stays
slower than C2's once warm."""
C1_UP_TO_HOP_ROWS = 2_000_000
"""An analysis of at most this many hop rows runs on a C1-only JVM (`jit_options`):
the largest size at which C1 only was measured the faster from a cold start (0.84 of
the default's time at 2 M rows, 1.08 at 4 M)."""
DRIVER_MEMORY = "3g"  # local mode: the driver JVM also runs the tasks
LOOPBACK = ("127.0.0.1", "localhost", "::1")

# Error-level logs to stderr from the JVM's start on (`setLogLevel` comes too late to
# hide the start-up warnings). PySpark's JVM counts as an interactive shell, whose
# level Spark takes from the logger of its entry point, the Python gateway (WARN unless
# configured, announced on stderr with "Setting default log level"): configured here,
# at the root's level. A task that fails is logged, with its stack trace, by each of
# the loggers turned off below as the failure passes through it, and is then raised to
# the driver as the job's error, which `hop` reports (a table that cannot be written
# for want of space, in one line): their logs only repeat it, some 180 lines for one
# failed write.
_LOG4J2 = """\
rootLogger.level = error
logger.repl.name = org.apache.spark.api.python.PythonGatewayServer
logger.repl.level = error
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = off
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = off
logger.writer.name = org.apache.spark.sql.execution.datasources.FileFormatWriter
logger.writer.level = off
logger.abort.name = org.apache.spark.util.Utils
logger.abort.level = off
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
"""


def is_local(master: str) -> bool:
    """True for `local`, `local[N]` and masters on a loopback address."""
    return master.startswith("local") or urlparse(master).hostname in LOOPBACK


def under_spark_submit() -> bool:
    """True when this Python process was started by `spark-submit` (the JVM runs already)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(
    master: str | None = None,
    app_name: str = "hop-analyze",
    shuffle_partitions: int = SHUFFLE_PARTITIONS,
    java_options: str = "",
) -> SparkSession:
    """A new (or the running) Spark session; `master` defaults to `local[*]`.

    `java_options` go to the driver JVM (`jit_options` chooses its JIT by the size of
    the analysis). Under spark-submit, whose JVM already runs, they and `master` are the
    submitter's business.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    submitted = under_spark_submit()
    if submitted:
        conf = _submitted_conf()
    else:
        conf = SparkConf(loadDefaults=False).setMaster(master or "local[*]")
    master = conf.get("spark.master", "local[*]")
    defaults = {
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
    }
    if is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        defaults |= {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    for key, value in defaults.items():
        conf.setIfMissing(key, value)
    if submitted:  # its log4j configuration is the submitter's; quiet once started
        conf.setIfMissing("spark.log.level", "ERROR")
        return _started(conf, master)
    check_spark_start(master)
    if master.startswith("local"):
        conf.set("spark.driver.memory", DRIVER_MEMORY)
    with tempfile.TemporaryDirectory(prefix="hop-spark-") as tmp:
        log_config = Path(tmp) / "log4j2.properties"
        log_config.write_text(_LOG4J2)
        conf.set(
            "spark.driver.extraJavaOptions",
            f"-Dlog4j2.configurationFile=file:{log_config} {java_options}".strip(),
        )
        # log4j reads its file once, when the JVM starts
        return _started(conf, master)


def _started(conf: SparkConf, master: str) -> SparkSession:
    """The session of ``conf``, or SparkStartError naming ``master`` and Spark's reason.

    Ctrl-C is held back while the JVM launches, and keeps its handler once it runs:

    - PySpark waits for a launching JVM to write its port to a file in a temporary
      folder, and removes that folder when the wait ends, by a KeyboardInterrupt too.
      The JVM then cannot write its file, prints a Java stack trace and runs on
      forever, waiting for a Python that has gone. Held back for the launch (about a
      second), the interrupt comes once the JVM watches its stdin, which ends it when
      this process ends.
    - A new SparkContext installs PySpark's own SIGINT handler, which calls the JVM
      from inside the signal handler, on the connection the interrupted call is using.
      That call then fails, the connection breaks, and the clean-up after it fails as
      well: an interrupted analysis ended in py4j tracebacks and an "internal error".
      It also replaces a SIGINT the shell had left ignored. With the previous handler
      back, Ctrl-C raises KeyboardInterrupt as in every other command.
    """
    _quiet_py4j_interrupts()
    keep = _sigint_handler()
    try:
        with _held_back(keep):
            SparkContext._ensure_initialized(conf=conf)  # launches the JVM
        SparkContext.getOrCreate(conf)  # (its last step installs PySpark's handler)
        if keep is not None:
            signal.signal(signal.SIGINT, keep)
        return SparkSession.builder.config(conf=conf).getOrCreate()
    except Exception as exc:  # (py4j's and PySpark's errors share no base but this)
        raise SparkStartError(
            f"Spark could not start with master {master}: {_reason(exc)}"
        ) from exc


SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers


def _sigint_handler() -> SignalHandler | None:
    """SIGINT's handler now, when this is the main thread (the only one that can set
    it) and Python installed it; else None."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.getsignal(signal.SIGINT)


@contextlib.contextmanager
def _held_back(handler: SignalHandler | None) -> Iterator[None]:
    """Run the block with SIGINT noted instead of handled, then hand a noted SIGINT to
    `handler` (a callable one; an ignored SIGINT stays ignored)."""
    if not callable(handler):
        yield
        return
    noted: list[FrameType | None] = []
    signal.signal(signal.SIGINT, lambda signum, frame: noted.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)
    if noted:
        handler(signal.SIGINT, noted[0])


class _Py4jInterruptFilter(logging.Filter):
    """Drops py4j's records of an interrupted call to the JVM: py4j logs the
    KeyboardInterrupt with its traceback, and then each failure of its clean-up of the
    connection, before passing the interrupt on; the command says "interrupted"
    itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not ("py4j" in record.pathname and record.exc_info and _interrupted(record))


def _interrupted(record: logging.LogRecord) -> bool:
    """Whether the record's exception is a KeyboardInterrupt or was raised while one
    was being handled."""
    error = record.exc_info[1] if record.exc_info else None
    while error is not None:
        if isinstance(error, KeyboardInterrupt):
            return True
        error = error.__context__
    return False


PY4J_LOGGERS = ("", "py4j.java_gateway", "py4j.clientserver")
"""Where py4j logs: the root logger too (`logging.exception`)."""


def _quiet_py4j_interrupts() -> None:
    """Install `_Py4jInterruptFilter` on py4j's loggers, once per process."""
    for name in PY4J_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Py4jInterruptFilter) for f in logger.filters):
            logger.addFilter(_Py4jInterruptFilter())


def _reason(exc: Exception) -> str:
    """What a failed start says: the Java exception's own line when the JVM raised it
    (py4j's text begins with the call that failed), else the exception's; its first line
    only, as what follows is a stack."""
    java = getattr(exc, "java_exception", None)
    text = str(exc)
    if java is not None:
        with contextlib.suppress(Exception):  # (the JVM gone meanwhile)
            text = str(java.toString())  # (its first line: what the JVM's stack is of)
    return (text.strip().splitlines() or [type(exc).__name__])[0]


JAVA_CAUSES_MAX = 16
"""How deep `jvm_io_failure` looks into a Java exception's causes."""


def jvm_io_failure(spark: SparkSession, error: BaseException) -> OSError | None:
    """The I/O failure behind an error the JVM raised (a table that could not be
    written: a full disk, a folder that cannot be cleared), as an OSError with the
    Java exception's message; None for any other error. py4j's error holds the Java
    exception as `java_exception`, PySpark's own errors as `_origin`."""
    java = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    jvm = spark.sparkContext._jvm
    if java is None or jvm is None:
        return None
    try:
        io_exception = jvm.java.lang.Class.forName("java.io.IOException")
        for _ in range(JAVA_CAUSES_MAX):
            if java is None:
                return None
            if io_exception.isInstance(java):
                return OSError(str(java.getMessage() or java.toString()))
            java = java.getCause()
    except Exception:  # (py4j's errors: the JVM gone meanwhile)
        return None
    return None


@contextlib.contextmanager
def stopped_at_end(spark: SparkSession) -> Iterator[SparkSession]:
    """Stop `spark` when the block ends.

    After an error or an interrupt, quietly: the JVM's log is turned off first, as
    stopping under running tasks makes it log each task's failure, and an error of the
    stop itself (a connection the interrupt broke) is dropped, so that the error raised
    is the one that tells what happened."""
    try:
        yield spark
    except BaseException:
        with contextlib.suppress(Exception):
            spark.sparkContext.setLogLevel("OFF")
        with contextlib.suppress(Exception):
            spark.stop()
        raise
    spark.stop()


def jit_options(hop_rows: int) -> str:
    """The driver JVM's options for an analysis of `hop_rows` hop rows: C1 only up to
    `C1_UP_TO_HOP_ROWS`, the JVM's default tiered JIT above.

    Most of a short run's analysis is Spark's fixed costs in a cold JVM (planning,
    generating and loading code), which C1 alone gets through sooner; a long run's is
    its rows, where C2's code is faster (`python -m bench.analyze_jit`,
    docs/performance.md)."""
    return C1_ONLY if hop_rows <= C1_UP_TO_HOP_ROWS else ""


def session_jit(spark: SparkSession) -> str:
    """Which JIT a session's driver JVM was started with: "c1-only" or "tiered"."""
    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", "") or ""
    return "c1-only" if C1_ONLY in options.split() else "tiered"


def _submitted_conf() -> SparkConf:
    """The configuration spark-submit started the JVM with (--master, --conf, ...)."""
    SparkContext._ensure_initialized()  # connects to the submitter's JVM
    return SparkConf()
