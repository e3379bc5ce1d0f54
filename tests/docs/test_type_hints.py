"""Every public parameter carries a type hint (the API reference's contract: a parameter's type is declared
in its signature, its shape in its docstring, its range in its ``@validated`` declaration), and every hint
resolves at run time, so ``typing.get_type_hints`` and the validator can read it."""
import inspect
import typing

from test_glossary import _callables

# parameters whose type is NumPyro's or Python's protocol, not ours to declare (none today: a new entry
# needs its reason)
EXEMPT: dict = {}


def _unhinted():
    for qualname, obj in _callables():
        try:
            signature = inspect.signature(obj)
        except (TypeError, ValueError):
            continue
        for p in signature.parameters.values():
            if p.name in ("self", "cls") or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            if p.annotation is inspect.Parameter.empty and f"{qualname}({p.name})" not in EXEMPT:
                yield f"{qualname}({p.name})"


def test_every_public_parameter_has_a_type_hint():
    missing = sorted(_unhinted())
    assert not missing, f"{len(missing)} public parameters without a type hint:\n" + "\n".join(missing)


def test_every_hint_resolves():
    """``from __future__ import annotations`` keeps hints as strings: each must name something importable
    where the function is defined (a name imported only for type checkers would fail here)."""
    bad = []
    for qualname, obj in _callables():
        target = obj.__init__ if inspect.isclass(obj) else obj
        if not (inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismethod(obj)):
            target = type(obj).__call__  # a dispatcher instance: its call's hints
        if inspect.isclass(obj) and target is object.__init__:
            continue
        try:
            typing.get_type_hints(target, include_extras=True)
        except Exception as e:  # noqa: BLE001 - the failure is the report
            bad.append(f"{qualname}: {type(e).__name__}: {e}")
    assert not bad, "hints that do not resolve:\n" + "\n".join(bad)
