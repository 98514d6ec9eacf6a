"""The layer contracts (import-linter, in pyproject.toml) hold, and they catch an import
that breaks a layer: checked on a copy of the packages, never on the tree itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("routing", "topologies", "broker", "client", "monitor", "hop", "bench")
# `make setup` installs import-linter into an environment of its own (pyproject.toml).
LINT_IMPORTS = Path(sys.prefix) / "lint" / "bin" / "lint-imports"


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    root.mkdir()
    for name in PACKAGES:
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "300"}  # no wrapped lines
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}\n")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy(tmp_path_factory.mktemp("layers"))


def test_the_tree_keeps_every_contract(pristine: Path) -> None:
    result = _lint(pristine)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "wrong_import", "contract"),
    [
        ("broker/server.py", "import monitor.replay", "Layers"),
        ("routing/filters.py", "import broker.protocol", "Layers"),
        ("client/aio.py", "import hop.cli", "Layers"),
        ("routing/index.py", "import trio", "routing and topologies are pure"),
        ("broker/process.py", "import pandas", "A broker process loads"),
    ],
)
def test_an_import_against_the_layers_breaks_a_contract(
    tmp_path: Path, module: str, wrong_import: str, contract: str
) -> None:
    root = _copy(tmp_path)
    _append(root / module, wrong_import)
    result = _lint(root)
    assert result.returncode != 0, result.stdout
    broken = [line for line in result.stdout.splitlines() if line.endswith(" BROKEN")]
    assert any(line.startswith(contract) for line in broken), result.stdout
    importer = module.removesuffix(".py").replace("/", ".")
    imported = wrong_import.removeprefix("import ")
    assert f"{importer} -> {imported}" in result.stdout, result.stdout
