r"""Argument checks declared beside the signature: one mechanism for every public callable.

A public function declares what each option may be in its type hints, as ``typing.Annotated``
metadata, and :func:`validated` checks every argument given against them before the body runs::

    @validated
    def choose_features(model, *args, refine: Annotated[int, NonNegativeInt()] = 2,
                        quantile: Annotated[float, Real(0, 0.5, low_open=True,
                                                         high_open=True)] = 0.05, ...):

The vocabulary (each a :class:`Check`): :class:`Integer` (:func:`PositiveInt`, :func:`NonNegativeInt`),
:class:`Real` (an interval with open or closed ends, finite; :func:`Probability`), :class:`OneOf` (one of a
set of strings), :class:`Boolean`, :class:`ArrayOf` (rank, trailing shape, finite values),
:class:`IsCallable`, :class:`Key` (a PRNG key or an int seed), :class:`InstanceOf`, :class:`OrNone`
(None allowed), :class:`AnyOf` (the first that fits) and :class:`SequenceOf` (a list or tuple of items
that each pass a check). A refused argument raises
:class:`InvalidArgument` (a ``ValueError``) or, for a wrong type, :class:`WrongArgumentType` (a
``TypeError`` and a ``ValueError``); the message names the function, the parameter, what it got, what
is allowed and the fix (the default as an example). An unknown keyword is refused by name with the
closest valid one (``difflib.get_close_matches``); a function that forwards ``**kwargs`` to a user's
model (``validated(forwards_to="model")``) refuses a keyword that is neither its own option nor a
parameter of that model, saying which it is not.

The declarations are read once per function (the hints resolved in its module; ``from __future__ import
annotations`` is fine) and listed by :func:`declared`: ``tests/validation/test_validation.py`` enumerates every
public callable and fails for a public parameter with neither a declaration nor a reasoned exemption, and
generates each declaration's bad inputs (``Check.bad_values()``), so a new declaration brings its own
test rows. The decorator also appends a "Checked arguments" line to the docstring, so the API reference
shows the declared ranges (the site renders no type hints: ``autodoc_typehints = "none"``).

Traced values (inside ``jit``/``grad``) are not judged: the checks are for the options a user passes.
"""
from __future__ import annotations

import difflib
import functools
import inspect
import os
import sys
import typing
import warnings
from collections.abc import Callable
from typing import Any, Optional

import numpy as np

__all__ = ["validated", "declared", "check_argument", "Check", "Integer", "PositiveInt", "NonNegativeInt", "Real",
           "Probability", "OneOf", "Boolean", "ArrayOf", "IsCallable", "Key", "InstanceOf", "OrNone", "AnyOf",
           "Draws", "Names", "with_fix", "InvalidArgument", "WrongArgumentType", "Tolerance", "Positive",
           "NonNegative", "Count", "MaybeCount", "MaxMargin", "Flag", "Inputs", "RngKey", "AKernel", "Path", "AFeature",
           "ALikelihood", "AName", "Samples", "Template", "PositiveScalar", "PositiveScales", "Nu", "Quantile",
           "SequenceOf", "warn_user"]


from ._vocabulary import (  # noqa: F401 - the vocabulary, re-exported
    AFeature,
    AKernel,
    ALikelihood,
    AName,
    AnyOf,
    ArrayOf,
    Boolean,
    Check,
    Count,
    Draws,
    Flag,
    Inputs,
    InstanceOf,
    Integer,
    InvalidArgument,
    IsCallable,
    Key,
    MaxMargin,
    MaybeCount,
    Names,
    NonNegative,
    NonNegativeInt,
    Nu,
    OneOf,
    OrNone,
    Path,
    Positive,
    PositiveInt,
    PositiveScalar,
    PositiveScales,
    Probability,
    Quantile,
    Real,
    RngKey,
    Samples,
    SequenceOf,
    Template,
    Tolerance,
    WrongArgumentType,
    _is_traced,
    with_fix,
)

