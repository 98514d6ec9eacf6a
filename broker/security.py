"""Authentication and encryption of links: shared secrets in Hello, TLS on every link.

Secrets. A broker network may require a shared secret (``auth_secret_file`` in the
topology): a child presents it in its Hello to its parent, and a parent refuses a
broker Hello without it. Clients present the network secret too, or a secret of their
own (``client_secret_file``). A refused Hello gets Error with code ``ERR_AUTH`` and the
connection is closed; the message does not say what was wrong. Secrets are compared
in constant time (``hmac.compare_digest``). The secret travels in the Hello as is, so
on links that an attacker may read, use TLS as well.

TLS. With a ``[tls]`` table every link is TLS: a broker serves with its certificate and
key, and verifies its parent's certificate (and, with ``verify_clients``, its clients')
against the CA. A peer's certificate must name the address it is reached at (an IP
SAN for an IP address; scripts/make_test_ca.sh makes such certificates).
"""

from __future__ import annotations

import hmac
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from broker.messages import Role
from topologies import TlsFiles, Topology

ERR_AUTH = "auth"
SECRET_ENV = "HOP_SECRET"
SECRET_FILE_ENV = "HOP_SECRET_FILE"


def read_secret(path: Path) -> str:
    """The secret in a file: its text without surrounding whitespace (ValueError if
    there is none)."""
    secret = Path(path).read_text(encoding="utf-8").strip()
    if not secret:
        raise ValueError(f"{path}: the secret file is empty")
    return secret


def secret_from_env() -> str | None:
    """A client's secret from the environment: $HOP_SECRET, else the file named by
    $HOP_SECRET_FILE, else None."""
    if os.environ.get(SECRET_ENV):
        return os.environ[SECRET_ENV]
    path = os.environ.get(SECRET_FILE_ENV)
    return read_secret(Path(path)) if path else None


def secret_matches(given: str | None, expected: str) -> bool:
    """Whether ``given`` is ``expected``, in time independent of where they differ."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def server_ssl_context(tls: TlsFiles) -> ssl.SSLContext:
    """The context a broker serves TLS with."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(tls.ca))
    context.load_cert_chain(str(tls.cert), str(tls.key))
    context.verify_mode = ssl.CERT_REQUIRED if tls.verify_clients else ssl.CERT_NONE
    return context


def client_ssl_context(
    ca: Path, cert: Path | None = None, key: Path | None = None
) -> ssl.SSLContext:
    """A context to connect to brokers whose certificates ``ca`` signed, presenting
    ``cert`` (and ``key``) if given; hostnames (or IP addresses) are checked."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key) if key is not None else None)
    return context


@dataclass(frozen=True)
class BrokerSecurity:
    """What one broker needs: the secrets it checks and presents, and TLS contexts."""

    secret: str | None = None
    """The network secret: presented to the parent, required from child brokers (and
    from clients when ``client_secret`` is None)."""
    client_secret: str | None = None
    server_ssl: ssl.SSLContext | None = None
    parent_ssl: ssl.SSLContext | None = None
    """For the link to the parent; it presents this broker's certificate."""

    @classmethod
    def from_topology(cls, topology: Topology, secret_file: Path | None = None) -> BrokerSecurity:
        """The settings the topology names; ``secret_file`` overrides its network secret."""
        security = topology.security
        secret_file = secret_file or security.secret_file
        tls = security.tls
        return cls(
            secret=read_secret(secret_file) if secret_file else None,
            client_secret=(
                read_secret(security.client_secret_file) if security.client_secret_file else None
            ),
            server_ssl=server_ssl_context(tls) if tls else None,
            parent_ssl=client_ssl_context(tls.ca, tls.cert, tls.key) if tls else None,
        )

    def required_secret(self, role: Role) -> str | None:
        """The secret a peer of this role must present (None: no authentication)."""
        if role == "client" and self.client_secret is not None:
            return self.client_secret
        return self.secret


@dataclass(frozen=True)
class ClientCredentials:
    """What a client of a network needs to connect: its secret and TLS context."""

    secret: str | None = None
    ssl_context: ssl.SSLContext | None = None

    @classmethod
    def for_network(cls, topology: Topology, secret_file: Path | None = None) -> ClientCredentials:
        """Credentials from the files a topology names, for tools that run where the
        topology file is (``hop net``, ``hop replay``, tests); ``secret_file`` overrides
        the network secret. With TLS, the client presents the brokers' certificate (so
        ``verify_clients`` networks accept it)."""
        security = topology.security
        secret_file = security.client_secret_file or secret_file or security.secret_file
        tls = security.tls
        return cls(
            secret=read_secret(secret_file) if secret_file else None,
            ssl_context=client_ssl_context(tls.ca, tls.cert, tls.key) if tls else None,
        )
