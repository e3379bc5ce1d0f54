r"""The object tree of a fit as JSON and arrays, and back: what :func:`~ppl_sparsegp.saving.save_fit` writes
under ``model`` and ``params`` and :func:`~ppl_sparsegp.saving.load_fit` rebuilds (the format: the package
docstring of :mod:`ppl_sparsegp.saving`).

* :class:`Encoder`: objects -> JSON nodes, the arrays collected as ``array_<i>``; a module as its
  ``_params`` and ``_static`` fields, anything else built by its constructor as its constructor arguments;
* :class:`Decoder`: JSON nodes -> objects, instantiating allow-listed classes only (``ppl_sparsegp`` and
  ``numpyro.distributions``), with a module's renamed and added fields (``_renamed_fields``,
  ``_static_defaults``) read under their current names;
* :func:`same`: the equality of two descriptions that ``save_fit``'s round-trip check asks for (arrays
  equal in shape, dtype and value, NaN equal to NaN).

The saving package's own helpers (not in an ``__all__``: the public names are :mod:`ppl_sparsegp.saving`'s).

References:
    1. NumPy, ``numpy.lib.format``: the ``.npy`` / ``.npz`` formats (dtype-exact, pickle-free arrays).
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.distributions import Distribution, constraints
from numpyro.distributions.transforms import Transform

from ..approximations.base import GPModel
from ..parameters import Module, Param, check_module_fields

_ALLOWED = ("ppl_sparsegp.", "numpyro.distributions.")
# instance attributes of an approximation that are caches, not configuration
_CACHES = ("_site_names",)


class FitFileError(ValueError):
    """A fit file that cannot be loaded (or an object that cannot be saved): the message names the
    problem and the fix."""


# --------------------------------------------------------------------------------------------------
# the approximation's configuration: its constructor arguments
# --------------------------------------------------------------------------------------------------
def _arguments(cls):
    """The named constructor arguments of ``cls`` (no ``self``, ``*args``, ``**kwargs``, ``validate_args``)."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "validate_args"]


def _config(gp) -> dict:
    """``{argument: value}`` that rebuilds ``gp`` through ``type(gp)(**config)``, plus ``data`` (the
    training data held for :meth:`~ppl_sparsegp.GPModel.with_data`, or None)."""
    cls = type(gp)
    args = {}
    for p in _arguments(cls):
        try:
            args[p.name] = gp.constructor_argument(p.name)
        except AttributeError:
            raise FitFileError(f"save_fit: {cls.__name__}'s constructor argument {p.name!r} is not stored on the "
                               f"instance, so a fit cannot describe it; override {cls.__name__}.constructor_argument"
                               ) from None
        except ValueError as e:  # an argument no fit can hold (a user's own q family)
            raise FitFileError(f"save_fit: {e}") from None
    return {"args": args, "data": getattr(gp, "data", None)}


def state(gp, other=None) -> dict:
    """The instance attributes of an approximation that must survive a round trip: the public ones, and
    the private ones that ``other`` has too (a private attribute only one of them has is a cache, e.g. of
    site names or of a factorisation, filled by use)."""
    shared = set(vars(other)) if other is not None else set(vars(gp))
    return {k: v for k, v in vars(gp).items()
            if k not in _CACHES and (not k.startswith("_") or k in shared)}


# --------------------------------------------------------------------------------------------------
# encoding: objects -> JSON + arrays
# --------------------------------------------------------------------------------------------------
def _class_path(cls) -> str:
    """The shortest public path of a class, which survives moves between files: ``ppl_sparsegp.<Name>``
    or ``ppl_sparsegp.<subpackage>.<Name>`` where exported there, ``numpyro.distributions.<Name>`` for
    NumPyro's public distributions, else ``<module>.<qualname>``."""
    parts = cls.__module__.split(".")
    for depth in range(1, len(parts)):
        candidate = ".".join(parts[:depth])
        if candidate in ("numpyro",):
            continue
        module = importlib.import_module(candidate)
        if getattr(module, cls.__name__, None) is cls:
            return f"{candidate}.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _constraint_singletons() -> dict:
    return {name: value for name, value in vars(constraints).items()
            if not name.startswith("_") and isinstance(value, constraints.Constraint)}