# --------------------------------------------------------------------------------------------------
# the decorator
# --------------------------------------------------------------------------------------------------
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # .../ppl_sparsegp/


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """Warn at the user's line: the first frame outside ``ppl_sparsegp``, however deep the library's own
    calls (the :func:`validated` wrapper included), so that the warning names the call in the user's
    model or script, and a filter on the user's module applies.

    :param message: the warning's text (what happened and the fix).
    :param category: a ``Warning`` subclass (default ``UserWarning``)."""
    frame, level = sys._getframe(1), 2  # stacklevel 2: warn_user's caller
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level - 1 if frame is None else level)


def _display_name(fn) -> str:
    qual = fn.__qualname__.replace(".<locals>", "")
    return qual[:-len(".__init__")] if qual.endswith(".__init__") else qual


def _short(value) -> str:
    text = repr(value)
    if text.startswith("<") and " at 0x" in text:  # the default repr: the type says it
        text = f"a {type(value).__name__}"
    if isinstance(value, np.ndarray) or hasattr(value, "shape") and not np.isscalar(value):
        text = f"an array of shape {tuple(np.shape(value))}"
    return text if len(text) <= 80 else text[:77] + "..."


def _read_declarations(fn) -> dict:
    """{parameter: Check} from the function's ``Annotated`` hints (each resolved on its own: a hint that
    does not resolve is not a declaration)."""
    out = {}
    for name, param in inspect.signature(fn).parameters.items():
        hint = param.annotation
        if hint is inspect.Parameter.empty:
            continue
        if isinstance(hint, str):
            try:
                hint = eval(hint, {**fn.__globals__, "Annotated": typing.Annotated})  # noqa: S307 - own source
            except Exception as err:
                if "Annotated" in hint or any(a in hint for a in __all__):  # a declaration that does not resolve
                    raise TypeError(f"@validated {fn.__qualname__}: the hint of {name!r} ({hint}) does not resolve "
                                    f"({err}): a declaration must name what its module imports") from err
                continue
        if typing.get_origin(hint) is typing.Annotated:
            checks = [m for m in hint.__metadata__ if isinstance(m, Check)]
            if checks:
                out[name] = checks[0] if len(checks) == 1 else AnyOf(*checks)
    return out


def declared(fn: Callable[..., Any]) -> dict[str, Check]:
    """``{parameter: Check}`` declared on a :func:`validated` callable (a class: its ``__init__``); ``{}``
    for one that is not."""
    target = fn.__init__ if inspect.isclass(fn) else fn
    target = getattr(target, "__func__", target)
    return dict(getattr(target, "__validated__", {}))


def check_argument(where: str, name: str, value: Any, check: Check,
                   default: Any = inspect.Parameter.empty) -> None:
    """Raise the declared check's error for ``value`` of parameter ``name`` of ``where`` (None: allowed).
    Public so that an argument read later (a header field, an option of a nested call) is judged by the
    same words."""
    if _is_traced(value) and not isinstance(check, ArrayOf):
        return
    found = check.problem(value)
    if found is None:
        return
    kind, why = found
    shown = f"{default:.6g}" if isinstance(default, float) else repr(default)
    example = ("" if default is inspect.Parameter.empty or default is None
               else f", e.g. {name}={shown} (the default)")
    fix = check.fix or f"pass {check.allowed}{example}"
    shown_value = _short(value)
    why = "" if shown_value == f"a {type(value).__name__}" and why.startswith("of type") else f" ({why})"
    head = f"{where[:-len('.__init__')]}.{name}" if where.endswith(".__init__") else f"{where}: {name}"
    raise kind(f"{head} must be {check.allowed}, got {shown_value}{why}; {fix}")


def _unknown_keyword(where, name, options, forwards, model):
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}=?" if close else f"; its options: {', '.join(options)}"
    if forwards is None:
        return WrongArgumentType(f"{where}: unknown option {name}={hint}")
    return WrongArgumentType(f"{where}: {name}= is neither an option of {where}{hint} — nor a parameter of the model "
                             f"{getattr(model, '__name__', type(model).__name__)}{_signature(model)}, to which "
                             f"{where} forwards the keywords it does not know")


