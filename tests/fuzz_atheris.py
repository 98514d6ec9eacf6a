"""Coverage-guided fuzzing of the wire decoder and the filter parser with atheris.

Not collected by pytest (tests/test_fuzz.py checks the same properties with
hypothesis); atheris is not a test dependency: ``.venv/bin/pip install -e '.[fuzz]'``, then

    .venv/bin/python -m tests.fuzz_atheris -atheris_runs=200000
    .venv/bin/python -m tests.fuzz_atheris -max_total_time=60 CORPUS_DIR

Each input's first byte picks the target (a connection state, or the parser), the rest
is the data. Anything but messages / ProtocolError (or Filter / FilterSyntaxError) is
reported by atheris as a crash, with the input saved for replay.
"""

from __future__ import annotations

import contextlib
import sys

import atheris

with atheris.instrument_imports():
    from broker.protocol import Connection, ProtocolError
    from routing import FilterSyntaxError, parse_filter
    from tests.test_fuzz import STATES

_TARGETS = sorted(STATES)


def one_input(data: bytes) -> None:
    if not data:
        return
    target, rest = data[0] % (len(_TARGETS) + 1), data[1:]
    if target == len(_TARGETS):
        text = atheris.FuzzedDataProvider(rest).ConsumeUnicodeNoSurrogates(len(rest))
        with contextlib.suppress(FilterSyntaxError):
            parse_filter(text)
        return
    conn: Connection = STATES[_TARGETS[target]]()
    half = len(rest) // 2
    for piece in (rest[:half], rest[half:]):
        try:
            conn.receive_data(piece)
        except ProtocolError:
            return


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
