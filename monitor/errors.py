"""The monitor layer's errors that mean "the input is wrong": a run folder, a workload
file or an option's value the user can correct (`hop` exits 2 and names it). Any other
exception from this layer is a failure or a bug, never blamed on the user's input."""

from __future__ import annotations


class InputError(ValueError):
    """Input the user can correct; the message names the file, folder or option."""
