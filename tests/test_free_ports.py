"""Free ports for brokers on 127.0.0.1 (`broker.local_network.free_base_port`): drawn from
HOP_FREE_PORTS when it is set, so processes sharing a host can keep out of each other's
way (the two workers of `make test` do), and a bad range is named."""

from __future__ import annotations

import socket

import pytest

from broker.local_network import FREE_PORTS_ENV, free_base_port, free_port_range


def test_ports_are_drawn_from_the_range_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FREE_PORTS_ENV, "21000-21040")
    for _ in range(50):
        base = free_base_port(7)
        assert base >= 21000 and base + 7 < 21040


def test_a_taken_port_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Of the two bases a one-port range of three allows, only the one whose port is
    free is given."""
    base = free_base_port(2)  # base+1 and base+2 free
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base + 2))
        taken.listen()
        monkeypatch.setenv(FREE_PORTS_ENV, f"{base}-{base + 3}")
        assert {free_base_port(1) for _ in range(30)} == {base}


def test_without_the_variable_the_range_ends_below_the_ephemeral_ports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(FREE_PORTS_ENV, raising=False)
    low, high = free_port_range()
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
    assert low == 20000 and high == min(60000, ephemeral_low)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("20000", "must be LOW-HIGH"),
        ("a-b", "must be LOW-HIGH"),
        ("30000-20000", "want 1024 <= LOW < HIGH <= 65535"),
        ("80-9000", "want 1024 <= LOW < HIGH <= 65535"),
    ],
)
def test_a_bad_range_is_named(monkeypatch: pytest.MonkeyPatch, value: str, said: str) -> None:
    monkeypatch.setenv(FREE_PORTS_ENV, value)
    with pytest.raises(ValueError, match=f"{FREE_PORTS_ENV}.*{said}"):
        free_base_port(1)


def test_a_range_too_small_for_the_ports_asked_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FREE_PORTS_ENV, "21000-21005")
    with pytest.raises(ValueError, match="has no room for 7 ports"):
        free_base_port(7)
