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
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("routing", "topologies", "broker", "client", "monitor", "hop", "bench")


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


@pytest.mark.integration
def test_the_installed_hop_runs_the_pipeline_from_outside_the_checkout(
    wheel: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps"]
    installed = _run([*install, "--quiet", str(wheel)], tmp_path)
    assert installed.returncode == 0, installed.stderr
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(_run([str(python), "-c", purelib], tmp_path).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    work = tmp_path / "elsewhere"
    work.mkdir()
    where = _run([str(python), "-c", "import hop, monitor.analysis; print(hop.__file__)"], work)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout

    hop = str(venv / "bin" / "hop")
    steps = [
        [hop, "replay", "tree7", "--out", "run", "--duration", "3", "--warmup", "1", "--quiet"],
        [hop, "analyze", "run"],
        [hop, "predict", "run", "--method", "mm1"],
        [hop, "report", "run"],
    ]
    for step in steps:
        done = _run(step, work, timeout=600)
        assert done.returncode == 0, f"{' '.join(step[1:])}: {done.stderr[-3000:]}"
    assert (work / "run" / "report.html").stat().st_size > 0
    assert (work / "run" / "analysis" / "predictions.parquet").exists()
