"""Immutable pytree modules and hyperparameter templates.

Kernels, likelihoods and features are small immutable pytrees (:class:`Module`). Fields named in
``_params`` are pytree leaves; fields in ``_static`` are hashable auxiliary data. In a *template* a
parameter field may hold

* a number or array: the value is fixed;
* a NumPyro :class:`~numpyro.distributions.Distribution`: :func:`instantiate` adds a sample site
  ``f"{prefix}{field}"`` with that prior (sampled by NUTS, point-estimated or given q by SVI);
* a :class:`Param`: :func:`instantiate` adds ``numpyro.param`` (optimised by SVI; its initial value
  under MCMC).

This one mechanism is how every approximation introduces its hyperparameters, so the same site names
appear under SVI, NUTS and SteinVI.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from numpyro.distributions import Distribution, constraints
from numpyro.distributions.transforms import biject_to

from .validation import ArrayOf, Flag, InstanceOf, OrNone, validated

# The public surface: templates and what users do with them. The check_* helpers, is_concrete, free_leaves
# and as_rng_key are the library's own (called on values its entry points have judged, often under a trace,
# and they are what they check): importable by the library's modules, not part of the API.
__all__ = ["Module", "Param", "instantiate", "free_sites", "debug_checks", "stack_modules"]

#: a template: a Module (kernel, likelihood, feature) or a sequence of them (an additive kernel's parts)
_TEMPLATE = Annotated[Any, InstanceOf("ppl_sparsegp.parameters.Module", list, tuple,
                                      what="a template (a kernel, likelihood or feature: a Module) or a list of them")]
_PREFIX = Annotated[str, InstanceOf(str, what="a string (the site names' prefix)")]


class Param:
    """A point-estimated parameter: ``numpyro.param(name, init, constraint=constraint)``.

    :param init: initial value (array-like).
    :param constraint: a NumPyro constraint. Default: the field's own domain, i.e. positive for a field
        that must be positive (a kernel's variance and lengthscale, a likelihood's noise variance, ...)
        and real otherwise. An explicit constraint that lets a positive field leave the positive reals
        is refused when the template is used (:func:`instantiate`), naming the field.
    """

    @validated
    def __init__(self, init: Annotated[Any, ArrayOf()],
                 constraint: Annotated[Any, OrNone(InstanceOf(constraints.Constraint,
                                                              what="a NumPyro constraint (e.g. constraints.positive)"))]
                 = None):
        self.init = jnp.asarray(init)
        self.constraint = constraint
        check_finite(self.init, "Param init")
        if constraint is not None and not bool(jnp.all(constraint(self.init))):
            raise ValueError(f"Param init {np.asarray(self.init)!r} violates its constraint {constraint}")

    @validated
    def resolved(self, positive: Flag,
                 name: Annotated[str, InstanceOf(str, what="a string (the field's name)")]) -> constraints.Constraint:
        """The constraint to use for a field (``positive``: the field must be positive), checked."""
        if self.constraint is None:
            constraint = constraints.positive if positive else constraints.real
        else:
            constraint = self.constraint
            if positive and not _constraint_is_positive(constraint, jnp.shape(self.init)):
                raise ValueError(f"{name} must be positive but its Param has the constraint {constraint}, "
                                 "which lets it leave the positive reals: give constraints.positive or "
                                 "leave the constraint unset (the default is positive for this field)")
        with jax.ensure_compile_time_eval():
            ok = bool(jnp.all(constraint(self.init)))
        if not ok:
            raise ValueError(f"the Param init {np.asarray(self.init)!r} of {name} violates its constraint "
                             f"{constraint}")
        return constraint

    def __repr__(self):
        return f"Param({np.asarray(self.init)!r}, constraint={self.constraint})"


def is_concrete(x) -> bool:
    """True when ``x`` holds numbers (not a tracer, a distribution or a Param)."""
    if isinstance(x, (Distribution, Param)) or x is None:
        return False
    leaves = jax.tree_util.tree_leaves(x)
    return all(not isinstance(leaf, jax.core.Tracer) for leaf in leaves)


def value_shape(x) -> tuple:
    """The shape of a field's value, whatever holds it: an array's shape, a prior's ``batch_shape +
    event_shape`` (the shape of its draws), a :class:`Param`'s initial value's shape."""
    if isinstance(x, Distribution):
        return tuple(x.batch_shape) + tuple(x.event_shape)
    return tuple(jnp.shape(x.init if isinstance(x, Param) else x))


_DEBUG = {"on": os.environ.get("PPL_SPARSEGP_DEBUG", "") not in ("", "0")}


@contextmanager
def _debug_scope(previous):
    try:
        yield
    finally:
        debug_checks(previous)


@validated
def debug_checks(enabled: Flag = True):
    """Check traced values too (under ``jit``, ``vmap``, ``grad``, NUTS and SVI), not only concrete ones.

    The library validates its inputs and hyperparameters (finite, positive, ...) when they are numbers.
    Inside a trace they are not, so a NaN input or a negative lengthscale reached by an optimiser gives
    NaN silently. With debug checks on, each such check also runs on the traced value when the compiled
    program runs (``jax.debug.callback``) and raises the same ``ValueError`` (naming the argument); under
    ``jit`` JAX reports it as its runtime error (``JaxRuntimeError``) carrying the message. It costs a
    host callback per check per call: use it to find where a NaN comes from, not for production runs.

    Use as a function, ``debug_checks()`` / ``debug_checks(False)``, or as a context manager,
    ``with debug_checks(): ...``; the environment variable ``PPL_SPARSEGP_DEBUG=1`` turns it on at import.
    The flag is read when a function is traced: changing it clears JAX's compilation caches, so that
    programs compiled before are traced again.

    :param enabled: turn the checks on (default) or off.
    :returns: a context manager that restores the previous setting on exit (ignore it when calling
        ``debug_checks()`` as a function).
    """
    previous, _DEBUG["on"] = _DEBUG["on"], bool(enabled)
    if previous != _DEBUG["on"]:
        jax.clear_caches()
    return _debug_scope(previous)


def check_value(value, problem):
    """Raise ``ValueError(problem(arr))`` when ``problem`` (a NumPy array -> the error message, or None when
    the value is fine) finds one in the concrete value; for a traced value, the same when the program runs,
    in debug mode (:func:`debug_checks`)."""
    if is_concrete(value):
        message = problem(np.asarray(value))
        if message is not None:
            raise ValueError(message)
    elif _DEBUG["on"] and not isinstance(value, (Distribution, Param)) and value is not None:
        def callback(v):
            message = problem(np.asarray(v))
            if message is not None:
                raise ValueError(message + " (a traced value, found by ppl_sparsegp.debug_checks)")
        jax.debug.callback(callback, value)
    return value


def check_finite(value, name: str):
    """Raise ``ValueError`` naming ``name`` if an array holds NaN or inf (a traced one: in debug mode)."""
    return check_value(value, lambda a: f"{name} contains NaN or inf"
                       if a.dtype.kind in "fc" and not np.all(np.isfinite(a)) else None)


def check_positive(value, name: str):
    """Raise ``ValueError`` naming ``name`` if a value is not strictly positive and finite (a traced
    one: in debug mode)."""
    def problem(a):
        a = a.astype(float)
        if a.size == 0 or not np.all(np.isfinite(a)) or not np.all(a > 0):
            return f"{name} must be positive and finite, got {a!r}"
        return None

    check_value(value, problem)


def _constraint_is_positive(support, shape=()) -> bool:
    """Whether every value the constraint's bijection reaches (probed at ±30 unconstrained) is > 0."""
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    with jax.ensure_compile_time_eval():  # a static property of the constraint, also inside a trace
        t = biject_to(support)
        lo, hi = t(jnp.full(shape, -30.0)), t(jnp.full(shape, 30.0))
        return bool(jnp.all(lo > 0) & jnp.all(hi > 0))


