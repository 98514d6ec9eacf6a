"""The characterization as Spark DataFrame operations (thesis 4.1; docs/traces.md).

Each function takes the window's traces (or small tables derived from them) and
returns one table; nothing here collects rows to the driver. The hop table is read
in three passes: one aggregation by (class, broker, forwarding decision) that the
routing tables and the brokers' sums come from, one by broker for service-time
percentiles, and one shuffle by event that finds the distinct event shapes (tree
and delivering brokers) that trees and paths come from; a last look at one example
event per shape spells the shapes out. The deliveries are read once, for latency.

Percentiles are nearest-rank (numpy's `method="inverted_cdf"`: the smallest value
with at least q of the values at or below it), from Spark's `percentile_approx` at
an accuracy that makes them exact up to 50,000 values per group and off by at most
1e-5 of the group's size in rank beyond (exact percentiles cost twice the time).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.window import Window as Over

from broker.trace.schema import SCHEMAS
from monitor.analysis.window import Window
from monitor.runfiles import local_path

CLASS = ["event_type", "publisher"]
ACCURACY = 100_000  # percentile_approx: exact up to 50,000 values per group


@dataclass
class Traces:
    """The three trace tables of a run as DataFrames."""

    hops: DataFrame
    deliveries: DataFrame
    publications: DataFrame


def load(spark: SparkSession, root: Path) -> Traces:
    """The staged Parquet traces, with the trace schema (no type inference)."""

    def read(table: str) -> DataFrame:
        schema = from_arrow_schema(SCHEMAS[table])
        return spark.read.schema(schema).parquet(local_path(root / table))

    return Traces(read("hops"), read("deliveries"), read("publications"))


def in_window(traces: Traces, window: Window) -> Traces:
    """The events published in the window, with all their hops and deliveries.

    Hops get `entered` (the event came from a local publisher client, so this is its
    home broker), `forwards` and `deliveries` (local ones); deliveries get
    `latency_ms`. The window's event ids are broadcast: a hash lookup per row instead
    of a shuffle of every hop.
    """
    t = F.col("t_publish_ns")
    publications = traces.publications.where((t >= window.start_ns) & (t < window.end_ns))
    events = F.broadcast(publications.select("event_id"))
    hops = traces.hops.join(events, "event_id", "left_semi").select(
        "event_id",
        *CLASS,
        "broker",
        "to_nodes",
        F.col("from_node").startswith("client:").alias("entered"),
        F.size("to_nodes").alias("forwards"),
        F.size("delivered_to").alias("deliveries"),
        "cpu_ns",
        "wait_ns",
        (F.col("t_done_ns") - F.col("t_arrival_ns")).alias("residence_ns"),
    )
    deliveries = traces.deliveries.join(events, "event_id", "left_semi").select(
        "publisher",
        "subscriber",
        "broker",
        F.size("path").alias("hops"),
        F.col("path")[0].alias("publisher_broker"),
        ((F.col("t_deliver_ns") - F.col("t_publish_ns")) / 1e6).alias("latency_ms"),
    )
    return Traces(hops, deliveries, publications)


def deliveries_at_brokers(hops: DataFrame, publications: DataFrame) -> DataFrame:
    """A brokers' trace folder's stand-in for the subscribers' deliveries, shaped as
    `in_window` shapes theirs: each local delivery of a hop row whose event is in
    `publications` (the window's), timed from the event's read at its home broker
    (its publication time there) to the delivering broker's sends (`t_done_ns`). It
    leaves out the two client links and the subscriber's decoding."""
    sent = hops.where(F.size("delivered_to") > 0).select(
        "event_id",
        "publisher",
        "broker",
        (F.col("hops_before") + 1).alias("hops"),
        F.explode("delivered_to").alias("subscriber"),
        "t_done_ns",
    )
    published = publications.select(
        "event_id", F.col("broker").alias("publisher_broker"), "t_publish_ns"
    )
    return sent.join(published, "event_id").select(
        "publisher",
        "subscriber",
        "broker",
        "hops",
        "publisher_broker",
        ((F.col("t_done_ns") - F.col("t_publish_ns")) / 1e6).alias("latency_ms"),
    )


def publications_per_class(publications: DataFrame, window: Window) -> DataFrame:
    return (
        publications.groupBy(*CLASS)
        .agg(F.count("*").alias("publications"))
        .withColumn("publication_rate", F.col("publications") / window.seconds)
    )


def decisions(hops: DataFrame) -> DataFrame:
    """Hops counted by class, broker, entry, forwarding decision (`to_nodes`) and local
    deliveries, with their CPU, wait and residence sums: the one pass over the hops
    that arrivals, forwards, routing probabilities and the brokers' means come from."""
    return hops.groupBy(*CLASS, "broker", "entered", "to_nodes", "deliveries").agg(
        F.count("*").alias("hops"),
        F.sum("cpu_ns").alias("cpu_ns"),
        F.sum("wait_ns").alias("wait_ns"),
        F.sum("residence_ns").alias("residence_ns"),
    )


def arrivals(decisions: DataFrame) -> DataFrame:
    """Per class and broker: events that arrived there (`arrived`), and how many of them
    entered the network there (`entered`)."""
    return decisions.groupBy(*CLASS, "broker").agg(
        F.sum("hops").alias("arrived"),
        F.sum(F.when(F.col("entered"), F.col("hops")).otherwise(0)).alias("entered"),
    )


def forwards(decisions: DataFrame) -> DataFrame:
    """Per class and edge: events forwarded from_broker -> to_broker."""
    return (
        decisions.select(
            *CLASS, F.col("broker").alias("from_broker"), F.explode("to_nodes"), "hops"
        )
        .groupBy(*CLASS, "from_broker", F.col("col").alias("to_broker"))
        .agg(F.sum("hops").alias("forwarded"))
    )


def routing_probabilities(forwards: DataFrame, arrivals: DataFrame) -> DataFrame:
    """nu[i][j] = forwards i -> j / arrivals at i, per class (thesis 4.1.2)."""
    at = arrivals.select(*CLASS, F.col("broker").alias("from_broker"), "arrived")
    return forwards.join(at, [*CLASS, "from_broker"]).select(
        *CLASS,
        "from_broker",
        "to_broker",
        "forwarded",
        "arrived",
        (F.col("forwarded") / F.col("arrived")).alias("probability"),
    )


def visit_ratios(
    solved: DataFrame, arrivals: DataFrame, per_class: DataFrame, window: Window
) -> DataFrame:
    """Solved visit ratios (`solved`: class, broker, visit_ratio_solved) next to the
    counted ones (visits / publications), with arrival rates lambda_j = lambda V_j
    (thesis eq. 4.1) and the counted rates visits / window."""
    solved_v, counted_v = F.col("visit_ratio_solved"), F.col("visit_ratio_counted")
    return (
        solved.join(arrivals.withColumnRenamed("arrived", "visits"), [*CLASS, "broker"], "full")
        .join(per_class, CLASS, "left")
        .fillna(0, ["visits", "entered"])
        .withColumn("visit_ratio_counted", F.col("visits") / F.col("publications"))
        .select(
            *CLASS,
            "broker",
            "visit_ratio_solved",
            "visit_ratio_counted",
            (F.col("publication_rate") * solved_v).alias("arrival_rate"),
            (F.col("visits") / window.seconds).alias("arrival_rate_counted"),
            "visits",
            "entered",
            "publications",
            "publication_rate",
            F.try_divide(F.abs(solved_v - counted_v), F.greatest(solved_v, counted_v)).alias(
                "relative_difference"
            ),
        )
    )


def brokers(decisions: DataFrame, hops: DataFrame, window: Window) -> DataFrame:
    """Per broker and event type: throughput, service times, utilization, fan-out.

    The service time is the broker thread's CPU per event; `cpu_base_ns` and
    `cpu_per_send_ns` fit S = S_event + n S_send (thesis eq. 4.19) by least squares
    over the events' sends n (forwards plus local deliveries; null if n never varies).
    Means and the fit come from `decisions` (n is constant within its groups); only
    the percentiles need the hops themselves.
    """
    n = F.size("to_nodes") + F.col("deliveries")
    keys = ["broker", "event_type"]
    sums = decisions.groupBy(*keys).agg(
        F.sum("hops").alias("arrivals"),
        F.sum("cpu_ns").alias("cpu_total_ns"),
        F.sum(F.col("hops") * n).alias("sends"),
        F.sum(F.col("hops") * F.size("to_nodes")).alias("forwards"),
        F.sum(F.col("hops") * F.col("deliveries")).alias("deliveries"),
        F.sum(F.col("hops") * n * n).alias("sends_squared"),
        F.sum(F.col("cpu_ns") * n).alias("cpu_sends"),
        F.sum("wait_ns").alias("wait_ns"),
        F.sum("residence_ns").alias("residence_ns"),
    )
    percentiles = hops.groupBy(*keys).agg(
        F.percentile_approx("cpu_ns", [0.5, 0.9], ACCURACY).alias("cpu_pct")
    )

    def mean(column: str) -> Column:
        return F.col(column) / F.col("arrivals")

    covariance = mean("cpu_sends") - mean("cpu_total_ns") * mean("sends")
    variance = mean("sends_squared") - mean("sends") ** 2
    per_send = F.when(variance > 1e-12, covariance / variance)
    return sums.join(percentiles, keys).select(
        *keys,
        "arrivals",
        (F.col("arrivals") / window.seconds).alias("throughput"),
        mean("cpu_total_ns").alias("cpu_mean_ns"),
        F.col("cpu_pct")[0].alias("cpu_p50_ns"),
        F.col("cpu_pct")[1].alias("cpu_p90_ns"),
        (F.col("cpu_total_ns") / (window.end_ns - window.start_ns)).alias("utilization"),
        mean("sends").alias("mean_fanout"),
        mean("forwards").alias("mean_forwards"),
        mean("deliveries").alias("mean_deliveries"),
        "cpu_total_ns",
        (mean("cpu_total_ns") - per_send * mean("sends")).alias("cpu_base_ns"),
        per_send.alias("cpu_per_send_ns"),
        mean("wait_ns").alias("wait_mean_ns"),
        mean("residence_ns").alias("residence_mean_ns"),
    )


def shapes(hops: DataFrame) -> DataFrame:
    """Per class: each distinct event shape (home broker, dissemination tree, brokers
    that delivered locally), its number of events and one example event.

    One shuffle of the hops by event, with fixed-width buffers: each event's shape is
    the XOR of 64-bit hashes of its tokens ("^home", "from>to" per forward, "!broker"
    per local delivery; no token repeats within an event). Equal hashes of different
    shapes (about 2^-64 per pair) would merge them. The example's rows spell the
    shape out again (`spell_out`).
    """
    zero = F.lit(0).cast("long")
    own = F.when(F.col("entered"), F.xxhash64(F.lit("^"), F.col("broker"))).otherwise(zero)
    own = own.bitwiseXOR(
        F.when(F.col("deliveries") > 0, F.xxhash64(F.lit("!"), F.col("broker"))).otherwise(zero)
    )
    edges = F.transform("to_nodes", lambda to: F.xxhash64(F.col("broker"), F.lit(">"), to))
    token = F.aggregate(edges, own, lambda acc, h: acc.bitwiseXOR(h))
    return (
        hops.where(F.col("entered") | (F.col("forwards") > 0) | (F.col("deliveries") > 0))
        .groupBy("event_id", *CLASS)
        .agg(F.bit_xor(token).alias("shape"))
        .groupBy(*CLASS, "shape")
        .agg(F.count("*").alias("events"), F.min("event_id").alias("example"))
    )


def spell_out(shapes: DataFrame, hops: DataFrame) -> DataFrame:
    """`shapes` with `home_broker`, `tree` (sorted "from>to" edges) and `delivered`
    (brokers with local deliveries), read from each shape's example event."""
    examples = F.broadcast(shapes.select(F.col("example").alias("event_id")))
    edges = F.transform("to_nodes", lambda to: F.concat(F.col("broker"), F.lit(">"), to))
    spelled = (
        hops.join(examples, "event_id", "left_semi")
        .select("event_id", "entered", "deliveries", "broker", F.explode_outer(edges))
        .groupBy(F.col("event_id").alias("example"))
        .agg(
            F.max(F.when(F.col("entered"), F.col("broker"))).alias("home_broker"),
            F.array_sort(F.collect_list("col")).alias("tree"),
            F.array_sort(F.collect_set(F.when(F.col("deliveries") > 0, F.col("broker")))).alias(
                "delivered"
            ),
        )
    )
    return shapes.join(spelled, "example")


def trees(shapes: DataFrame, per_class: DataFrame) -> DataFrame:
    """Per class: each distinct dissemination tree (its sorted "from>to" forwarding
    edges) with its home broker, how many events took it, and their share of the
    class's publications."""
    counts = (
        shapes.groupBy(*CLASS, "home_broker", "tree")
        .agg(F.sum("events").alias("events"))
        .withColumn("edges", F.size("tree"))
    )
    return _share(counts, per_class)


def independent_shares(trees: DataFrame, routing: DataFrame) -> DataFrame:
    """`trees` with `share_independent`: the tree's probability if every broker chose
    its next hops independently with the measured routing probabilities, as the
    thesis' QPN firing modes assume (eq. 4.18): the product over the tree's brokers i
    and their possible next hops j of nu[i][j] if i forwarded to j, else 1 - nu[i][j],
    times the share of the class's events entering at the tree's home broker.
    Compare with `share` to see whether routing decisions are independent per hop."""
    keys = [*CLASS, "home_broker", "tree"]
    brokers = F.array_distinct(
        F.concat(
            F.array("home_broker"), F.transform("tree", lambda e: F.substring_index(e, ">", -1))
        )
    )
    edge = F.concat(F.col("from_broker"), F.lit(">"), F.col("to_broker"))
    factor = F.coalesce(
        F.when(F.array_contains("tree", edge), F.col("probability")).otherwise(
            1 - F.col("probability")
        ),
        F.lit(1.0),  # a broker without any next hop in this class
    )
    product = (
        trees.select(*keys, F.explode(brokers).alias("from_broker"))
        .join(routing, [*CLASS, "from_broker"], "left")
        .groupBy(*keys)
        .agg(F.when(F.min(factor) > 0, F.exp(F.sum(F.log(factor)))).otherwise(0.0).alias("p"))
    )
    home_share = F.sum("events").over(Over.partitionBy(*CLASS, "home_broker")) / F.sum(
        "events"
    ).over(Over.partitionBy(*CLASS))
    return trees.join(product, keys).select(
        *CLASS,
        "home_broker",
        "tree",
        "events",
        "share",
        (F.col("p") * home_share).alias("share_independent"),
        "edges",
        "publications",
    )


def paths(shapes: DataFrame, per_class: DataFrame) -> DataFrame:
    """Per class: each distinct delivery path (publisher's broker first) and the events
    that took it: the route in the event's tree from its home broker to a broker that
    delivered it locally (an event delivered to two subscribers of one broker took
    that path once). Where hop records are missing (a truncated trace) a route that
    cannot be followed back to the home broker starts where the records stop."""
    per_target = shapes.select(
        *CLASS, "home_broker", "tree", "events", F.explode("delivered").alias("subscriber_broker")
    )
    counts = (
        per_target.withColumn("path", _route("tree", "home_broker", "subscriber_broker"))
        .groupBy(*CLASS, "path", "subscriber_broker")
        .agg(F.sum("events").alias("events"))
    )
    return _share(counts, per_class).select(
        *CLASS,
        "path",
        "subscriber_broker",
        "events",
        "share",
        F.size("path").alias("hops"),
        "publications",
    )


def _route(tree: str, home: str, target: str) -> Column:
    """Brokers from `home` to `target` along the tree's edges, found by following each
    broker's incoming edge back from `target` (stops early if the tree is broken)."""

    def sender(node: Column) -> Column:
        incoming = F.filter(tree, lambda edge: F.substring_index(edge, ">", -1) == node)
        return F.substring_index(F.try_element_at(incoming, F.lit(1)), ">", 1)

    def step(route: Column, _: Column) -> Column:
        done = (route[0] == F.col(home)) | sender(route[0]).isNull()
        return F.when(done, route).otherwise(F.concat(F.array(sender(route[0])), route))

    return F.aggregate(F.sequence(F.lit(0), F.size(tree)), F.array(F.col(target)), step)


def latency(deliveries: DataFrame) -> DataFrame:
    """Per (publisher, subscriber): delivery latency, end to end (publish to delivery)
    or through the brokers (`deliveries_at_brokers`).

    `hops` counts the brokers on the delivery path, both ends included (`hops_min`
    differs only if the pair's events took paths of different lengths).
    """
    ms = F.col("latency_ms")
    return (
        deliveries.groupBy("publisher", "subscriber")
        .agg(
            F.count("*").alias("deliveries"),
            F.avg(ms).alias("mean_ms"),
            F.percentile_approx(ms, [0.5, 0.9, 0.99], ACCURACY).alias("pct"),
            F.stddev_pop(ms).alias("std_ms"),
            F.max("hops").alias("hops"),
            F.min("hops").alias("hops_min"),
            F.min("publisher_broker").alias("publisher_broker"),
            F.min("broker").alias("subscriber_broker"),
        )
        .select(
            "publisher",
            "subscriber",
            "deliveries",
            "mean_ms",
            *(F.col("pct")[i].alias(f"p{q}_ms") for i, q in enumerate((50, 90, 99))),
            "std_ms",
            "hops",
            "hops_min",
            "publisher_broker",
            "subscriber_broker",
        )
    )


def _share(counts: DataFrame, per_class: DataFrame) -> DataFrame:
    """`share`: events over the class's publications in the window."""
    return counts.join(per_class.select(*CLASS, "publications"), CLASS, "left").withColumn(
        "share", F.col("events") / F.col("publications")
    )
