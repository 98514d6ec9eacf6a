"""Spark master URLs, checked without loading Spark: Spark itself refuses a master of
another form only once its JVM has started, with the JVM's stack on stderr."""

from __future__ import annotations

import argparse

FORMS = ("spark://", "k8s://", "local[")
"""How a master URL may begin, besides the plain `local` and `yarn`."""


def master_url(text: str) -> str:
    """An argparse type: a Spark master URL of a form Spark takes."""
    if text in ("local", "yarn") or text.startswith(FORMS):
        return text
    raise argparse.ArgumentTypeError(
        f"expected local, local[N], spark://HOST:PORT, k8s://URL or yarn, got {text!r}"
    )
