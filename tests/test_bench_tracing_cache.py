"""bench.tracing_cache: the host's caches as cachegrind options, and the process it
counts (run here without valgrind: counting takes minutes)."""

from __future__ import annotations

import re
from pathlib import Path

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
