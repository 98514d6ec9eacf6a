"""`hop predict`: per-broker throughput/utilization/response and per-pair latency for a
target workload, from one characterization run.

The network model is built from `monitor.characterize` (service demands, trees,
delays measured in the run) and the target rates (a case-study file and scenario,
or the run's own rates); only the rates differ between the characterization and
the prediction, and the service and delay samples, drawn again for the target's
rates by how long their processes had been idle (`monitor.warmth`). Methods:
``mm1`` (the thesis' operational analysis), ``mm1-ps`` (the same with the host's
cores shared by processor sharing) and ``sim``
(discrete-event simulation). Output: RUN_DIR/analysis/predictions.parquet, one row
per (kind, entity, metric, method), and simulated_latency.parquet (samples).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from monitor.carry import carried, check_trend
from monitor.characterize import Characterization, characterize
from monitor.errors import InputError, check_number, write_output, writing
from monitor.measured import in_window
from monitor.model.network import Arrival, EventClass, Host, Network, Station, Tree
from monitor.model.operational import Method, OperationalResult
from monitor.model.operational import analyze as operational
from monitor.model.simulation import SimulationResult, simulate
from monitor.runfiles import local_path
from monitor.traces import check_manifest
from monitor.validate import SIMULATION_S
from monitor.warmth import matched
from topologies import CaseStudy, load_case_study, publisher_name

METHODS = ("mm1", "mm1-ps", "sim")
PREDICTIONS = pa.schema(
    [
        ("kind", pa.string()),
        ("entity", pa.string()),
        ("metric", pa.string()),
        ("method", pa.string()),
        ("predicted", pa.float64()),
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
        ("measured", pa.float64()),
        ("rel_error", pa.float64()),
    ]
)


KEYED_MIN_SAMPLES = 30
"""Fewest delay samples of one link, home broker, subscriber or (publisher, subscriber)
pair for the model to use them rather than the pooled samples of all (docs/accuracy.md
says why fewer samples mislead more than pooled ones)."""


@dataclass
class Target:
    """The workload to predict: rate and arrival process per publisher."""

    rates: dict[str, float]
    arrivals: dict[str, Arrival]
    same_as_run: bool


def target_workload(
    char: Characterization,
    study_file: Path | None,
    scenario: str | None,
    rate_scale: float = 1.0,
    measured_rates: bool = False,
) -> Target:
    """The target rates: from `study_file` (+ scenario), else the run's own rates; all
    times `rate_scale`.

    With `measured_rates`, the run's rates are those its publishers reached in the
    measurement window rather than the nominal ones: the characterized workload
    itself, scaled. A prediction is then not off by the run's sampling of its
    (Poisson) arrivals: with the same seed, a replay at `rate_scale` times the rates
    (and 1/`rate_scale` times the durations) publishes the same events, faster.
    """
    run_file = char.run_dir / "case_study.toml"
    run_study = load_case_study(run_file, files_needed=False)
    study = load_case_study(study_file) if study_file is not None else run_study
    if study_file is not None:
        same_network(study, study_file, run_study, run_file)
    arrivals = {publisher_name(p.id): p.arrival for p in study.publishers.values()}
    if measured_rates:
        if study_file is not None or scenario is not None:
            raise InputError("measured rates are the run's own: give no case study or scenario")
        if not any(rate > 0 for rate in char.rates.values()):
            raise InputError(
                f"{char.run_dir}: its publishers published nothing in the measurement "
                "window: there are no measured rates to predict for"
            )
        rates = finite_rates({p: r * rate_scale for p, r in char.rates.items()}, rate_scale)
        return Target(rates, arrivals, same_as_run=rate_scale == 1.0)
    manifest = check_manifest(char.manifest, char.run_dir, ("rates",))
    run_rates = {publisher_name(int(k)): v for k, v in manifest["rates"].items()}
    if study_file is None and scenario is None and rate_scale == 1.0:
        return Target(run_rates, arrivals, same_as_run=True)
    raw = study.rates_for(scenario)
    if not any(rate > 0 for rate in raw.values()):
        where = f"{study_file or run_file}" + (f", scenario {scenario!r}" if scenario else "")
        raise InputError(f"{where}: every publisher's rate is 0: there is nothing to predict")
    rates = finite_rates({publisher_name(k): v * rate_scale for k, v in raw.items()}, rate_scale)
    same = rates.keys() == run_rates.keys() and all(
        abs(rates[p] - v) < 1e-9 * max(1.0, v) for p, v in run_rates.items()
    )
    return Target(rates, arrivals, same_as_run=same)


def same_network(study: CaseStudy, study_file: Path, run_study: CaseStudy, run_file: Path) -> None:
    """InputError naming the first difference unless the workload file `study_file`
    has the run's brokers (each with its parent), publishers and subscribers (each at
    its broker). The model is the run's network (its trees, service times and delays)
    and takes only the rates and arrival processes from the file: a file of another
    network would be predicted on the run's, its other clients left out."""
    for what, attribute, mine, run in (
        ("broker", "parent", study.topology.brokers, run_study.topology.brokers),
        ("publisher", "broker", study.publishers, run_study.publishers),
        ("subscriber", "broker", study.subscribers, run_study.subscribers),
    ):
        ours = {k: getattr(v, attribute) for k, v in mine.items()}
        theirs = {k: getattr(v, attribute) for k, v in run.items()}
        difference = _difference(what, attribute, ours, theirs)
        if difference is not None:
            raise InputError(
                f"{study_file}: {difference} (the run's case study: {run_file}); a "
                "prediction is for the run's network, at other rates"
            )


