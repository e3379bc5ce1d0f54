"""What the command lines share (``python -m inference`` and ``python -m inference.launch``): a parser whose
every refusal is one line on stderr naming the flag (with the closest valid flag or choice for a misspelt
one), and the argument types (:mod:`models._arguments`, which the models' own flags use too) that refuse a
bad value when the command line is read, before any model is built or any device started.

Standard library only: the launcher imports it before JAX may start.
"""
from __future__ import annotations

import argparse
import difflib
import re

from models._arguments import (  # noqa: F401 - the argument types, re-exported for the runner and the launcher
    count,
    non_negative_int,
    open_unit,
    out_folder,
    port,
    positive_number,
    step_size,
)

__all__ = ["OneLineParser", "with_suggestion", "option_strings", "count", "non_negative_int", "positive_number",
           "open_unit", "step_size", "port", "out_folder"]


def option_strings(parser: argparse.ArgumentParser) -> list:
    """Every option string of ``parser`` and of its sub-commands (``--num-steps``, ``--no-progress``, ...)."""
    out = list(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += option_strings(sub)
    return sorted(set(out))


def with_suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """``message`` with the closest valid flag (an unrecognised one) or choice (an invalid one) appended."""
    if message.startswith("unrecognized arguments:"):
        flags = [t.split("=", 1)[0] for t in message.split(":", 1)[1].split() if t.startswith("-")]
        for flag in flags:
            close = difflib.get_close_matches(flag, option_strings(parser), n=1, cutoff=0.6)
            if close:
                return f"{message}; did you mean {close[0]}?"
        return message + "; see --help for the flags"
    found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if found:
        choices = re.findall(r"'([^']*)'", found.group(2))
        close = difflib.get_close_matches(found.group(1), choices, n=1, cutoff=0.5)
        if close:
            return f"{message}; did you mean {close[0]!r}?"
    return message


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose error is ``<prog>: error: <message>`` on one line of stderr (no usage
    block), exit status 2; sub-commands made with ``add_subparsers`` are of this class too."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {' '.join(with_suggestion(self, message).split())}\n")


