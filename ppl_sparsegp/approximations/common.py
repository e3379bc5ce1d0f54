"""What the approximation files share, in one internal module (no private name crosses files): the
checks of fitted params and posterior draws against the sites a model creates (:func:`site_names`,
``require``), the refusal of a primitive outside a model run, the inputs' shape for the own-model
primitives, and the projection E[f(X) | u] they share (``project``); and the argument hints the
approximations' signatures share (``DataInputs``, ``Targets``, ``FittedParams``, ...; see
:mod:`ppl_sparsegp.validation`).

Only :func:`site_names` is public (the runner reads a guide's params with it); the rest are the approximation
files' own helpers, called with arguments the public entry points have already checked (the curated
surface: they are not in ``__all__``, so they are not part of the API and declare nothing)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import jax
import jax.numpy as jnp
from numpyro import handlers

from ..conditionals import conditional, projected_mean
from ..kernels import check_inputs
from ..numpyro_internals import inside_model_run
from ..validation import (
    AnyOf,
    ArrayOf,
    Draws,
    InstanceOf,
    IsCallable,
    Key,
    OneOf,
    OrNone,
    Template,
    validated,
    with_fix,
)

__all__ = ["site_names"]

#: an approximation's inputs: an array (N, D) or (N,), or a Grid; only the rank is judged here (the values by
#: ``check_inputs`` in the body, which also reads a distributed array block by block: nothing is read twice)
DataInputs = Annotated[Any, AnyOf(ArrayOf(rank=(1, 2), read=False),
                                  InstanceOf("ppl_sparsegp.grid.Grid", what="a Grid"))]
MaybeInputs = Annotated[Any, OrNone(DataInputs.__metadata__[0])]
#: targets (N,) (their values judged by the likelihood's ``validate`` in the body, against X's rows there)
Targets = Annotated[Any, ArrayOf(rank=1, read=False)]
MaybeTargets = Annotated[Any, OrNone(ArrayOf(rank=1, read=False))]
_PARAMS = InstanceOf(Mapping, what="the SVI params (svi_result.params, a dict)")
FittedParams = Annotated[Any, _PARAMS]
MaybeParams = Annotated[Any, OrNone(_PARAMS)]
MaybeDraws = Annotated[Any, OrNone(Draws())]
#: a PRNG key (NumPyro's Predictive and jax.random take no int seed)
AKey = Annotated[Any, Key(allow_int=False)]
MaybeKey = Annotated[Any, OrNone(Key())]  # a key or an int seed (as_rng_key converts it)
#: a constant mean: a finite number (or one per latent GP), a NumPyro prior or a Param
LatentMean = Annotated[Any, Template(rank=(0, 1), positive=False)]
#: the own-model primitives' feature: their order is (feature, kernel), and the fix says so
PrimitiveFeature = Annotated[Any, with_fix(
    InstanceOf("ppl_sparsegp.features.base.InducingFeature", what="an InducingFeature (e.g. FourierFeatures(-1.0, "
                                                                  "2.0, 8))"),
    "pass the inducing feature first and the kernel second, (feature, kernel): if a kernel came first, swap them")]
AnOperator = Annotated[Any, InstanceOf("ppl_sparsegp.linalg.LinearOperator",
                                       what="a LinearOperator (e.g. Kuu(feature, kernel))")]
MaybeOperator = Annotated[Any, OrNone(AnOperator.__metadata__[0])]
AStatistics = Annotated[Any, InstanceOf("ppl_sparsegp.covariances.SufficientStatistics",
                                        what="SufficientStatistics (e.g. SufficientStatistics.from_kuf(Kuf, y))")]
MaybeStatistics = Annotated[Any, OrNone(AStatistics.__metadata__[0])]


@validated
def site_names(gp: Annotated[Any, InstanceOf("ppl_sparsegp.approximations.base.GPModel",
                                             what="an approximation (e.g. a SparseGP)")],
               fn: Annotated[Any, IsCallable()], kind: Annotated[str, OneOf("param", "sample")]) -> list:
    """Names of the ``kind`` ("param" or "sample") sites that ``fn`` (the guide, or the model's
    components) creates, found by tracing it abstractly (``jax.eval_shape``: no FLOPs, and no concrete
    values needed, so it also works under ``jit``); cached on the model.

    :param gp: the approximation (the cache lives on it).
    :param fn: its guide, or its ``components`` (the model's hyperparameter sites).
    :param kind: ``"param"`` or ``"sample"``.
    :returns: the site names, in the order ``fn`` creates them.
    """
    cache = gp.__dict__.setdefault("_site_names", {})
    key = (getattr(fn, "__name__", repr(fn)), kind)
    if key not in cache:
        names = []

        def run():
            with handlers.block():
                tr = handlers.trace(handlers.seed(fn, rng_seed=0)).get_trace()
            names.extend(name for name, site in tr.items()
                         if site["type"] == kind and not site.get("is_observed", False))
            return 0

        jax.eval_shape(run)
        cache[key] = tuple(names)
    return list(cache[key])


def require(method: str, argument: str, given: dict, required, hint: str):
    """Raise ``ValueError`` naming the entries of ``required`` that ``given`` lacks (a name ``<site>_map``
    may also be given as ``<site>``), and the keys of ``given`` that match none of them (typos, or values
    for another model). Nothing is substituted silently: a missing param would fall back to its initial
    value, a missing sample site to a prior draw."""
    keys = set(given)
    missing = [n for n in required if n not in keys and not (n.endswith("_map") and n[:-4] in keys)]
    if not missing:
        return
    known = set(required) | {n[:-4] for n in required if n.endswith("_map")}
    unexpected = sorted(k for k in keys if k not in known)
    msg = f"{method}: {argument} is missing {', '.join(repr(n) for n in missing)}"
    if unexpected:
        msg += f"; it has unexpected {', '.join(repr(k) for k in unexpected)}"
    raise ValueError(f"{msg} ({hint})")


def require_params(gp, method: str, params: dict):
    """Every param the model's guide creates must be in ``params`` (SVI on another guide, a misspelt key
    or a partial dict would otherwise silently use initial values)."""
    if not isinstance(params, Mapping):
        raise TypeError(f"{method}: params must be a dict (svi_result.params), got {type(params).__name__}")
    require(method, "params", params, site_names(gp, gp.guide, "param"),
            "pass svi_result.params from SVI on this model's guide")


def require_samples(gp, method: str, samples: dict, *latent):
    """Every sampled hyperparameter (and the ``latent`` sites) must have draws in ``samples``; a missing
    site would otherwise be drawn from its prior with a fixed seed."""
    if not isinstance(samples, Mapping):
        raise TypeError(f"{method}: samples must be a dict (mcmc.get_samples()), got {type(samples).__name__}")
    require(method, "samples", samples, site_names(gp, gp.components, "sample") + list(latent),
            "pass mcmc.get_samples() from MCMC on this model")


def require_model(primitive: str):
    """Refuse a primitive called outside a model's run (it adds sample sites)."""
    if not inside_model_run():  # NumPyro's handler stack: empty outside a model's run
        raise ValueError(f"{primitive} adds sample sites: call it inside a NumPyro model run by an inference "
                         "engine (MCMC, SVI, Predictive) or under numpyro.handlers.seed(model, rng_seed=0)")


