"""What a test needs from the machine beyond Python, and what happens when it is missing.

A test that needs a tool or a kernel feature says so with a marker, e.g.
``@pytest.mark.needs("netns")``; the names are the keys of ``CAPABILITIES``. Before
the test's fixtures are set up, each capability it names is probed (once per session):

- present: the test runs;
- missing: the test fails (an error in its setup) with a message naming the capability,
  why the probe found it missing, and how to install it;
- listed in ``$HOP_TEST_SKIP`` (comma-separated names, e.g. ``HOP_TEST_SKIP=netns,chromium``):
  the test is skipped with that reason, whether or not the capability is present.

So a test never skips silently: a machine without a tool fails the run unless the person
running it opts out of that tool by name. CI never sets ``HOP_TEST_SKIP``. A name in
``HOP_TEST_SKIP`` or in a marker that is not a known capability is a usage error.

Tests that ask for certain fixtures need a capability without a marker: the ``spark``
and ``standalone_cluster`` fixtures start a JVM, so such tests need ``java``
(``FIXTURE_NEEDS``).

Registered as a pytest plugin by tests/conftest.py; docs/testing.md describes the opt-out.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

SKIP_ENV = "HOP_TEST_SKIP"
MARKER = "needs"
DEPS = "scripts/system_deps.sh (run by `make setup` and `make test`) installs it"


@dataclass(frozen=True)
class Capability:
    """One thing a test may need: ``probe`` returns None when it is there, else why not."""

    name: str
    needed_for: str
    install: str
    probe: Callable[[], str | None]


@dataclass
class Registry:
    """The known capabilities, each probed at most once."""

    capabilities: Mapping[str, Capability]
    _found: dict[str, str | None] = field(default_factory=dict)

    def missing(self, name: str) -> str | None:
        """Why capability ``name`` is missing here, or None if it is present."""
        if name not in self._found:
            self._found[name] = self.capabilities[name].probe()
        return self._found[name]


Verdict = Literal["run", "skip", "fail"]


def decide(
    capability: Capability, opted_out: frozenset[str], missing: str | None
) -> tuple[Verdict, str]:
    """What to do with a test that needs ``capability``: skip it if the runner opted out
    of it by name, else fail it if it is ``missing`` (the reason names the capability and
    how to install it), else run it."""
    if capability.name in opted_out:
        return "skip", f"capability {capability.name!r} opted out by {SKIP_ENV}"
    if missing is not None:
        return "fail", (
            f"needs capability {capability.name!r} ({capability.needed_for}): {missing}. "
            f"Install: {capability.install}. To skip such tests instead, run with "
            f"{SKIP_ENV}={capability.name}"
        )
    return "run", ""


def opted_out(environ: Mapping[str, str], known: Iterable[str]) -> frozenset[str]:
    """The capability names listed in ``$HOP_TEST_SKIP``; ValueError for an unknown one
    (a typo must not turn into a silent run of everything)."""
    names = frozenset(n.strip() for n in environ.get(SKIP_ENV, "").split(",") if n.strip())
    unknown = sorted(names - set(known))
    if unknown:
        raise ValueError(f"{SKIP_ENV} names unknown capabilities {unknown}; known: {sorted(known)}")
    return names


# --- probes ----------------------------------------------------------------------------------


def _command(*names: str) -> str | None:
    """The path of the first of ``names`` found on PATH."""
    return next((path for name in names if (path := shutil.which(name))), None)


def chromium_path() -> str | None:
    """The Chromium executable, if installed."""
    return _command("chromium", "chromium-browser")


def _installed(*names: str) -> Callable[[], str | None]:
    def probe() -> str | None:
        if _command(*names) is None:
            return f"the `{names[0]}` command is not on PATH"
        return None

    return probe


def _netns() -> str | None:
    """Network namespaces can be created: `ip` exists, we are root, `ip netns add` works."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not on PATH"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    probe = f"hopprobe{os.getpid() % 100000}"
    try:
        subprocess.run(["ip", "netns", "add", probe], check=True, capture_output=True, timeout=10)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        return f"`ip netns add` failed: {getattr(exc, 'stderr', b'') or exc}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=10)
    return None


def _sched_idle() -> str | None:
    if not hasattr(os, "SCHED_IDLE") or not hasattr(os, "sched_setaffinity"):
        return "this platform has no SCHED_IDLE scheduling policy or CPU affinity (Linux has)"
    return None


def _raise_priority() -> str | None:
    if not hasattr(os, "SCHED_IDLE"):
        return "this platform has no SCHED_IDLE scheduling policy (Linux has)"
    if os.geteuid() != 0 and resource.getrlimit(resource.RLIMIT_NICE)[0] < 20:
        return "leaving idle priority needs root (CAP_SYS_NICE) or an RLIMIT_NICE of 20"
    return None