def _support_is_positive(d: Distribution) -> bool:
    try:
        return _constraint_is_positive(d.support, d.shape())
    except jax.errors.ConcretizationTypeError:  # a support bounded by traced values: not decidable here
        return True


def check_positive_prior(prior: Distribution, name: str):
    """The one rule for priors on positive quantities (lengthscales, variances, noise, periods), used by
    every entry point that reads a template (:func:`instantiate`, :func:`free_sites`,
    ``marginal_spectral_gp``'s noise): raise ``ValueError`` naming ``name`` when the prior's support
    reaches zero or the negative reals (a ``Normal`` would give negative draws under NUTS)."""
    if not _support_is_positive(prior):
        raise ValueError(f"the prior for {name} must have positive support, got {type(prior).__name__} with support "
                         f"{prior.support}: it is a positive quantity, so give a prior on the positive reals, e.g. "
                         f"dist.LogNormal(log(value), 0.5), dist.HalfNormal(scale) or dist.Gamma(2.0, 2.0 / value)")
    return prior


class Module:
    """Base class of every immutable pytree in the library.

    Subclasses list their leaf fields in ``_params`` and hashable auxiliary fields in ``_static``;
    ``_positive`` names the parameter fields that must be strictly positive. Subclasses are registered
    as pytrees automatically, so instances pass through ``jit``, ``vmap`` and ``grad``.
    """

    _params: tuple = ()
    _static: tuple = ()
    _positive: tuple = ()
    #: ``{static field: value}`` for static fields added after a release, so that a fit file written
    #: before them still loads (:func:`~ppl_sparsegp.saving.load_fit` fills them in)
    _static_defaults: dict = {}
    #: ``{old field name: new name}`` (or a tuple of new names where one stored pair became two fields)
    #: for fields renamed after a release, so that a fit file written before the rename still loads
    _renamed_fields: dict = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        jax.tree_util.register_pytree_node(cls, cls._tree_flatten, cls._tree_unflatten)

    def _tree_flatten(self):
        return (tuple(getattr(self, n) for n in self._params),
                tuple(getattr(self, n) for n in self._static))

    @classmethod
    def _tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        for n, v in zip(cls._params, children):
            object.__setattr__(obj, n, v)
        for n, v in zip(cls._static, aux):
            object.__setattr__(obj, n, v)
        return obj

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable; use .replace({name}=...)")

    def _set(self, **fields):
        """Set fields during ``__init__`` (the only mutation allowed)."""
        for n, v in fields.items():
            object.__setattr__(self, n, v)
        for n in self._positive:
            if n in fields:
                check_positive(fields[n], f"{type(self).__name__}.{n}")

    def replace(self, **fields) -> "Module":
        """A copy with some fields replaced (no validation: used under tracing)."""
        children, aux = self._tree_flatten()
        new = self._tree_unflatten(aux, children)
        for n, v in fields.items():
            if n not in self._params and n not in self._static:
                raise TypeError(f"{type(self).__name__} has no field {n!r}")
            object.__setattr__(new, n, v)
        return new

    def __repr__(self):
        items = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._params + self._static)
        return f"{type(self).__name__}({items})"


