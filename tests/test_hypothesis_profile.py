"""The Hypothesis profile: derandomized under CI, and no test's settings undo that."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from hypothesis import settings

from tests.conftest import hypothesis_profile

# Settings that would make CI's runs differ from each other again.
PROFILE_ONLY = {"derandomize", "database", "phases"}


def test_ci_selects_the_derandomized_profile() -> None:
    assert hypothesis_profile({"CI": "true"}) == "ci"
    assert hypothesis_profile({"CI": "1"}) == "ci"
    assert hypothesis_profile({}) == "dev"
    assert hypothesis_profile({"CI": ""}) == "dev"
    assert hypothesis_profile({"CI": "false"}) == "dev"
    assert hypothesis_profile({"CI": "true", "HYPOTHESIS_PROFILE": "dev"}) == "dev"
    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.database is None and ci.print_blob and ci.deadline is None
    assert not settings.get_profile("dev").derandomize


def test_the_profile_for_this_environment_is_loaded() -> None:
    expected = settings.get_profile(hypothesis_profile(os.environ))
    assert settings.default.derandomize == expected.derandomize
    assert settings.default.database == expected.database
    assert settings.default.deadline == expected.deadline


def _settings_keywords(path: Path) -> set[str]:
    """Keywords given to `settings(...)` or `@settings(...)` anywhere in `path`."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else None
            name = node.func.id if isinstance(node.func, ast.Name) else name
            if name == "settings":
                out |= {k.arg for k in node.keywords if k.arg is not None}
    return out


def test_no_test_overrides_the_profile() -> None:
    tests = Path(__file__).parent
    overriding = {
        path.name: sorted(keywords & PROFILE_ONLY)
        for path in sorted(tests.glob("*.py"))
        if path.name != "conftest.py" and (keywords := _settings_keywords(path))
    }
    assert {name: keys for name, keys in overriding.items() if keys} == {}
    assert "test_covering.py" in overriding  # the scan sees the tests' settings
