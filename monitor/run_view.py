"""`hop analyze RUN --out DIR`: DIR made a run folder of its own whose inputs are RUN's.

A run folder holds its inputs (the manifest, the traces, the case study; or, for a
brokers' trace folder, the trace files themselves) and what the commands derive from
them (`analysis/`, `report.html`, `report.md`). When RUN cannot or should not be
written (read-only storage, another user's traces), DIR gets a symbolic link to each of
RUN's inputs and the derived files of its own, so `hop predict DIR` and `hop report
DIR` work on it as on RUN, and RUN is only read. The links are absolute: DIR keeps
working wherever it moves, as long as RUN stays where it is.
"""

from __future__ import annotations

import os
from pathlib import Path

from monitor.errors import InputError, made_folder

DERIVED = frozenset({"analysis", "report.html", "report.md"})
"""What `hop analyze`, `hop predict` and `hop report` write into a run folder."""


def linked_run(run_dir: Path, folder: Path) -> Path:
    """`folder` (made if missing) holding a link to each of `run_dir`'s inputs; InputError
    naming what is in the way: a file of the same name that is not such a link (another
    run's, say), or a folder that cannot be made or written."""
    made_folder(folder, "--out")
    if folder.resolve() == run_dir.resolve():
        return folder
    for entry in sorted(run_dir.iterdir()):
        if entry.name in DERIVED or entry.resolve() == folder.resolve():
            continue  # (a DIR inside RUN is not linked into itself)
        link = folder / entry.name
        if link.is_symlink() and link.resolve() == entry.resolve():
            continue  # made by an earlier analysis of the same run
        if link.exists() or link.is_symlink():
            raise InputError(
                f"--out {folder}: {link.name} is in the way (not a link to {entry}); "
                "give a new or empty folder, or one made by hop analyze of this run"
            )
        try:
            os.symlink(entry.resolve(), link)
        except OSError as exc:
            raise InputError(f"--out {folder}: cannot link {link.name}: {exc.strerror}") from None
    return folder