def _difference(
    what: str, attribute: str, ours: dict[int, int | None], theirs: dict[int, int | None]
) -> str | None:
    """The first difference between a file's `what`s (id -> `attribute`) and the run's."""
    extra, missing = sorted(ours.keys() - theirs.keys()), sorted(theirs.keys() - ours.keys())
    if extra:
        return f"{what}s not in the run: {_ids(extra)}"
    if missing:
        return f"the run's {what}s missing: {_ids(missing)}"
    for key in sorted(ours):
        if ours[key] != theirs[key]:
            return f"{what} {key}: {attribute} {ours[key]} here, {theirs[key]} in the run"
    return None


def _ids(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids)


def finite_rates(rates: dict[str, float], rate_scale: float) -> dict[str, float]:
    """`rates` (events/s, scaled by `rate_scale`) if their sum is finite, else an
    InputError naming the scale: a finite scale can still make a rate (and every
    throughput the model sums from the rates) overflow."""
    total = sum(rates.values())
    if not math.isfinite(total):
        raise InputError(
            f"rate scale {rate_scale:g} is too large: the rates it gives add up to {total} events/s"
        )
    return rates


def _throughputs(char: Characterization, rates: dict[str, float]) -> tuple[dict[str, float], float]:
    """Events per second at each broker, and at the client process (publications plus
    deliveries), when the publishers publish at `rates`."""
    visits: dict[str, float] = {}
    client = 0.0
    for publisher, trees in char.trees.items():
        rate = rates.get(publisher, 0.0)
        for share, (edges, deliveries) in trees:
            for broker in {char.home[publisher], *(child for _, child in edges)}:
                visits[broker] = visits.get(broker, 0.0) + rate * share
            client += rate * share * (1 + sum(len(subs) for _, subs in deliveries))
    return visits, client


