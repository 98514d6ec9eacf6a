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
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
    from monitor.spark import spark_session

    session = spark_session(
        "local[2]",
        app_name="hop-tests",
        shuffle_partitions=2,
        java_options="-XX:TieredStopAtLevel=1",  # tiny data: compile quickly, not well
    )
    yield session
    session.stop()


# --- capabilities: tests that need a tool fail, or skip only when HOP_TEST_SKIP names it ---
# (tests/capabilities.py; pytester runs pytest inside a test, for tests/test_capabilities.py)
# tests/spark_cluster.py: the `standalone_cluster` fixture, one per session.
pytest_plugins = ["tests.capabilities", "tests.spark_cluster", "pytester"]
