r"""The ground-floor dispatchers every feature family registers into (as GPflow's ``covariances``).

* ``Kuu(feature, kernel)`` → a :mod:`~ppl_sparsegp.linalg` operator: the covariance of the inducing
  variables;
* ``Kuf(feature, kernel, X)`` → (M, N) array: cov(u, f(X));
* ``conditional(feature, kernel, X, q_mu, q_cov=None, *, whiten=False, Kmm=None, rng_key=None)`` →
  (mean, var): the q(f(X)) marginals (the default lives in :mod:`ppl_sparsegp.conditionals`; a family
  overrides it only where its structure demands);
* ``sufficient_statistics(feature, kernel, X, y, **options)`` → :class:`SufficientStatistics`: the data
  summaries of the collapsed bound (the default forms Kuf; VFF streams them in one pass).

A family registers next to its class, so nothing here imports a family and nothing imports upward::

    @Kuu.register(MyFeatures, Matern32)
    def _(feature, kernel): return DiagPlusLowRank(...)

    @Kuf.register(MyFeatures, Matern32)
    def _(feature, kernel, X): return ...          # (M, N) array

Lookup walks the method resolution orders of the feature and kernel types (feature first). The
approximations only ever call these four, so a new family needs no change elsewhere.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

__all__ = ["Dispatcher", "FeatureDispatcher", "Kuu", "Kuf", "kuf_basis", "conditional", "sufficient_statistics",
           "SufficientStatistics"]


class Dispatcher:
    """Multiple dispatch on ``(type(feature), type(kernel))`` by method resolution order."""

    def __init__(self, name: str, doc: str = ""):
        self.name, self.__doc__ = name, doc
        self.registry: dict = {}

    def register(self, feature_type: type, kernel_type: type):
        def decorator(fn):
            self.registry[(feature_type, kernel_type)] = fn
            return fn
        return decorator

    def dispatch(self, feature: Any, kernel: Any):
        for F in type(feature).__mro__:
            for K in type(kernel).__mro__:
                fn = self.registry.get((F, K))
                if fn is not None:
                    return fn
        supported = sorted({f"({F.__name__}, {K.__name__})" for F, K in self.registry
                            if isinstance(feature, F)})
        raise NotImplementedError(
            f"{self.name} is not defined for feature {type(feature).__name__} with kernel "
            f"{type(kernel).__name__}; supported kernels for this feature: "
            f"{', '.join(supported) or 'none'}")

    def __call__(self, feature: Any, kernel: Any, *args, **kwargs):
        return self.dispatch(feature, kernel)(feature, kernel, *args, **kwargs)


class FeatureDispatcher:
    """Dispatch on ``type(feature)`` alone by method resolution order; the default is the
    registration for ``object``."""

    def __init__(self, name: str, doc: str = ""):
        self.name, self.__doc__ = name, doc
        self.registry: dict = {}

    def register(self, feature_type: type):
        def decorator(fn):
            self.registry[feature_type] = fn
            return fn
        return decorator

    @property
    def default(self):
        return self.registry[object]

    def dispatch(self, feature: Any):
        for F in type(feature).__mro__:
            if F in self.registry:
                return self.registry[F]
        raise NotImplementedError(f"{self.name} has no registration for {type(feature).__name__}")

    def __call__(self, feature: Any, *args, **kwargs):
        return self.dispatch(feature)(feature, *args, **kwargs)


class _KuuDispatcher(Dispatcher):
    """:data:`Kuu`: every approximation calls it, so the checks of its result live here; a higher floor
    registers them (``Kuu.checks.append(fn)``, ``fn(out)``, as the float32-on-a-GPU warning of
    :mod:`ppl_sparsegp.features.base`), so that nothing here imports upward."""

    def __init__(self, name: str, doc: str = ""):
        super().__init__(name, doc)
        self.checks: list = []

    def __call__(self, feature: Any, kernel: Any, *args, **kwargs):
        out = super().__call__(feature, kernel, *args, **kwargs)
        for check in self.checks:
            check(out)
        return out


Kuu = _KuuDispatcher("Kuu", r"""Kuu(feature, kernel)