def warmed(char: Characterization, target: Target, seed: int = 1) -> Characterization:
    """`char` with its service and delay samples drawn again for the target's rates
    (`monitor.warmth`): each process's samples for its own change of rate, each link's,
    home broker's and (publisher, subscriber) pair's delays among their own."""
    calibration, client_calibration = _throughputs(char, char.rates)
    target_rates, client_target = _throughputs(char, target.rates)
    scale = {b: target_rates.get(b, 0.0) / x for b, x in calibration.items() if x > 0}
    rng = np.random.default_rng(seed)

    def at(broker: str, samples: np.ndarray, gaps: np.ndarray) -> np.ndarray:
        return matched(samples, gaps, scale.get(broker, 1.0), rng)

    def by_key(
        samples: np.ndarray, gaps: np.ndarray, keys: list[np.ndarray], factor: np.ndarray
    ) -> np.ndarray:
        out = np.asarray(samples, dtype=float).copy()
        for rows in _groups(keys):
            out[rows] = matched(samples[rows], gaps[rows], factor[rows], rng)
        return out

    client_scale = client_target / client_calibration if client_calibration > 0 else 1.0
    link_scale = np.array([scale.get(b, 1.0) for b in char.link_broker])
    publish_scale = np.array([scale.get(b, 1.0) for b in char.publish_broker])
    return dataclasses.replace(
        char,
        service_ns={b: at(b, v, char.service_gap_ns[b]) for b, v in char.service_ns.items()},
        service_by_fanout={
            b: {k: at(b, v, char.service_by_fanout_gap_ns[b][k]) for k, v in groups.items()}
            for b, groups in char.service_by_fanout.items()
        },
        link_delay_ns=by_key(
            char.link_delay_ns, char.link_gap_ns, [char.link_sender, char.link_broker], link_scale
        ),
        publish_delay_ns=by_key(
            char.publish_delay_ns, char.publish_gap_ns, [char.publish_broker], publish_scale
        ),
        deliver_delay_ns=by_key(
            char.deliver_delay_ns,
            char.deliver_gap_ns,
            [char.deliver_publisher, char.deliver_subscriber],
            np.full(len(char.deliver_delay_ns), client_scale),
        ),
    )


def _groups(keys: list[np.ndarray]) -> list[np.ndarray]:
    """The row indices of each distinct combination of `keys` (aligned arrays)."""
    if not keys or len(keys[0]) == 0:
        return []
    frame = pd.DataFrame({str(i): k for i, k in enumerate(keys)})
    return [np.asarray(rows) for rows in frame.groupby(list(frame.columns)).indices.values()]


def _keyed(samples: np.ndarray, keys: list[np.ndarray]) -> dict[Any, np.ndarray]:
    """The samples of each key (a tuple for several key arrays) that has at least
    `KEYED_MIN_SAMPLES`; the model uses the pooled samples for the others."""
    out: dict[Any, np.ndarray] = {}
    for rows in _groups(keys):
        if len(rows) >= KEYED_MIN_SAMPLES:
            key = tuple(str(k[rows[0]]) for k in keys)
            out[key if len(keys) > 1 else key[0]] = samples[rows]
    return out


def build_network(char: Characterization, target: Target) -> Network:
    """The model of the characterized network under the target rates."""
    total_rate = sum(target.rates.values())
    # Off-path CPU (clients, and each broker's per-event overhead) takes cores away
    # from the brokers' event handling in proportion to the target throughputs.
    visits, _ = _throughputs(char, target.rates)
    broker_overhead = sum(char.overhead_ns[b] * 1e-9 * x for b, x in visits.items())
    background = char.client_cpu_per_event_s * total_rate + broker_overhead
    host = Host("host", cores=float(char.cores), background=min(background, 0.95 * char.cores))
    stations = [
        Station(b, "host", char.service_ns[b], char.service_by_fanout[b]) for b in char.brokers
    ]
    classes = []
    for publisher, trees in sorted(char.trees.items()):
        model_trees = []
        for share, (edges, deliveries) in trees:
            children: dict[str, list[str]] = {}
            for parent, child in edges:
                children.setdefault(parent, []).append(child)
            tree = Tree(char.home[publisher], children, {b: list(s) for b, s in deliveries})
            model_trees.append((share, tree))
        rate = target.rates.get(publisher, 0.0)
        classes.append(
            EventClass(publisher, rate, target.arrivals.get(publisher, "poisson"), model_trees)
        )
    return Network(
        stations,
        [host],
        classes,
        link_delay_ns=_pooled(char.link_delay_ns),
        publish_delay_ns=_pooled(char.publish_delay_ns),
        deliver_delay_ns=_pooled(char.deliver_delay_ns),
        link_delays_ns=_keyed(char.link_delay_ns, [char.link_sender, char.link_broker]),
        publish_delays_ns=_keyed(char.publish_delay_ns, [char.publish_broker]),
        deliver_delays_ns={
            **_keyed(char.deliver_delay_ns, [char.deliver_subscriber]),
            **_keyed(char.deliver_delay_ns, [char.deliver_publisher, char.deliver_subscriber]),
        },
    )


