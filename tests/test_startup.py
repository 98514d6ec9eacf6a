"""What starting a broker costs: the modules its processes load. A network of N
brokers starts N broker processes (and N trace writers when traced) on a few cores,
so each one's imports add up (`hop replay` of the 15-broker case study waited 8 s for
its traced brokers to listen before these were trimmed, 4.9 s after)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from broker.local_network import REPO


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_broker_process_loads_no_dataframe_or_arrow_library() -> None:
    """A broker starts as `python -m broker.cli broker`; the Arrow work of a traced
    broker is its writer's, and replay, analysis and report load theirs when they run."""
    loaded = _run(
        "import sys, broker.cli, broker.server\n"
        "print(sorted(m for m in ('numpy', 'pandas', 'pyarrow', 'pyspark') if m in sys.modules))"
    )
    assert loaded == "[]"


def test_a_broker_process_loads_neither_the_client_library_nor_the_monitor() -> None:
    loaded = _run(
        "import sys, broker.cli, broker.server\n"
        "top = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(top & {'client', 'monitor', 'hop', 'tqdm'}))"
    )
    assert loaded == "[]"


def test_the_command_line_loads_what_a_command_needs_only_when_it_runs() -> None:
    """`hop pub`, `hop sub` and `hop --help` start without numpy, Arrow, pandas, Spark,
    the replay or the package metadata (a third of `hop`'s start-up when they loaded);
    `--version` reads the trace schema when asked."""
    heavy = "('numpy', 'pandas', 'pyarrow', 'pyspark', 'monitor.replay', 'importlib.metadata')"
    loaded = _run(
        "import sys, hop.cli\n"
        "hop.cli.build_parser().parse_args(['pub', '127.0.0.1:1', 'x=1'])\n"
        f"print(sorted(m for m in {heavy} if m in sys.modules))"
    )
    assert loaded == "[]"
    assert _run("import hop.cli\nhop.cli.main(['--version'])").startswith("hop ")


def test_the_client_package_loads_asyncio_only_for_the_asyncio_client() -> None:
    """`import client` (every trio program) leaves asyncio out; the asyncio client's
    names load it."""
    loaded = _run(
        "import sys, client\n"
        "print('asyncio' in sys.modules)\n"
        "client.open_asyncio_client\n"
        "print('asyncio' in sys.modules, client.AsyncioClient.__module__)"
    )
    assert loaded.splitlines() == ["False", "True client.asyncio_client"]


def test_the_trace_writer_writes_without_pandas(tmp_path: Path) -> None:
    """pyarrow would import pandas (when installed) at its first conversion."""
    path = tmp_path / "hops-broker1-1.arrow"
    out = _run(
        "import sys\n"
        "from pathlib import Path\n"
        "from broker.trace.arrow_writer import TraceWriter, without_pandas\n"
        "from broker.trace.schema import HOPS\n"
        "without_pandas()\n"
        f"writer = TraceWriter(Path({str(path)!r}), HOPS, {{'run_id': 'r', 'broker': '1'}})\n"
        "writer.close()\n"
        "print('pandas' in sys.modules)\n"
        "try:\n"
        "    import pandas\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc)\n"
    )
    assert out.splitlines() == ["False", "this process writes traces without pandas"]
    assert pa.ipc.open_stream(path).read_all().schema.names[:2] == ["run_id", "event_id"]


def test_a_replays_client_process_writes_its_traces_without_pandas(tmp_path: Path) -> None:
    """`python -m monitor.driver` (a replay starts one per client, 24 for the 15-broker
    case study, all at once): its `main`, here with its input at an end before any plan,
    leaves pandas unimportable, and its trace writers start without it."""
    code = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "os.dup2(os.open(os.devnull, os.O_RDONLY), 0)\n"
        "import monitor.driver\n"
        "from monitor.tracing import ClientRecorder\n"
        "print(monitor.driver.main())\n"
        f"recorder = ClientRecorder(Path({str(tmp_path)!r}), 'r', 'pub1')\n"
        "print('pandas' in sys.modules)\n"
        "try:\n"
        "    import pandas\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc)\n"
    )
    assert _run(code).splitlines() == ["0", "False", "this process writes traces without pandas"]


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("trend='curve'", "unknown trend 'curve'; use one of ('line', 'none')"),
        # the last of its checks: every check comes before the imports
        ("duration_s=-1", "duration must be a finite number more than 0, got -1"),
    ],
)
def test_hop_validate_refuses_a_bad_option_before_loading_spark_or_pandas(
    tmp_path: Path, option: str, message: str
) -> None:
    """Its checks come before the imports of the replay, Spark, pandas and the report
    (a second and more), so a mistyped option is refused at once."""
    heavy = "('pandas', 'pyarrow', 'pyspark', 'matplotlib', 'monitor.replay')"
    out = _run(
        "import sys\n"
        "from pathlib import Path\n"
        "from monitor.errors import InputError\n"
        "from monitor.validate import validate\n"
        "try:\n"
        f"    validate(Path('topologies/tree7.toml'), Path({str(tmp_path / 'run')!r}), {option})\n"
        "except InputError as exc:\n"
        "    print(exc)\n"
        f"print(sorted(m for m in {heavy} if m in sys.modules))"
    )
    assert out.splitlines() == [message, "[]"]
    assert not (tmp_path / "run").exists()