def initial_value(d: Distribution):
    """A starting point for a point estimate: the prior mean if finite, else the transformed origin."""
    fallback = biject_to(d.support)(jnp.zeros(d.shape()))
    try:
        mean = jnp.broadcast_to(d.mean, d.shape())
    except NotImplementedError:
        return fallback
    ok = jnp.isfinite(mean) & d.support(mean)
    return jnp.where(ok, mean, fallback)


def _walk(template, prefix, on_leaf, check=False):
    """Walk a template's fields, calling ``on_leaf`` on its free ones (priors checked by
    :func:`check_positive_prior` where the field is positive); ``check``: a listing (no values to check)."""
    if isinstance(template, (list, tuple)):
        return type(template)(_walk(t, f"{prefix}{i}_", on_leaf, check) for i, t in enumerate(template))
    if not isinstance(template, Module):
        return template
    values = {}
    for name in template._params:
        value = getattr(template, name)
        site = f"{prefix}{name}"
        if isinstance(value, (list, tuple)):
            values[name] = _walk(value, prefix, on_leaf, check)  # kernels=(k0, k1) -> "kernel_0_variance"
        elif isinstance(value, Module):
            values[name] = _walk(value, f"{site}_", on_leaf, check)
        elif isinstance(value, (Distribution, Param)):
            positive = name in template._positive
            if positive and isinstance(value, Distribution):
                check_positive_prior(value, f"{type(template).__name__}.{name} (site {site!r})")
            values[name] = on_leaf(site, value, positive) if isinstance(value, Param) else on_leaf(site, value)
            if positive and not check:  # a draw (or a value substituted for it) must be positive too
                check_positive(values[name], f"{type(template).__name__}.{name} (site {site!r})")
        else:
            values[name] = value
    return template.replace(**values)


def _free(value) -> bool:
    return isinstance(value, (Distribution, Param))


def free_leaves(module) -> list:
    """The NumPyro priors and Params anywhere in a module (a template's free parameters; [] when concrete)."""
    return [leaf for leaf in jax.tree.leaves(module, is_leaf=_free) if _free(leaf)]


def check_concrete_module(module, name: str, where: str):
    """Refuse a template (a module with NumPyro priors or Params in its fields) where a concrete one is
    needed, naming the fields and the fix."""
    if free_leaves(module):
        fields = ", ".join(f for f in getattr(module, "_params", ()) if _free(getattr(module, f, None)))
        fields = fields or "a nested field"
        raise ValueError(f"{where} takes a concrete {name}, but this {type(module).__name__} has priors or Params "
                         f"({fields}): give numbers (e.g. {type(module).__name__}(1.0, 0.3)), or use an "
                         f"approximation (CollapsedGP, SparseGP) or spectral_gp inside a model, which sample them")
    return module


def check_module_fields(module):
    """The value checks of a module's constructor on a module built without it (``load_fit``, which rebuilds
    modules from their fields): every concrete field finite, every ``_positive`` one positive, nested
    modules too; a ``ValueError`` naming the field otherwise."""
    if isinstance(module, (list, tuple)):
        for m in module:
            check_module_fields(m)
        return module
    if not isinstance(module, Module):
        return module
    for name in module._params:
        value = getattr(module, name, None)
        if isinstance(value, (Module, list, tuple)):
            check_module_fields(value)
        elif value is not None and not isinstance(value, (Distribution, Param)) and is_concrete(value):
            where = f"{type(module).__name__}.{name}"
            check_finite(value, where)
            if name in module._positive:
                check_positive(value, where)
    return module