def _pooled(samples: np.ndarray) -> np.ndarray | float:
    """A delay's samples over the run, or 0 where the run has none: no event crossed a
    link (every client at one broker) or reached a subscriber (no filter matched), and
    then no tree of the model, drawn from the same events, takes that step."""
    return samples if len(samples) else 0.0


def measured_values(char: Characterization) -> dict[tuple[str, str, str], float]:
    """The run's own per-broker throughput and per-pair mean latency (window only)."""
    throughput, latency = in_window(char.run_dir)
    out: dict[tuple[str, str, str], float] = {}
    for broker, rate in throughput.items():
        out[("broker", broker, "throughput")] = float(rate)
    pairs = latency.groupby(["publisher", "subscriber"])["latency_ms"].mean()
    for (pub, sub), mean in pairs.items():
        out[("pair", f"{pub}>{sub}", "latency_ms")] = float(mean)
    return out


def predict(
    run_dir: Path,
    study_file: Path | None = None,
    scenario: str | None = None,
    rate_scale: float = 1.0,
    methods: tuple[str, ...] = METHODS,
    seed: int = 1,
    max_wall_s: float = SIMULATION_S,
    measured_rates: bool = False,
    warm: bool = True,
    other_runs: Sequence[Path] = (),
    trend: str = "line",
) -> dict[str, Any]:
    """Write RUN_DIR/analysis/predictions.parquet; return a summary.

    The simulation runs until the 95 % interval of every mean it tracks is within 2 %
    of it, or for at most `max_wall_s` seconds; the summary says which (`stop_reason`)
    and how wide the widest interval was (`max_relative_ci`, half-width over mean).

    With `other_runs` (runs of the same workload, at least one at another rate than
    RUN_DIR's; repeats at one rate are pooled) each stage's samples are carried to the
    target along the stage's line in the host's busy share through the runs, or with
    `trend` "none" every run's samples pooled as they are (`monitor.carry`).
    Otherwise, with `warm` (the default), the run's samples are drawn again for the
    target's rates (`warmed`); without it they are taken as measured, as the thesis
    does.
    """
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise InputError(f"unknown methods {sorted(unknown)}; use {METHODS}")
    check_number(rate_scale, "rate scale", positive=True)
    check_number(max_wall_s, "simulation seconds", positive=True)
    check_trend(trend)  # used only with other runs, but a wrong one is refused always
    char = characterize(run_dir)
    target = target_workload(char, study_file, scenario, rate_scale, measured_rates)
    # same_as_run: the target is the run's own load, so the run's measurement is what
    # the predictions are compared with (`hop report` compares them only then); and
    # how the target was asked for (`hop report` checks a validation's against it).
    summary: dict[str, Any] = {
        "target_rates": target.rates,
        "same_as_run": target.same_as_run,
        "target": {
            "workload": None if study_file is None else str(study_file),
            "scenario": scenario,
            "rate_scale": rate_scale,
            "measured_rates": measured_rates,
        },
        "methods": {},
    }
    if other_runs:
        runs = [char, *(characterize(run) for run in other_runs)]
        prepared = carried(runs, sum(target.rates.values()), trend)
        summary["other_runs"] = [str(run) for run in other_runs]
        summary["trend"] = trend
    else:
        prepared = warmed(char, target, seed) if warm else char
    network = build_network(prepared, target)
    rows: list[dict[str, Any]] = []
    result: SimulationResult | OperationalResult
    for method in methods:
        if method == "sim":
            result = simulate(network, seed=seed, max_wall_s=max_wall_s)
            _write_samples(run_dir, result)
            # whether it converged (stop_reason "precision") or ran out of its seconds,
            # and its widest interval (None: some mean had none, too short a run)
            widest = result.max_relative_ci
            stopped = {
                "stop_reason": result.stop_reason,
                "limit_s": max_wall_s,
                "max_relative_ci": None if np.isnan(widest) else widest,
            }
        else:
            # every method but "sim" is an operational one: unknown methods were refused above
            result = operational(network, method=cast(Method, method))
            stopped = {}
        rows += _rows(result, method)
        summary["methods"][method] = {
            "bottleneck": result.bottleneck,
            "saturated_hosts": list(result.saturated_hosts),
            **stopped,
        }
    if target.same_as_run:
        measured = measured_values(char)
        for row in rows:
            value = measured.get((row["kind"], row["entity"], row["metric"]))
            if value is not None:
                row["measured"] = value
                row["rel_error"] = (row["predicted"] - value) / value if value else None
    table = pa.Table.from_pylist(
        [{name: row.get(name) for name in PREDICTIONS.names} for row in rows], schema=PREDICTIONS
    )
    out = run_dir / "analysis"
    out.mkdir(exist_ok=True)
    with writing(out / "predictions.parquet"):
        pq.write_table(table, local_path(out / "predictions.parquet"))
    write_output(out / "predictions_summary.json", json.dumps(summary, indent=2, default=str))
    summary["rows"] = table.num_rows
    return summary


