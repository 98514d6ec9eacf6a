"""`hop validate`: characterize at low load, predict the target, measure it, report.

1. calibration replay at `calibration_fraction` of the target rates into
   RUN_DIR/calibration/, analysed with Spark;
2. prediction of the target workload from the calibration alone
   (RUN_DIR/calibration/analysis/predictions.parquet);
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

    step("calibration replay")
    calibration = replay(
        study_file,
        run_dir / "calibration",
        scenario=scenario,
        rate_scale=load_scale * calibration_fraction,
        quiet=quiet,
        **durations,
    )
    spark = spark_session(master)
    step("analysing the calibration run")
    analyze(calibration.run_dir, master=master, spark=spark)
    step("predicting the target workload")
    predict(calibration.run_dir, study_file=study_file, scenario=scenario, rate_scale=load_scale)
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