The covariance of the inducing variables, :math:`K_{uu} = \operatorname{cov}(\mathbf u, \mathbf u)`.

:param feature: an :class:`~ppl_sparsegp.features.InducingFeature` (M features).
:param kernel: a concrete kernel (no priors left in it).
:returns: a :class:`~ppl_sparsegp.linalg.LinearOperator` (M, M) whose structure the family chooses
    (dense, diagonal + low rank, block-diagonal, Kronecker, identity).
:raises NotImplementedError: when no family registered this (feature, kernel) pair; the message lists
    the kernels the feature supports.""")
Kuf = Dispatcher("Kuf", r"""Kuf(feature, kernel, X)

The cross-covariance :math:`K_{uf} = \operatorname{cov}(\mathbf u, f(X))`.

:param feature: an :class:`~ppl_sparsegp.features.InducingFeature` (M features).
:param kernel: a concrete kernel.
:param X: inputs (N, D), or a :class:`~ppl_sparsegp.Grid`.
:returns: an (M, N) array.
:raises NotImplementedError: when no family registered this (feature, kernel) pair.""")
conditional = FeatureDispatcher(
    "conditional", r"""conditional(feature, kernel, X, q_mu, q_cov=None, whiten=False, Kmm=None, rng_key=None)

The marginals of :math:`q(f(X))` for :math:`q(\mathbf u) = \mathcal N(\mathbf m, S)` (or of
:math:`p(f \mid \mathbf u = \mathbf m)` when ``q_cov`` is None):
:math:`\mu = K_{fu}K_{uu}^{-1}\mathbf m`,
:math:`\sigma^2 = k_{ff} - \operatorname{diag}(K_{fu}K_{uu}^{-1}(K_{uu} - S)K_{uu}^{-1}K_{uf})`
[Titsias 2009; Hensman et al. 2015]. The default is :func:`ppl_sparsegp.conditionals.conditional`;
a family registers a faster one where its structure allows.

:param feature: an :class:`~ppl_sparsegp.features.InducingFeature` (M features).
:param kernel: a concrete kernel.
:param X: inputs (N, D) or a Grid.
:param q_mu: the mean (M,) of q(u) (of q(v) when ``whiten``).
:param q_cov: its covariance, a LinearOperator (M, M), or None for the conditional at ``u = q_mu``.
:param whiten: (keyword-only, as ``Kmm`` and ``rng_key``) read ``q_mu``, ``q_cov`` as the distribution of v with
    u = R v.
:param Kmm: a precomputed :data:`Kuu` (optional).
:param rng_key: a PRNG key for the families that estimate Kuf by Monte Carlo (trigonometric VOF with a
    stochastic estimator); without it they use their deterministic quadrature.
:returns: ``(mean, var)``, each (N,).""")
kuf_basis = Dispatcher("kuf_basis", r"""kuf_basis(feature, kernel, X)

Kuf factored as :math:`\operatorname{diag}(\mathbf s)\Phi` with Φ free of the hyperparameters where the
family allows: a model integrating the inducing variables out (:func:`~ppl_sparsegp.marginal_spectral_gp`)
then computes the data statistics ΦΦᵀ, Φy once. The default is ``(None, Kuf)``, concrete inside a trace
exactly when Kuf does not depend on the hyperparameters (VFF inside its box); the periodic kernel's
Fourier features register Φ = the Fourier basis and s = the kernel's Fourier coefficients.

:param feature: an :class:`~ppl_sparsegp.features.InducingFeature` (M features).
:param kernel: a concrete kernel.
:param X: inputs (N, D).
:returns: ``(s, Phi)``: s (M,) or None (for s = 1), Phi an (M, N) array.
:raises NotImplementedError: when Kuf is not defined for this (feature, kernel) pair.""")
sufficient_statistics = Dispatcher("sufficient_statistics", r"""sufficient_statistics(feature, kernel, X, y)

The :class:`SufficientStatistics` of all the data: :math:`A = K_{uf}K_{uf}^\top`,
:math:`\mathbf c = K_{uf}\mathbf y`, :math:`\mathbf y^\top\mathbf y`, N, :math:`K_{uf}\mathbf 1` and
:math:`\sum_n y_n`, all the collapsed bound needs. The default forms Kuf; VFF registers its one-pass
streaming (any array kind, chunks, NUFFT: :func:`~ppl_sparsegp.features.fourier_statistics.fourier_statistics`).

