"""Hosts for tests, as network namespaces on one machine: each plugged by a veth pair
into a bridge in a switch namespace of its own. Nothing is added to this machine's
own namespace; everything made here is deleted by `delete`."""

from __future__ import annotations

import subprocess


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def build(switch: str, hosts: dict[str, str], made: list[str]) -> None:
    """The switch namespace and one namespace per host (name -> address/24), each
    with its loopback up; the i-th host's port in the switch is `p{i}` (from 1), to
    pull its cable with `ip -n SWITCH link set p{i} down`. Every namespace made is
    appended to `made` at once, so a failure halfway leaves nothing that
    `delete(made)` does not remove."""
    ip("netns", "add", switch)
    made.append(switch)
    ip("-n", switch, "link", "add", "br0", "type", "bridge")
    ip("-n", switch, "link", "set", "br0", "up")
    for i, (name, address) in enumerate(hosts.items(), start=1):
        ip("netns", "add", name)
        made.append(name)
        port = f"p{i}"
        ip("-n", switch, "link", "add", port, "type", "veth", "peer", "name", "eth0",
           "netns", name)  # fmt: skip
        ip("-n", switch, "link", "set", port, "master", "br0")
        ip("-n", switch, "link", "set", port, "up")
        ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
        ip("-n", name, "link", "set", "eth0", "up")
        ip("-n", name, "link", "set", "lo", "up")


def delete(made: list[str]) -> None:
    for name in reversed(made):
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
