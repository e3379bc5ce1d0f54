r"""Spherical harmonic features on many rows: the collapsed bound on one-pass statistics, fitted by L-BFGS.

For a :class:`~ppl_sparsegp.kernels.Zonal` kernel the spherical features' Kuf depends only on the input
map (the scales s and the bias b of :class:`~ppl_sparsegp.kernels.Zonal`), not on σ² or the shape of
κ. :func:`fit_spherical` uses that in three stages [1, §5]:

1. **the map** (s, b) and a starting point: type-II MAP of every hyperparameter by L-BFGS
   (:func:`~ppl_sparsegp.approximations.map_estimate.map_lbfgs`) on the collapsed bound of a random
   subsample of ``subsample`` rows (O(n M_s²) per evaluation, with the features ``map_feature``, by
   default the same as ``feature``);
2. **one pass** over all N rows in chunks with (s, b) fixed: the sufficient statistics
   :math:`A = K_{uf}K_{fu}`, :math:`K_{uf}\mathbf y`, :math:`\mathbf y^\top\mathbf y`, N
   (:func:`~ppl_sparsegp.features.spherical.spherical_statistics`; O(N M²), memory O(chunk · M + M²),
   never the (M, N) Kuf);
3. **MAP of the rest** (σ², the shape of κ, the noise) by L-BFGS on
   :class:`~ppl_sparsegp.CollapsedGP` holding those statistics: O(M³) per evaluation, no N.

The result predicts in chunks from the optimal whitened :math:`q(\mathbf v)` (:meth:`SphericalFit.predict`).

References:
    1. Dutordoir, Durrande, Hensman (2020), Sparse Gaussian processes with spherical harmonic features, ICML.
    2. Titsias (2009), Variational learning of inducing variables in sparse Gaussian processes, AISTATS.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np

from ..conditionals import conditional
from ..covariances import Kuu, sufficient_statistics
from ..features.base import InducingFeature
from ..features.registry import FAMILIES
from ..kernels import Zonal, constant_kernel_diagonal
from ..likelihoods import Gaussian
from ..parameters import as_rng_key, is_concrete
from ..validation import ArrayOf, Count, InstanceOf, Integer, OrNone, Real, RngKey, WrongArgumentType, validated
from .collapsed import CollapsedGP, collapsed_elbo_from_stats
from .map_estimate import map_lbfgs

__all__ = ["fit_spherical", "SphericalFit"]


@dataclass
class SphericalFit:
    """The result of :func:`fit_spherical`.

    :ivar gp: the :class:`~ppl_sparsegp.CollapsedGP` holding the statistics of all rows (its kernel's map
        fixed at the fitted s, b).
    :ivar values: the MAP value of each free hyperparameter site (``{site: array}``), the map's included.
    :ivar kernel: the concrete kernel at ``values``; ``noise_variance``: σ_n² at ``values``.
    :ivar bound: the collapsed bound :math:`\\mathcal L \\le \\log p(\\mathbf y)` of all rows at ``values``.
    :ivar q: the optimal whitened ``(m_v (M,), S_v (M, M) operator)`` at ``values``.
    :ivar info: ``{"subsample": …, "full": …}``: the two L-BFGS records of
        :func:`~ppl_sparsegp.approximations.map_estimate.map_lbfgs` (``None`` for a skipped stage 1).
    :ivar seconds: wall seconds of the stages: ``subsample``, ``statistics``, ``optimise``.
    """

    gp: CollapsedGP
    values: dict
    kernel: Zonal
    noise_variance: float
    bound: float
    q: tuple
    info: dict
    seconds: dict = field(default_factory=dict)

    @property
    def feature(self):
        return self.gp.feature

    @validated
    def predict(self, X_new: Annotated[Any, ArrayOf(rank=2, read=False)], *,
                chunk_size: Count = 8192) -> tuple[np.ndarray, np.ndarray]:
        """Predictive marginals of f at ``X_new`` (N*, D) in chunks of ``chunk_size`` rows (one compilation).

        :returns: ``(f_mean (N*,), f_var (N*,))`` NumPy arrays; add ``noise_variance`` for y.
        :raises ValueError: for X_new with the wrong number of columns, NaN/inf, or a bad chunk_size.
        """
        _check_int(chunk_size, "chunk_size")
        X_new = np.asarray(X_new, dtype=np.float64)
        if X_new.ndim != 2 or X_new.shape[1] != self.feature.input_dim:
            raise ValueError(f"X_new must have shape (N*, {self.feature.input_dim}), got {X_new.shape}")
        if not np.all(np.isfinite(X_new)):
            raise ValueError("X_new contains NaN or inf")
        _, _, _, c = self.gp.components_from(self.values)
        m_v, S_v = self.q
        dtype = jnp.result_type(float)
        ms, vs = [], []
        for start in range(0, len(X_new), chunk_size):
            Xc = X_new[start:start + chunk_size]
            n = len(Xc)
            if n < chunk_size and len(X_new) > chunk_size:  # pad the last chunk: one compilation
                Xc = np.concatenate([Xc, np.repeat(Xc[:1], chunk_size - n, 0)])
            mean, var = _predict_chunk(self.feature, self.kernel, jnp.asarray(Xc, dtype), m_v, S_v)
            ms.append(np.asarray(mean)[:n])
            vs.append(np.asarray(var)[:n])
        if not ms:
            return np.zeros(0), np.zeros(0)
        return np.concatenate(ms) + float(c), np.concatenate(vs)


@jax.jit
def _predict_chunk(feature, kernel, X, m_v, S_v):
    # q as arguments, not closed over: closed-over arrays are folded as constants at compile time
    return conditional(feature, kernel, X, m_v, S_v, whiten=True)


def _check_int(value, name, low=1):
    if isinstance(value, bool) or int(value) != value or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def _check_arguments(feature, map_feature, kernel, likelihood, X, y, subsample, num_steps, chunk_size):
    """Eager validation of :func:`fit_spherical`'s arguments (clear errors naming the argument)."""
    for name, f in (("feature", feature), ("map_feature", map_feature)):
        if _ONE_PASS.problem(f) is not None:
            raise ValueError(f"{name} must be {_ONE_PASS.allowed}, got {type(f).__name__}; for other "
                             "features use CollapsedGP with map_lbfgs")
    if map_feature.input_dim != feature.input_dim:
        raise ValueError(f"map_feature has input_dim = {map_feature.input_dim}, feature has {feature.input_dim}: "
                         "build both for the same columns")
    if not isinstance(kernel, Zonal):
        raise ValueError(f"kernel must be a Zonal kernel (e.g. ChordalMatern), got {type(kernel).__name__}")
    if kernel.order != 0:
        raise ValueError(f"kernel must have a constant diagonal (order 0, e.g. ChordalMatern); "
                         f"{type(kernel).__name__} of order {kernel.order} has not")
    feature.check_kernel(kernel)
    if not isinstance(likelihood, Gaussian):
        raise ValueError(f"likelihood must be Gaussian (the collapsed bound), got {type(likelihood).__name__}")
    _check_int(subsample, "subsample", 2)
    _check_int(num_steps, "num_steps")
    _check_int(chunk_size, "chunk_size")
    if len(getattr(X, "shape", ())) != 2 or X.shape[1] != feature.input_dim:
        raise ValueError(f"X must have shape (N, {feature.input_dim}), got {getattr(X, 'shape', None)}")
    if np.shape(y) != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {np.shape(y)}")
    if X.shape[0] < 2:
        raise ValueError(f"X needs at least 2 rows, got {X.shape[0]}")


