"""TLS on every link: a 3-broker network with certificates from scripts/make_test_ca.sh;
brokers and clients refuse certificates from another CA, and with ``verify_clients`` a
broker refuses clients without a certificate from its CA.

Two CAs are made once per session: ``certs`` (the network's) and ``other_ca`` (a
stranger's, with certificates of the same names and addresses)."""

from __future__ import annotations

import dataclasses
import json
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import client
from broker.local_network import REPO, Network, free_base_port
from broker.probe import fetch_stats
from broker.process import BrokerProcesses
from broker.security import ClientCredentials, client_ssl_context
from tests.event_loops import LOOPS, run_on
from topologies import Security, TlsFiles, Topology
from topologies.generators import chain, kary_tree, to_toml

pytestmark = [pytest.mark.integration, pytest.mark.needs("openssl")]


def make_ca(out: Path) -> Path:
    """A CA with broker and client certificates in ``out`` (scripts/make_test_ca.sh)."""
    subprocess.run(
        ["bash", str(REPO / "scripts" / "make_test_ca.sh"), str(out)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return out


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_ca(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_ca(tmp_path_factory.mktemp("tls-other"))


def broker_tls(folder: Path, verify_clients: bool = False) -> TlsFiles:
    """The broker certificate in ``folder``, trusting ``folder``'s CA."""
    return TlsFiles(folder / "ca.pem", folder / "broker.pem", folder / "broker.key", verify_clients)


@pytest.fixture
def tls_net(tmp_path: Path, certs: Path) -> Iterator[Network]:
    """Broker 1 with children 2 and 3, every link in TLS."""
    topology = kary_tree(2, 1, name="tls3", base_port=free_base_port(3))
    net = Network(with_tls(topology, broker_tls(certs)), tmp_path)
    try:
        yield net.start()  # the children's links to broker 1 are up: TLS between brokers
    finally:
        codes = net.stop()
        assert all(code == 0 for code in codes.values()), (codes, net.log_text()[-3000:])


async def deliver(net: Network, ca: Path) -> tuple[dict, tuple[str, ...]]:
    context = client_ssl_context(ca)
    with trio.fail_after(20):
        async with (
            client.open_client(*net.address(3), name="sub", ssl_context=context) as sub_client,
            client.open_client(*net.address(2), name="pub", ssl_context=context) as pub,
        ):
            sub = await sub_client.subscribe("n = 1")
            await pub.publish({"n": 1, "blob": b"\x00" * 50_000})
            await pub.publish({"n": 2})
            delivery = await sub.next_delivery()
            return delivery.attributes, delivery.path


async def plaintext_fails(net: Network) -> None:
    with trio.fail_after(20), pytest.raises(client.ConnectionLost):
        async with client.open_client(*net.address(1), name="plain"):
            pass


def test_events_cross_a_tls_network(tls_net: Network, certs: Path) -> None:
    attributes, path = trio.run(deliver, tls_net, certs / "ca.pem")
    assert attributes == {"n": 1, "blob": b"\x00" * 50_000}
    assert path == ("2", "1", "3")


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_the_asyncio_client_over_tls_and_refused_in_plaintext_or_by_its_ca(
    tls_net: Network, certs: Path, other_ca: Path, loop: str
) -> None:
    async def scenario() -> tuple[dict, tuple[str, ...]]:
        context = client_ssl_context(certs / "ca.pem")
        with pytest.raises(client.ConnectionLost):
            async with client.open_asyncio_client(*tls_net.address(1), name="plain"):
                pass
        async with (
            client.open_asyncio_client(
                *tls_net.address(3), name="sub", ssl_context=context
            ) as sub_client,
            client.open_asyncio_client(*tls_net.address(2), name="pub", ssl_context=context) as pub,
        ):
            sub = await sub_client.subscribe("n = 1")
            await pub.publish({"n": 1, "blob": b"\x00" * 50_000})
            delivery = await sub.next_delivery()
            return delivery.attributes, delivery.path

    async def stranger() -> None:  # trusting another CA: the broker's certificate fails
        context = client_ssl_context(other_ca / "ca.pem")
        async with client.open_asyncio_client(*tls_net.address(1), name="x", ssl_context=context):
            pass

    with pytest.raises(client.ConnectionLost, match="TLS with the broker at .* failed") as info:
        run_on(loop, stranger, 20)
    assert isinstance(info.value.__cause__, ssl.SSLCertVerificationError), repr(info.value)
    attributes, path = run_on(loop, scenario, 20)
    assert attributes == {"n": 1, "blob": b"\x00" * 50_000}
    assert path == ("2", "1", "3")
    assert tls_net.procs.failed() == {}


def test_a_plaintext_client_fails_cleanly_and_the_broker_keeps_serving(
    tls_net: Network, certs: Path
) -> None:
    trio.run(plaintext_fails, tls_net)
    assert tls_net.procs.failed() == {}
    assert trio.run(deliver, tls_net, certs / "ca.pem")[0]["n"] == 1


def test_hop_stats_over_tls(tls_net: Network, certs: Path) -> None:
    address = "{}:{}".format(*tls_net.address(1))
    done = subprocess.run(
        [sys.executable, "-m", "hop", "stats", address, "--ca", str(certs / "ca.pem")],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert '"children_connected": 2' in done.stdout


def test_hop_stats_every_and_hop_ping_over_tls(tls_net: Network, certs: Path) -> None:
    """The watch's one connection per broker and the ping's two clients, over TLS, with
    the topology's files (`hop stats FILE`) and with --ca (HOST:PORT)."""
    root, leaf = ("{}:{}".format(*tls_net.address(b)) for b in (1, 3))
    ca = ["--ca", str(certs / "ca.pem")]
    for command in (
        ["stats", str(tls_net.file), "--every", "0.2", "--count", "1", "--json"],
        ["ping", leaf, "--to", root, "--count", "2", "--interval", "0.05", *ca],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "hop", *command],
            capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        last = done.stdout.splitlines()[-1]
        if command[0] == "stats":
            assert sorted(json.loads(last)["brokers"]) == ["1", "2", "3"]
        else:
            assert last.startswith(f"2 probe(s) from {leaf} to {root}: 2 delivered, 0 lost")


def test_a_tls_network_closes_every_link_on_sigterm(tls_net: Network, certs: Path) -> None:
    """On SIGTERM each broker sends what is queued and Bye, and a link closes once both
    sides said Bye. A TLS stream cannot half-close, so two draining brokers must not
    wait for an end of stream: they would give up only at the drain timeout, with their
    links still open."""
    assert trio.run(deliver, tls_net, certs / "ca.pem")[0]["n"] == 1
    assert tls_net.stop() == {1: 0, 2: 0, 3: 0}
    drained = [json.loads(line) for line in tls_net.log_text().splitlines() if '"drained"' in line]
    assert sorted(record["broker"] for record in drained) == ["1", "2", "3"]
    assert [record["links_left"] for record in drained] == [[], [], []], drained


# --- certificates from another CA --------------------------------------------------------------


def with_tls(topology: Topology, tls: TlsFiles) -> Topology:
    return dataclasses.replace(topology, security=Security(tls=tls))


def stats_of(topology: Topology, broker_id: int) -> dict:
    return fetch_stats(
        *topology.address(broker_id),
        ssl_context=ClientCredentials.for_network(topology).ssl_context,
    )


def wait_for_log(log: Path, *texts: str, timeout: float = 20.0) -> str:
    """The first of ``texts`` to appear in ``log``."""
    deadline = time.monotonic() + timeout
    while True:
        found = log.read_text() if log.exists() else ""
        for text in texts:
            if text in found:
                return text
        assert time.monotonic() < deadline, f"none of {texts} in {log}"
        time.sleep(0.05)


async def connect(address: tuple[str, int], name: str, context: ssl.SSLContext) -> None:
    with trio.fail_after(10):
        async with client.open_client(*address, name=name, ssl_context=context):
            pass


def refusal(
    address: tuple[str, int], name: str, context: ssl.SSLContext, by_server: bool = False
) -> BaseException:
    """The TLS error behind a client's failed connection (the client raises
    ConnectionLost caused by it).

    `by_server`: the server refuses the client's certificate. In TLS 1.3 it does so
    after the client has finished its side of the handshake, so the client sees the
    server's alert or, when the server's close overtakes it, a reset; the broker's log
    says why (the callers check it)."""
    with pytest.raises(client.ConnectionLost) as info:
        trio.run(connect, address, name, context)
    allowed = (ssl.SSLError, ConnectionResetError) if by_server else ssl.SSLError
    assert isinstance(info.value.__cause__, allowed), repr(info.value)
    if isinstance(info.value.__cause__, ssl.SSLError):
        assert str(info.value).startswith("TLS with the broker failed: "), info.value
        plain = "WRONG_VERSION_NUMBER" in str(info.value.__cause__)
        assert str(info.value).endswith("(is that broker serving TLS?)") == plain, info.value
    return info.value.__cause__


def test_a_client_in_tls_to_a_plain_broker_is_told_so(tmp_path: Path, certs: Path) -> None:
    net = Network(chain(1, name="plain1", base_port=free_base_port(1)), tmp_path)
    net.start()
    try:
        error = refusal(net.address(1), "tls-client", client_ssl_context(certs / "ca.pem"))
    finally:
        net.stop()
    assert isinstance(error, ssl.SSLError)
    assert "WRONG_VERSION_NUMBER" in str(error)


def test_a_broker_with_another_cas_certificate_is_refused_by_its_child_and_by_clients(
    tmp_path: Path, certs: Path, other_ca: Path
) -> None:
    """Broker 1 serves a certificate from another CA; broker 2, its child, trusts only
    the network's CA: the link never comes up, and a client refuses broker 1 too."""
    topology = chain(2, name="rogue-parent", base_port=free_base_port(2))
    network, rogue = with_tls(topology, broker_tls(certs)), with_tls(topology, broker_tls(other_ca))
    network_file, rogue_file = tmp_path / "network.toml", tmp_path / "rogue.toml"
    network_file.write_text(to_toml(network))
    rogue_file.write_text(to_toml(rogue))
    parent, child = BrokerProcesses(rogue_file, rogue), BrokerProcesses(network_file, network)
    logs = tmp_path / "logs"
    try:
        parent.start([1], log_dir=logs)
        parent.wait_listening()
        child.start([2], log_dir=logs)
        child.wait_listening()
        seen = wait_for_log(logs / "broker-2.log", "CERTIFICATE_VERIFY_FAILED", "parent_connected")
        assert seen == "CERTIFICATE_VERIFY_FAILED"
        assert stats_of(network, 2)["parent_connected"] == 0
        assert stats_of(rogue, 1)["children_connected"] == 0

        error = refusal(network.address(1), "trusting", client_ssl_context(certs / "ca.pem"))
        assert isinstance(error, ssl.SSLCertVerificationError), repr(error)
        assert parent.failed() == {} and child.failed() == {}
    finally:
        codes = {**parent.stop(), **child.stop()}
    assert codes == {1: 0, 2: 0}


@pytest.fixture(scope="module")
def verifying(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[Network]:
    """One broker with ``verify_clients``: clients must present a certificate of its CA."""
    topology = chain(1, name="verify1", base_port=free_base_port(1))
    net = Network(
        with_tls(topology, broker_tls(certs, verify_clients=True)),
        tmp_path_factory.mktemp("verify"),
    )
    try:
        yield net.start()  # its readiness probe presents the broker certificate
    finally:
        codes = net.stop()
        assert codes == {1: 0}, (codes, net.log_text()[-3000:])


def test_verify_clients_refuses_a_client_without_a_certificate(
    verifying: Network, certs: Path
) -> None:
    refusal(verifying.address(1), "anonymous", client_ssl_context(certs / "ca.pem"), True)
    wait_for_log(verifying.logs / "broker-1.log", "PEER_DID_NOT_RETURN_A_CERTIFICATE")
    assert "client:anonymous" not in verifying.log_text()
    assert verifying.procs.failed() == {}


def test_verify_clients_refuses_a_client_certificate_from_another_ca(
    verifying: Network, certs: Path, other_ca: Path
) -> None:
    context = client_ssl_context(certs / "ca.pem", other_ca / "client.pem", other_ca / "client.key")
    refusal(verifying.address(1), "stranger", context, by_server=True)
    wait_for_log(verifying.logs / "broker-1.log", "certificate verify failed")
    assert "client:stranger" not in verifying.log_text()
    assert verifying.procs.failed() == {}


async def deliver_on(address: tuple[str, int], context: ssl.SSLContext) -> dict:
    with trio.fail_after(20):
        async with (
            client.open_client(*address, name="sub", ssl_context=context) as sub_client,
            client.open_client(*address, name="pub", ssl_context=context) as pub,
        ):
            sub = await sub_client.subscribe("n = 1")
            await pub.publish({"n": 2})
            await pub.publish({"n": 1})
            return await sub.next()


def test_verify_clients_accepts_a_client_certificate_from_its_ca(
    verifying: Network, certs: Path
) -> None:
    context = client_ssl_context(certs / "ca.pem", certs / "client.pem", certs / "client.key")
    assert trio.run(deliver_on, verifying.address(1), context) == {"n": 1}
    assert "client:sub#" in verifying.log_text() and "client:pub#" in verifying.log_text()
