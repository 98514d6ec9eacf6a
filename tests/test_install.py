"""The project as a user installs it: the wheel holds every package and the shipped
topologies, and from outside the checkout its `hop` replays, analyses, predicts and
reports.

The fresh virtual environment gets the wheel without dependencies (pip `--no-deps`) and
sees the third-party packages of the running environment through a `.pth` line: the
install under test is the wheel's, checked by where `hop` is imported from, while
PySpark and the rest are not copied again (hundreds of MB, minutes). That every
third-party import is a declared dependency is checked apart, from the sources.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from importlib import metadata
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("routing", "topologies", "broker", "client", "monitor", "hop", "bench")
TYPED = ("routing", "topologies", "broker", "client", "monitor", "hop")  # the libraries


def _packages() -> set[str]:
    """Every package and subpackage of the checkout, dotted."""
    return {
        ".".join(init.parent.relative_to(REPO).parts)
        for layer in LAYERS
        for init in (REPO / layer).rglob("__init__.py")
    }


def _run(cmd: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


SKIP_IN_COPY = (".git", ".venv", "build", "runs", "*.egg-info", "__pycache__", ".*_cache")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of the checkout (a build writes build/ beside the
    sources, and the checkout is not the test's to change)."""
    source = tmp_path_factory.mktemp("source") / "hop"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*SKIP_IN_COPY))
    dist = tmp_path_factory.mktemp("dist")
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist)]
    built = _run([*pip, str(source)], cwd=dist)
    assert built.returncode == 0, built.stderr
    (path,) = dist.glob("hop_broker-*.whl")
    return path


