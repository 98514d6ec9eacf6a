"""The repository's documentation stands alone.

* every relative link in README.md and docs/*.md names a file of the repository, and an
  anchor in such a link names a heading of the Markdown file it points to;
* README.md stays a front door (under 300 lines), the details living in docs/;
* every option of every `hop` command is in docs/design.md's command-line section, as
  README.md promises, and the `[deployment]` example of docs/across-hosts.md loads;
* no tracked source, topology or Markdown file points outside the repository: no path
  into a sibling folder, no section number of a design document a clone does not have,
  no tracker issue number. bench/HISTORY.md, the dated record of benchmark runs, is
  exempt.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README_MAX_LINES = 300
EXEMPT = {"bench/HISTORY.md"}
CHECKED_SUFFIXES = {".py", ".toml", ".md", ".sh"}

# Inline Markdown links and images: [text](target) or ![alt](target "title").
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, mailto:, ...

# What points outside the repository. Each pattern is spelt so that this file's own
# text does not match it.
OUTSIDE = [
    (re.compile(r"\.\./shar[e]d"), "a path into a sibling folder"),
    (re.compile(r"shared/seed[s]"), "the project's seed documents"),
    (re.compile(r"/wor[k]/"), "a path on one machine"),
    (re.compile(r"DESIG[N](?:\.md| ?[0-9§])"), "a design document a clone does not have"),
    (re.compile(r"[Ii]ssu[e] #?[0-9]+|[(]issu[e]"), "a tracker issue number"),
]


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every inline link outside fenced code blocks."""
    found: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        unquoted = re.sub(r"`[^`]*`", "", line)  # a link inside code is not a link
        found += [(number, target) for target in _LINK.findall(unquoted)]
    return found


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as
    hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: Path) -> set[str]:
    """The anchors of a Markdown file's headings (duplicates numbered as GitHub does)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in markdown.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def broken_links(markdown: Path, root: Path = REPO) -> list[str]:
    """Why each relative link of `markdown` (a file under `root`) does not resolve to a
    file under `root` (empty: all do)."""
    problems = []
    for number, target in links(markdown.read_text()):
        if _EXTERNAL.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        where = f"{markdown.relative_to(root)}:{number}: {target}"
        resolved = (markdown.parent / path_part).resolve() if path_part else markdown
        if not resolved.is_relative_to(root):
            problems.append(f"{where}: outside the repository")
        elif not resolved.exists():
            problems.append(f"{where}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{where}: no heading with anchor #{anchor}")
    return problems


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [name for name in out.decode().split("\0") if name]


def outside_references(names: list[str], root: Path = REPO) -> list[str]:
    """`file:line: what` for every line of the checked files (paths relative to `root`)
    that points outside."""
    hits = []
    for name in names:
        path = root / name
        if name in EXEMPT or path.suffix not in CHECKED_SUFFIXES or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for pattern, what in OUTSIDE:
                if pattern.search(line):
                    hits.append(f"{name}:{number}: {what}: {line.strip()[:100]}")
    return hits


@pytest.mark.parametrize("markdown", doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(markdown: Path) -> None:
    assert markdown.exists()
    assert broken_links(markdown) == []


def test_docs_are_linked_from_the_readme() -> None:
    readme_targets = {target.partition("#")[0] for _, target in links(_readme())}
    pages = sorted((REPO / "docs").glob("*.md"))
    missing = [page.name for page in pages if f"docs/{page.name}" not in readme_targets]
    assert missing == []


def test_readme_is_short() -> None:
    assert len(_readme().splitlines()) < README_MAX_LINES


def section(markdown: Path, heading: str) -> str:
    """The text under the `## heading` of `markdown`, up to the next `## ` heading."""
    text = markdown.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def undocumented_options(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """`COMMAND --option` for each long option of the parser's commands not in `text`."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [
        f"{name} {option}"
        for name, command in commands.choices.items()
        for action in command._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help" and option not in text
    ]


def test_every_hop_option_is_in_the_command_line_section() -> None:
    import hop.cli

    text = section(REPO / "docs" / "design.md", "The hop command line")
    assert undocumented_options(hop.cli.build_parser(), text) == []
    assert undocumented_options(hop.cli.build_parser(), "") != []  # it sees the options


def toml_blocks(markdown: Path) -> list[str]:
    """The text of each ```toml fenced block of `markdown`."""
    return re.findall(r"^```toml\n(.*?)^```", markdown.read_text(), re.MULTILINE | re.DOTALL)


def test_the_deployment_example_loads_beside_a_shipped_case_study(tmp_path: Path) -> None:
    from topologies import load_case_study

    (example,) = [b for b in toml_blocks(REPO / "docs" / "across-hosts.md") if "[deployment]" in b]
    study = tmp_path / "tree7-deployed.toml"
    study.write_text((REPO / "topologies" / "tree7.toml").read_text() + "\n" + example)
    deployment = load_case_study(study).deployment
    assert [(p.host, p.publishers, p.subscribers) for p in deployment.processes] == [
        ("lab5", (1, 2), (3,))
    ]
    assert deployment.host("lab5").address == "10.0.0.5"


def test_nothing_points_outside_the_repository() -> None:
    assert outside_references(tracked_files()) == []


def test_the_checks_catch_what_they_look_for(tmp_path: Path) -> None:
    """The checkers themselves: a missing file, a missing anchor, a link out of the
    tree and each kind of outside reference are reported; good ones are not."""
    root = tmp_path.resolve()
    (root / "docs").mkdir()
    (root / "docs" / "real.md").write_text("# A page\n\n## Wire protocol (version 2)\n")
    page = root / "docs" / "page.md"
    page.write_text(
        "[ok](real.md) [ok](real.md#wire-protocol-version-2) [ok](https://example.org)\n"
        "[a](nowhere.md) [b](real.md#no-such-heading) [c](../../etc/passwd)\n"
        "`[not a link](nowhere.md)`\n"
    )
    problems = broken_links(page, root)
    assert [p.rsplit(": ", 1)[1] for p in problems] == [
        "no such file",
        "no heading with anchor #no-such-heading",
        "outside the repository",
    ]
    # (split, so that this file itself does not hold what it plants)
    bad = ["../shar" "ed/x", "DESIGN" " 3.1", "DESIGN" ".md"]  # fmt: skip
    bad += ["see issu" "e 7", "(issu" "e 4)", "/wor" "k/x"]  # fmt: skip
    (root / "bad.py").write_text("\n".join(bad) + "\n")
    (root / "good.py").write_text("the design of issue handling (docs/design.md)\n")
    (root / "bench").mkdir()
    (root / "bench" / "HISTORY.md").write_text("\n".join(bad) + "\n")  # exempt
    (root / "bad.txt").write_text("\n".join(bad) + "\n")  # not a checked kind
    hits = outside_references(["bad.py", "good.py", "bench/HISTORY.md", "bad.txt"], root)
    assert [hit.split(":")[1] for hit in hits] == ["1", "2", "3", "4", "5", "6"]


def _readme() -> str:
    return (REPO / "README.md").read_text()
