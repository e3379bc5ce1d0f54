"""The vocabulary of :mod:`ppl_sparsegp.validation`: the errors, the checks (:class:`Check` and its kinds) and
the hints most signatures share (``Tolerance``, ``Count``, ``PositiveScalar``, ...)."""
from __future__ import annotations

import difflib
import math
import os
import typing
from typing import Any, Optional

import numpy as np


class InvalidArgument(ValueError):
    """An argument outside what its parameter declares (the message names the function, the parameter,
    the value, what is allowed and the fix)."""


class WrongArgumentType(InvalidArgument, TypeError):
    """An argument of the wrong type (a ``TypeError``; also a ``ValueError``, as the checks it replaces
    raised)."""


def _is_traced(value) -> bool:
    try:
        import jax
        return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(value))
    except Exception:  # pragma: no cover - jax is a dependency; a value jax cannot walk is not traced
        return False


#: what :meth:`Check.problem` returns: None (allowed) or (the exception class to raise, what is wrong)
Problem = Optional[tuple[type[InvalidArgument], str]]


class Check:
    """One declared constraint. ``problem(value)`` returns None when the value is allowed, else
    ``(exception class, what is wrong)``; ``allowed`` says what is allowed (for messages and docs);
    ``bad_values()`` lists values the check must refuse (the generated test rows); ``example()`` a value it
    accepts (used to fill the other parameters of a generated call)."""

    allowed = "a value"
    #: the fix to name after what is allowed (set with :func:`with_fix`); None: "pass <allowed>"
    fix = None

    def problem(self, value: Any) -> Problem:  # pragma: no cover - every check overrides it
        raise NotImplementedError

    def bad_values(self) -> list:
        return []

    def example(self) -> Any:
        return None

    def __repr__(self):
        return self.allowed


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _real(value):
    """value as a float, or None for something that is not one real number."""
    if isinstance(value, (bool, np.bool_, str, bytes)) or value is None:
        return None
    try:
        arr = np.asarray(value)
    except Exception:
        return None
    if arr.shape != () or arr.dtype.kind not in "iuf":
        return None
    return float(arr)


class Integer(Check):
    """An integer (``int`` or a NumPy integer; not a bool, not a float) in ``[low, high]`` (either None:
    unbounded)."""

    def __init__(self, low: int | None = None, high: int | None = None):
        self.low, self.high = low, high
        bounds = (">= %d" % low if low is not None else "") + (" and " if low is not None and high is not None
                                                                else "") + ("<= %d" % high if high is not None else "")
        named = {(1, None): "a positive integer", (0, None): "a non-negative integer"}.get((low, high))
        self.allowed = named or "an integer" + (f" {bounds}" if bounds else "")

    def problem(self, value: Any) -> Problem:
        if not _is_int(value):
            return WrongArgumentType, f"not an integer ({type(value).__name__})"
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            return InvalidArgument, "out of range"
        return None

    def bad_values(self) -> list:
        out = [1.5, "2", True, None, math.nan]
        out += [self.low - 1] if self.low is not None else []
        out += [self.high + 1] if self.high is not None else []
        return out

    def example(self) -> Any:
        return self.low if self.low is not None else (self.high if self.high is not None else 1)


def PositiveInt() -> Integer:  # noqa: N802 - read as a type in the hints
    """An integer ≥ 1 (a count of steps, starts, features)."""
    return Integer(1)


def NonNegativeInt() -> Integer:  # noqa: N802
    """An integer ≥ 0."""
    return Integer(0)


