"""Shared fixtures, and the Hypothesis profile.

Hypothesis profiles: "ci", loaded when the environment variable ``CI`` is set to
anything but "", "0" or "false" (CI runs with ``CI=true``), draws examples from a
fixed seed per test (``derandomize``, so no example database), so a CI failure is the
same failure on every run and on a developer's machine run with ``CI=true``; it has no
deadline and does not fail tests whose data generation is slow, because on shared
cores run times are not reproducible, and it prints the blob that replays a failing
example (``@reproduce_failure``). (Recent Hypothesis has such a built-in profile; the
project's own keeps CI the same with any Hypothesis it accepts.) "dev", otherwise,
keeps Hypothesis's random search and example database, which look further over many
runs and replay past failures first. ``HYPOTHESIS_PROFILE`` names a profile
explicitly. Tests' own ``@settings`` change only ``max_examples``, ``deadline`` and
health checks, never ``derandomize`` or ``database``
(``tests/test_hypothesis_profile.py`` checks that).

`spark`: one local Spark session for the whole test run. A session takes 10-15 s to
start, so it is shared; it starts only when the first test that asks for it runs
(pyspark is not even imported before), so tests without Spark never pay for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings
from xdist.scheduler import LoadScopeScheduling

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession

    from broker.local_network import Network

# Both on Hypothesis's "default" profile, not on the active one: recent Hypothesis
# already loads its own "ci" profile on import when CI is set.
settings.register_profile(
    "ci",
    settings.get_profile("default"),
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", settings.get_profile("default"))


def hypothesis_profile(environ: Mapping[str, str]) -> str:
    """The Hypothesis profile for an environment (see the module doc)."""
    if "HYPOTHESIS_PROFILE" in environ:
        return environ["HYPOTHESIS_PROFILE"]
    return "ci" if environ.get("CI", "").lower() not in ("", "false", "0") else "dev"


settings.load_profile(hypothesis_profile(os.environ))


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from monitor.spark import C1_ONLY, spark_session

    session = spark_session(
        "local[2]",
        app_name="hop-tests",
        shuffle_partitions=2,
        java_options=C1_ONLY,  # tiny data: compile quickly, not well (monitor.spark)
    )
    yield session
    session.stop()


@pytest.fixture
def chain5(tmp_path: Path) -> Iterator[Network]:
    """The shipped chain5 network on free ports, brokers 1 (the root) to 5 in a line,
    started and linked; stopped by PID afterwards."""
    from broker.local_network import Network

    net = Network.from_file("chain5", tmp_path)
    try:
        yield net.start()
    finally:
        net.stop()


# --- capabilities: tests that need a tool fail, or skip only when HOP_TEST_SKIP names it ---
# (tests/capabilities.py; pytester runs pytest inside a test, for tests/test_capabilities.py)
# tests/spark_cluster.py: the `standalone_cluster` fixture, one per session.
pytest_plugins = ["tests.capabilities", "tests.spark_cluster", "pytester"]


# --- two workers (`make test` runs pytest-xdist's `-n 2`) --------------------------------
# Tests are handed out a group at a time: a file, or the files that share the Spark
# session and the standalone cluster (each then starts once per run, as without workers,
# and a module's fixtures are built once). xdist's own `loadgroup` cannot be used: it
# renames test ids in a way pytest 9.2 no longer reads, so its groups split.
SHARED_JVMS = {"spark", "standalone_cluster"}
SPARK_FILES = {"test_analysis.py", "test_end_to_end.py"}
SLOWEST_FIRST = [
    "spark",
    "test_validate.py",
    "test_install.py",
    "test_replay_deployment.py",
    "test_netns_replay.py",
    "test_bench_client_api.py",
    "test_replay.py",
]
"""The longest groups (each a minute or more of one worker's time), handed out first so
that no worker is left with one of them at the end while the other waits."""


def group_of(file_name: str) -> str:
    return "spark" if file_name in SPARK_FILES else file_name


def scope_of(nodeid: str) -> str:
    """The group of a test id (`tests/test_x.py::test_y[param]`)."""
    return group_of(nodeid.split("::", 1)[0].rsplit("/", 1)[-1])


class ByGroup(LoadScopeScheduling):
    """xdist's scheduler by scope, the scope being `group_of` the test's file; groups are
    handed out in collection order (`pytest_collection_modifyitems` puts the slowest
    first)."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False  # xdist would order groups by test count

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> ByGroup:
    return ByGroup(config, log)


WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if WORKER is not None:
    # Each worker draws brokers' ports from its own share of the range (HOP_FREE_PORTS
    # as set for the run, or the default), as do the processes it starts, which inherit
    # it: a range one worker found free cannot be taken by the other before its brokers
    # listen.
    from broker.local_network import FREE_PORTS_ENV, free_port_range

    low, high = free_port_range()
    workers, index = int(os.environ["PYTEST_XDIST_WORKER_COUNT"]), int(WORKER[2:])
    share = (high - low) // workers
    os.environ[FREE_PORTS_ENV] = f"{low + index * share}-{low + (index + 1) * share}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A file using the Spark session or the standalone cluster must be in SPARK_FILES
    (or it would start its own under workers); under workers the slowest groups come
    first."""
    with_jvm = {item.path.name for item in items if SHARED_JVMS & set(item.fixturenames)}
    if with_jvm - SPARK_FILES:
        raise pytest.UsageError(
            f"tests/conftest.py: add {sorted(with_jvm - SPARK_FILES)} to SPARK_FILES"
        )
    if WORKER is not None:
        rank = {group: i for i, group in enumerate(SLOWEST_FIRST)}
        # a stable sort: the other files keep their order
        items.sort(key=lambda item: rank.get(group_of(item.path.name), len(rank)))
