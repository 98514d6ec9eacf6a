"""What a user meets at the edges of the command line: exit 2 blames only the user's
input, and `hop net`'s ready line means the network is linked."""

from __future__ import annotations

import argparse
import signal
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import client
import monitor.report
from broker.cli import EXIT_BAD_INPUT, EXIT_FAILURE, Layer, build, run
from broker.local_network import REPO, free_base_port
from broker.probe import fetch_stats
from broker.protocol import PROTOCOL_VERSION
from broker.trace.schema import TRACE_VERSION
from hop.cli import build_parser
from hop.cli import main as hop_main
from hop.command import HOP, stop, wait_ready
from monitor.errors import InputError
from monitor.validate import SIMULATION_S


def _layer(error: BaseException) -> Layer:
    def register(commands: Any, common: argparse.ArgumentParser) -> None:
        def fail(args: argparse.Namespace) -> int:
            raise error

        commands.add_parser("fail", parents=[common]).set_defaults(func=fail)

    return Layer(register, bad_input=(InputError,), failures=(ConnectionError,))


@pytest.mark.parametrize(
    ("error", "code", "said"),
    [
        (InputError("runs/x/manifest.json: missing"), EXIT_BAD_INPUT, "manifest.json: missing"),
        (ConnectionRefusedError("no broker at 127.0.0.1:1"), EXIT_FAILURE, "no broker"),
        (ValueError("math domain error"), EXIT_FAILURE, "internal error"),
        (KeyError("pub3"), EXIT_FAILURE, "internal error"),
        # As a trio nursery raises what one of its tasks raised:
        (ExceptionGroup("nursery", [InputError("bad file")]), EXIT_BAD_INPUT, "hop fail: bad"),
        (
            ExceptionGroup("outer", [ExceptionGroup("inner", [ConnectionRefusedError("gone")])]),
            EXIT_FAILURE,
            "hop fail: gone",
        ),
        (ExceptionGroup("two", [InputError("a"), KeyError("b")]), EXIT_FAILURE, "internal error"),
    ],
)
def test_only_the_users_input_exits_2(
    error: BaseException, code: int, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    layers = [_layer(error)]
    assert run(build("hop", "test", layers), layers, ["fail"]) == code
    err = capsys.readouterr().err
    assert said in err
    if said == "internal error":  # a bug shows where it is
        assert "Traceback" in err and type(error).__name__ in err
    else:
        assert "Traceback" not in err


def test_a_bug_in_a_real_command_is_not_blamed_on_the_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(run_dir: Path) -> Any:
        raise ValueError("an internal check failed")

    monkeypatch.setattr(monitor.report, "render", broken)
    assert hop_main(["report", str(tmp_path)]) == EXIT_FAILURE
    assert "internal error" in capsys.readouterr().err


def test_a_folder_that_is_not_a_run_is_the_users_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert hop_main(["report", str(tmp_path)]) == EXIT_BAD_INPUT
    assert str(tmp_path) in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "option", "value", "named"),
    [
        ("replay", "--rate-scale", "0", "rate scale"),
        ("replay", "--rate-scale", "nan", "rate scale"),
        ("replay", "--duration", "0", "duration"),
        ("replay", "--duration", "nan", "duration"),
        ("replay", "--warmup", "-1", "warm-up"),
        ("validate", "--load-scale", "-2", "load scale"),
        ("validate", "--duration", "-1", "duration"),
        ("validate", "--warmup", "inf", "warm-up"),
        ("predict", "--rate-scale", "-1", "rate scale"),
        ("predict", "--sim-seconds", "0", "simulation seconds"),
        ("validate", "--sim-seconds", "-1", "simulation seconds"),
    ],
)
def test_a_bad_length_or_scale_is_the_users_input(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    option: str,
    value: str,
    named: str,
) -> None:
    """Refused before anything starts or is read (no run folder), naming the option's
    quantity."""
    study = REPO / "topologies" / "tree7.toml"
    out = tmp_path / "run"
    where = [str(out)] if command == "predict" else [str(study), "--out", str(out), "--quiet"]
    code = hop_main([command, *where, option, value])
    assert code == EXIT_BAD_INPUT
    assert f"{named} must be a finite number" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("command", [["predict", "run"], ["validate", "x.toml", "--out", "o"]])
def test_the_simulation_limit_defaults_to_the_models(command: list[str]) -> None:
    """Without --sim-seconds both commands give the simulation its default limit (the
    end-to-end tests pass a shorter one, and check that it reaches the simulation)."""
    assert build_parser().parse_args(command).sim_seconds == SIMULATION_S


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["pub", "127.0.0.1:1", "--count", "-1", "a=1"], "--count: must be at least 1"),
        (["pub", "127.0.0.1:1", "--rate", "0", "a=1"], "--rate: must be a finite number"),
        (["pub", "127.0.0.1:1", "--rate", "nan", "a=1"], "--rate: must be a finite number"),
        (["sub", "127.0.0.1:1", "--count", "0", "a = 1"], "--count: must be at least 1"),
    ],
)
def test_a_client_commands_bad_count_or_rate_is_refused_before_connecting(
    capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        hop_main(args)
    assert exited.value.code == EXIT_BAD_INPUT
    assert said in capsys.readouterr().err


def test_hop_version_names_the_package_protocol_and_trace_schema(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        hop_main(["--version"])
    assert exited.value.code == 0
    said = capsys.readouterr().out.strip()
    assert said == (
        f"hop {metadata.version('hop-broker')} "
        f"(protocol {PROTOCOL_VERSION}, trace schema {TRACE_VERSION})"
    )


def _children_first(tmp_path: Path, routing: str) -> tuple[Path, int]:
    """A 7-broker tree whose root has the highest id: `hop net` starts brokers in id
    order, so the leaves try their parents before those listen and back off."""
    base = free_base_port(7)
    parents = {1: 5, 2: 5, 3: 6, 4: 6, 5: 7, 6: 7, 7: None}
    lines = ['name = "children-first"', 'host = "127.0.0.1"', f"base_port = {base}"]
    lines.append(f'routing = "{routing}"')
    for broker_id, parent in parents.items():
        lines += ["[[brokers]]", f"id = {broker_id}"]
        lines += [f"parent = {parent}"] if parent else []
    path = tmp_path / "children_first.toml"
    path.write_text("\n".join(lines) + "\n")
    return path, base


@pytest.mark.integration
@pytest.mark.parametrize("routing", ["flooding", "hierarchical"])
def test_hop_net_is_ready_only_when_linked(tmp_path: Path, routing: str) -> None:
    """A publisher that starts the moment the ready line appears loses nothing, under
    flooding too (where no acknowledged subscription waits for the links)."""
    path, base = _children_first(tmp_path, routing)
    proc = subprocess.Popen(
        [*HOP, "net", str(path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        wait_ready(proc)
        stats = {b: fetch_stats("127.0.0.1", base + b) for b in range(1, 8)}
        assert all(stats[b]["parent_connected"] for b in range(1, 7)), stats
        assert [stats[b]["children_connected"] for b in (5, 6, 7)] == [2, 2, 2], stats
        count = 200
        with (
            client.Client.connect("127.0.0.1", base + 1, name="sub") as sub_client,
            client.Client.connect("127.0.0.1", base + 4, name="pub") as pub,
        ):
            sub = sub_client.subscribe("n >= 0")
            for n in range(count):
                pub.publish({"n": n})
            pub.flush()
            got = sorted(sub.next(timeout=10)["n"] for _ in range(count))
        assert got == list(range(count))
    finally:
        stop(proc, signal.SIGINT)
