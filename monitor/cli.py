"""The monitor layer's part of the `hop` command line: `hop replay`, `analyze`,
`predict`, `report` and `validate`.

The heavy imports (Spark, pandas, the model) happen inside each command, so that
`hop --help` and the commands of the other layers stay quick.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from broker import logs
from broker.cli import EXIT_FAILURE, EXIT_OK, FILE_HELP, BadInput, Layer
from broker.process import StartupError, unwind_on_termination
from monitor.errors import InputError, ReplayError, SparkStartError
from monitor.hostload import OTHER_CPU_LIMIT_CORES
from monitor.spark_master import master_url
from monitor.validate import (
    CALIBRATION_FRACTIONS,
    DISTURBED_RETRIES,
    QUICK,
    SIMULATION_S,
    TREND,
)
from routing import FilterSyntaxError
from topologies import TopologyError, study_path


def cmd_replay(args: argparse.Namespace) -> int:
    # So what the command starts is stopped on SIGTERM too; before the imports, whose
    # threads would take a SIGINT that the shell left ignored (`unwind_on_termination`).
    unwind_on_termination()
    from monitor.replay import replay

    result = replay(
        study_path(args.file),
        Path(args.out),
        scenario=args.scenario,
        duration_s=args.duration,
        warmup_s=args.warmup,
        quiet=args.quiet,
        rate_scale=args.rate_scale,
        attach=args.attach,
    )
    c = result.counts
    logs.emit(
        f"{result.run_id}: published {c.published}, delivered {c.delivered} "
        f"of {c.expected_deliveries} expected, lost {c.lost}, unexpected {c.unexpected}\n"
        f"traces and manifest in {result.run_dir}"
    )
    if c.lost or c.unexpected:
        for example in c.lost_examples:
            logs.say(f"  lost: {example}")
        return EXIT_FAILURE
    return EXIT_OK


def cmd_analyze(args: argparse.Namespace) -> int:
    unwind_on_termination()  # as in cmd_replay: the Spark session (its JVM) is stopped
    from monitor.analysis import analyze, findings

    def say(line: str) -> None:
        logs.say(f"hop analyze: {line}")

    summary = analyze(
        Path(args.run_dir),
        master=args.master,
        window=args.window,
        progress=None if args.quiet else say,
        out=Path(args.out) if args.out else None,
    )
    logs.emit(json.dumps(summary, indent=2, default=str))
    for line in findings(summary):
        logs.say(f"hop analyze: {line}")
    return EXIT_OK


def cmd_predict(args: argparse.Namespace) -> int:
    from monitor.predict import METHODS, predict

    methods = METHODS if args.method == "all" else (args.method,)
    workload = study_path(args.workload) if args.workload else None
    summary = predict(
        Path(args.run_dir),
        workload,
        args.scenario,
        args.rate_scale,
        methods,
        measured_rates=args.measured_rates,
        warm=not args.as_measured,
        other_runs=[Path(run) for run in args.other_runs],
        trend=args.trend,
        max_wall_s=args.sim_seconds,
    )
    logs.emit(json.dumps(summary, indent=2, default=str))
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from monitor.report import render

    html_path, md_path, sentence = render(Path(args.run_dir))
    logs.emit(f"{sentence}\n{html_path}\n{md_path}")
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    unwind_on_termination()  # as in cmd_replay
    from monitor.validate import validate

    result = validate(
        study_path(args.file),
        Path(args.out),
        scenario=args.scenario,
        duration_s=args.duration,
        quick=args.quick,
        warmup_s=args.warmup,
        load_scale=args.load_scale,
        calibration_fractions=args.calibration_fractions,
        calibration_repeats=args.calibration_repeats,
        master=args.master,
        quiet=args.quiet,
        repeats=args.repeats,
        disturbed_retries=args.disturbed_retries,
        trend=args.trend,
        sim_seconds=args.sim_seconds,
    )
    logs.emit(f"{result.summary}\nreport: {result.report_html} ({result.seconds:.0f} s)")
    return EXIT_OK


ANALYZED_FOLDER_HELP = "a run folder written by hop replay, or a brokers' --trace-dir folder"
OUT_HELP = (
    "make DIR a run folder of links to RUN_DIR's files and write the tables into "
    "DIR/analysis, leaving RUN_DIR as it is (for a folder you cannot write); then "
    "hop predict DIR and hop report DIR"
)
WINDOW_HELP = (
    "the events published in the measurement phase (measure: a run folder's default) or "
    "in the whole run, or all a --trace-dir folder recorded (all: its only window)"
)


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    def command(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, parents=[common])

    p = command("replay", "run a case study's workload and record traces into RUN_DIR")
    p.add_argument("file", help=f"{FILE_HELP} with a workload")
    p.add_argument("--out", required=True, help="RUN_DIR (must not hold traces yet)")
    p.add_argument("--scenario", help="a [[scenarios]] name of the file")
    p.add_argument("--duration", type=float, help="measurement seconds (default: the file's)")
    p.add_argument("--warmup", type=float, help="warm-up seconds (default: the file's)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("--rate-scale", type=float, default=1.0, help="multiply every rate")
    p.add_argument(
        "--attach",
        action="store_true",
        help="drive brokers already running (each started with hop broker FILE --id N "
        "--trace-dir DIR) instead of starting them, and gather their traces",
    )
    p.set_defaults(func=cmd_replay)

    p = command("analyze", "Spark jobs over RUN_DIR's traces -> RUN_DIR/analysis/")
    p.add_argument("run_dir", help=ANALYZED_FOLDER_HELP)
    p.add_argument("--master", type=master_url, help="Spark master URL (default: local[*])")
    p.add_argument("--window", choices=["measure", "all"], help=WINDOW_HELP)
    p.add_argument("--out", help=OUT_HELP)
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_analyze)

    p = command("predict", "model predictions for RUN_DIR -> RUN_DIR/analysis/")
    p.add_argument("run_dir", help="a run folder written by hop replay")
    p.add_argument("--workload", help="case-study file (or shipped name) with the target rates")
    p.add_argument("--scenario", help="scenario of the workload file")
    p.add_argument("--rate-scale", type=float, default=1.0, help="multiply every target rate")
    p.add_argument(
        "--method",
        choices=["mm1", "mm1-ps", "sim", "all"],
        default="all",
        help="M/M/1 per broker, the same with the host's cores shared (mm1-ps), the "
        "discrete-event simulation (sim), or all three (default all)",
    )
    p.add_argument(
        "--measured-rates",
        action="store_true",
        help="start from the rates the run's publishers reached, not the nominal ones",
    )
    p.add_argument(
        "--as-measured",
        action="store_true",
        help="use service times and delays as measured, not reweighted for the target rates",
    )
    p.add_argument(
        "--other-runs",
        nargs="+",
        default=[],
        metavar="RUN_DIR2",
        help="runs of the same workload, at least one at another rate: each stage's cost "
        "is carried to the target along its line in the host's busy share through the "
        "runs, and runs at one rate are pooled (monitor.carry)",
    )
    p.add_argument(
        "--trend",
        default="line",
        metavar="{line,none}",
        help="with --other-runs: carry each stage along its line in the host's busy share "
        "(line, the default) or pool every run's samples as they are (none)",
    )
    _sim_seconds(p)
    p.set_defaults(func=cmd_predict)

    p = command("report", "RUN_DIR/report.html and report.md")
    p.add_argument("run_dir", help="a run folder (hop replay) or validation folder (hop validate)")
    p.set_defaults(func=cmd_report)

    p = command("validate", "replay + analyze + predict + report")
    p.add_argument("file", help=f"{FILE_HELP} with a workload")
    p.add_argument("--out", required=True, help="RUN_DIR")
    p.add_argument("--scenario", help="a [[scenarios]] name of the file")
    p.add_argument(
        "--duration",
        type=float,
        help="measured seconds of the measurement replay (default: the file's; the "
        "calibrations' are 1/F times longer)",
    )
    p.add_argument(
        "--warmup", type=float, help="warm-up seconds, as --duration (default: the file's)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"short phases, a smoke run: {QUICK['duration_s']:g} s measured after "
        f"{QUICK['warmup_s']:g} s of warm-up, unless --duration or --warmup say otherwise",
    )
    p.add_argument("--load-scale", type=float, default=1.0, help="multiply the target rates")
    p.add_argument(
        "--calibration-fractions",
        type=float,
        nargs="+",
        default=list(CALIBRATION_FRACTIONS),
        metavar="F",
        help="calibration loads as fractions of the target, one replay each (default "
        f"{' '.join(f'{f:g}' for f in CALIBRATION_FRACTIONS)}); with two or more, each cost "
        "is carried to the target by --trend (monitor.carry)",
    )
    p.add_argument(
        "--trend",
        default=TREND,
        metavar="{line,none}",
        help="with two or more fractions: pool the calibrations' samples as they are "
        f"(none) or carry each stage along its line in the host's busy share (line); "
        f"default {TREND} (docs/accuracy.md says why)",
    )
    p.add_argument(
        "--calibration-repeats",
        type=int,
        default=1,
        metavar="N",
        help="replays at each calibration fraction, pooled (default 1)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="N",
        help="repetitions, each one calibration set and one measurement, run in "
        "alternation (c1 m1 c2 m2 ...); the report gives per broker and pair the median "
        "measurement, its bootstrap interval and run-to-run spread, and a prediction "
        "interval over the calibrations (default 1)",
    )
    p.add_argument(
        "--disturbed-retries",
        type=int,
        default=DISTURBED_RETRIES,
        metavar="K",
        help="run a replay again, at most K times, when processes outside it used more "
        f"than {OTHER_CPU_LIMIT_CORES:g} cores of the host in its warm-up or measurement "
        f"(default {DISTURBED_RETRIES}; 0 keeps every replay, marked)",
    )
    _sim_seconds(p)
    p.add_argument("--master", type=master_url, help="Spark master URL (default: local[*])")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_validate)


def _sim_seconds(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sim-seconds",
        type=float,
        default=SIMULATION_S,
        metavar="S",
        help="wall-clock seconds the simulation may run per prediction; it stops sooner "
        "once the 95 %% interval of every mean it tracks is within 2 %% of it "
        f"(default {SIMULATION_S:g})",
    )


LAYER = Layer(
    register,
    bad_input=(BadInput, InputError, TopologyError, FilterSyntaxError),
    failures=(ReplayError, SparkStartError, StartupError, ConnectionError, OSError, TimeoutError),
)
