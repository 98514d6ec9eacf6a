"""Topology and case-study files: the data model, a validating loader, and generators.

Shipped files (see `shipped_path`): ``siena15`` (the thesis' 15-broker case study),
``tree7`` and ``chain5`` (small networks for tests and demos), ``specjms_vertical``
(SPECjms2007's vertical topology as content-based events; `topologies.specjms`).
"""

from pathlib import Path

from topologies.generators import binary_tree, chain, kary_tree, to_toml
from topologies.loader import load_case_study, load_topology
from topologies.model import (
    BrokerSpec,
    CaseStudy,
    Deployment,
    EventSpec,
    HostSpec,
    ProcessSpec,
    PublisherSpec,
    Scenario,
    Security,
    SubscriberSpec,
    TlsFiles,
    Topology,
    TopologyError,
    Workload,
    publisher_name,
    subscriber_name,
)

SHIPPED = ("siena15", "tree7", "chain5", "specjms_vertical")


def shipped_path(name: str) -> Path:
    """The path of a topology file shipped with the package, by name (e.g. "siena15")."""
    if name not in SHIPPED:
        raise TopologyError(name, None, f"no shipped topology; shipped: {', '.join(SHIPPED)}")
    return Path(__file__).with_name(f"{name}.toml")


def study_path(text: str) -> Path:
    """The file a command-line argument names: a path to an existing file, else the name
    of a shipped topology (`hop replay tree7` works from anywhere, the package
    installed). TopologyError when it is neither."""
    path = Path(text)
    if path.is_file() or text not in SHIPPED:
        return path  # a missing file is reported by the loader, naming it
    return shipped_path(text)


__all__ = [
    "SHIPPED",
    "BrokerSpec",
    "CaseStudy",
    "Deployment",
    "EventSpec",
    "HostSpec",
    "ProcessSpec",
    "PublisherSpec",
    "Scenario",
    "Security",
    "SubscriberSpec",
    "TlsFiles",
    "Topology",
    "TopologyError",
    "Workload",
    "binary_tree",
    "chain",
    "kary_tree",
    "load_case_study",
    "load_topology",
    "publisher_name",
    "shipped_path",
    "study_path",
    "subscriber_name",
    "to_toml",
]
