"""The targets of ``python -m bench`` (docs/performance.md), from its results: each
with the measured value, its limit and whether it is met, and for the ratios the
ratio within each repetition. ``python -m bench.table`` computes them again from a
result file's results, so files written before a change to them render alike."""

from __future__ import annotations

from typing import Any

from bench import throughput
from bench.common import lookup, paired_ratios

HOP_RUNS = ("hop", "fanout1", "runs")  # the 1-to-1 runs of ours and of the relay
RELAY_RUNS = ("link", "fanout1", "runs")


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target: the measured value, its limit and ``target_met`` (None when not
    measured in this run); for a ratio also ``per_repetition`` (the ratio in each
    repetition) and ``repetitions_met``. The amqtt ratios are taken against the bare
    amqtt broker (no filler subscriptions, as in the anchors of `bench.table`), the stricter
    comparison; the ratio against amqtt holding the same 1000 subscriptions as ours is
    given beside it. The slow-subscriber limit (50 MB) is this benchmark's own reading
    of "bounded": the broker's queue holds 4096 frames of ~1.1 KB."""

    def target(
        name: str,
        description: str,
        value: float | None,
        limit: float,
        at_least: bool,
        paired: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] | None = None,
        **context: Any,
    ) -> dict[str, Any]:
        """``paired``: for a ratio, where ours and the baseline's runs are in the results
        and what of each run the ratio is of; its ratio in each repetition is then
        judged against ``limit`` too."""

        def meets(x: float) -> bool:
            return x >= limit if at_least else x < limit

        out = {
            "name": name,
            "description": description,
            "value": value,
            "limit": limit,
            "target_met": None if value is None else meets(value),
            **context,
        }
        if paired is not None:
            ours, base, measure = paired
            ratios = paired_ratios(
                lookup(results, *ours) or [],
                lookup(results, *base) or [],
                lambda run: lookup(run, *measure),
            )
            out |= {"per_repetition": ratios, "repetitions_met": sum(map(meets, ratios))}
        return out

    def vs_amqtt(fanout: int) -> dict[str, Any]:
        runs = f"fanout{fanout}", "runs"
        return target(
            f"hop_1to{fanout}_vs_amqtt",
            f"hop 1-to-{fanout} events/s over amqtt's (bare), at least 10x",
            lookup(results, "amqtt", "hop_over_amqtt_bare", f"fanout{fanout}", "events_per_s"),
            10.0,
            True,
            value_with_1000_subscriptions=lookup(
                results, "amqtt", "hop_over_amqtt", f"fanout{fanout}", "events_per_s"
            ),
            paired=(("hop", *runs), ("amqtt", "bare", *runs), ("saturation", "events_per_s")),
        )

    return [
        vs_amqtt(1),
        target(
            "hop_1to1_vs_relay",
            "hop 1-to-1 events/s over the relay's (link), at least 0.2",
            lookup(results, "hop", "ratio_to_link", "fanout1", "events_per_s"),
            0.2,
            True,
            paired=(HOP_RUNS, RELAY_RUNS, ("saturation", "events_per_s")),
        ),
        vs_amqtt(4),
        target(
            "hop_latency_500_vs_relay",
            "hop 1-to-1 latency p50 at 500 events/s over the relay's, at most 1.5",
            lookup(results, "hop", "ratio_to_link", "fanout1", "latency_500_p50"),
            1.5,
            False,
            paired=(HOP_RUNS, RELAY_RUNS, ("latency_500", "p50_us")),
        ),
        target(
            "chain_per_hop_us",
            "chain of 5 brokers: added latency per broker hop (median, us), under 150",
            lookup(results, "chain", "hop", "per_hop_us"),
            150.0,
            False,
            value_with_cpus_kept_awake=lookup(
                results, "chain", "cpus_kept_awake", "hop", "per_hop_us"
            ),
        ),
        target(
            "memory_100k_subscriptions_mb",
            "broker RSS (MB) holding 100k subscriptions, under 300",
            lookup(results, "memory", "subscriptions", "rss_mb"),
            300.0,
            False,
        ),
        target(
            "memory_slow_subscriber_growth_mb",
            "broker RSS growth (MB) under a slow subscriber, under 50 (bounded)",
            lookup(results, "memory", "slow_subscriber", "rss_growth_mb"),
            throughput.SLOW_GROWTH_LIMIT_MB,
            False,
        ),
    ]
