"""TLS on every link: a 3-broker network with certificates from scripts/make_test_ca.sh."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import client
from broker.local_network import REPO, Network, free_base_port
from broker.security import client_ssl_context
from topologies import Security, TlsFiles
from topologies.generators import kary_tree

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make test certificates")
    out = tmp_path_factory.mktemp("tls")
    subprocess.run(
        ["bash", str(REPO / "scripts" / "make_test_ca.sh"), str(out)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return out


@pytest.fixture
def tls_net(tmp_path: Path, certs: Path) -> Iterator[Network]:
    """Broker 1 with children 2 and 3, every link in TLS."""
    tls = TlsFiles(certs / "ca.pem", certs / "broker.pem", certs / "broker.key")
    topology = kary_tree(2, 1, name="tls3", base_port=free_base_port(3))
    net = Network(dataclasses.replace(topology, security=Security(tls=tls)), tmp_path)
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
