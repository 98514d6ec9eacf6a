"""The client commands as a user meets them: `hop pub` from standard input, and `hop
sub` printing each event once however many filters it matched, reconnecting if asked.
Real brokers on 127.0.0.1 (chain5), stopped by PID."""

from __future__ import annotations

import errno
import io
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import client
from broker.cli import EXIT_BAD_INPUT, EXIT_OK
from broker.local_network import Network
from broker.logs import OutputFailed
from broker.netio import host_port
from client.cli import EventPrinter, address, json_lines, names_a_network
from hop.cli import main as hop_main
from hop.command import HOP, REPO, start_hop, stop


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["-", "a=1"], "give no name=value pairs and no --count"),
        (["--count", "2", "-"], "give no name=value pairs and no --count"),
    ],
)
def test_hop_pub_takes_pairs_or_standard_input(
    capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    assert hop_main(["pub", "127.0.0.1:1", *args]) == EXIT_BAD_INPUT
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["pub", "127.0.0.1:7301:5", "a=1"], "expected HOST:PORT, got '127.0.0.1:7301:5'"),
        (["stats", "http://127.0.0.1:7301"], "expected HOST:PORT, got 'http://127.0.0.1:7301'"),
        (
            ["stats", "::1:7301"],
            "expected HOST:PORT, got '::1:7301' (an IPv6 address goes in brackets: [::1]:7301)",
        ),
        (["pub", "127.0.0.1:1", "k=\udcff"], "attribute 'k': '\\udcff' is not valid UTF-8"),
        (["stats", "127.0.0.1:1", "--name", "n\udcff"], "--name: 'n\\udcff' is not valid"),
        (["sub", "127.0.0.1:1", 'x = "\udcff"'], "filter: 'x = \"\\udcff\"' is not valid"),
    ],
    ids=["port-too-many", "url", "ipv6-unbracketed", "value", "client-name", "filter"],
)
def test_client_commands_name_bad_text_and_addresses_before_connecting(
    capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    """A byte of an argument that is not UTF-8 reaches Python as a lone surrogate, which
    no message can carry; an address with a scheme or a port too many is no HOST:PORT."""
    assert hop_main(args) == EXIT_BAD_INPUT
    assert said in capsys.readouterr().err


def test_client_address_takes_ipv6_in_brackets_and_messages_write_it_so() -> None:
    assert address("[::1]:7301") == ("::1", 7301)
    assert address("broker.example:7301") == ("broker.example", 7301)
    for host in ("::1", "broker.example", "127.0.0.1"):
        assert address(host_port(host, 7301)) == (host, 7301)  # what it says, it takes


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--count", str(2**64)], f"must be at most {sys.maxsize}"),
        (["--rate", "1e-300"], "must be 0.001 to 1e9 events per second"),
    ],
)
def test_hop_pub_refuses_counts_and_rates_it_cannot_keep(
    capsys: pytest.CaptureFixture[str], option: list[str], said: str
) -> None:
    with pytest.raises(SystemExit) as info:
        hop_main(["pub", "127.0.0.1:1", "a=1", *option])
    assert info.value.code == EXIT_BAD_INPUT
    assert said in capsys.readouterr().err