:param X: inputs (N, D); ``y``: targets (N,).
:param options: keyword options of the registered implementation (VFF's: ``chunk_size``, ``method``, ...).
:returns: a :class:`SufficientStatistics`.""")


class SufficientStatistics(NamedTuple):
    """``A = Kuf Kufᵀ`` (M, M), ``c = Kuf y`` (M,), ``yy = yᵀy``, ``n`` = N, and for centring by a
    constant mean ``f1 = Kuf 1`` (M,) and ``ysum = Σ y`` (optional). They add over blocks of data.

    ``root`` (M, r), optional, is a square root of A (``A = root rootᵀ``), the form the collapsed bound
    is evaluated from: Kuf itself on data, or :meth:`with_root` for precomputed A. A may then be None.
    On data ``y`` (N,) is kept too, so that W y is formed as G y, with the same rounding as G (not as
    Rᵀ Kuu⁻¹ c, which differs by Kuu's conditioning)."""

    A: jnp.ndarray | None
    c: jnp.ndarray
    yy: jnp.ndarray
    n: jnp.ndarray
    f1: jnp.ndarray | None = None
    ysum: jnp.ndarray | None = None
    root: jnp.ndarray | None = None
    y: jnp.ndarray | None = None

    @classmethod
    def from_kuf(cls, Kmn: jax.Array, y: jax.Array, *, keep_root: bool = False) -> "SufficientStatistics":
        """The statistics of one block of data (they add over blocks). ``keep_root=True`` keeps Kuf as
        ``root`` and skips the O(NM²) product A (the form the collapsed bound reads)."""
        A = None if keep_root else Kmn @ Kmn.T
        return cls(A, Kmn @ y, jnp.dot(y, y), jnp.asarray(y.shape[0], Kmn.dtype), jnp.sum(Kmn, axis=1),
                   jnp.sum(y), Kmn if keep_root else None, y if keep_root else None)

    @property
    def num_features(self) -> int:
        """M."""
        return int(jnp.shape(self.c)[0])

    def with_root(self) -> "SufficientStatistics":
        r"""These statistics with ``root`` = :math:`U\Lambda_+^{1/2}` from A's eigendecomposition
        :math:`A = U\Lambda U^\top` (eigenvalues clipped at 0: A is PSD, rounding can make the
        smallest slightly negative). O(M³), once: call it on precomputed statistics, not per step."""
        if self.root is not None:
            return self
        lam, U = jnp.linalg.eigh(0.5 * (self.A + self.A.T))
        return self._replace(root=U * jnp.sqrt(jnp.maximum(lam, 0.0)))

    def centred(self, mean: ArrayLike):
        r"""The statistics of :math:`\mathbf y - \mu\mathbf 1` for a constant mean μ:
        :math:`\mathbf c - \mu\mathbf f_1`, :math:`\mathbf y^\top\mathbf y - 2\mu\sum y + \mu^2 N`,
        :math:`\sum y - \mu N` (A, f1 and N are unchanged)."""
        if self.f1 is None or self.ysum is None:
            raise ValueError("these SufficientStatistics have no f1 = Kuf·1 and ysum = Σy, so they cannot "
                             "be centred by a constant mean; compute them with sufficient_statistics or "
                             "SufficientStatistics.from_kuf")
        return self._replace(c=self.c - mean * self.f1, yy=self.yy - 2 * mean * self.ysum + mean**2 * self.n,
                             ysum=self.ysum - mean * self.n, y=None if self.y is None else self.y - mean)


@kuf_basis.register(object, object)
def _kuf_as_basis(feature, kernel, X):
    """Default: Kuf itself, unscaled."""
    return None, Kuf(feature, kernel, X)


@sufficient_statistics.register(object, object)
def _dense_statistics(feature, kernel, X, y):
    """Default: from the dense Kuf (O(NM²)); X and y in memory."""
    return SufficientStatistics.from_kuf(Kuf(feature, kernel, X), jnp.asarray(y))
