"""Delays and service times measured at a low rate, made fit for a higher one.

What an event costs a process depends on how long that process was idle before the
event came: after a long sleep, the wake-up is slower (the scheduler, CPU power
states, cold caches), after a short one it is quick. The traces show it on every
stage: a broker's routing time, the wait to decode, the link and client delays all
grow with the receiving process's idle gap. So samples taken at a low rate, where
gaps are long, overstate what the same stages cost at a higher rate.

The correction keeps the measured samples and changes which are drawn. When the
same workload runs `scale` times faster, every process sees the same arrivals
compressed in time, so an idle gap `g` at the low rate becomes about `g / scale`
(the handling itself, much shorter than the gaps, does not shrink). Each sample is
therefore replaced by one drawn from the samples whose gap was closest to its own
gap divided by `scale`: the sample the same event would have produced at the higher
rate, as far as the calibration run can tell. Nothing is fitted and no arrival
process is assumed: the relation between gap and cost is whatever the calibration
run measured, and so is the distribution of gaps.
"""

from __future__ import annotations

import numpy as np

NEIGHBOURS = 0.02
"""Share of the samples (at least 3) among which a replacement is drawn: the ones
with the gaps closest to the wanted gap."""


def idle_gaps(arrivals_ns: np.ndarray, busy_until_ns: np.ndarray) -> np.ndarray:
    """Per arrival (sorted by time), how long its process had been idle: the arrival
    minus the end of the previous item's handling, 0 when the process was still busy,
    NaN for the first arrival."""
    gaps = np.full(len(arrivals_ns), np.nan)
    if len(arrivals_ns) > 1:
        gaps[1:] = np.maximum(arrivals_ns[1:] - busy_until_ns[:-1], 0)
    return gaps


def gaps_since(times_ns: np.ndarray, activity_ns: np.ndarray) -> np.ndarray:
    """Per time, the time since the latest `activity_ns` before it (NaN if none)."""
    activity = np.sort(activity_ns)
    index = np.searchsorted(activity, times_ns, side="left") - 1
    gaps = np.full(len(times_ns), np.nan)
    known = index >= 0
    gaps[known] = times_ns[known] - activity[index[known]]
    return gaps


def matched(
    samples: np.ndarray,
    gaps_ns: np.ndarray,
    scale: np.ndarray | float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Each sample replaced by one of those whose gap is nearest its gap / `scale`
    (per sample, or one scale for all). Unchanged when the scale is 1 everywhere or
    there are no samples; samples with unknown gaps are kept as they are."""
    samples = np.asarray(samples, dtype=float)
    scale = np.broadcast_to(np.asarray(scale, dtype=float), samples.shape)
    if len(samples) == 0 or np.all(scale == 1.0):
        return samples
    gaps = np.asarray(gaps_ns, dtype=float)
    known = np.flatnonzero(np.isfinite(gaps))
    if len(known) == 0:
        return samples
    order = known[np.argsort(gaps[known], kind="stable")]
    sorted_gaps = gaps[order]
    width = max(3, int(NEIGHBOURS * len(order)))
    wanted = gaps[known] / scale[known]
    centre = np.searchsorted(sorted_gaps, wanted)
    low = np.clip(centre - width // 2, 0, max(0, len(order) - width))
    pick = low + rng.integers(0, min(width, len(order)), size=len(known))
    out = samples.copy()
    out[known] = samples[order[pick]]
    return out