def test_a_secret_file_from_the_environment_that_cannot_be_read_is_named(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("HOP_SECRET", raising=False)
    monkeypatch.setenv("HOP_SECRET_FILE", str(tmp_path / "missing"))
    assert hop_main(["stats", "127.0.0.1:1"]) == EXIT_BAD_INPUT
    assert "$HOP_SECRET_FILE: " in capsys.readouterr().err


def _pub_lines(net: Network, lines: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """`hop pub ROOT -` in this process, reading ``lines``."""
    host, port = net.address(1)
    monkeypatch.setattr(sys, "stdin", io.StringIO(lines))
    return hop_main(["pub", f"{host}:{port}", "-"])


@pytest.mark.integration
def test_hop_pub_from_standard_input_publishes_each_json_line_in_order(
    chain5: Network, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `hop sub` prints (a JSON object per line) is what `hop pub HOST:PORT -` reads."""
    lines = '{"family": 7, "n": 1}\n\n{"family": 8, "n": 2}\n{"family": 7, "n": 3, "tag": "x"}\n'
    with client.Client.connect(*chain5.address(5), name="sub") as c:
        sub = c.subscribe("family = 7")
        assert _pub_lines(chain5, lines, monkeypatch) == EXIT_OK
        got = [sub.next(timeout=10) for _ in range(2)]
        with pytest.raises(TimeoutError):
            sub.next(timeout=0.3)
    assert got == [{"family": 7, "n": 1}, {"family": 7, "n": 3, "tag": "x"}]
    assert "published 3 event(s)" in capsys.readouterr().err


@pytest.mark.integration
@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ("[1, 2]", "expected a JSON object of attributes"),
        ('{"n": ', "Expecting value"),
        ('{"n": [3]}', "unsupported type list"),
        ('{"n": 100000000000000000000}', "does not fit in 64 bits"),
        ('{"n": "\\ud800"}', "attribute 'n': '\\ud800' is not valid UTF-8 text"),
        ('{"n": "' + "x" * 1_100_000 + '"}', "framing: Publish needs 1100"),
    ],
    ids=["array", "not-json", "list", "int-65", "surrogate", "over-max-frame"],
)
def test_hop_pub_from_standard_input_stops_at_a_bad_line_naming_it(
    chain5: Network,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    bad: str,
    said: str,
) -> None:
    """The events before the bad line are published (and flushed), none after it."""
    with client.Client.connect(*chain5.address(5), name="sub") as c:
        sub = c.subscribe("n >= 0")
        lines = f'{{"n": 1}}\n{{"n": 2}}\n{bad}\n{{"n": 4}}\n'
        assert _pub_lines(chain5, lines, monkeypatch) == EXIT_BAD_INPUT
        got = [sub.next(timeout=10)["n"] for _ in range(2)]
        with pytest.raises(TimeoutError):
            sub.next(timeout=0.3)
    assert got == [1, 2]
    err = capsys.readouterr().err
    assert "line 3: " in err and said in err, err
    assert "(the 2 event(s) before it were published)" in err, err


@pytest.mark.integration
def test_an_event_the_broker_refuses_over_its_limits_is_bad_input(
    chain5: Network, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Within the frame but over the broker's --max-value-len: only the broker knows its
    limits, and its refusal is the user's input to correct, as a bad line is."""
    line = '{"n": "' + "x" * 300_000 + '"}\n'
    assert _pub_lines(chain5, line, monkeypatch) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "the broker refused an event over its limits: limit: max_value_len" in err, err


# -- hop sub --------------------------------------------------------------------------------


def _delivery(event_id: str, n: int) -> client.Delivery:
    return client.Delivery(event_id, "pub", {"n": n}, (1,), ("1",), 0, 0)


def test_what_hop_sub_prints_hop_pub_reads_back_non_finite_numbers_too() -> None:
    """NaN and infinities are printed as Python's json writes them (not strict JSON),
    and `hop pub`'s reader takes them back; a name given twice keeps its last value."""
    out = io.StringIO()
    printer = EventPrinter(None, out)
    attributes = {"a": float("nan"), "b": float("inf"), "c": -float("inf"), "d": b"\x01"}
    printer.show(client.Delivery("p:1", "pub", attributes, (1,), ("1",), 0, 0))
    printer.settled()
    line = out.getvalue()
    assert line == '{"a": NaN, "b": Infinity, "c": -Infinity, "d": "01"}\n'
    [(where, event)] = list(json_lines([line]))
    assert where == "line 1" and math.isnan(event["a"])
    assert (event["b"], event["c"], event["d"]) == (math.inf, -math.inf, "01")
    assert next(json_lines(['{"n": 1, "n": 2}']))[1] == {"n": 2}


def test_hop_sub_prints_an_event_once_whichever_filters_matched() -> None:
    out = io.StringIO()
    printer = EventPrinter(None, out)
    x, y = _delivery("p:1", 1), _delivery("p:2", 2)
    # While subscribing: a later subscription hands over what came before its
    # acknowledgement, after other events.
    for delivery in (x, y, x):
        printer.show(delivery)
    printer.settled()
    # Then: each Delivery reaches the handlers of the filters it matched in a row.
    z = _delivery("p:3", 3)
    for delivery in (z, z, z, _delivery("p:4", 4)):
        printer.show(delivery)
    assert [json.loads(line)["n"] for line in out.getvalue().splitlines()] == [1, 2, 3, 4]
    assert printer._seen is None  # nothing kept per event once subscribed


def test_hop_sub_stops_printing_at_its_count() -> None:
    out = io.StringIO()
    printer = EventPrinter(2, out)
    done: list[bool] = []
    printer.on_done = lambda: done.append(True)
    printer.settled()
    for n in range(4):
        printer.show(_delivery(f"p:{n}", n))
    assert len(out.getvalue().splitlines()) == 2 and done == [True]


class _FullDisk(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_output_that_cannot_be_written_is_said_in_a_line(chain5: Network) -> None:
    """A full disk under `hop sub > file` or `hop stats > file`: the command says that
    its output failed, not only the system's reason."""
    printer = EventPrinter(None, _FullDisk())
    printer.settled()
    with pytest.raises(OutputFailed, match="cannot write its output: No space left on device"):
        printer.show(_delivery("p:1", 1))
    host, port = chain5.address(1)
    with open("/dev/full", "wb", buffering=0) as full:
        for target in (f"{host}:{port}", str(chain5.file)):
            result = subprocess.run(
                [*HOP, "stats", target], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60
            )
            assert result.returncode == 1
            assert result.stderr == "hop stats: cannot write its output: No space left on device\n"


def _hop_sub(net: Network, *options: str) -> subprocess.Popen[str]:
    """`hop sub` of every event at the chain's leaf, started and subscribed."""
    leaf = "{}:{}".format(*net.address(5))
    sub = subprocess.Popen(
        [*HOP, "sub", leaf, "n >= 0", *options],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert sub.stderr is not None
    if not sub.stderr.readline().startswith("subscribed to 1 filter(s)"):
        stop(sub)
        pytest.fail("hop sub did not subscribe")
    return sub


def _publish_until_it_ends(sub: subprocess.Popen[str], pub: client.Client, n: int) -> None:
    """Publish {"n": n} at the root until ``sub`` exits (at most 20 s)."""
    deadline = time.monotonic() + 20
    while sub.poll() is None and time.monotonic() < deadline:
        pub.publish({"n": n})
        pub.flush()
        time.sleep(0.1)


@pytest.mark.integration
def test_hop_sub_reconnect_renews_its_filters_after_its_broker_restarts(
    chain5: Network,
) -> None:
    """With --reconnect, `hop sub` says the connection was lost, connects again once the
    broker is back, says so, and prints what is published after."""
    sub = _hop_sub(chain5, "--reconnect", "--count", "1")
    try:
        assert sub.stderr is not None
        chain5.kill(5)
        assert sub.stderr.readline().startswith("hop sub: connection lost: ")
        chain5.restart(5)
        chain5.wait_linked(brokers=[5])
        assert sub.stderr.readline().startswith("hop sub: reconnected, 1 filter(s) renewed")
        with client.Client.connect(*chain5.address(1), name="pub") as pub:
            _publish_until_it_ends(sub, pub, 7)  # (until the renewed filter reached the root)
        out, _ = sub.communicate(timeout=10)
    finally:
        stop(sub)
    assert sub.returncode == 0
    assert [json.loads(line) for line in out.splitlines()] == [{"n": 7}]


@pytest.mark.integration
def test_hop_sub_without_reconnect_ends_when_its_broker_goes(chain5: Network) -> None:
    sub = _hop_sub(chain5)
    try:
        chain5.kill(5)
        _, err = sub.communicate(timeout=20)
    finally:
        stop(sub)
    assert sub.returncode == 1
    assert "hop sub: the broker closed the connection" in err


@pytest.mark.integration
def test_hop_sub_ends_quietly_when_the_reader_of_its_output_goes(chain5: Network) -> None:
    """`hop sub ... | head -2`: once the pipe's reader is gone, hop sub ends with exit 0
    and no traceback (a handler's BrokenPipeError, not a lost connection)."""
    sub = _hop_sub(chain5)
    try:
        assert sub.stdout is not None and sub.stderr is not None
        with client.Client.connect(*chain5.address(1), name="pub") as pub:
            for n in range(2):
                pub.publish({"n": n})
            assert [json.loads(sub.stdout.readline()) for _ in range(2)] == [{"n": 0}, {"n": 1}]
            sub.stdout.close()  # as head does after its lines
            _publish_until_it_ends(sub, pub, 2)
        err = sub.stderr.read()
        sub.wait(timeout=10)
    finally:
        stop(sub)
    assert sub.returncode == 0, err
    assert err == "", err


def _hop_into_a_closed_pipe(stream: str, *args: str) -> tuple[int, str]:
    """Run `hop ARGS` with its `stream` ("stdout" or "stderr") a pipe whose reader is
    already gone, as after `| head -0`: its exit code and what it wrote on the other."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    other = "stderr" if stream == "stdout" else "stdout"
    try:
        done = subprocess.run(
            [*HOP, *args],
            cwd=REPO,
            text=True,
            timeout=30,
            check=False,
            **{stream: write_end, other: subprocess.PIPE},
        )
    finally:
        os.close(write_end)
    return done.returncode, getattr(done, other)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("stream", "command"),
    [("stdout", ["stats"]), ("stderr", ["pub", "--count", "2", "n=1"])],
    ids=["stats", "pub"],
)
def test_stats_and_pub_end_quietly_when_the_reader_of_their_output_goes(
    chain5: Network, stream: str, command: list[str]
) -> None:
    """As `hop sub` does: what `hop stats` prints (the counters, on stdout) and what
    `hop pub` does (the events published, told on stderr) is no longer wanted, which
    is no failure."""
    host, port = chain5.address(1)
    name, *rest = command
    assert _hop_into_a_closed_pipe(stream, name, f"{host}:{port}", *rest) == (0, "")
    if name == "pub":  # it published all the same
        assert chain5.stats(1)["events_routed"] == 2


@pytest.mark.integration
def test_hop_stats_of_a_topology_gives_every_brokers_counters_and_names_one_that_is_down(
    chain5: Network, capsys: pytest.CaptureFixture[str]
) -> None:
    pids = {str(b): p.pid for b, p in chain5.procs.procs.items()}
    assert hop_main(["stats", str(chain5.file)]) == EXIT_OK
    every = json.loads(capsys.readouterr().out)
    assert {b: stats["pid"] for b, stats in every.items()} == pids
    assert every["1"]["children_connected"] == 1 and every["5"]["children_connected"] == 0

    chain5.kill(5)
    assert hop_main(["stats", str(chain5.file)]) == 1
    out, err = capsys.readouterr()
    every = json.loads(out)
    refused = "connection refused (is the broker running?)"
    assert every["5"] == {"error": refused}
    assert [every[b]["pid"] for b in "1234"] == [pids[b] for b in "1234"]
    host, port = chain5.address(5)
    assert err.splitlines() == [f"hop stats: broker 5 at {host}:{port}: {refused}"]


def test_hop_stats_takes_a_topology_by_file_or_name_and_its_files_not_tls_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert [names_a_network(t) for t in ("tree7", "lab.toml", str(HOP[0]), "127.0.0.1:7301")] == [
        True,
        True,
        True,
        False,
    ]
    assert hop_main(["stats", "tree7", "--ca", "ca.pem"]) == EXIT_BAD_INPUT
    assert "--ca/--cert/--key are for HOST:PORT" in capsys.readouterr().err
    assert hop_main(["stats", "missing.toml"]) == EXIT_BAD_INPUT
    assert "missing.toml: cannot read" in capsys.readouterr().err


@pytest.mark.integration
def test_hop_pub_interrupted_says_so_in_one_line_and_exits_130(chain5: Network) -> None:
    host, port = chain5.address(1)
    pub = start_hop("pub", f"{host}:{port}", "n=1", "--count", "100", "--rate", "1")
    try:
        deadline = time.monotonic() + 20
        while chain5.stats(1)["events_routed"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)  # until it publishes: connected, between two events
        assert pub.poll() is None, "hop pub ended before it was interrupted"
        pub.send_signal(signal.SIGINT)
        _, err = pub.communicate(timeout=20)
    finally:
        stop(pub)
    assert "Traceback" not in err, err
    assert err == "hop pub: interrupted\n"
    assert pub.returncode == 130
