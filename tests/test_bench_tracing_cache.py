"""bench.tracing_cache: the host's caches as cachegrind options, the process it counts
(run here without valgrind: counting it takes minutes), and cachegrind's summary read
from a real valgrind run of a small program."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from bench import tracing_cache
from monitor.traces import read_table


def test_cache_options_describe_the_hosts_data_caches() -> None:
    for level, option in ((1, "D1"), (2, "LL")):
        value = tracing_cache.cache_option(level, option)
        found = re.fullmatch(rf"--{option}=(\d+),(\d+),(\d+)", value)
        assert found is not None, value
        size, ways, line = map(int, found.groups())
        assert size % (ways * line) == 0  # whole sets, as valgrind requires


def test_the_counted_process_routes_and_traces_every_event(tmp_path: Path) -> None:
    tracing_cache.child("on", 500, str(tmp_path))
    assert read_table(tmp_path, "hops").table.num_rows == 500


@pytest.mark.needs("valgrind")
def test_cachegrind_counts_a_real_run_with_the_hosts_caches() -> None:
    options = [tracing_cache.cache_option(1, "D1"), tracing_cache.cache_option(2, "LL")]
    true = shutil.which("true")
    assert true is not None
    totals = tracing_cache.cachegrind([true], options, dict(os.environ))
    assert set(totals) == {"instructions", "d1_misses", "l2_misses"}
    assert totals["instructions"] > 10_000  # the dynamic loader alone runs that many
    assert 0 < totals["l2_misses"] <= totals["d1_misses"] < totals["instructions"]
    with pytest.raises(RuntimeError, match="cachegrind run failed"):
        tracing_cache.cachegrind([true], ["--D1=3,3,3"], dict(os.environ))  # not a cache
