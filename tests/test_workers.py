"""The two workers of `make test` (tests/conftest.py): a file's tests stay on one worker,
the files sharing the Spark session go to the same one, and each worker draws broker
ports from a range of its own. An inner pytest run (pytester) with two workers uses the
suite's own scheduler and hooks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.local_network import FREE_PORTS_ENV, REPO
from tests.conftest import SPARK_FILES, scope_of

INNER_CONFTEST = """
from tests.conftest import pytest_collection_modifyitems, pytest_xdist_make_scheduler
"""

INNER_TEST = """
import json, os
from pathlib import Path

import pytest

@pytest.mark.parametrize("n", range({count}))
def test_note_the_worker(n):
    with open(Path(os.environ["NOTES"]) / f"{{os.getpid()}}-{{n}}-{name}.json", "w") as f:
        json.dump({{"file": "{name}", "worker": os.environ["PYTEST_XDIST_WORKER"],
                   "ports": os.environ["{env}"]}}, f)
"""


def test_a_test_id_belongs_to_its_files_group() -> None:
    assert scope_of("tests/test_replay.py::test_x[a/b::c]") == "test_replay.py"
    assert scope_of("tests/test_replay.py::Class::test_x") == "test_replay.py"
    for name in SPARK_FILES:
        assert scope_of(f"tests/{name}::test_x[1]") == "spark"


def test_two_workers_keep_files_whole_and_the_spark_files_together(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    monkeypatch.setenv("NOTES", str(notes))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.delenv(FREE_PORTS_ENV, raising=False)
    pytester.makeconftest(INNER_CONFTEST)
    files = [*sorted(SPARK_FILES), "test_one.py", "test_two.py", "test_three.py"]
    for name in files:
        pytester.makepyfile(
            **{name.removesuffix(".py"): INNER_TEST.format(count=4, name=name, env=FREE_PORTS_ENV)}
        )
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4 * len(files))
    seen = [json.loads(p.read_text()) for p in notes.iterdir()]
    workers: dict[str, set[str]] = {}
    for note in seen:
        workers.setdefault(note["file"], set()).add(note["worker"])
    assert all(len(on) == 1 for on in workers.values()), workers
    assert len({worker for name in SPARK_FILES for worker in workers[name]}) == 1
    assert len({note["worker"] for note in seen}) == 2  # both workers had work
    ranges = {note["worker"]: note["ports"] for note in seen}
    (low0, high0), (low1, high1) = (map(int, ranges[w].split("-")) for w in ("gw0", "gw1"))
    assert low0 < high0 <= low1 < high1