# NumPyro distributions whose constructor arguments are not all attributes of the instance
_DISTRIBUTION_ARGS = {
    "Delta": lambda d: {"v": d.v, "log_density": d.log_density, "event_dim": len(d.event_shape)},
    "MultivariateNormal": lambda d: {"loc": d.loc, "scale_tril": d.scale_tril},
    "LowRankMultivariateNormal": lambda d: {"loc": d.loc, "cov_factor": d.cov_factor, "cov_diag": d.cov_diag},
}


def _constructor_args(obj, where: str) -> dict:
    """The constructor arguments of a NumPyro distribution or transform, read from its attributes."""
    cls = type(obj)
    if isinstance(obj, Distribution) and cls.__name__ in _DISTRIBUTION_ARGS and cls.__module__.startswith("numpyro"):
        return _DISTRIBUTION_ARGS[cls.__name__](obj)
    out = {}
    for p in _arguments(cls):
        if hasattr(obj, p.name):
            out[p.name] = getattr(obj, p.name)
        elif p.default is p.empty:
            raise FitFileError(f"save_fit: {where}: {cls.__name__}'s constructor argument {p.name!r} is not an "
                               f"attribute of the instance, so it cannot be saved")
    return out


class Encoder:
    def __init__(self):
        self.arrays = {}

    def array(self, x, kind):
        key = f"array_{len(self.arrays)}"
        self.arrays[key] = np.asarray(x)
        return {"__array__": key, "kind": kind}

    def __call__(self, obj, where: str):
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, np.generic):
            return self.array(obj, "numpy-scalar")
        if isinstance(obj, (int, float)):
            return obj if type(obj) in (int, float) else self.array(obj, "numpy-scalar")
        if isinstance(obj, jax.core.Tracer):
            raise FitFileError(f"save_fit: {where} is a tracer: call save_fit outside jit/vmap")
        if isinstance(obj, jax.Array):
            return self.array(obj, "jax")
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                raise FitFileError(f"save_fit: {where} is an object array; a fit holds numeric arrays only")
            return self.array(obj, "numpy")
        if isinstance(obj, type):
            self._check_class(obj, where)
            return {"__type__": _class_path(obj)}
        if isinstance(obj, Module):
            self._check_class(type(obj), where)
            extra = sorted(set(vars(obj)) - set(obj._params) - set(obj._static))
            if extra:
                raise FitFileError(f"save_fit: {where}: {type(obj).__name__} holds attributes {extra} outside its "
                                   f"_params/_static fields, so a fit cannot rebuild it")
            return {"__module__": _class_path(type(obj)),
                    "fields": {n: self(getattr(obj, n), f"{where}.{n}") for n in obj._params + obj._static}}
        if isinstance(obj, Param):
            return {"__object__": _class_path(Param),
                    "args": {"init": self(obj.init, f"{where}.init"),
                             "constraint": self(obj.constraint, f"{where}.constraint")}}
        if isinstance(obj, constraints.Constraint):
            for name, value in _constraint_singletons().items():
                if obj is value:
                    return {"__constraint__": name}
            return self._object(obj, dict(vars(obj)), where)
        if isinstance(obj, (Distribution, Transform)):
            return self._object(obj, _constructor_args(obj, where), where)
        if isinstance(obj, GPModel):
            config = _config(obj)
            out = self._object(obj, config["args"], where)
            out["data"] = self(config["data"], f"{where}.data")
            return out
        if dataclasses.is_dataclass(obj):
            return self._object(obj, {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init},
                                where)
        if isinstance(obj, tuple) and hasattr(type(obj), "_fields"):  # a NamedTuple (SufficientStatistics)
            return self._object(obj, obj._asdict(), where)
        if isinstance(obj, tuple):
            return {"__tuple__": [self(v, f"{where}[{i}]") for i, v in enumerate(obj)]}
        if isinstance(obj, list):
            return [self(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        if isinstance(obj, dict):
            if not all(isinstance(k, str) for k in obj):
                raise FitFileError(f"save_fit: {where} is a dict with non-string keys")
            return {"__dict__": {k: self(v, f"{where}.{k}") for k, v in obj.items()}}
        raise FitFileError(f"save_fit: {where} is a {type(obj).__module__}.{type(obj).__qualname__}, which a fit "
                           f"cannot hold (numbers, arrays, ppl_sparsegp objects and NumPyro distributions only)")

    def _object(self, obj, args: dict, where: str):
        self._check_class(type(obj), where)
        return {"__object__": _class_path(type(obj)), "args": {k: self(v, f"{where}.{k}") for k, v in args.items()}}

    @staticmethod
    def _check_class(cls, where):
        path = _class_path(cls)
        if not path.startswith(_ALLOWED) or "<locals>" in path:
            raise FitFileError(f"save_fit: {where} is a {path}; a fit may only hold classes of ppl_sparsegp and "
                               f"numpyro.distributions (defined at module level)")


# --------------------------------------------------------------------------------------------------
# decoding: JSON + arrays -> objects (allow-listed classes only)
# --------------------------------------------------------------------------------------------------
def _constructible(cls) -> bool:
    """The classes a fit may build through their constructor."""
    if issubclass(cls, (Distribution, Transform, constraints.Constraint)):
        return True
    if not cls.__module__.startswith("ppl_sparsegp"):
        return False
    return (issubclass(cls, (Param, GPModel)) or dataclasses.is_dataclass(cls)
            or (issubclass(cls, tuple) and hasattr(cls, "_fields")))


class Decoder:
    def __init__(self, arrays, source: str, written_by: str):
        self.arrays, self.source, self.written_by = arrays, source, written_by

    def fail(self, where, message):
        raise FitFileError(f"{self.source}: {where}: {message}")

    def resolve(self, path, where, kinds):
        if not isinstance(path, str) or not path.startswith(_ALLOWED):
            self.fail(where, f"refusing to instantiate {path!r}: a fit may only hold classes of ppl_sparsegp and "
                             f"numpyro.distributions")
        module_name, _, name = path.rpartition(".")
        try:
            module = importlib.import_module(module_name)
            cls = getattr(module, name)
        except (ImportError, AttributeError):
            self.fail(where, f"class {path!r} does not exist in this installation (ppl_sparsegp "
                             f"{library_version()}; the file was written by {self.written_by}): load it with that "
                             f"version, or rebuild the model in code and take only the params from the file")
        if not isinstance(cls, type):
            self.fail(where, f"{path!r} is not a class")
        if not issubclass(cls, kinds):
            self.fail(where, f"{path!r} is not a {' or '.join(k.__name__ for k in kinds)}")
        return cls

    def __call__(self, node, where: str):
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            return [self(v, f"{where}[{i}]") for i, v in enumerate(node)]
        if not isinstance(node, dict):
            self.fail(where, f"unexpected JSON value {node!r}")
        if "__array__" in node:
            key = node["__array__"]
            if key not in self.arrays:
                self.fail(where, f"the array {key!r} is missing from the file (a damaged file)")
            value = np.asarray(self.arrays[key])
            kind = node.get("kind")
            if kind == "jax":
                return jnp.asarray(value)
            if kind == "numpy-scalar":
                return value[()]
            if kind == "numpy":
                return value
            self.fail(where, f"unknown array kind {kind!r}")
        if "__tuple__" in node:
            return tuple(self(v, f"{where}[{i}]") for i, v in enumerate(node["__tuple__"]))
        if "__dict__" in node:
            return {k: self(v, f"{where}.{k}") for k, v in node["__dict__"].items()}
        if "__constraint__" in node:
            name = node["__constraint__"]
            singletons = _constraint_singletons()
            if name not in singletons:
                self.fail(where, f"unknown NumPyro constraint {name!r}")
            return singletons[name]
        if "__type__" in node:
            return self.resolve(node["__type__"], where, (object,))
        if "__module__" in node:
            cls = self.resolve(node["__module__"], where, (Module,))
            fields = node.get("fields")
            if not isinstance(fields, dict):
                self.fail(where, "a module without 'fields'")
            fields = _renamed(cls, fields)
            expected = list(cls._params) + list(cls._static)
            defaults = {n: v for n, v in cls._static_defaults.items() if n not in fields}  # fields added since
            missing = [n for n in expected if n not in fields and n not in defaults]
            unknown = [n for n in fields if n not in expected]
            if missing or unknown:
                self.fail(where, f"{cls.__name__} now has the fields {expected}; the file "
                                 + (f"lacks {missing}" if missing else "")
                                 + ("; " if missing and unknown else "")
                                 + (f"has unknown {unknown}" if unknown else "")
                                 + f" (written by {self.written_by}): load it with that version")
            children = tuple(self(fields[n], f"{where}.{n}") for n in cls._params)
            aux = tuple(defaults[n] if n in defaults else self(fields[n], f"{where}.{n}") for n in cls._static)
            obj = cls._tree_unflatten(aux, children)
            try:
                check_module_fields(obj)
            except ValueError as e:
                self.fail(where, f"{e}, which {cls.__name__}(...) refuses: the file was edited or damaged (written by "
                                 f"{self.written_by})")
            return obj
        if "__object__" in node:
            cls = self.resolve(node["__object__"], where, (object,))
            if not _constructible(cls):
                self.fail(where, f"{node['__object__']!r} is not a class a fit may build (NumPyro distributions, "
                                 f"transforms and constraints; ppl_sparsegp approximations, Params, groups, "
                                 f"statistics)")
            args = node.get("args")
            if not isinstance(args, dict):
                self.fail(where, "an object without 'args'")
            values = {k: self(v, f"{where}.{k}") for k, v in args.items()}
            try:
                obj = cls(**values)
            except (TypeError, ValueError) as e:
                self.fail(where, f"{cls.__name__}(...) refused the saved arguments ({e}); the file was written by "
                                 f"{self.written_by}")
            if isinstance(obj, GPModel) and "data" in node:
                data = self(node["data"], f"{where}.data")
                if data is not None:
                    obj = obj.with_data(*data)
            return obj
        self.fail(where, f"unknown JSON object with keys {sorted(node)}")


# --------------------------------------------------------------------------------------------------
# equality of two descriptions (save_fit's round-trip check)
# --------------------------------------------------------------------------------------------------
def _renamed(cls, fields: dict) -> dict:
    """A file's fields under the class's current names: ``cls._renamed_fields`` maps a field's old name to
    its new one, or to a tuple of names where one stored pair became two fields (a spherical feature's
    ``data_box`` = (lower, upper)); a file written before a rename loads unchanged in value."""
    out = dict(fields)
    for old, new in getattr(cls, "_renamed_fields", {}).items():
        if old not in out or (new if isinstance(new, str) else new[0]) in out:
            continue
        value = out.pop(old)
        if isinstance(new, str):
            out[new] = value
        else:
            parts = value.get("__tuple__") if isinstance(value, dict) else None
            out.update(zip(new, parts if parts is not None else (value,) * len(new)))
    return out


def same(a, b) -> bool:
    if isinstance(a, (jax.Array, np.ndarray, np.generic)) or isinstance(b, (jax.Array, np.ndarray, np.generic)):
        if isinstance(a, jax.Array) != isinstance(b, jax.Array):
            return False
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and a.dtype == b.dtype and bool(
            np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, Module):
        return all(same(getattr(a, n), getattr(b, n)) for n in a._params + a._static)
    if isinstance(a, (Distribution, Transform, constraints.Constraint)):  # their pytree data (no caches)
        (la, aa), (lb, ab) = a.tree_flatten(), b.tree_flatten()
        return same(la, lb) and same(aa, ab)
    if isinstance(a, Param):
        return same(a.init, b.init) and same(a.constraint, b.constraint)
    if isinstance(a, GPModel):
        return same(state(a, b), state(b, a))
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    return a == b or a is b


def first_difference(a: dict, b: dict):
    return next((k for k in a if k not in b or not same(a[k], b[k])), None)


# --------------------------------------------------------------------------------------------------
# the public functions


def library_version() -> str:
    return importlib.import_module("ppl_sparsegp").__version__