def _rows(result: Any, method: str) -> list[dict[str, Any]]:
    """Prediction rows; CIs (simulation only) from its 95 % half-widths."""
    rows = []
    for name, m in result.stations.items():
        for metric, value, half, scale in (
            ("throughput", m.throughput, getattr(m, "throughput_ci", None), 1.0),
            ("utilization", m.utilization, getattr(m, "utilization_ci", None), 1.0),
            ("response_ms", m.response_ns, getattr(m, "response_ci_ns", None), 1e-6),
        ):
            rows.append(_row("broker", name, metric, method, value * scale, half, scale))
    halves = getattr(result, "latency_ci_ns", {})
    for (cls, subscriber), value in result.latency_ns.items():
        entity = f"{cls}>{subscriber}"
        rows.append(
            _row(
                "pair",
                entity,
                "latency_ms",
                method,
                value * 1e-6,
                halves.get((cls, subscriber)),
                1e-6,
            )
        )
    return rows


def _row(
    kind: str, entity: str, metric: str, method: str, value: float, half: float | None, scale: float
) -> dict[str, Any]:
    finite = value if np.isfinite(value) else None
    ci_low = ci_high = None
    if half is not None and finite is not None and np.isfinite(half):
        ci_low, ci_high = finite - half * scale, finite + half * scale
    return {
        "kind": kind,
        "entity": entity,
        "metric": metric,
        "method": method,
        "predicted": finite,
        "ci_low": ci_low,
        "ci_high": ci_high,
    }


def _write_samples(run_dir: Path, result: Any) -> None:
    samples = getattr(result, "latency_samples_ns", None)
    if not samples:
        return
    frames = [
        pd.DataFrame({"publisher": cls, "subscriber": sub, "latency_ms": np.asarray(v) / 1e6})
        for (cls, sub), v in samples.items()
    ]
    out = run_dir / "analysis"
    out.mkdir(exist_ok=True)
    table = pa.Table.from_pandas(pd.concat(frames), preserve_index=False)
    with writing(out / "simulated_latency.parquet"):
        pq.write_table(table, local_path(out / "simulated_latency.parquet"))
