"""Shared fixtures.

`spark`: one local Spark session for the whole test run. A session takes 10-15 s to
start, so it is shared; it starts only when the first test that asks for it runs
(pyspark is not even imported before), so tests without Spark never pay for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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
pytest_plugins = ["tests.capabilities", "pytester"]
