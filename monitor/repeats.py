"""Measurement and prediction over repetitions of a validation: the figures a single
run cannot give.

Decisions (docs/accuracy.md says why):

- **Measurement** per broker or pair: the median over the repetitions' measurements,
  a percentile-bootstrap 95 % interval of that median (resampling the repetitions),
  and the run-to-run *spread*: how far the furthest repetition lay from the median,
  in percent of it. A prediction whose error is within the spread is as close to the
  median as some measurement of the very same events was.
- **Prediction**: each repetition's calibration gives a prediction (with, for the
  simulation, its own 95 % interval of sampling error). The point is the median of
  the predictions; the interval is the envelope of every prediction's interval (of the
  predictions themselves where a method has none), so it covers both the spread of
  the calibrations and the simulation's sampling error. With one repetition it is the
  simulation's interval, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

BOOTSTRAP_RESAMPLES = 2000
LEVEL = 0.95


def bootstrap_median_interval(
    values: Sequence[float],
    resamples: int = BOOTSTRAP_RESAMPLES,
    level: float = LEVEL,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of the median of `values` (NaN, NaN for fewer
    than two values: one run has no interval)."""
    x = np.asarray([v for v in values if np.isfinite(v)], dtype=float)
    if len(x) < 2:
        return (np.nan, np.nan)
    rng = np.random.default_rng(seed)
    medians = np.median(x[rng.integers(0, len(x), size=(resamples, len(x)))], axis=1)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(medians, [tail, 100 - tail])
    return (float(lo), float(hi))


def spread_percent(values: Sequence[float]) -> float:
    """The largest distance of one value from their median, in percent of the median
    (NaN for fewer than two values)."""
    x = np.asarray([v for v in values if np.isfinite(v)], dtype=float)
    if len(x) < 2:
        return np.nan
    middle = float(np.median(x))
    return float(np.max(np.abs(x - middle)) / abs(middle) * 100) if middle else np.nan


def measured_summary(per_repetition: Sequence[pd.Series]) -> pd.DataFrame:
    """Per entity (the series' index): `measured` (median over the repetitions),
    `meas_ci_low`/`meas_ci_high` (bootstrap interval), `spread_%` and `runs` (how many
    repetitions measured it)."""
    frame = pd.concat([s.rename(i) for i, s in enumerate(per_repetition)], axis=1)
    rows = []
    for entity, row in frame.iterrows():
        values = row.dropna().to_numpy(dtype=float)
        lo, hi = bootstrap_median_interval(values)
        rows.append(
            {
                "entity": entity,
                "measured": float(np.median(values)) if len(values) else np.nan,
                "meas_ci_low": lo,
                "meas_ci_high": hi,
                "spread_%": spread_percent(values),
                "runs": len(values),
            }
        )
    return pd.DataFrame(rows, columns=_MEASURED)


_MEASURED = ["entity", "measured", "meas_ci_low", "meas_ci_high", "spread_%", "runs"]


def predicted_summary(per_repetition: Sequence[pd.DataFrame], method: str) -> pd.DataFrame:
    """Per entity, from each repetition's rows (`entity`, `predicted`, `ci_low`,
    `ci_high`): the median prediction as `method`, and the envelope of the intervals as
    `method_ci_low`/`method_ci_high`."""
    rows = pd.concat(list(per_repetition), ignore_index=True)
    low = rows["ci_low"].where(rows["ci_low"].notna(), rows["predicted"])
    high = rows["ci_high"].where(rows["ci_high"].notna(), rows["predicted"])
    rows = rows.assign(low=low, high=high)
    grouped = rows.groupby("entity", sort=False)
    out = pd.DataFrame(
        {
            method: grouped["predicted"].median(),
            f"{method}_ci_low": grouped["low"].min(),
            f"{method}_ci_high": grouped["high"].max(),
        }
    ).reset_index()
    single = grouped["predicted"].count() < 2
    if single.all() and rows["ci_low"].isna().all():
        # One prediction and no sampling error: a point, not an interval.
        out[f"{method}_ci_low"] = np.nan
        out[f"{method}_ci_high"] = np.nan
    return out


def inside(value: pd.Series, low: pd.Series, high: pd.Series) -> pd.Series:
    """'yes'/'no' whether each value lies in [low, high]; '' where there is no interval."""
    known = low.notna() & high.notna() & value.notna()
    verdict = np.where((value >= low) & (value <= high), "yes", "no")
    return pd.Series(np.where(known, verdict, ""), index=value.index)