def _procfs() -> str | None:
    if not Path("/proc/self/task").is_dir():
        return "/proc (with /proc/PID/task) is not mounted"
    return None


def _immutable_folders() -> str | None:
    """`chattr +i` makes a folder refuse new entries, even to root (an output that cannot
    be written, without filling a disk)."""
    if shutil.which("chattr") is None:
        return "the `chattr` command (e2fsprogs) is not on PATH"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "probe"
        folder.mkdir()
        made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, timeout=10)
        if made.returncode != 0:
            return f"`chattr +i` failed here: {made.stderr.decode().strip()}"
        try:
            (folder / "x").touch()
        except OSError:
            return None
        finally:
            subprocess.run(["chattr", "-i", str(folder)], capture_output=True, timeout=10)
        (folder / "x").unlink()
        return "a folder with `chattr +i` still takes new files (run the tests as root)"


def java_major() -> int:
    """The major version of `java` on PATH, 0 if there is none."""
    if shutil.which("java") is None:
        return 0
    done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    found = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr)
    if found is None:
        return 0
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def _java() -> str | None:
    major = java_major()
    if major < 17:
        return "no `java` on PATH" if major == 0 else f"`java` is version {major}, not 17+"
    return None


CAPABILITIES: dict[str, Capability] = {
    c.name: c
    for c in (
        Capability(
            "openssl",
            "making test certificates for TLS",
            f"apt-get install openssl; {DEPS}",
            _installed("openssl"),
        ),
        Capability(
            "netns",
            "brokers on separate simulated hosts",
            f"apt-get install iproute2 and run the tests as root; {DEPS}",
            _netns,
        ),
        Capability(
            "chromium",
            "rendering the report in a browser",
            f"apt-get install chromium; {DEPS}",
            _installed("chromium", "chromium-browser"),
        ),
        Capability(
            "valgrind",
            "counting instructions with cachegrind",
            f"apt-get install valgrind; {DEPS}",
            _installed("valgrind"),
        ),
        Capability(
            "java",
            "Spark",
            f"apt-get install openjdk-17-jre-headless; {DEPS}",
            _java,
        ),
        Capability(
            "immutable_folders",
            "an output folder that cannot be written",
            f"run the tests as root on ext4, xfs or btrfs, with chattr (e2fsprogs); {DEPS}",
            _immutable_folders,
        ),
        Capability("sched_idle", "idle-priority CPU spinners", "run on Linux", _sched_idle),
        Capability("procfs", "reading processes from /proc", "run on Linux", _procfs),
        Capability(
            "raise_priority",
            "giving a process at idle priority normal priority back",
            "run the tests as root, or with `ulimit -e 20`",
            _raise_priority,
        ),
    )
}

FIXTURE_NEEDS = {"spark": "java", "standalone_cluster": "java"}
"""Fixtures whose users need a capability without saying so with a marker."""

REGISTRY = Registry(CAPABILITIES)


# --- the pytest plugin -------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    try:
        opted_out(os.environ, REGISTRY.capabilities)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_report_header(config: pytest.Config) -> str | None:
    names = opted_out(os.environ, REGISTRY.capabilities)
    return f"{SKIP_ENV}: skipping tests that need {sorted(names)}" if names else None


def needed_by(item: pytest.Item) -> list[str]:
    """The capabilities ``item`` needs: its ``needs`` markers and its fixtures'."""
    names = [name for mark in item.iter_markers(MARKER) for name in mark.args]
    names += [
        need
        for fixture, need in FIXTURE_NEEDS.items()
        if fixture in getattr(item, "fixturenames", ())
    ]
    return list(dict.fromkeys(names))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip or fail ``item`` before its fixtures are set up, as ``decide`` says for each
    capability it needs: skipped if any is opted out, else failed naming every missing one."""
    registry = REGISTRY
    skip = opted_out(os.environ, registry.capabilities)
    needed = needed_by(item)
    unknown = [name for name in needed if name not in registry.capabilities]
    if unknown:
        pytest.fail(
            f"unknown capability {unknown} in @pytest.mark.{MARKER}; "
            f"known: {sorted(registry.capabilities)}",
            pytrace=False,
        )
    verdicts = [
        decide(registry.capabilities[name], skip, None if name in skip else registry.missing(name))
        for name in needed
    ]
    for verdict, reason in verdicts:
        if verdict == "skip":
            # reported at the test's location, as pytest does for skipif marks
            raise pytest.skip.Exception(reason, _use_item_location=True)
    failures = [reason for verdict, reason in verdicts if verdict == "fail"]
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)