@validated
def stack_modules(modules: Annotated[Any, InstanceOf(list, tuple,
                                                     what="a list of modules (e.g. of kernels)")]) -> Module:
    """One module whose every leaf holds the given modules' values along a new leading axis: K concrete
    kernels (each built, so each validated, by its constructor) as the per-output kernel of
    ``spectral_gp(..., batched_kernel=True)``, e.g. ``stack_modules([Matern32(1.0, [0.1, 0.2]), Matern32(2.0,
    [0.3, 0.4])])`` (variance (2,), lengthscale (2, 2): per output and per dimension, which one
    constructor call cannot tell apart from per dimension alone).

    :raises ValueError: for an empty list, modules of different types or structures, or leaves of
        different shapes.
    """
    modules = list(modules)
    if not modules or not all(isinstance(m, Module) for m in modules):
        raise ValueError("stack_modules needs a non-empty list of modules (kernels, features, ...)")
    structures = {jax.tree_util.tree_structure(m) for m in modules}
    if len(structures) != 1:
        raise ValueError(f"stack_modules needs modules of one type and structure, got "
                         f"{[type(m).__name__ for m in modules]} with structures {sorted(map(str, structures))}")
    shapes = [[jnp.shape(leaf) for leaf in jax.tree.leaves(m)] for m in modules]
    if any(s != shapes[0] for s in shapes):
        raise ValueError(f"stack_modules needs leaves of the same shapes in every module, got {shapes}")
    return jax.tree.map(lambda *leaves: jnp.stack([jnp.asarray(v) for v in leaves]), *modules)


@validated
def instantiate(template: _TEMPLATE, prefix: _PREFIX = "", *, point: Flag = False) -> Module:
    """Turn a template into a concrete module, adding NumPyro sites for its free parameters.

    Must be called inside a NumPyro model or guide. Nested modules are walked with the prefix
    ``f"{prefix}{field}_"``; a sequence of modules (e.g. the per-dimension kernels of an additive kernel)
    with ``f"{prefix}{index}_"``.

    :param template: a :class:`Module` whose parameter fields may be Distributions or Params.
    :param prefix: prefix for the site names.
    :param point: guide mode: each Distribution field becomes a ``Delta`` site at a constrained
        ``numpyro.param`` named ``f"{site}_map"`` (MAP / type-II maximum likelihood under SVI).
    :returns: a module of the same type holding arrays.
    """
    import numpyro.distributions as dist

    def on_leaf(site, value, positive=False):
        if isinstance(value, Param):
            return numpyro.param(site, value.init, constraint=value.resolved(positive, f"site {site!r}"))
        if not point:
            return numpyro.sample(site, value)
        loc = numpyro.param(f"{site}_map", lambda rng_key: initial_value(value), constraint=value.support)
        return numpyro.sample(site, dist.Delta(loc, event_dim=len(value.event_shape)))

    return _walk(template, prefix, on_leaf)


@validated
def free_sites(template: _TEMPLATE, prefix: _PREFIX = "") -> dict:
    """The sample sites a template introduces: ``{site name: prior distribution}``.

    Also checks (outside any trace) that positive fields have priors with positive support and Params
    whose constraints keep them positive."""
    out = {}

    def on_leaf(site, value, positive=False):
        if isinstance(value, Distribution):
            out[site] = value
        else:
            value.resolved(positive, f"site {site!r}")
        return value

    _walk(template, prefix, on_leaf, check=True)
    return out


def as_rng_key(rng_key, name: str = "rng_key"):
    """A JAX PRNG key from ``rng_key``: a key is returned as it is, an int ``s`` becomes
    ``jax.random.PRNGKey(s)`` (the library's one conversion of an integer seed).

    :param rng_key: a JAX PRNG key (``jax.random.PRNGKey(s)`` or ``jax.random.key(s)``) or an int.
    :param name: the argument's name, for the error.
    :raises TypeError: for anything else (a float, None, an array that is not a key)."""
    if isinstance(rng_key, (int, np.integer)) and not isinstance(rng_key, bool):
        return jax.random.PRNGKey(int(rng_key))
    if hasattr(rng_key, "dtype") and (jax.dtypes.issubdtype(rng_key.dtype, jax.dtypes.prng_key)
                                      or (rng_key.dtype == jnp.uint32 and jnp.shape(rng_key)[-1:] == (2,))):
        return rng_key
    raise TypeError(f"{name} must be a JAX PRNG key (jax.random.PRNGKey(0)) or an int, got {rng_key!r}")
