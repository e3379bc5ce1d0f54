r"""Saved fits that predict: an approximation's configuration and its fitted params in one file.

A *fit* is what ``gp.predict`` needs: the approximation (its class and
constructor arguments: feature, kernel, likelihood, mean and options such as ``whiten``, ``q_cov``,
``name``; templates whose fields hold numbers, arrays, NumPyro priors or :class:`~ppl_sparsegp.Param`
objects with their constraints; the training data or statistics a collapsed model conditions on) and
the params dict of an SVI or MAP fit (``svi_result.params``; ``{"<site>_map": value}``).
:func:`save_fit` writes both into one ``.npz`` file and :func:`load_fit` rebuilds them, so that

.. math::

    \texttt{load\_fit(path)} = (g', \theta')\quad\Longrightarrow\quad
    g'.\texttt{predict}(X_*, \texttt{params}=\theta') = g.\texttt{predict}(X_*, \texttt{params}=\theta)

bit for bit (same float dtype; in a float32 process a float64 fit is rounded, with a warning).

**The file.** A NumPy ``.npz`` archive (read with ``allow_pickle=False``: no pickled objects) holding

* ``fit.json``: a JSON header ``{"format": "ppl_sparsegp.fit", "format_version": 1, "model": ...,
  "params": ..., "metadata": ..., "versions": ...}``; ``model`` describes the object tree: a
  :class:`~ppl_sparsegp.parameters.Module` as ``{"__module__": "ppl_sparsegp.kernels.Matern52",
  "fields": {...}}`` (its ``_params`` and ``_static`` fields), anything else built by its constructor
  as ``{"__object__": "numpyro.distributions.LogNormal", "args": {...}}`` (NumPyro distributions,
  transforms and constraints, :class:`~ppl_sparsegp.Param`, the approximation, groups, statistics), a
  NumPyro constraint singleton as ``{"__constraint__": "positive"}``, tuples as ``{"__tuple__": [...]}``
  and arrays as ``{"__array__": "array_3", "kind": "jax"}``;
* ``array_<i>``: those arrays, with their dtypes (float64 stays float64).

Loading instantiates only classes of ``ppl_sparsegp`` and ``numpyro.distributions`` (a
:class:`FitFileError` otherwise), and refuses, naming the problem, a file of a newer format version,
one with a missing key, a class that no longer exists, a module whose fields changed (a static field
added since, listed in the class's ``_static_defaults``, takes its default: e.g. a spherical
feature's ``vanishing``; a field renamed since, listed in ``_renamed_fields``, is read under its new
name: e.g. FourierFeatures' ``a, b``, now ``lower, upper``), or params that do not match the
approximation's guide. :func:`save_fit`
checks before writing that the description rebuilds the same approximation (every attribute equal), so
a fit that saves also loads.

Example::

    save_fit("fit.npz", gp, svi_result.params, metadata={"steps": 2000})
    gp, params = load_fit("fit.npz")          # in another process
    gp.predict(X_new, params=params)["y_mean"]

References:
    1. NumPy, ``numpy.lib.format``: the ``.npy`` / ``.npz`` formats (dtype-exact, pickle-free arrays).
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import math
import os
import tempfile
from collections.abc import Mapping
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.distributions import Distribution, constraints
from numpyro.distributions.transforms import Transform

from .approximations.base import GPModel
from .approximations.common import require_params
from .diagnostics.traces import check_draws_match_model
from .parameters import Module, Param, check_module_fields
from .validation import InstanceOf, IsCallable, OrNone, Path, validated, warn_user

__all__ = ["save_fit", "load_fit", "load_metadata", "FitFileError", "FORMAT", "FORMAT_VERSION"]

FORMAT = "ppl_sparsegp.fit"
#: the version this library writes; it reads every version up to this one
FORMAT_VERSION = 1
HEADER = "fit.json"
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


def _state(gp, other=None) -> dict:
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


class _Encoder:
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


class _Decoder:
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
                             f"{_library_version()}; the file was written by {self.written_by}): load it with that "
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


def _same(a, b) -> bool:
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
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, Module):
        return all(_same(getattr(a, n), getattr(b, n)) for n in a._params + a._static)
    if isinstance(a, (Distribution, Transform, constraints.Constraint)):  # their pytree data (no caches)
        (la, aa), (lb, ab) = a.tree_flatten(), b.tree_flatten()
        return _same(la, lb) and _same(aa, ab)
    if isinstance(a, Param):
        return _same(a.init, b.init) and _same(a.constraint, b.constraint)
    if isinstance(a, GPModel):
        return _same(_state(a, b), _state(b, a))
    if dataclasses.is_dataclass(a):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    return a == b or a is b


def _first_difference(a: dict, b: dict):
    return next((k for k in a if k not in b or not _same(a[k], b[k])), None)


# --------------------------------------------------------------------------------------------------
# the public functions
# --------------------------------------------------------------------------------------------------
def _check_params(params, who: str) -> dict:
    if not isinstance(params, Mapping):
        raise TypeError(f"{who}: params must be a dict (svi_result.params), got {type(params).__name__}")
    for k, v in params.items():
        if not isinstance(k, str):
            raise TypeError(f"{who}: params keys must be strings, got {k!r}")
        if not isinstance(v, (jax.Array, np.ndarray, np.generic, int, float)) or isinstance(v, jax.core.Tracer):
            raise TypeError(f"{who}: params[{k!r}] must be an array, got {type(v).__name__}")
    return dict(params)


def _own_model(model, samples, model_args):
    """An own model's fit: its draws ``{site: (draws, ...)}`` and the arguments prediction needs, checked."""
    if not callable(model) or not isinstance(samples, Mapping) or isinstance(getattr(model, "__self__", None), GPModel):
        raise TypeError(f"save_fit: gp must be an approximation (SparseGP, CollapsedGP, SparseSpectrumGP; itself, not "
                        f"its .model) or the NumPyro model function of an own-model fit with its samples {{site: "
                        f"(draws, ...)}} (mcmc.get_samples()), got {type(model).__name__} and {type(samples).__name__}")
    counts = {k: int(np.shape(v)[0]) if np.ndim(v) else 0 for k, v in _check_params(samples, "save_fit").items()}
    if len(set(counts.values())) > 1 or 0 in counts.values():
        raise ValueError(f"save_fit: samples needs the same number of draws (≥ 1) on every site, got {counts}")
    if model_args is not None and not isinstance(model_args, Mapping):
        raise TypeError(f"save_fit: model_args must be a dict {{argument name: value}}, "
                        f"got {type(model_args).__name__}")
    return samples, dict(model_args or {})