def _signature(fn) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(...)"


def _forwarded_ok(model, names) -> list:
    """The keywords among ``names`` that the model cannot take (none when its signature cannot be read or
    it takes ``**kwargs``)."""
    try:
        params = inspect.signature(model).parameters
    except (TypeError, ValueError):
        return []
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return []
    takes = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return [n for n in names if n not in takes]


def _with_doc_line(doc, where, checks) -> str:
    """The docstring with the "Checked arguments" paragraph appended at its own indentation."""
    lines = doc.expandtabs().splitlines()[1:]
    indent = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
    items = "; ".join(f"``{n}``: {c.allowed}" for n, c in checks.items())
    return (doc.rstrip() + "\n\n" + " " * indent + "Checked arguments (:func:`~ppl_sparsegp.validation.validated`; an "
            f"argument outside its range raises :class:`~ppl_sparsegp.validation.InvalidArgument`): {items}.\n")


def validated(fn: Optional[Callable[..., Any]] = None, *,
              forwards_to: str | None = None) -> Callable[..., Any]:
    """Check the arguments of ``fn`` against the ``Annotated`` declarations in its hints before it runs
    (module docstring). Use as ``@validated`` or ``@validated(forwards_to="model")`` for a function
    whose ``**kwargs`` go to the callable given as its parameter ``forwards_to``.

    :param fn: the function or method (decorate a class's ``__init__`` for its constructor).
    :param forwards_to: the parameter holding the callable that receives the unknown keywords.
    :returns: the wrapped function, with ``__validated__`` (the declarations) and the docstring's
        "Checked arguments" line.
    :raises InvalidArgument: (at call time) for an argument outside its declaration;
        :class:`WrongArgumentType` for a wrong type or an unknown keyword.
    """
    if fn is None:
        return functools.partial(validated, forwards_to=forwards_to)
    if inspect.isclass(fn):
        return _validated_class(fn, forwards_to)
    signature = inspect.signature(fn)
    params = signature.parameters
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    options = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
               and n not in ("self", "cls")]
    where = _display_name(fn)
    declarations = _read_declarations(fn)

    owner = fn.__qualname__.rsplit(".", 1)[0] if "." in fn.__qualname__ else None

    def named(args):
        """The message's name: the instance's class for a method (Matern32, not Stationary)."""
        if owner and args and "self" in params and any(c.__qualname__ == owner for c in type(args[0]).__mro__):
            return f"{type(args[0]).__name__}.{fn.__name__}"  # a constructor: "Matern32.variance must be ..."
        return f"{where}.__init__" if fn.__name__ == "__init__" else where

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        unknown = [k for k in kwargs if k not in params or params[k].kind is inspect.Parameter.POSITIONAL_ONLY]
        if unknown and not var_kw:
            raise _unknown_keyword(named(args).removesuffix(".__init__"), unknown[0], options, None, None)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as err:
            raise WrongArgumentType(f"{where}{signature}: {err}") from None
        if unknown and forwards_to is not None:
            model = bound.arguments.get(forwards_to)
            refused = _forwarded_ok(model, unknown) if callable(model) else []
            if refused:
                raise _unknown_keyword(where, refused[0], options, forwards_to, model)
        for name, check in declarations.items():
            if name in bound.arguments:
                check_argument(named(args), name, bound.arguments[name], check, params[name].default)
        return fn(*args, **kwargs)

    wrapper.__validated__ = declarations
    if wrapper.__validated__ and fn.__doc__:
        wrapper.__doc__ = _with_doc_line(fn.__doc__, where, wrapper.__validated__)
    return wrapper


def _validated_class(cls, forwards_to):
    """``@validated`` on a class: its ``__init__`` checked, the line in the class docstring."""
    init = validated(cls.__init__, forwards_to=forwards_to)
    cls.__init__ = init
    if init.__validated__ and cls.__doc__:
        cls.__doc__ = _with_doc_line(cls.__doc__, cls.__name__, init.__validated__)
    return cls