def as_inputs(X, name):
    """(N, D) inputs; a vector of shape (N,) is one input dimension (as ``numpyro.contrib.hsgp`` takes)."""
    if not hasattr(X, "points") and jnp.ndim(X) == 1:
        with jax.ensure_compile_time_eval():  # data stays concrete inside a trace (so Kuf can be a constant)
            X = jnp.asarray(X)[:, None]
    return check_inputs(X, name)


def project(feature, kernel, X, value, whiten, Kmm, need_var=True):
    r"""E[f(X) | u] and the residual variance (without ``need_var``: the mean alone,
    :func:`~ppl_sparsegp.conditionals.projected_mean`); inside ``numpyro.plate``\ s the inducing value has
    leading batch dimensions (one latent function per output or group) and the means come back with the
    same leading dimensions, (..., N), from ONE Kuf and one solve with a matrix right-hand side."""
    batched = jnp.ndim(value) > 1
    q_mu = jnp.reshape(value, (-1, jnp.shape(value)[-1])).T if batched else value
    if need_var:
        mean, var = conditional(feature, kernel, X, q_mu, whiten=whiten, Kmm=Kmm)
    else:
        mean = projected_mean(feature, kernel, X, q_mu, whiten=whiten, Kmm=Kmm)
    if batched:
        mean = jnp.reshape(mean.T, jnp.shape(value)[:-1] + (-1,))  # (N, B) -> (..., N)
    return (mean, var) if need_var else mean
