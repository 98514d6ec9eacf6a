"""`hop validate`: characterize at low load, predict the target, measure it, report.

1. calibration replay at `calibration_fraction` of the target rates into
   RUN_DIR/calibration/, analysed with Spark. Its phases are 1/`calibration_fraction`
   times longer, and the seed is the same, so it publishes the very events the
   measurement will, only slower;
2. prediction of the target workload from the calibration alone
   (RUN_DIR/calibration/analysis/predictions.parquet): the calibration's measured
   rates scaled up by 1/`calibration_fraction`, so the prediction is for the
   events the measurement replays, not for the scenario's nominal rates, which a
   short run's Poisson arrivals miss by several percent;
3. measurement replay at the target rates into RUN_DIR/measurement/, analysed;
4. RUN_DIR/report.html and report.md comparing 2 with 3.

One Spark session serves both analyses.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from monitor.replay import replay
from topologies import Workload, load_case_study

QUICK = {"duration_s": 10.0, "warmup_s": 2.0}


@dataclass
class ValidationResult:
    run_dir: Path
    report_html: Path
    summary: str
    seconds: float


def validate(
    study_file: Path,
    run_dir: Path,
    scenario: str | None = None,
    duration_s: float | None = None,
    quick: bool = False,
    load_scale: float = 1.0,
    calibration_fraction: float = 0.3,
    master: str | None = None,
    quiet: bool = False,
) -> ValidationResult:
    from monitor.analysis import analyze
    from monitor.predict import predict
    from monitor.report import render
    from monitor.spark import spark_session

    if not 0 < calibration_fraction <= 1:
        raise ValueError(f"calibration fraction must be in (0, 1], got {calibration_fraction}")
    started = time.monotonic()
    durations = dict(QUICK) if quick else {}
    if duration_s is not None:
        durations["duration_s"] = duration_s
    run_dir.mkdir(parents=True, exist_ok=True)

    def step(text: str) -> None:
        if not quiet:
            print(f"[{time.monotonic() - started:6.1f} s] {text}", file=sys.stderr, flush=True)

    workload = load_case_study(study_file).workload or Workload()
    slow = 1 / calibration_fraction
    step("calibration replay")
    calibration = replay(
        study_file,
        run_dir / "calibration",
        scenario=scenario,
        rate_scale=load_scale * calibration_fraction,
        quiet=quiet,
        duration_s=durations.get("duration_s", workload.duration_s) * slow,
        warmup_s=durations.get("warmup_s", workload.warmup_s) * slow,
    )
    spark = spark_session(master)
    step("analysing the calibration run")
    analyze(calibration.run_dir, master=master, spark=spark)
    step("predicting the target workload")
    predict(calibration.run_dir, rate_scale=slow, measured_rates=True)
    step("measurement replay")
    measurement = replay(
        study_file,
        run_dir / "measurement",
        scenario=scenario,
        rate_scale=load_scale,
        quiet=quiet,
        **durations,
    )
    step("analysing the measurement run")
    analyze(measurement.run_dir, master=master, spark=spark)
    step("writing the report")
    report_html, _, summary = render(run_dir)
    return ValidationResult(run_dir, report_html, summary, time.monotonic() - started)