def _numpy_generator(rng_key):
    """The subsample's NumPy generator: seeded with an int as it is, with a JAX key by the key's data."""
    if isinstance(rng_key, (int, np.integer)) and not isinstance(rng_key, bool):
        return np.random.default_rng(int(rng_key))
    return np.random.default_rng(np.asarray(jax.random.key_data(as_rng_key(rng_key))))


class _OnePass(InstanceOf):
    """Features of a family with one-pass statistics (:attr:`~ppl_sparsegp.features.InducingFeature.
    one_pass_with_fixed_map`: spherical harmonics), named from the registry of families."""

    def __init__(self):
        names = [f.name for f in FAMILIES if f.feature_class.one_pass_with_fixed_map]
        super().__init__(InducingFeature, what=" or ".join(names))

    def problem(self, value):
        return super().problem(value) or (None if value.one_pass_with_fixed_map else (
            WrongArgumentType, f"of type {type(value).__name__}, a family without one-pass statistics"))


_ONE_PASS = _OnePass()


@validated
def fit_spherical(feature: Annotated[Any, _ONE_PASS], kernel: Annotated[Any, InstanceOf(Zonal, what="a Zonal kernel")],
                  likelihood: Annotated[Any, InstanceOf(Gaussian, what="Gaussian (the collapsed bound's)")],
                  X: Annotated[Any, ArrayOf(rank=2, read=False)], y: Annotated[Any, ArrayOf(rank=1, read=False)], *,
                  map_feature: Annotated[Any, OrNone(_ONE_PASS)] = None, subsample: Annotated[int, Integer(2)] = 5000,
                  num_steps: Count = 200,
                  chunk_size: Count = 8192, mean: Annotated[float, Real()] = 0.0,
                  rng_key: RngKey = 0) -> SphericalFit:
    r"""Fit spherical harmonic features to N rows (up to millions) by the collapsed bound: the input map from a
    subsample MAP, the one-pass statistics of all rows, L-BFGS on the rest at O(M³) per step [1].

    The three stages are in the module docstring (:mod:`ppl_sparsegp.approximations.spherical_fit`). The
    objective of stages 1 and 3 is the log joint of :class:`~ppl_sparsegp.CollapsedGP` (the priors of
    ``kernel`` and ``likelihood`` included),

    .. math::

        \log p(\theta) + \log\mathcal N(\mathbf y\mid 0, Q_{ff}+\sigma_n^2 I)
        - \tfrac{1}{2\sigma_n^2}\operatorname{tr}(K_{ff}-Q_{ff}),\qquad Q_{ff} = K_{fu}K_{uu}^{-1}K_{uf}

    [2]; stage 3 evaluates it from the statistics of all rows with the map (s, b) held at stage 1's values.
    Cost: stage 1 O(subsample · M_s²) per evaluation, stage 2 O(N M²) once (memory O(chunk_size · M + M²)),
    stage 3 O(M³) per evaluation. Inputs should be on a unit scale (e.g. standardised or centred in
    [−½, ½]) for the default priors of the scales; y standardised, or ``mean`` set.

    :param feature: :class:`~ppl_sparsegp.SphericalHarmonicFeatures` (M features) of the final fit.
    :param kernel: a :class:`~ppl_sparsegp.kernels.Zonal` kernel template with a constant diagonal
        (:class:`~ppl_sparsegp.ChordalMatern`): priors on ``lengthscale`` (the scales s, scalar or (D,)) and
        ``bias`` are fitted in stage 1 and then fixed; numbers there are kept.
    :param likelihood: a :class:`~ppl_sparsegp.Gaussian` likelihood (its variance a prior or a number).
    :param X: (N, D) inputs: any array with ``.shape`` and row slicing (NumPy, ``np.memmap``); read in
        chunks, never copied to the device whole.
    :param y: (N,) targets.
    :param map_feature: the features of stage 1 (default ``feature``); a lower degree makes stage 1
        cheaper at large M (the map needs only the coarse structure).
    :param subsample: rows of stage 1 (drawn without replacement with ``rng_key``; all rows when N is smaller).
    :param num_steps: at most this many L-BFGS iterations in each stage.
    :param chunk_size: rows per chunk of stage 2 and of :meth:`SphericalFit.predict`.
    :param mean: a constant mean (a number; default 0).
    :param rng_key: the JAX PRNG key of the prior-median starting point, or an int (converted once with
        ``jax.random.PRNGKey``); the subsample's NumPy generator is seeded with the int itself (as before) or
        with the key's data.
    :returns: a :class:`SphericalFit` (``gp``, ``values``, ``kernel``, ``noise_variance``, ``bound``, ``q``,
        ``info``, ``seconds``; ``predict(X_new)``).
    :raises ValueError: for a feature other than SphericalHarmonicFeatures, a non-Zonal kernel or one whose
        diagonal is not constant, a likelihood other than Gaussian, X or y of the wrong shape or with
        NaN/inf, a non-positive ``subsample``, ``num_steps`` or ``chunk_size``.

    References:
        1. Dutordoir, Durrande, Hensman (2020), Sparse Gaussian processes with spherical harmonic
           features, ICML.
        2. Titsias (2009), Variational learning of inducing variables in sparse Gaussian processes, AISTATS.
    """
    map_feature = feature if map_feature is None else map_feature
    generator, rng_key = _numpy_generator(rng_key), as_rng_key(rng_key)  # converted once
    _check_arguments(feature, map_feature, kernel, likelihood, X, y, subsample, num_steps, chunk_size)
    N = X.shape[0]
    free_map = [f for f in feature.kuf_kernel_fields if not is_concrete(getattr(kernel, f))]
    seconds, v0, info0 = {"subsample": 0.0}, None, None
    if free_map:  # 1. the map (s, b) and the starting point, from a subsample (data path)
        t0 = time.perf_counter()
        idx = np.sort(generator.choice(N, min(subsample, N), replace=False))
        Xs, ys = np.asarray(X[idx], np.float64), np.asarray(y[idx], np.float64)
        if not (np.all(np.isfinite(Xs)) and np.all(np.isfinite(ys))):
            raise ValueError("X or y contains NaN or inf (in the subsample of stage 1)")
        small = CollapsedGP(map_feature, kernel, likelihood, mean)
        v0, info0 = map_lbfgs(small.model, small.hyperparameter_sites(), model_args=(jnp.asarray(Xs), jnp.asarray(ys)),
                              num_steps=num_steps, rng_key=rng_key)
        kernel = kernel.replace(**{f: jnp.asarray(v0[f"kernel_{f}"]) for f in free_map})
        seconds["subsample"] = time.perf_counter() - t0
    t0 = time.perf_counter()  # 2. one pass over all rows with the map fixed
    stats = jax.block_until_ready(sufficient_statistics(feature, kernel, X, y, chunk_size=chunk_size))
    seconds["statistics"] = time.perf_counter() - t0
    gp = CollapsedGP(feature, kernel, likelihood, mean, statistics=stats)
    t0 = time.perf_counter()  # 3. MAP of σ², the shape of κ and the noise at O(M³) per evaluation
    sites = gp.hyperparameter_sites()
    init = None if v0 is None else {k: v0[k] for k in sites}
    values, info = map_lbfgs(gp.model, sites, init=init, num_steps=num_steps, rng_key=rng_key)
    seconds["optimise"] = time.perf_counter() - t0
    if v0 is not None:
        values.update({f"kernel_{f}": np.asarray(v0[f"kernel_{f}"]) for f in free_map})
    k, lik, f, c = gp.components_from(values)
    centred = gp.precomputed if c is None or float(c) == 0.0 else gp.precomputed.centred(c)
    bound = collapsed_elbo_from_stats(Kuu(f, k), centred, stats.n * constant_kernel_diagonal(k), lik.variance)
    q = gp.optimal_q(values)
    return SphericalFit(gp=gp, values=values, kernel=k, noise_variance=float(lik.variance), bound=float(bound),
                        q=q, info={"subsample": info0, "full": info}, seconds=seconds)