def _library_version() -> str:
    return importlib.import_module("ppl_sparsegp").__version__


def _versions() -> dict:
    import numpyro

    return {"ppl_sparsegp": _library_version(), "jax": jax.__version__, "numpyro": numpyro.__version__}


_GP = InstanceOf(GPModel, type(lambda: None), what="an approximation (SparseGP, CollapsedGP, SparseSpectrumGP; itself, "
                 "not its .model) or an own model function with its samples")
_PARAMS = InstanceOf(Mapping, what="a dict: svi_result.params, or for a model function its samples {site: (draws, "
                     "...)} (mcmc.get_samples())")


@validated
def save_fit(path: Path, gp: Annotated[Any, _GP], params: Annotated[dict, _PARAMS], *,
             metadata: Annotated[dict | None, OrNone(InstanceOf(dict))] = None,
             model_args: Annotated[dict | None, OrNone(InstanceOf(Mapping, what="a dict {argument name: value}"))]
             = None) -> str:
    """Write the approximation ``gp`` and the fitted ``params`` to the ``.npz`` file ``path``.

    :param path: the file to write (any suffix; written atomically: a failed save leaves no file).
    :param gp: a :class:`~ppl_sparsegp.GPModel` (SparseGP, CollapsedGP, SparseSpectrumGP); a collapsed
        model holding training data (``gp.with_data(X, y)``) or precomputed statistics keeps them. Or an
        own model's function (``spectral_gp`` inside): its name is kept, not its code; :func:`load_fit`
        returns ``(model_args, samples)`` for ``Predictive(model, samples)(key, **model_args)``.
    :param params: the params of an SVI fit of ``gp.guide`` (``svi_result.params``) or of a MAP fit
        (``{"<site>_map": value}``); every param of the guide must be there. For a model function: its
        draws (``mcmc.get_samples()``); ``model_args``: the arguments prediction passes it (a dict).
    :param metadata: JSON-serialisable information to keep with the fit (steps, loss, data set, ...);
        read it back with :func:`load_metadata`.
    :returns: the path written.
    :raises FitFileError: when something in ``gp`` cannot be described (a user-defined q family, a class
        outside ppl_sparsegp and numpyro.distributions) or the description does not rebuild the same
        approximation.
    :raises ValueError: when ``params`` lacks a param of ``gp.guide``; ``TypeError`` for wrong types.
    """
    own = not isinstance(gp, GPModel)
    params, model_args = _own_model(gp, params, model_args) if own else (_check_params(params, "save_fit"), None)
    if not own:
        require_params(gp, "save_fit", params)
    try:
        meta_json = json.loads(json.dumps(metadata if metadata is not None else {}, allow_nan=True))
    except (TypeError, ValueError) as e:
        raise TypeError(f"save_fit: metadata must be JSON-serialisable (numbers, strings, lists, dicts): {e}") from None
    if not isinstance(meta_json, dict):
        raise TypeError(f"save_fit: metadata must be a dict, got {type(metadata).__name__}")

    enc = _Encoder()
    header = {"format": FORMAT, "format_version": FORMAT_VERSION, "versions": _versions(),
              "model": enc(model_args, "model_args") if own else enc(gp, "model"),
              "params": {k: enc(v, f"params.{k}") for k, v in params.items()}, "metadata": meta_json}
    if own:
        header["own_model"] = f"{getattr(gp, '__module__', '')}.{getattr(gp, '__qualname__', type(gp).__name__)}"
    text = json.dumps(header, allow_nan=True)
    # the round trip, in memory, before anything is written: a fit that saves also loads, identically
    back_gp, back_params = _decode(json.loads(text), enc.arrays, "save_fit (round-trip check)")
    before, after = (model_args, back_gp) if own else (_state(gp, back_gp), _state(back_gp, gp))
    if not _same(before, after):
        name = _first_difference(before, after)
        raise FitFileError(f"save_fit: {'model_args' if own else type(gp).__name__}.{name} does not survive the round "
                           f"trip through the fit description; the fit cannot be saved faithfully")
    if not _same(params, back_params):
        raise FitFileError(f"save_fit: params[{_first_difference(params, back_params)!r}] does not survive the "
                           f"round trip")

    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".fit-", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{HEADER: np.array(text)}, **enc.arrays)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 -> the permissions of an ordinary new file
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def _read(path):
    """(header dict, arrays dict) of a fit file, with the format checks."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no fit file at {path}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except Exception as e:  # not a zip / npz at all
        raise FitFileError(f"{path} is not a fit file written by save_fit (not a NumPy .npz archive: {e})") from None
    if HEADER not in arrays:
        raise FitFileError(f"{path} has no {HEADER!r} header: not a fit file written by save_fit")
    try:
        header = json.loads(str(arrays.pop(HEADER)[()]))
    except (ValueError, TypeError) as e:
        raise FitFileError(f"{path}: the {HEADER!r} header is not valid JSON ({e}): a damaged file") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise FitFileError(f"{path}: the header does not say format {FORMAT!r}: not a fit file written by save_fit")
    version = header.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise FitFileError(f"{path}: the header's format_version is {version!r}, not a positive integer: a damaged "
                           f"file")
    if version > FORMAT_VERSION:
        raise FitFileError(f"{path} has fit format version {version}, newer than this ppl_sparsegp "
                           f"({_library_version()}) can read (up to {FORMAT_VERSION}; the file was written by "
                           f"{header.get('versions', {}).get('ppl_sparsegp', 'an unknown version')}): upgrade "
                           f"ppl_sparsegp to load it")
    missing = [k for k in ("model", "params", "metadata", "versions") if k not in header]
    if missing:
        raise FitFileError(f"{path}: the header lacks {', '.join(repr(k) for k in missing)} (a damaged or "
                           f"hand-edited file)")
    return header, arrays


def _decode(header, arrays, source):
    written_by = f"ppl_sparsegp {header.get('versions', {}).get('ppl_sparsegp', '(unknown version)')}"
    dec = _Decoder(arrays, source, written_by)
    gp = dec(header["model"], "model")
    if "own_model" in header:  # an own model's fit: (model_args, samples)
        return gp, {k: dec(v, f"params.{k}") for k, v in header["params"].items()}
    if not isinstance(gp, GPModel):
        raise FitFileError(f"{source}: model describes a {type(gp).__name__}, not an approximation")
    if not isinstance(header["params"], dict):
        raise FitFileError(f"{source}: params is not a JSON object")
    params = {k: dec(v, f"params.{k}") for k, v in header["params"].items()}
    try:
        require_params(gp, "load_fit", params)
    except ValueError as e:
        raise FitFileError(f"{source}: the params do not match the approximation's guide: {e}") from None
    return gp, params


@validated
def load_fit(path: Path, *,
             model: Annotated[Any, OrNone(IsCallable())] = None):
    """Read a fit written by :func:`save_fit`: ``(gp, params)`` such that ``gp.predict(X_new,
    params=params)`` equals the saved approximation's prediction; for an own model's fit
    ``(model_args, samples)``, with ``Predictive(model, samples)(key, **model_args)`` equal to the saved
    fit's (the model function comes from the user's code).

    Every module read is held to its constructor's value checks (a positive field positive, every value
    finite), so an edited header cannot load a kernel of negative variance.

    :param path: the fit file.
    :param model: for an own model's fit, the model function it will predict with: its sample sites are
        checked against the fit's draws (a site of the fit the model lacks is refused, naming the sites,
        rather than drawn from its prior by ``Predictive``).

    Arrays come back with the dtypes they were saved with (a float64 fit in a process without
    ``jax_enable_x64`` is rounded to float32 by JAX: a warning says so).

    :raises FileNotFoundError: when there is no file at ``path``.
    :raises FitFileError: (a ``ValueError``) for a file that is not a fit, one of a newer format version,
        one lacking a key, or describing a class that no longer exists (or a module whose fields
        changed), a module whose values its constructor refuses, or params that do not match the
        approximation's guide, or (with ``model``) draws of sites the model does not have; the message
        names which.
    """
    header, arrays = _read(path)
    if not jax.config.jax_enable_x64 and any(a.dtype in (np.float64, np.complex128, np.int64)
                                             for a in arrays.values()):
        warn_user(f"{os.fspath(path)} holds 64-bit arrays but jax_enable_x64 is off: JAX rounds them to 32 "
                  f"bits, so predictions differ from the saved fit's; call "
                  f"jax.config.update('jax_enable_x64', True) before load_fit", UserWarning)
    gp, params = _decode(header, arrays, os.fspath(path))
    if model is not None and "own_model" in header:
        try:
            check_draws_match_model(model, gp, params, header["own_model"])
        except ValueError as e:
            raise FitFileError(f"{os.fspath(path)}: {e}") from None
    return gp, params


@validated
def load_metadata(path: Path) -> dict:
    """The header of a fit file without building anything: ``metadata`` (as given to :func:`save_fit`),
    ``format_version``, ``versions`` (ppl_sparsegp, jax, numpyro that wrote it) and ``approximation``
    (the class path)."""
    header, _ = _read(path)
    model = header["model"]
    return {"metadata": header["metadata"], "format_version": header["format_version"],
            "versions": header["versions"], "model_function": header.get("own_model"),
            "approximation": model.get("__object__") if isinstance(model, dict) else None}
