"""Shared-secret authentication of brokers and clients, the security keys of topology
files, and brokers listening on their topology address only."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import client
from broker.local_network import REPO, Network, free_base_port
from broker.probe import clock_offset, fetch_stats
from broker.process import BrokerProcesses
from broker.protocol import ProtocolError
from broker.security import (
    ERR_AUTH,
    SECRET_ENV,
    BrokerSecurity,
    ClientCredentials,
    secret_matches,
)
from hop.cli import main
from topologies import Security, TlsFiles, Topology, TopologyError, load_topology
from topologies.generators import chain, kary_tree, to_toml

SECRET = "correct horse battery staple"


def with_secret(topology: Topology, secret_file: Path, client_file: Path | None = None) -> Topology:
    security = Security(secret_file=secret_file, client_secret_file=client_file)
    return dataclasses.replace(topology, security=security)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def stop_cleanly(*groups: BrokerProcesses | Network) -> None:
    codes = {}
    for group in groups:
        codes.update(group.stop())
    assert all(code == 0 for code in codes.values()), codes


# --- units -------------------------------------------------------------------------------------


def test_secret_matches_only_the_same_secret() -> None:
    assert secret_matches("abc", "abc")
    assert not secret_matches("abd", "abc")
    assert not secret_matches("ab", "abc")
    assert not secret_matches(None, "abc")
    assert not secret_matches("", "abc")


def test_required_secret_per_role() -> None:
    assert BrokerSecurity().required_secret("client") is None
    network_only = BrokerSecurity(secret="n")
    assert network_only.required_secret("broker") == "n"
    assert network_only.required_secret("client") == "n"
    both = BrokerSecurity(secret="n", client_secret="c")
    assert (both.required_secret("broker"), both.required_secret("client")) == ("n", "c")


def test_secrets_are_read_from_files_without_surrounding_whitespace(tmp_path: Path) -> None:
    topology = with_secret(chain(1), write(tmp_path / "s", f"  {SECRET}\n"))
    assert BrokerSecurity.from_topology(topology).secret == SECRET
    assert ClientCredentials.for_network(topology).secret == SECRET
    override = write(tmp_path / "o", "other\n")
    assert BrokerSecurity.from_topology(topology, override).secret == "other"
    with pytest.raises(ValueError, match="the secret file is empty"):
        BrokerSecurity.from_topology(topology, write(tmp_path / "empty", "\n"))


# --- topology files ------------------------------------------------------------------------------


def topology_text(extra: str) -> str:
    """A one-broker topology with ``extra`` keys (or tables, if it starts with one)."""
    top, tables = ("", extra) if extra.startswith("[") else (extra, "")
    return f"base_port = 7000\n{top}\n{tables}\n[[brokers]]\nid = 1\n"


def test_security_paths_are_resolved_against_the_file_folder(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    for name in ("secret", "clients", "ca.pem", "b.pem", "b.key"):
        write(tmp_path / "keys" / name, "x")
    text = (
        'base_port = 7000\nauth_secret_file = "keys/secret"\nclient_secret_file = "keys/clients"\n'
        '[tls]\nca = "keys/ca.pem"\ncert = "keys/b.pem"\nkey = "keys/b.key"\n'
        "verify_clients = true\n"
        "[[brokers]]\nid = 1\n"
    )
    topology = load_topology(write(tmp_path / "t.toml", text))
    keys = (tmp_path / "keys").resolve()
    assert topology.security == Security(
        secret_file=keys / "secret",
        client_secret_file=keys / "clients",
        tls=TlsFiles(keys / "ca.pem", keys / "b.pem", keys / "b.key", verify_clients=True),
    )
    elsewhere = tmp_path / "copy"
    elsewhere.mkdir()
    assert load_topology(write(elsewhere / "t.toml", to_toml(topology))) == topology


def test_a_reader_of_the_network_alone_does_without_the_files(tmp_path: Path) -> None:
    """A run's copy read on a host without its secrets (`hop predict`, `hop report`):
    the paths are still resolved and checked for type, the files not looked for."""
    text = (
        'base_port = 7000\nauth_secret_file = "keys/secret"\n'
        '[tls]\nca = "/nowhere/ca.pem"\ncert = "b.pem"\nkey = "b.key"\n[[brokers]]\nid = 1\n'
    )
    file = write(tmp_path / "t.toml", text)
    with pytest.raises(TopologyError, match="tls.ca: file not found"):
        load_topology(file)
    topology = load_topology(file, files_needed=False)
    assert topology.security.secret_file == tmp_path.resolve() / "keys" / "secret"
    assert topology.security.tls is not None
    assert topology.security.tls.ca == Path("/nowhere/ca.pem")
    with pytest.raises(TopologyError, match="auth_secret_file: must be a string"):
        not_text = write(tmp_path / "t.toml", text.replace('"keys/secret"', "1"))
        load_topology(not_text, files_needed=False)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('auth_secret_file = "nope"', "auth_secret_file: file not found: "),
        ('auth_secret_file = "."', "auth_secret_file: not a file: "),
        ('client_secret_file = ""', "client_secret_file: must not be empty"),
        ('[tls]\nca = "ca.pem"\ncert = "ca.pem"', "tls.key: missing required key"),
        ('[tls]\nca = "ca.pem"\ncert = "ca.pem"\nkey = "gone.key"', "tls.key: file not found"),
        (
            '[tls]\nca = "ca.pem"\ncert = "ca.pem"\nkey = "ca.pem"\nverify = 1',
            "tls.verify: unknown",
        ),
        (
            '[tls]\nca = "ca.pem"\ncert = "ca.pem"\nkey = "ca.pem"\nverify_clients = "yes"',
            "tls.verify_clients: must be true or false",
        ),
    ],
)
def test_bad_security_keys_are_topology_errors(tmp_path: Path, extra: str, message: str) -> None:
    write(tmp_path / "ca.pem", "x")
    with pytest.raises(TopologyError, match=message):
        load_topology(write(tmp_path / "t.toml", topology_text(extra)))


# --- a network with a secret ----------------------------------------------------------------


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    return write(tmp_path / "network.secret", SECRET + "\n")


@pytest.fixture
def auth_net(tmp_path: Path, secret_file: Path) -> Iterator[Network]:
    """Broker 1 with children 2 and 3, all requiring the secret."""
    topology = with_secret(kary_tree(2, 1, name="auth3", base_port=free_base_port(3)), secret_file)
    net = Network(topology, tmp_path)
    try:
        yield net.start()  # start() waits until 2 and 3 are linked: they authenticated
    finally:
        stop_cleanly(net)


async def deliver_once(net: Network, secret: str | None) -> dict:
    with trio.fail_after(20):
        async with (
            client.open_client(*net.address(3), name="sub", secret=secret) as sub_client,
            client.open_client(*net.address(2), name="pub", secret=secret) as pub,
        ):
            sub = await sub_client.subscribe("n = 1")
            await pub.publish({"n": 1})
            return await sub.next()


async def refused(net: Network, secret: str | None) -> client.BrokerError:
    with trio.fail_after(20), pytest.raises(client.BrokerError) as info:
        async with client.open_client(*net.address(1), name="intruder", secret=secret):
            pass
    return info.value


@pytest.mark.integration
def test_clients_need_the_network_secret(
    auth_net: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert trio.run(deliver_once, auth_net, SECRET) == {"n": 1}
    for secret in (None, "wrong", SECRET + "x"):
        error = trio.run(refused, auth_net, secret)
        assert (error.code, error.message) == (ERR_AUTH, "authentication failed")
    with pytest.raises(ProtocolError, match="auth"):
        fetch_stats(*auth_net.address(1))
    monkeypatch.setenv(SECRET_ENV, SECRET)  # open_client's default secret
    assert trio.run(deliver_once, auth_net, None) == {"n": 1}
    assert auth_net.procs.failed() == {}
    assert auth_net.stats(1)["children_connected"] == 2
    assert '"auth_refused"' in auth_net.log_text()


@pytest.mark.integration
def test_hop_client_commands_take_a_secret_file(auth_net: Network, secret_file: Path) -> None:
    address = "{}:{}".format(*auth_net.address(1))
    command = [sys.executable, "-m", "hop", "stats", address]
    ok = subprocess.run(
        [*command, "--secret-file", str(secret_file)],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert '"broker": "1"' in ok.stdout
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert refused.returncode == 1
    assert "auth: authentication failed" in refused.stderr


@pytest.mark.integration
def test_a_broker_with_the_wrong_secret_is_refused(tmp_path: Path, secret_file: Path) -> None:
    topology = with_secret(kary_tree(2, 1, name="rogue3", base_port=free_base_port(3)), secret_file)
    net = Network(topology, tmp_path)
    wrong = write(tmp_path / "wrong.secret", "not the secret\n")
    rogue = BrokerProcesses(
        net.file, topology, ["--secret-file", str(wrong)], ClientCredentials("not the secret")
    )
    try:
        net.procs.start([1, 2], log_dir=net.logs)
        net.procs.wait_listening()
        net.wait_linked(brokers=[2])
        rogue.start_one(3, log_dir=net.logs)
        rogue.wait_listening()
        deadline = time.monotonic() + 20
        while '"auth_refused"' not in net.log_text():
            assert time.monotonic() < deadline, net.log_text()[-2000:]
            time.sleep(0.1)
        host, port = net.address(3)
        assert fetch_stats(host, port, secret="not the secret")["parent_connected"] == 0
        assert net.stats(1)["children_connected"] == 1
        assert net.procs.failed() == {} and rogue.failed() == {}
    finally:
        stop_cleanly(net, rogue)


@pytest.mark.integration
def test_clients_may_have_a_secret_of_their_own(tmp_path: Path, secret_file: Path) -> None:
    client_file = write(tmp_path / "client.secret", "for clients\n")
    topology = with_secret(chain(1, name="csecret", base_port=free_base_port(1)), secret_file)
    topology = with_secret(topology, secret_file, client_file)
    net = Network(topology, tmp_path)
    try:
        net.start()
        assert trio.run(deliver_once_on_1, net, "for clients") == {"n": 1}
        assert trio.run(refused, net, SECRET).code == ERR_AUTH
    finally:
        stop_cleanly(net)


async def deliver_once_on_1(net: Network, secret: str) -> dict:
    with trio.fail_after(20):
        async with client.open_client(*net.address(1), name="c", secret=secret) as c:
            sub = await c.subscribe("n = 1")
            await c.publish({"n": 1})
            return await sub.next()


# --- listening address ----------------------------------------------------------------------


def listening_addresses(port: int) -> set[str]:
    """The local addresses of the LISTEN sockets on ``port`` (IPv4 and IPv6), from
    /proc/net/tcp*."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                if len(address) == 8:
                    found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
                else:
                    found.add(f"ipv6:{address}")
    return found


