"""Argument types for command-line flags (``type=`` of ``argparse``): each refuses a bad value when the command
line is read, before any data is loaded, and argparse names the flag (``argument --num-steps: must be a positive
integer, got -3``). Used by the models' ``add_arguments`` and, through :mod:`inference.cli`, by the runner and
the launcher. Standard library only.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

__all__ = ["count", "non_negative_int", "positive_number", "open_unit", "step_size", "port", "out_folder"]


def _parsed(text, kind, convert, ok):
    try:
        value = convert(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be {kind}, got {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"must be {kind}, got {text}")
    return value


def count(text: str) -> int:
    """An integer ≥ 1 (steps, draws, chains, features)."""
    return _parsed(text, "a positive integer", int, lambda v: v >= 1)


def non_negative_int(text: str) -> int:
    """An integer ≥ 0 (warm-up iterations)."""
    return _parsed(text, "an integer >= 0", int, lambda v: v >= 0)


def positive_number(text: str) -> float:
    """A finite number > 0 (a learning rate, a timeout)."""
    return _parsed(text, "a finite number > 0", float, lambda v: math.isfinite(v) and v > 0)


def open_unit(text: str) -> float:
    """A number in (0, 1) (NUTS's target acceptance)."""
    return _parsed(text, "a number in (0, 1)", float, lambda v: 0 < v < 1)


def step_size(text: str) -> float:
    """A number in (0, 1] (the natural-gradient step size γ)."""
    return _parsed(text, "a number in (0, 1]", float, lambda v: 0 < v <= 1)


def port(text: str) -> int:
    """A TCP port, 1..65535."""
    return _parsed(text, "a port in 1..65535", int, lambda v: 0 < v < 65536)


def out_folder(text: str) -> Path:
    """A folder to write into: a path that is not an existing file."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is an existing file, not a folder: give a folder (it is "
                                         "created if missing)")
    return path

