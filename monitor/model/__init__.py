"""The performance model of the broker network: inputs, operational analysis, simulation.

Pure computation, no I/O: callers build a `Network` from measured traces and
ask `analyze` (operational analysis, M/M/1 per station, thesis 4.1.4) or
`simulate` (discrete-event simulation, the role SimQPN played in the thesis).
"""

from monitor.model.network import EventClass, Host, Network, Station, Tree
from monitor.model.operational import (
    HostMetrics,
    OperationalResult,
    StationMetrics,
    analyze,
    visit_ratios,
)
from monitor.model.simulation import (
    Percentiles,
    SimStationMetrics,
    SimulationResult,
    simulate,
)

__all__ = [
    "EventClass",
    "Host",
    "HostMetrics",
    "Network",
    "OperationalResult",
    "Percentiles",
    "SimStationMetrics",
    "SimulationResult",
    "Station",
    "StationMetrics",
    "Tree",
    "analyze",
    "simulate",
    "visit_ratios",
]
