"""Which client processes a replay starts, on which hosts, with which clients: the
case study's [deployment] applied (pure: no process is started here).

Clients placed by hand ([[deployment.processes]]) run as listed. The others follow
`deployment.clients`: "process", one process per client on its home broker's host (as
clients are deployed: each application its own process); "broker", one process per
home broker with all its clients; "single", one process here with all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from topologies import CaseStudy, HostSpec, publisher_name, subscriber_name


@dataclass(frozen=True)
class ClientProcess:
    name: str
    host: HostSpec
    publishers: tuple[int, ...]
    subscribers: tuple[int, ...]

    @property
    def clients(self) -> list[str]:
        return [publisher_name(p) for p in self.publishers] + [
            subscriber_name(s) for s in self.subscribers
        ]


def client_processes(study: CaseStudy, here: HostSpec) -> list[ClientProcess]:
    """The client processes of a replay; `here` is the host the replay runs on."""
    deployment = study.deployment
    topology = study.topology
    out: list[ClientProcess] = []
    placed_pubs: set[int] = set()
    placed_subs: set[int] = set()
    for i, spec in enumerate(deployment.processes, start=1):
        out.append(
            ClientProcess(
                f"clients{i}", deployment.host(spec.host), spec.publishers, spec.subscribers
            )
        )
        placed_pubs.update(spec.publishers)
        placed_subs.update(spec.subscribers)
    pubs = [p for p in sorted(study.publishers) if p not in placed_pubs]
    subs = [s for s in sorted(study.subscribers) if s not in placed_subs]

    def home(broker_id: int) -> HostSpec:
        return deployment.host(topology.address(broker_id)[0])

    if deployment.clients == "single":
        if pubs or subs:
            out.append(ClientProcess("clients", here, tuple(pubs), tuple(subs)))
    elif deployment.clients == "broker":
        by_broker: dict[int, tuple[list[int], list[int]]] = {}
        for p in pubs:
            by_broker.setdefault(study.publishers[p].broker, ([], []))[0].append(p)
        for s in subs:
            by_broker.setdefault(study.subscribers[s].broker, ([], []))[1].append(s)
        for broker_id, (p_ids, s_ids) in sorted(by_broker.items()):
            out.append(
                ClientProcess(f"clients-b{broker_id}", home(broker_id), tuple(p_ids), tuple(s_ids))
            )
    else:
        for p in pubs:
            out.append(ClientProcess(publisher_name(p), home(study.publishers[p].broker), (p,), ()))
        for s in subs:
            out.append(
                ClientProcess(subscriber_name(s), home(study.subscribers[s].broker), (), (s,))
            )
    return out
