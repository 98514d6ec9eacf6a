"""The client targets over several runs of `bench.client_api`, judged by one rule.

``python -m bench.client_verdict [--ours SYSTEM] [--pooled] FILE [FILE ...]`` prints a
markdown table with a row per result file and a column per target measured in them
(our client against its MQTT baseline; ``--ours``: that client's only), then how often
each target was met (``--pooled``: and each target judged once more over all the
files' repetitions together). A cell gives both medians, the
ratio ours / baseline per repetition (median and range), in how many repetitions ours
was the better, the two-sided sign test of that count, and the judgement:

* **met**: the medians meet the target, and ours was the better in every repetition
  or in a majority that a sign test does not put down to chance (p < `SIGNIFICANT`);
* **not met**: the medians miss it, and ours was the worse in every repetition or in
  such a majority;
* **a tie**: anything else (the medians and the repetitions disagree, or the count is
  one a fair coin gives as often). A short run of five repetitions decides only when
  all five agree.

One run's medians can meet a target by a hair in one hour and miss it in the next;
the rule keeps a run that a coin could have decided from counting either way
(docs/performance.md, "Where the targets stand").

Pooled, the repetitions of several runs of the same code are judged as one run, by the
same rule: the median of all their ratios in place of the medians (each ratio pairs
two runs made next to each other, so ratios from different hours compare where the
hours' own values do not), and the sign test over all of them. It is the longer
measurement for an effect smaller than one run's noise; which files to pool is chosen
before their results are seen (all the runs of one code), or it proves nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.client_api import TARGETS, targets
from bench.common import median, p_text, read_result, sign_test_p

SIGNIFICANT = 0.05
"""The sign test's p under which a majority of repetitions counts."""

JUDGEMENTS = ("met", "a tie", "not met")

TABLE_HEAD = "| result file | written (UTC) | revision | "
"""How a verdict table begins; the target columns follow."""

HIGHER = {(ours, what): higher for what, ours, _, _, higher in TARGETS}
"""Whether higher is better, by (our system, target)."""


def judged(target: dict[str, Any]) -> str | None:
    """The judgement of one target of one run (a `bench.client_api.targets` entry);
    None when it was not measured."""
    ratios, won = target.get("ratios") or [], target.get("repetitions_won", 0)
    if target["target_met"] is None or not ratios:
        return None
    n = len(ratios)
    lopsided = sign_test_p(won, n) < SIGNIFICANT
    if target["target_met"] and (won == n or (lopsided and 2 * won > n)):
        return "met"
    if not target["target_met"] and (won == 0 or (lopsided and 2 * won < n)):
        return "not met"
    return "a tie"


def value_text(target: dict[str, Any], value: float) -> str:
    """A value of ``target``: a rate in thousands ("161.5k"), a latency in whole
    microseconds ("152")."""
    return f"{value / 1000:.1f}k" if target["what"].endswith("events/s") else f"{value:.0f}"


def cell(target: dict[str, Any]) -> str:
    verdict = judged(target)
    if verdict is None:
        return "-"
    ratios, won = target["ratios"], target["repetitions_won"]
    return (
        f"{value_text(target, target['ours_value'])} / "
        f"{value_text(target, target['baseline_value'])}; "
        f"{median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}); "
        f"{won} of {len(ratios)}, {p_text(sign_test_p(won, len(ratios)))}: {verdict}"
    )


def measured(result: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """The targets ``result`` measured, by (our system, what), in `TARGETS`' order;
    computed again from its systems, as `bench.client_api --table` does."""
    return {(t["ours"], t["what"]): t for t in targets(result["systems"]) if judged(t) is not None}


def load(file: Path) -> dict[str, Any]:
    """A `bench.client_api` result file; ValueError naming the file when it is not one."""
    result = read_result(file)
    if not isinstance(result.get("systems"), dict):
        raise ValueError(f"{file}: not a bench.client_api result (it has no systems)")
    return result


def pooled(key: tuple[str, str], found: list[dict[str, Any]]) -> str:
    """The line judging target ``key`` over the repetitions of all the runs in ``found``
    (its `bench.client_api.targets` entry in each) together (the module doc)."""
    ratios = [ratio for target in found for ratio in target["ratios"]]
    won = sum(target["repetitions_won"] for target in found)
    middle = median(ratios)
    together = {
        "target_met": middle >= 1 if HIGHER[key] else middle <= 1,
        "ratios": ratios,
        "repetitions_won": won,
    }
    return (
        f"- {key[0]} {key[1]}, all {len(ratios)} repetitions together: ours / baseline "
        f"{middle:.2f} ({min(ratios):.2f}-{max(ratios):.2f}); ours the better in {won} of "
        f"{len(ratios)}, {p_text(sign_test_p(won, len(ratios)))}: {judged(together)}"
    )


def verdict(files: list[Path], ours: str | None = None, pool: bool = False) -> str:
    """The table of the runs in ``files`` and how often each target was met; only the
    targets of our system ``ours`` if given; with ``pool``, each target's `pooled`
    line too."""
    runs = [(file, load(file)) for file in files]
    by_run = [
        {key: t for key, t in measured(result).items() if ours in (None, key[0])}
        for _, result in runs
    ]
    order = [(system, what) for what, system, *_ in TARGETS]
    columns = sorted({key for found in by_run for key in found}, key=order.index)
    if not columns:
        return "No client target was measured in these files."
    baseline = {key: found[key]["baseline"] for found in by_run for key in found}
    rows = [
        TABLE_HEAD
        + " | ".join(
            f"{system} {what} against {baseline[system, what]}" for system, what in columns
        )
        + " |",
        "|---|---|---|" + "---|" * len(columns),
    ]
    for (file, result), found in zip(runs, by_run, strict=True):
        machine = result.get("machine", {})
        written = str(machine.get("date", "-")).replace("T", " ").removesuffix("Z")[:16]
        code = [name for name in machine.get("git_modified") or [] if name.endswith(".py")]
        revision = machine.get("git_revision", "-") + (
            f" with {', '.join(code)} modified" if code else ""
        )
        cells = " | ".join(cell(found[key]) if key in found else "-" for key in columns)
        rows.append(f"| `{file.name}` | {written} | {revision} | {cells} |")
    lines = ["\n".join(rows), ""]
    for key in columns:
        counts = [judged(found[key]) for found in by_run if key in found]
        tally = ", ".join(f"{word} in {counts.count(word)}" for word in JUDGEMENTS)
        runs_text = "run" if len(counts) == 1 else "runs"
        lines.append(f"- {key[0]} {key[1]}: {tally} of {len(counts)} {runs_text}")
    if pool:
        lines += [pooled(key, [found[key] for found in by_run if key in found]) for key in columns]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help="bench.client_api result files")
    parser.add_argument(
        "--ours", choices=sorted({system for _, system, *_ in TARGETS}), help="this client only"
    )
    parser.add_argument(
        "--pooled",
        action="store_true",
        help="judge each target over all the files' repetitions together too",
    )
    args = parser.parse_args(argv)
    try:
        print(verdict(args.files, args.ours, args.pooled))
    except ValueError as exc:
        parser.error(str(exc))


if __name__ == "__main__":
    main()