class Real(Check):
    """A finite real number in an interval: ``low``/``high`` (None: unbounded), ``low_open``/``high_open``
    for open ends. Ints are accepted (as numbers), bools and strings are not."""

    def __init__(self, low: float | None = None, high: float | None = None, *, low_open: bool = False,
                 high_open: bool = False):
        self.low, self.high, self.low_open, self.high_open = low, high, low_open, high_open
        if low is None and high is None:
            self.allowed = "a finite number"
        elif high is None:
            self.allowed = f"a finite number {'>' if low_open else '>='} {low:g}"
        elif low is None:
            self.allowed = f"a finite number {'<' if high_open else '<='} {high:g}"
        else:
            self.allowed = (f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}")

    def problem(self, value: Any) -> Problem:
        x = _real(value)
        if x is None:
            return WrongArgumentType, f"not a real number ({type(value).__name__})"
        if not math.isfinite(x):
            return InvalidArgument, "not finite"
        below = self.low is not None and (x < self.low or (self.low_open and x == self.low))
        above = self.high is not None and (x > self.high or (self.high_open and x == self.high))
        if below or above:
            return InvalidArgument, "out of range"
        return None

    def bad_values(self) -> list:
        out = [math.nan, math.inf, -math.inf, "0.1", None, True]
        for end, is_open, step in ((self.low, self.low_open, -1), (self.high, self.high_open, 1)):
            if end is not None:
                out += [end + step * max(1.0, abs(end))] + ([end] if is_open else [])
        if self.high is None:
            out += []  # huge values are allowed where no upper end is declared
        return out

    def example(self) -> Any:
        if self.low is not None and self.high is not None:
            return 0.5 * (self.low + self.high)
        if self.low is not None:
            return self.low + 1.0
        return 0.0 if self.high is None else self.high - 1.0


def Probability() -> Real:  # noqa: N802
    """A number in [0, 1]."""
    return Real(0.0, 1.0)


class OneOf(Check):
    """One of a set of strings (the closest one is suggested for a misspelling), or of numbers."""

    def __init__(self, *choices):
        self.choices = tuple(choices)
        self.strings = all(isinstance(c, str) for c in self.choices)
        self.allowed = "one of " + ", ".join(repr(c) for c in self.choices)

    def problem(self, value: Any) -> Problem:
        if not self.strings:
            ok = not isinstance(value, (bool, np.bool_, str)) and _real(value) in self.choices
            return None if ok else (InvalidArgument, "not one of them")
        if not isinstance(value, str):
            return WrongArgumentType, f"not a string ({type(value).__name__})"
        if value not in self.choices:
            close = difflib.get_close_matches(value, self.choices, n=1)
            return InvalidArgument, "not one of them" + (f" (did you mean {close[0]!r}?)" if close else "")
        return None

    def bad_values(self) -> list:
        return ["no such choice", 3, None] if self.strings else [max(self.choices) + 1, "1", None, True]

    def example(self) -> Any:
        return self.choices[0]


class Boolean(Check):
    """``True`` or ``False`` (a NumPy bool too; not 0/1, not a string)."""

    allowed = "True or False"

    def problem(self, value: Any) -> Problem:
        return None if isinstance(value, (bool, np.bool_)) else (WrongArgumentType, f"of type {type(value).__name__}")

    def bad_values(self) -> list:
        return ["yes", 2, None]

    def example(self) -> Any:
        return True


