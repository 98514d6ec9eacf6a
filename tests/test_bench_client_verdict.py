"""bench.client_verdict: each run's targets judged by one rule (the medians and the
repetitions must agree, and a majority must be more than a coin gives), and the
table of several runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import client_api, client_verdict
from tests.test_bench_client_api import system_sample

REPO = Path(__file__).resolve().parent.parent
WRITTEN = "2000-01-02T03:04:05Z"  # a result file's date, as `write_result` notes it
REVISION = "rev-one"


def _target(met: bool | None, won: int, n: int) -> dict[str, Any]:
    return {"target_met": met, "ratios": [1.0] * n, "repetitions_won": won}


@pytest.mark.parametrize(
    ("met", "won", "n", "judgement"),
    [
        (True, 21, 30, "met"),  # p = 0.043
        (True, 20, 30, "a tie"),  # p = 0.099: a coin gives that one time in ten
        (True, 5, 5, "met"),  # every repetition: the most five can say
        (True, 4, 5, "a tie"),
        (True, 8, 30, "a tie"),  # the medians meet it, the repetitions say otherwise
        (False, 9, 30, "not met"),
        (False, 0, 5, "not met"),
        (False, 15, 30, "a tie"),
        (False, 25, 30, "a tie"),  # the medians miss it, the repetitions say otherwise
    ],
)
def test_a_target_is_judged_by_its_medians_and_its_repetitions_together(
    met: bool, won: int, n: int, judgement: str
) -> None:
    assert client_verdict.judged(_target(met, won, n)) == judgement


def test_a_target_not_measured_is_not_judged() -> None:
    assert client_verdict.judged(_target(None, 0, 0)) is None
    assert client_verdict.judged(_target(True, 0, 0)) is None  # (no repetition paired)


def _samples(one: list[float], p50: list[float]) -> list[dict[str, Any]]:
    return [
        system_sample((a, a / 2, b)) | {"repetition": r}
        for r, (a, b) in enumerate(zip(one, p50, strict=True))
    ]


def _result_file(
    path: Path, ours: dict[str, Any], base: dict[str, Any], modified: list[str]
) -> Path:
    systems = {"hop-trio": client_api.summarize(_samples(**ours)),
               "mosquitto-gmqtt": client_api.summarize(_samples(**base))}  # fmt: skip
    machine = {"date": WRITTEN, "git_revision": REVISION, "git_modified": modified}
    path.write_text(json.dumps({"machine": machine, "systems": systems}))
    return path


def test_the_table_has_a_row_per_run_and_counts_each_targets_judgements(tmp_path: Path) -> None:
    six = [100_000.0] * 6
    fast = _result_file(
        tmp_path / "fast.json",
        {"one": [120_000.0] * 6, "p50": [150.0] * 6},
        {"one": six, "p50": [160.0] * 6},
        ["docs/performance.md"],  # not code: the revision's code ran
    )
    slow = _result_file(
        tmp_path / "slow.json",
        {"one": [101_000.0, 99_000.0] * 3, "p50": [200.0] * 6},
        {"one": six, "p50": [160.0] * 6},
        ["broker/server.py", "docs/performance.md"],
    )
    table = client_verdict.verdict([fast, slow])
    header, _, first, second, _, *tallies = table.splitlines()
    assert header.startswith("| result file | written (UTC) | revision | hop-trio 1-to-1 events/s")
    assert first.startswith("| `fast.json` | 2000-01-02 03:04 | rev-one | 120.0k / 100.0k; 1.20")
    assert "6 of 6, p = 0.031: met" in first
    assert "| 150 / 160; 0.94 (0.94-0.94); 6 of 6, p = 0.031: met |" in first
    assert second.startswith(
        "| `slow.json` | 2000-01-02 03:04 | rev-one with broker/server.py modified |"
    )
    assert "100.0k / 100.0k; 1.00 (0.99-1.01); 3 of 6, p = 1: a tie" in second
    assert "200 / 160; 1.25 (1.25-1.25); 0 of 6, p = 0.031: not met" in second
    assert tallies == [
        "- hop-trio 1-to-1 events/s: met in 1, a tie in 1, not met in 0 of 2 runs",
        "- hop-trio 1-to-4 events/s: met in 1, a tie in 1, not met in 0 of 2 runs",
        "- hop-trio p50 at 500/s: met in 1, a tie in 0, not met in 1 of 2 runs",
    ]


def test_pooled_the_repetitions_of_several_runs_are_judged_as_one_run(tmp_path: Path) -> None:
    """Three runs, each a tie on the p50 (ours lower in 5 of 6, p = 0.22), are together
    ours lower in 15 of 18 (p = 0.0075): met; the rates, met in each, met together."""
    runs = [
        _result_file(
            tmp_path / f"run{k}.json",
            {"one": [120_000.0] * 6, "p50": [150.0] * 5 + [170.0]},
            {"one": [100_000.0] * 6, "p50": [160.0] * 6},
            [],
        )
        for k in range(3)
    ]
    table = client_verdict.verdict(runs, pool=True)
    assert "- hop-trio p50 at 500/s: met in 0, a tie in 3, not met in 0 of 3 runs" in table
    assert table.splitlines()[-3:] == [
        "- hop-trio 1-to-1 events/s, all 18 repetitions together: ours / baseline 1.20 "
        "(1.20-1.20); ours the better in 18 of 18, p < 0.0001: met",
        "- hop-trio 1-to-4 events/s, all 18 repetitions together: ours / baseline 1.20 "
        "(1.20-1.20); ours the better in 18 of 18, p < 0.0001: met",
        "- hop-trio p50 at 500/s, all 18 repetitions together: ours / baseline 0.94 "
        "(0.94-1.06); ours the better in 15 of 18, p = 0.0075: met",
    ]
    assert "together" not in client_verdict.verdict(runs)  # only when asked
    worse = _result_file(
        tmp_path / "worse.json",
        {"one": [99_000.0] * 6, "p50": [150.0] * 6},
        {"one": [100_000.0] * 6, "p50": [160.0] * 6},
        [],
    )
    one_to_one = client_verdict.verdict([worse, worse], pool=True).splitlines()[-3]
    assert one_to_one.endswith("ours the better in 0 of 12, p = 0.00049: not met")


def test_files_without_a_client_target_say_so(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"systems": {}}))
    assert client_verdict.verdict([empty]) == "No client target was measured in these files."


def test_the_table_can_keep_to_one_clients_targets(tmp_path: Path) -> None:
    run = _result_file(
        tmp_path / "run.json",
        {"one": [120_000.0] * 6, "p50": [150.0] * 6},
        {"one": [100_000.0] * 6, "p50": [160.0] * 6},
        [],
    )
    assert "hop-trio 1-to-1" in client_verdict.verdict([run], ours="hop-trio")
    assert client_verdict.verdict([run], ours="hop-blocking") == (
        "No client target was measured in these files."
    )


def test_a_file_that_is_no_client_result_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"systems": ')
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"benchmark": "routing_loop"}))
    with pytest.raises(ValueError, match=r"broken\.json: not JSON"):
        client_verdict.verdict([broken])
    with pytest.raises(ValueError, match=r"missing\.json: cannot be read \(No such file"):
        client_verdict.verdict([tmp_path / "missing.json"])
    with pytest.raises(ValueError, match=r"other\.json: not a bench.client_api result"):
        client_verdict.verdict([other])
    with pytest.raises(SystemExit):  # the command says so and exits 2
        client_verdict.main([str(other)])


def verdict_tables(doc: str) -> list[tuple[list[str], str, bool]]:
    """Each verdict table of a page: the result files its rows name, its client, and
    whether its tallies go on with the pooled lines."""
    tables = []
    blocks = doc.split("\n\n")
    for block, tallies in zip(blocks, blocks[1:] + [""], strict=True):
        if block.startswith(client_verdict.TABLE_HEAD):
            header = block.splitlines()[0][len(client_verdict.TABLE_HEAD) :]
            files = [line.split("`")[1] for line in block.splitlines()[2:]]
            tables.append((files, header.split()[0], "repetitions together:" in tallies))
    return tables


def test_the_docs_verdict_tables_are_the_tools_output_for_the_committed_files() -> None:
    """docs/performance.md's verdict tables and their tallies are what
    `python -m bench.client_verdict` prints for the result files they name, as they
    are committed: a figure there comes from a file here."""
    doc = (REPO / "docs" / "performance.md").read_text()
    tables = verdict_tables(doc)
    assert [(ours, pool) for _, ours, pool in tables] == [
        ("hop-trio", False),  # every long run
        ("hop-trio", False),  # the long runs on the AMD EPYC VM
        ("hop-blocking", False),
        ("hop-trio", True),  # the runs of the code as it is, pooled
        ("hop-asyncio", True),  # the asyncio client's long runs, pooled
    ]
    for files, ours, pool in tables:
        assert len(files) >= 2
        paths = [REPO / "bench" / "results" / file for file in files]
        assert client_verdict.verdict(paths, ours=ours, pool=pool) in doc