@pytest.mark.integration
def test_a_broker_listens_on_its_topology_host_only(tmp_path: Path) -> None:
    base = free_base_port(1)
    topology = chain(1, name="bind", base_port=base, host="127.0.0.3")
    net = Network(topology, tmp_path)
    try:
        net.start()
        _, port = net.address(1)
        assert listening_addresses(port) == {"127.0.0.3"}
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        stop_cleanly(net)


# --- clock offsets ---------------------------------------------------------------------------


@pytest.mark.integration
def test_clock_offset_on_one_host_is_within_half_the_round_trip(tmp_path: Path) -> None:
    net = Network(chain(1, name="clock", base_port=free_base_port(1)), tmp_path)
    try:
        net.start()
        estimate = clock_offset(*net.address(1), rounds=10)
        assert 0 < estimate.rtt_ns < 1_000_000_000
        assert abs(estimate.offset_ns) <= estimate.rtt_ns // 2 + 1  # the true offset is 0
        assert abs(estimate.offset_ns) < 5_000_000
    finally:
        stop_cleanly(net)


def test_cli_refuses_unusable_secret_and_tls_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = write(tmp_path / "t.toml", to_toml(chain(1)))
    empty = write(tmp_path / "empty", "")
    assert main(["broker", str(file), "--id", "1", "--secret-file", str(empty)]) == 2
    assert "--secret-file: " in capsys.readouterr().err
    assert main(["stats", "127.0.0.1:1", "--secret-file", str(tmp_path / "missing")]) == 2
    assert "--secret-file: " in capsys.readouterr().err
    assert main(["stats", "127.0.0.1:1", "--cert", str(file)]) == 2
    assert "--cert and --key need --ca" in capsys.readouterr().err
    assert main(["stats", "127.0.0.1:1", "--ca", str(file)]) == 2
    assert "--ca/--cert/--key: " in capsys.readouterr().err