class ArrayOf(Check):
    """An array (anything ``numpy.asarray`` reads as numbers) of ``rank`` (an int or a tuple of allowed
    ranks; None: any), trailing ``shape`` (a tuple, None for any size on an axis), with finite values
    (``finite=True``). A traced array is checked for its rank only, and so is anything with a ``shape``
    for ``read=False`` (a memory-mapped file of millions of rows is not read to be checked)."""

    def __init__(self, rank: int | tuple[int, ...] | None = None, shape: tuple | None = None, *, finite: bool = True,
                 read: bool = True, positive: bool = False, traced: bool = True) -> None:
        self.rank = (rank,) if isinstance(rank, int) else rank
        self.shape, self.finite, self.read = shape, finite and read, read
        self.positive, self.traced = positive and read, traced
        ranks = "" if self.rank is None else " of rank " + " or ".join(map(str, self.rank))
        trail = "" if shape is None else " with shape (…, " + ", ".join("any" if s is None else str(s)
                                                                       for s in shape) + ")"
        self.allowed = (f"an array{ranks}{trail}" + (" of positive" if positive else " of")
                        + (" finite numbers" if finite else " numbers"))

    def problem(self, value: Any) -> Problem:
        if isinstance(value, (str, bytes, dict)) or value is None:
            return WrongArgumentType, f"of type {type(value).__name__}"
        if not self.traced and _is_traced(value):  # a value sampled inside a model: judged by debug_checks
            return None
        traced = _is_traced(value) or (not self.read and hasattr(value, "shape"))  # read=False: the shape only
        shape = tuple(np.shape(value)) if traced else None
        if not traced:
            try:
                arr = np.asarray(value)
            except Exception:
                return WrongArgumentType, f"of type {type(value).__name__}, not an array"
            if arr.dtype.kind not in "biufc":
                return WrongArgumentType, f"an array of {arr.dtype} (not numbers)"
            shape = arr.shape
        if self.rank is not None and len(shape) not in self.rank:
            return InvalidArgument, f"rank {len(shape)} (shape {shape})"
        if self.shape is not None:
            tail = shape[len(shape) - len(self.shape):] if len(shape) >= len(self.shape) else None
            if tail is None or any(s is not None and s != t for s, t in zip(self.shape, tail)):
                return InvalidArgument, f"shape {shape}"
        if self.finite and not traced and arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
            return InvalidArgument, "NaN or inf in it"
        if self.positive and not traced and not np.all(arr > 0):
            return InvalidArgument, "not all positive"
        return None

    def _good_shape(self):
        rank = 1 if self.rank is None else self.rank[0]
        shape = [3] * rank
        if self.shape is not None and rank >= len(self.shape):
            shape[rank - len(self.shape):] = [3 if s is None else s for s in self.shape]
        return tuple(shape)

    def bad_values(self) -> list:
        good = self._good_shape()
        out = ["an array", None]
        if self.finite:
            out += [np.full(good, np.nan), np.full(good, np.inf)]
        if self.rank is not None:
            out.append(np.ones((2,) * (max(self.rank) + 1)))
        if self.positive:
            out += [np.zeros(good), -np.ones(good)]
        return out

    def example(self) -> Any:
        return np.ones(self._good_shape())


class Names(Check):
    """A string, or a non-empty list or tuple of strings (site names)."""

    allowed = "a string or a non-empty list of strings"

    def problem(self, value: Any) -> Problem:
        if isinstance(value, str):
            return None
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
            return None
        return WrongArgumentType, f"of type {type(value).__name__}"

    def bad_values(self) -> list:
        return [3, [], [1, 2], None]

    def example(self) -> Any:
        return "f_v"


class IsCallable(Check):
    """A callable (a function, a model, a schedule)."""

    allowed = "a callable"

    def problem(self, value: Any) -> Problem:
        return None if callable(value) else (WrongArgumentType, f"of type {type(value).__name__}")

    def bad_values(self) -> list:
        return [3, "f"]

    def example(self) -> Any:
        return lambda *a, **k: None


class Key(Check):
    """A JAX PRNG key (``jax.random.PRNGKey(0)``, shape (2,) uint32, or a typed key) or, with
    ``allow_int=True``, an int seed."""

    def __init__(self, allow_int: bool = True):
        self.allow_int = allow_int
        self.allowed = "a PRNG key (jax.random.PRNGKey(seed))" + (" or an integer seed" if allow_int else "")

    def problem(self, value: Any) -> Problem:
        if _is_int(value):
            return None if self.allow_int else (WrongArgumentType, "an int, not a key")
        import jax
        if _is_traced(value):
            return None
        if isinstance(value, (jax.Array, np.ndarray)):
            if jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key) and value.ndim == 0:
                return None
            if value.dtype == np.uint32 and value.shape == (2,):
                return None
            return InvalidArgument, f"an array of {value.dtype} and shape {value.shape}"
        return WrongArgumentType, f"of type {type(value).__name__}"

    def bad_values(self) -> list:
        return [1.5, "0", np.zeros(3)] + ([] if self.allow_int else [0])

    def example(self) -> Any:
        import jax
        return 0 if self.allow_int else jax.random.PRNGKey(0)


