"""Running commands on the hosts of a deployment: here, or through a launcher template
(`ssh` by default, `ip netns exec {host}` in the tests, a cluster's own launcher), and
moving files to and from them with copy templates (`scp` by default; none for a shared
filesystem). Pure: it builds argument lists; the callers run them."""

from __future__ import annotations

import ipaddress
import shlex
import socket
import sys
from collections.abc import Sequence

from topologies import Deployment, HostSpec

LOCAL_LAUNCHER = "{command}"


def is_local(address: str) -> bool:
    """True for loopback addresses and names: processes there run on this machine."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address in (socket.gethostname(), socket.getfqdn())


def launcher_of(host: HostSpec, deployment: Deployment) -> str:
    """The launcher template for a host: its own, else local for this machine's
    addresses, else the deployment's."""
    if host.launcher is not None:
        return host.launcher
    if is_local(host.address):
        return LOCAL_LAUNCHER
    return deployment.launcher


def python_on(host: HostSpec, deployment: Deployment) -> str:
    """The Python interpreter to run on a host."""
    if is_local(host.address) or deployment.python is None:
        return sys.executable
    return deployment.python


def expand(template: str, words: Sequence[str] = (), **values: str) -> list[str]:
    """A template's words with its placeholders filled: a word that is exactly
    "{command}" becomes `words`, and {command_line} is `words` as one shell-quoted
    string (what ssh passes to the remote shell)."""
    out: list[str] = []
    line = shlex.join(words)
    for word in shlex.split(template):
        if word == "{command}":
            out.extend(words)
        else:
            out.append(word.format(command_line=line, command=line, **values))
    return out


def launch_command(host: HostSpec, deployment: Deployment, words: Sequence[str]) -> list[str]:
    """The argument list that runs `words` on `host`."""
    template = launcher_of(host, deployment)
    return expand(template, words, host=host.label, address=host.address, path="", dest="")


def runs_here(host: HostSpec, deployment: Deployment) -> bool:
    return launcher_of(host, deployment) == LOCAL_LAUNCHER


def copy_command(template: str, host: HostSpec, path: str, dest: str) -> list[str] | None:
    """The argument list of a copy template (None: a shared filesystem, nothing to do)."""
    if not template:
        return None
    return expand(template, host=host.label, address=host.address, path=path, dest=dest)
