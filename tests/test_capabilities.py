"""The capability check (tests/capabilities.py): a test needing a missing capability
fails naming it and how to install it; one that ``HOP_TEST_SKIP`` lists is skipped; a
present one runs. Inner pytest runs (pytester) use two fake capabilities."""

from __future__ import annotations

import os

import pytest

from tests import capabilities
from tests.capabilities import SKIP_ENV, Capability, Registry, decide, opted_out

PRESENT = Capability("frob", "frobbing", "apt-get install frob", lambda: None)
ABSENT = Capability(
    "zap", "zapping", "apt-get install zap", lambda: "the `zap` command is not on PATH"
)

INNER_TESTS = """
import pytest

@pytest.mark.needs("frob")
def test_with_frob():
    pass

@pytest.mark.needs("zap")
def test_with_zap():
    pass

@pytest.mark.needs("frob", "zap")
def test_with_both():
    pass

def test_with_nothing():
    pass

@pytest.fixture
def spark():
    return "a fixture whose users need zap"

def test_with_the_fixture(spark):
    pass
"""


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester whose runs know only the fake capabilities (the `spark` fixture needs zap)."""
    monkeypatch.setattr(capabilities, "REGISTRY", Registry({"frob": PRESENT, "zap": ABSENT}))
    monkeypatch.setattr(capabilities, "FIXTURE_NEEDS", {"spark": "zap"})
    monkeypatch.delenv(SKIP_ENV, raising=False)
    pytester.makeini(
        "[pytest]\naddopts = -ra --strict-markers\nmarkers =\n    needs(*names): capabilities\n"
    )
    pytester.makepyfile(test_inner=INNER_TESTS)
    return pytester


def run(inner: pytest.Pytester, *args: str) -> pytest.RunResult:
    return inner.runpytest_inprocess("-p", "tests.capabilities", *args)


def test_a_missing_capability_fails_the_test_naming_it_and_how_to_install_it(
    inner: pytest.Pytester,
) -> None:
    result = run(inner)
    result.assert_outcomes(passed=2, errors=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_with_zap*",
            "needs capability 'zap' (zapping): the `zap` command is not on PATH. "
            f"Install: apt-get install zap. To skip such tests instead, run with {SKIP_ENV}=zap",
            "ERROR test_inner.py::test_with_zap - Failed: needs capability 'zap'*",
            "ERROR test_inner.py::test_with_both - Failed: needs capability 'zap'*",
            "ERROR test_inner.py::test_with_the_fixture - Failed: needs capability 'zap'*",
        ]
    )


def test_a_capability_listed_in_hop_test_skip_is_skipped_with_that_reason(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SKIP_ENV, "zap")
    result = run(inner)
    result.assert_outcomes(passed=2, skipped=3)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"SKIPPED * capability 'zap' opted out by {SKIP_ENV}"])
    monkeypatch.setenv(SKIP_ENV, " frob, zap ")  # even a present one, when named
    run(inner).assert_outcomes(passed=1, skipped=4)
    monkeypatch.setenv(SKIP_ENV, "frob")  # one opted out: skipped, though another is missing
    result = run(inner, "-v")
    result.assert_outcomes(passed=1, skipped=2, errors=2)
    result.stdout.fnmatch_lines(["*::test_with_both SKIPPED (capability 'frob' opted out*"])


def test_an_unknown_name_is_a_usage_error_not_a_silent_pass(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SKIP_ENV, "zap,netnss")
    result = run(inner)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{SKIP_ENV} names unknown capabilities ?'netnss'?; known*"])
    monkeypatch.delenv(SKIP_ENV)
    inner.makepyfile(
        test_typo="import pytest\n@pytest.mark.needs('zapp')\ndef test_typo():\n    pass\n"
    )
    result = inner.runpytest_inprocess("-p", "tests.capabilities", "test_typo.py")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*unknown capability ?'zapp'? in*"])


def test_decide_and_opted_out() -> None:
    assert decide(PRESENT, frozenset(), None) == ("run", "")
    verdict, reason = decide(ABSENT, frozenset(), "gone")
    assert verdict == "fail" and "'zap'" in reason and "apt-get install zap" in reason
    assert decide(ABSENT, frozenset({"zap"}), "gone")[0] == "skip"
    assert opted_out({SKIP_ENV: "a, b,,"}, ["a", "b", "c"]) == {"a", "b"}
    assert opted_out({}, ["a"]) == frozenset()
    with pytest.raises(ValueError, match=r"\['d'\]"):
        opted_out({SKIP_ENV: "a,d"}, ["a"])


def test_each_probe_is_run_once() -> None:
    calls: list[str] = []
    counted = Capability("c", "c", "c", lambda: calls.append("probe") or "missing")
    registry = Registry({"c": counted})
    assert registry.missing("c") == registry.missing("c") == "missing"
    assert calls == ["probe"]


def test_every_capability_is_present_here_unless_opted_out() -> None:
    """On a machine set up by `make setup` every capability is there: the probes agree
    (a probe that wrongly reports a tool missing would fail tests that need it)."""
    skip = opted_out(os.environ, capabilities.CAPABILITIES)
    missing = {
        name: why
        for name in capabilities.CAPABILITIES
        if name not in skip and (why := capabilities.REGISTRY.missing(name)) is not None
    }
    assert missing == {}