class Draws(Check):
    """Posterior draws: a dict ``{site name: array (draws, ...)}`` (``mcmc.get_samples()``) or an
    InferenceData (anything with a ``posterior``)."""

    allowed = "the fit's draws: a dict {site: array (draws, ...)} (mcmc.get_samples()) or its InferenceData"

    def problem(self, value: Any) -> Problem:
        if hasattr(value, "posterior"):
            return None
        if not isinstance(value, dict):
            return WrongArgumentType, f"of type {type(value).__name__}"
        bad = [k for k, v in value.items() if not isinstance(k, str) or isinstance(v, (str, dict)) or v is None]
        return (WrongArgumentType, f"entries {bad[:3]} are not site name: array") if bad else None

    def bad_values(self) -> list:
        return [[1.0, 2.0], 3, {"a": "b"}]

    def example(self) -> Any:
        return {"f_kernel_lengthscale": np.full(3, 0.3)}


class InstanceOf(Check):
    """An instance of one of ``classes`` (a class, or a dotted path ``"ppl_sparsegp.kernels.Kernel"`` read
    when first checked, for a class of a higher floor); ``what`` names it in messages."""

    def __init__(self, *classes, what: str | None = None):
        self._classes = classes
        self.allowed = what or "a " + " or ".join(c if isinstance(c, str) else c.__name__ for c in classes)

    @property
    def classes(self) -> tuple:
        import importlib
        out = []
        for c in self._classes:
            if isinstance(c, str):
                module, _, name = c.rpartition(".")
                c = getattr(importlib.import_module(module), name)
            out.append(c)
        return tuple(out)

    def problem(self, value: Any) -> Problem:
        return None if isinstance(value, self.classes) else (WrongArgumentType, f"of type {type(value).__name__}")

    def bad_values(self) -> list:
        return [v for v in (3, "x", 2.5) if self.problem(v) is not None]


class OrNone(Check):
    """None, or what ``check`` allows."""

    def __init__(self, check: Check):
        self.check = check
        self.allowed = f"None or {check.allowed}"

    def problem(self, value: Any) -> Problem:
        return None if value is None else self.check.problem(value)

    def bad_values(self) -> list:
        return [v for v in self.check.bad_values() if v is not None]

    def example(self) -> Any:
        return None


class AnyOf(Check):
    """What any of ``checks`` allows (the message of the first is given when none does)."""

    def __init__(self, *checks: Check):
        self.checks = checks
        self.allowed = " or ".join(c.allowed for c in checks)

    def problem(self, value: Any) -> Problem:
        problems = [c.problem(value) for c in self.checks]
        if any(p is None for p in problems):
            return None
        kinds = [p[0] for p in problems]
        return (InvalidArgument if InvalidArgument in kinds else WrongArgumentType), problems[0][1]

    def bad_values(self) -> list:
        bad = [v for c in self.checks for v in c.bad_values()]
        return [v for v in bad if all(c.problem(v) is not None for c in self.checks)]

    def example(self) -> Any:
        return self.checks[0].example()


def with_fix(check: Check, fix: str) -> Check:
    """``check`` with its own fix for the message (e.g. the function to use instead)."""
    check.fix = fix
    return check


#: the options most signatures share, as hints (``tolerance: Tolerance = 0.01``)
Tolerance = typing.Annotated[float, Real(0.0, 1.0, low_open=True, high_open=True)]
Positive = typing.Annotated[float, Real(0.0, None, low_open=True)]
NonNegative = typing.Annotated[float, Real(0.0, None)]
Count = typing.Annotated[int, Integer(1)]
MaybeCount = typing.Annotated[typing.Optional[int], OrNone(Integer(1))]  # noqa: UP045 - Optional is ours
Flag = typing.Annotated[bool, Boolean()]
Inputs = typing.Annotated[typing.Any, ArrayOf(rank=(1, 2))]
RngKey = typing.Annotated[typing.Any, Key()]
AKernel = typing.Annotated[typing.Any, InstanceOf("ppl_sparsegp.kernels.base.Kernel",
                                                  what="a kernel (e.g. Matern32(1.0, 0.3))")]