def test_the_wheel_holds_every_package_and_the_shipped_topologies(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    packaged = {n.removesuffix("/__init__.py").replace("/", ".") for n in names}
    missing = sorted(p for p in _packages() if p not in packaged)
    assert not missing, f"packages left out of the wheel: {missing}"
    shipped = {p.name for p in (REPO / "topologies").glob("*.toml")}
    assert shipped and {f"topologies/{n}" for n in shipped} <= names
    assert not any(n.startswith("tests/") for n in names)
    assert {f"{layer}/py.typed" for layer in TYPED} <= names  # PEP 561: annotations read


def test_every_third_party_import_is_a_declared_dependency() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}

    declared_names = names(project["dependencies"])
    # the benchmarks' baselines are an extra of their own (pip install '.[bench]')
    bench_names = declared_names | names(project["optional-dependencies"]["bench"])
    imported: dict[str, str] = {}
    for layer in LAYERS:
        for path in (REPO / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    tops = [alias.name.split(".")[0] for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    tops = [node.module.split(".")[0]]
                else:
                    continue
                for top in tops:
                    if top not in LAYERS and top not in sys.stdlib_module_names:
                        imported.setdefault(top, str(path.relative_to(REPO)))
    distributions = packages_distributions()  # import name -> its distributions

    def declared(module: str, where: str) -> bool:
        allowed = bench_names if where.startswith("bench/") else declared_names
        return any(d.lower() in allowed for d in distributions.get(module, [module]))

    undeclared = {m: where for m, where in imported.items() if not declared(m, where)}
    assert not undeclared, f"imported but not in [project] dependencies: {undeclared}"


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with the wheel installed (see the module doc)."""
    venv = tmp_path_factory.mktemp("installed") / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], venv.parent)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps"]
    installed = _run([*install, "--quiet", str(wheel)], venv.parent)
    assert installed.returncode == 0, installed.stderr
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(_run([str(python), "-c", purelib], venv.parent).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


USER_CODE = """
import client
from routing import covers, parse_filter


def script() -> None:
    with client.Client.connect("127.0.0.1", 7304, name="sub-1", reconnect=True) as c:
        sub = c.subscribe("family = 7 and price < 120.5")
        event_id: str = c.publish({"type": "callForOffers", "family": 7, "price": 99.0})
        delivery: client.Delivery = sub.next_delivery(timeout=1.0)
        published_ns: int = delivery.t_publish_ns
        c.subscribe("family = 8", handler=lambda d: print(d.attributes))
        round_trip_s: float = c.ping()
        c.unsubscribe(sub)
        c.wait_closed(timeout=1.0)


async def task() -> None:
    async with client.open_client(
        "127.0.0.1", 7304, name="sub-2", on_disconnect=print, on_reconnect=lambda: None
    ) as c:
        sub = await c.subscribe("family = 7")
        async for event in sub:
            print(event["family"])
        batch: list[client.Delivery] = await sub.next_batch()
        ids: list[str] = await c.publish_many([{"family": 1}])


async def asyncio_task() -> None:
    async with client.open_asyncio_client("127.0.0.1", 7304, name="sub-3") as c:
        sub = await c.subscribe("family = 7", handler=lambda d: print(d.event_id))
        await c.unsubscribe(sub)
        round_trip_s: float = await c.ping()
    pub: client.AsyncioClient = await client.AsyncioClient.connect("h", 1, name="pub")
    subscription: client.AsyncioSubscription = await pub.subscribe("family = 7")
    delivery: client.Delivery = await subscription.next_delivery()
    await pub.aclose()


matches: bool = parse_filter("family = 7").matches({"family": 7})
covered: bool = covers(parse_filter("price > 3"), parse_filter("price > 5"))
"""


def test_make_test_type_checks_every_layer() -> None:
    """`make test` runs `mypy` with no arguments: its configured files are every layer,
    so a package added later is checked too (or this fails)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert sorted(config["files"]) == sorted(LAYERS)
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\ntest: ", 1)[1].split("\n\n", 1)[0]
    assert "\n\t$(BIN)/mypy\n" in recipe


@pytest.mark.integration
def test_a_users_code_is_type_checked_against_the_installed_libraries(
    venv: Path, tmp_path: Path
) -> None:
    """mypy reads the installed wheel's annotations (its py.typed markers): a user's
    code that uses the client API as documented passes, and a misuse is reported."""
    good = tmp_path / "good.py"
    good.write_text(USER_CODE)
    bad = tmp_path / "bad.py"
    bad.write_text(USER_CODE + 'wrong: int = client.Client.connect("h", 1, name="n").ping()\n')
    mypy = [sys.executable, "-m", "mypy", "--python-executable", str(venv / "bin" / "python")]
    mypy += ["--no-incremental", "--strict-optional"]
    checked = _run([*mypy, str(good)], tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Success" in checked.stdout
    refused = _run([*mypy, str(bad)], tmp_path)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    line = len(USER_CODE.splitlines()) + 1
    wrong = f'bad.py:{line}: error: Incompatible types in assignment (expression has type "float"'
    assert wrong in refused.stdout, refused.stdout


@pytest.mark.integration
@pytest.mark.needs("java")  # hop analyze runs Spark
def test_the_installed_hop_runs_the_pipeline_from_outside_the_checkout(
    venv: Path, tmp_path: Path
) -> None:
    python = venv / "bin" / "python"
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = _run([str(python), "-c", "import hop, monitor.analysis; print(hop.__file__)"], work)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout

    hop = str(venv / "bin" / "hop")
    version = _run([hop, "--version"], work)
    assert version.stdout.startswith(f"hop {metadata.version('hop-broker')} (protocol "), version
    steps = [
        [hop, "replay", "tree7", "--out", "run", "--duration", "3", "--warmup", "1", "--quiet"],
        [hop, "analyze", "run"],
        [hop, "predict", "run", "--method", "mm1"],
        [hop, "report", "run"],
    ]
    for step in steps:
        done = _run(step, work, timeout=600)
        assert done.returncode == 0, f"{' '.join(step[1:])}: {done.stderr[-3000:]}"
        # Spark's start-up chatter stays out of a user's terminal (monitor.spark).
        assert "log level" not in done.stderr, done.stderr[-3000:]
    assert (work / "run" / "report.html").stat().st_size > 0
    summary = json.loads((work / "run" / "analysis" / "summary.json").read_text())
    assert summary["spark_jit"] == "c1-only"  # a short run's analysis (monitor.spark)
    assert (work / "run" / "analysis" / "predictions.parquet").exists()