Path = typing.Annotated[typing.Any, InstanceOf(str, os.PathLike, what="a path (a str or an os.PathLike)")]
AFeature = typing.Annotated[typing.Any, InstanceOf("ppl_sparsegp.features.base.InducingFeature",
                                                   what="an inducing feature (e.g. FourierFeatures(-1.0, 2.0, 8))")]
ALikelihood = typing.Annotated[typing.Any, InstanceOf("ppl_sparsegp.likelihoods.Likelihood",
                                                      what="a likelihood (e.g. Gaussian(0.1))")]
AName = typing.Annotated[str, InstanceOf(str, what="a string (a site name or prefix)")]
Samples = typing.Annotated[typing.Any, Draws()]


def Template(rank: int | tuple[int, ...] = (0, 1), positive: bool = True) -> AnyOf:  # noqa: N802 - read as a type in the hints
    """A template field: an array of ``rank`` (positive, finite), a NumPyro prior or a
    :class:`~ppl_sparsegp.parameters.Param` (a value sampled inside a model is not judged here: its prior was)."""
    check = AnyOf(ArrayOf(rank=rank, positive=positive, traced=False),
                  InstanceOf("numpyro.distributions.Distribution", "ppl_sparsegp.parameters.Param",
                             what="a NumPyro prior or a Param"))
    what = {0: "a number", (0,): "a number", (0, 1): "a number or an array (D,)"}.get(rank, "an array")
    check.allowed = f"{'positive and ' if positive else ''}finite ({what}, a NumPyro prior or a Param)"
    return check


PositiveScalar = typing.Annotated[typing.Any, Template(rank=0)]
PositiveScales = typing.Annotated[typing.Any, Template(rank=(0, 1))]
Nu = typing.Annotated[float, OneOf(0.5, 1.5, 2.5)]
Quantile = typing.Annotated[float, Real(0.0, 0.5, low_open=True, high_open=True)]
#: a margin cap in data spans: a finite number >= 0, or inf for none
MaxMargin = typing.Annotated[float, AnyOf(Real(0.0, None), OneOf(math.inf))]


class SequenceOf(Check):
    """A list or tuple (not a string) of at least ``min_len`` items (exactly ``length`` when given), each
    allowed by ``check`` (e.g. coordinate indices, the axes of a grid, the members of a group)."""

    def __init__(self, check: Check, *, min_len: int = 1, length: int | None = None):
        self.check, self.min_len, self.length = check, min_len, length
        head = (f"a list or tuple of {length} items" if length is not None else "a non-empty list or tuple"
                if min_len == 1 else "a list or tuple" if min_len == 0
                else f"a list or tuple of at least {min_len} items")
        self.allowed = f"{head}, each item {check.allowed}"

    def problem(self, value: Any) -> Problem:
        if not isinstance(value, (list, tuple)):
            return WrongArgumentType, f"of type {type(value).__name__}, not a list or tuple"
        if len(value) < self.min_len or (self.length is not None and len(value) != self.length):
            return InvalidArgument, f"{len(value)} items"
        for i, item in enumerate(value):
            found = self.check.problem(item)
            if found is not None:
                return found[0], f"item {i}: {found[1]}"
        return None

    def bad_values(self) -> list:
        inner = [v for v in self.check.bad_values() if v is not None and not isinstance(v, (list, tuple))][:2]
        good = self.check.example()
        out = ["no sequence", 3, None] + [[v] * max(1, self.min_len, self.length or 0) for v in inner]
        if self.min_len > 0:
            out.append([])
        if self.length is not None:
            out.append([good] * (self.length + 1))
        return out

    def example(self) -> Any:
        return [self.check.example()] * max(1, self.min_len, self.length or 0)
