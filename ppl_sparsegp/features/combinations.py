r"""Multi-input features built from 1-D features, one per input dimension.

* :class:`AdditiveFeatures` with an :class:`~ppl_sparsegp.kernels.Additive` kernel
  :math:`k = \sum_d k_d`: features of different dimensions are independent, so
  :math:`K_{uu} = \operatorname{blockdiag}_d K_{uu}^{(d)}` and :math:`K_{uf} = [K_{uf}^{(d)}]_d` stacked
  [1, §4.1].
* :class:`KroneckerFeatures` with a :class:`~ppl_sparsegp.kernels.Product` kernel
  :math:`k = \prod_d k_d`: :math:`\boldsymbol\phi(\mathbf x) = \otimes_d\boldsymbol\phi^{(d)}(x_d)`,
  :math:`K_{uu} = \otimes_d K_{uu}^{(d)}` and Kuf the column-wise Kronecker (Khatri–Rao) product
  [1, §4.2, eqs. 69–73]. On a :class:`~ppl_sparsegp.grid.Grid` the conditional works per axis and never
  forms the full Kuf: O(M^D · G) per evaluation.
* :class:`AdditiveOrthogonal`: one variational orthogonal family per input column
  (:class:`~ppl_sparsegp.features.HermiteFeatures`, :class:`~ppl_sparsegp.features.TrigonometricFeatures`)
  with an :class:`~ppl_sparsegp.kernels.Additive` kernel: :math:`K_{uu} = I`, Kuf stacked [2].

The first two work with any 1-D family (Fourier, orthogonal, inducing points).

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, JMLR 18.
    2. Burt, Rasmussen, van der Wilk (2020), Variational orthogonal features, arXiv:2006.13170.
"""
from __future__ import annotations

from typing import Annotated, Any, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from ..conditionals import conditional
from ..covariances import Kuf, Kuu
from ..grid import Grid
from ..kernels import Additive, Kernel, Matern12, Matern32, Matern52, Product, check_inputs
from ..linalg import BlockDiag, Identity, Kronecker, LinearOperator
from ..validation import (
    AKernel,
    AnyOf,
    ArrayOf,
    Count,
    Inputs,
    InstanceOf,
    MaxMargin,
    MaybeCount,
    NonNegative,
    NonNegativeInt,
    Quantile,
    Tolerance,
    validated,
)
from .base import (
    InducingFeature,
    MaybeLengthscale,
    SequenceOf,
    TooManyFeatures,
    check_feature_cap,
    constant_kuf,
    matern_template,
)
from .float32 import warn_float32
from .fourier import FourierFeatures
from .fourier_sizes import lengthscale_range
from .hermite import HermiteFeatures
from .inducing_points import InducingPoints
from .trigonometric import TrigonometricFeatures, combine_moments, mc_kuf_pair, mc_moments

__all__ = ["AdditiveFeatures", "KroneckerFeatures", "AdditiveOrthogonal"]

_MATERN = {0.5: Matern12, 1.5: Matern32, 2.5: Matern52}
#: inputs (N, D) or a Grid
Points = Annotated[Any, AnyOf(ArrayOf(rank=2), InstanceOf(Grid, what="a Grid"))]


class _PerDimension(InducingFeature):
    _params = ("features",)

    def __init__(self, features: Sequence[InducingFeature]):
        features = tuple(features)
        if not features or not all(isinstance(f, InducingFeature) for f in features):
            raise ValueError("features must be a non-empty sequence of 1-D InducingFeature instances")
        self._set(features=features)

    def refined(self):
        """Every dimension's feature refined (:meth:`FourierFeatures.refined`)."""
        return type(self)([f.refined() for f in self.features])

    @validated
    def resized(self, X: Inputs, kernel: AKernel, tolerance: Tolerance, max_features: MaybeCount = None):
        """Every dimension's feature resized for its kernel (``kernel.kernels[d]``, input column d) at the
        per-dimension tolerance of :meth:`from_data` (``dimension_tolerance``); None unless every dimension
        has a rule (:meth:`~ppl_sparsegp.features.InducingFeature.resized`). Each dimension's search stops
        at ``max_features``, and the combination (the sum or the product of the sizes) must fit it too."""
        kernels = getattr(kernel, "kernels", None)
        if kernels is None or len(kernels) != len(self.features):
            return None
        X, t = np.asarray(X, dtype=float), self.dimension_tolerance(tolerance, len(self.features))
        out = []
        for d, (f, k) in enumerate(zip(self.features, kernels)):
            try:
                out.append(f.resized(X[:, d:d + 1], k, t, max_features))
            except TooManyFeatures as err:
                raise TooManyFeatures(f"{type(self).__name__}, input column {d}: {err}", err.wanted,
                                      max_features) from err
        if any(f is None for f in out):
            return None
        new = type(self)(out)
        check_feature_cap(new.num_features, max_features, f"{type(self).__name__} of sizes "
                          f"{[f.num_features for f in out]} at tolerance {tolerance:.3g}")
        return new

    def check_inputs(self, X: Union[ArrayLike, Grid], name: str = "X"):
        X = check_inputs(X, name, len(self.features))
        if not isinstance(X, Grid):
            for d, f in enumerate(self.features):
                f.check_inputs(X[:, d:d + 1], f"{name}[:, {d}]")
        return X

    @classmethod
    @validated
    def from_data(cls, X: Points, kernel: AKernel, *, tolerance: Tolerance = 0.01, margin: NonNegative = 3.0,
                  max_lengthscale: MaybeLengthscale = None, quantile: Quantile = 0.01, max_margin: MaxMargin = 1.0):
        """Variational Fourier features per input dimension by :meth:`FourierFeatures.from_data`'s rule:
        dimension d gets the box [min x_d − pad_d, max x_d + pad_d] (pad_d = min(margin·ℓ_max,d,
        max(margin·ℓ_min,d, max_margin·span_d))) and the fewest
        frequencies that leave a fraction t_d of its Matérn-ν_d prior variance unresolved at ℓ_min,d, with
        t_d chosen so that the whole kernel's unresolved fraction is at most ``tolerance``
        (:meth:`dimension_tolerance`).

        :param X: inputs (N, D) or a :class:`~ppl_sparsegp.grid.Grid` (its axes).
        :param kernel: the kernel or kernel template the features serve: the combination of D Matérn kernels
            (:class:`~ppl_sparsegp.kernels.Additive` for :class:`AdditiveFeatures`,
            :class:`~ppl_sparsegp.kernels.Product` for :class:`KroneckerFeatures`), kernel d giving
            dimension d's ν (its class) and ℓ (a number or a scalar prior); or one Matérn kernel for every
            dimension, its lengthscale one for all dimensions or one per dimension (D,), or a prior (batch
            shape () or (D,)). A prior's ``quantile`` and ``1 − quantile`` quantiles are ℓ_min and ℓ_max
            (:func:`~ppl_sparsegp.features.fourier_sizes.lengthscale_range`). E.g.
            ``KroneckerFeatures.from_data(X, Matern32(1.0, [0.1, 0.4]))``.
        :param max_lengthscale: ℓ_max (scalar or (D,), or a prior; default: the priors' upper quantiles, or
            ℓ_min).
        :raises ValueError: for X that is not (N, D), a kernel that is not Matérn or a combination of another
            kind or size, lengthscales of another size than D.
        """
        axes = X.axes if isinstance(X, Grid) else None
        if axes is None:
            X = np.asarray(X, dtype=float)
            if X.ndim != 2 or X.shape[0] == 0:
                raise ValueError(f"X must be a non-empty (N, D) array or a Grid, got shape {X.shape}")
            axes = [X[:, d] for d in range(X.shape[1])]
        D = len(axes)
        nus, lo, hi = cls._rule_lengthscales(kernel, D, max_lengthscale, quantile)
        if lo.shape not in ((), (1,), (D,)) or hi.shape not in ((), (1,), (D,)):
            raise ValueError(f"the kernel's lengthscale must be a scalar or have one entry per dimension ({D}), "
                             f"got {kernel!r}")
        lo, hi, t = np.broadcast_to(lo, (D,)), np.broadcast_to(hi, (D,)), cls.dimension_tolerance(tolerance, D)
        return cls([FourierFeatures.from_data(axes[d], _MATERN[nus[d]](1.0, float(lo[d])), tolerance=t,
                                              margin=margin, max_lengthscale=float(hi[d]), max_margin=max_margin)
                    for d in range(D)])

    @classmethod
    def _rule_lengthscales(cls, kernel, D, max_lengthscale, quantile):
        """(ν per dimension, ℓ_min, ℓ_max) of :meth:`from_data` from one Matérn kernel or a combination of D."""
        where = f"{cls.__name__}.from_data"
        kernels = getattr(kernel, "kernels", None)
        if kernels is None:
            nu, ell = matern_template(kernel, where)
            return [nu] * D, *lengthscale_range(ell, max_lengthscale, quantile)
        kind = f"{'an' if cls._combination.__name__[0] in 'AEIOU' else 'a'} {cls._combination.__name__}"
        if not isinstance(kernel, cls._combination) or len(kernels) != D:
            raise ValueError(f"{where}: kernel must be one Matérn kernel or {kind} of D = "
                             f"{D} Matérn kernels (one per input column), got {type(kernel).__name__} of "
                             f"{len(kernels)}")
        parts = [matern_template(k, f"{where}, kernel {d}") for d, k in enumerate(kernels)]
        ranges = [lengthscale_range(ell, None, quantile) for _, ell in parts]
        if any(np.size(r[0]) != 1 for r in ranges):
            raise ValueError(f"{where}: each kernel of {kind} acts on one input column: give "
                             "each a scalar lengthscale (a number or a scalar prior)")
        lo = np.array([float(np.reshape(r[0], ())) for r in ranges])
        hi = np.array([float(np.reshape(r[1], ())) for r in ranges])
        if max_lengthscale is not None:
            _, hi = lengthscale_range(lo, max_lengthscale, quantile)
        return [nu for nu, _ in parts], lo, hi

    def warn_outside(self, X: Union[ArrayLike, Grid], name: str = "X_new", *, kernel: Optional[Kernel] = None):
        kernels = getattr(kernel, "kernels", None) or [None] * len(self.features)
        if not isinstance(X, Grid):
            for d, (f, k) in enumerate(zip(self.features, kernels)):
                f.warn_outside(X[:, d], f"{name}[:, {d}]", kernel=k)
        else:
            for d, (f, axis, k) in enumerate(zip(self.features, X.axes, kernels)):
                f.warn_outside(axis, f"{name} axis {d}", kernel=k)
        return X

    def _float32_limit(self):
        """The message of this combination's measured float32 limit (:func:`warn_float32`), or None."""
        return None

    def _check_kernel(self, kernel, kind):
        if not isinstance(kernel, kind) or len(kernel.kernels) != len(self.features):
            raise ValueError(f"{type(self).__name__} with {len(self.features)} dimensions needs a "
                             f"{kind.__name__} kernel of {len(self.features)} kernels, got {kernel!r}")


class AdditiveFeatures(_PerDimension):
    """One 1-D feature per input dimension for an additive kernel; M = Σ_d M_d.

    :param features: a sequence of D one-dimensional features (e.g. ``FourierFeatures``), feature d for
        input column d; see :meth:`from_data` for the rule that chooses them.
    :raises ValueError: for an empty sequence or an element that is not an InducingFeature."""

    _combination = Additive  # the kernel it serves (from_data reads one Matérn kernel per column from it)

    @staticmethod
    @validated
    def dimension_tolerance(tolerance: Tolerance, D: Count) -> float:
        """For :math:`k = \\sum_d k_d` the unresolved fraction at x is :math:`\\sum_d\\sigma_d^2 r_d(x_d) /
        \\sum_d\\sigma_d^2 \\le \\max_d r_d`: each dimension may leave the whole ``tolerance``."""
        return tolerance

    @property
    def num_features(self):
        return sum(f.num_features for f in self.features)

    @validated
    def parts(self, kernel: AKernel, X: Points, d: Annotated[int, NonNegativeInt()]):
        """Kuf of dimension d alone (rows of the other dimensions zeroed out), for per-covariate effects.

        :param kernel: the additive kernel.
        :param X: the inputs, (N, D) or a :class:`~ppl_sparsegp.grid.Grid`.
        :param d: the dimension, 0 ≤ d < D.
        :returns: (M, N), the rows of the other dimensions zero.
        :raises ValueError: for d ≥ D."""
        if d >= len(self.features):
            raise ValueError(f"AdditiveFeatures.parts: d must be a dimension in [0, {len(self.features)}), got {d}")
        K = Kuf(self, kernel, X)
        start = sum(f.num_features for f in self.features[:d])
        mask = jnp.zeros(K.shape[0], K.dtype).at[start:start + self.features[d].num_features].set(1.0)
        return K * mask[:, None]


class KroneckerFeatures(_PerDimension):
    """Tensor-product features for a product kernel; M = Π_d M_d."""

    _combination = Product  # the kernel it serves (from_data reads one Matérn kernel per column from it)

    @staticmethod
    @validated
    def dimension_tolerance(tolerance: Tolerance, D: Count) -> float:
        """For :math:`k = \\prod_d k_d` with tensor-product features :math:`[Q_{ff}]_{xx} = \\prod_d
        [Q^{(d)}]_{x_dx_d}`, so the unresolved fraction is :math:`1 - \\prod_d(1 - r_d)`: each dimension
        leaves :math:`t_d = 1 - (1 - \\text{tolerance})^{1/D}` (≈ tolerance / D)."""
        return 1.0 - (1.0 - tolerance) ** (1.0 / D)

    @property
    def num_features(self):
        out = 1
        for f in self.features:
            out *= f.num_features
        return out

    def _float32_limit(self):
        if any(isinstance(f, InducingPoints) for f in self.features):
            return ("KroneckerFeatures of InducingPoints in float32: each factor carries float32's jitter, so "
                    "Kuu's condition number reaches 1/ε² ≈ 1e10 and the collapsed bound was measured up to 10% "
                    "above the exact log marginal likelihood (ℓ ≥ 5)")
        return None


def _khatri_rao(mats):
    """Column-wise Kronecker product, first factor slowest: (Π M_d, N)."""
    out = mats[0]
    for m in mats[1:]:
        out = (out[:, None, :] * m[None, :, :]).reshape(-1, out.shape[1])
    return out


def _register(feature_cls, kernel_cls, combine_kuu, combine_kuf):
    """Kuu/Kuf of a per-dimension combination from its 1-D parts: ``combine_kuu`` of the per-dimension
    Kuu operators, ``combine_kuf`` of the per-dimension Kuf rows (dimension d sees column d of X)."""

    @Kuu.register(feature_cls, kernel_cls)
    def _kuu(feature, kernel):
        feature._check_kernel(kernel, kernel_cls)
        out = combine_kuu(tuple(Kuu(f, k) for f, k in zip(feature.features, kernel.kernels)))
        limit = feature._float32_limit()
        warn_float32(out.dtype, limit is not None, limit)
        return out

    @Kuf.register(feature_cls, kernel_cls)
    def _kuf(feature, kernel, X):
        feature._check_kernel(kernel, kernel_cls)
        X = feature.check_inputs(X)
        with jax.ensure_compile_time_eval():  # concrete data stay concrete inside a trace (the columns are
            X = X.points() if isinstance(X, Grid) else X  # N x 1 each), so that each dimension's Kuf can be
            columns = [X[:, d:d + 1] for d in range(len(feature.features))]  # a constant (constant_kuf)
        with constant_kuf(X, feature.num_features):  # and so their combination, when small enough
            return combine_kuf([Kuf(f, k, x) for x, f, k in zip(columns, feature.features, kernel.kernels)])


# additive: Kuu block-diagonal, Kuf the stacked rows; Kronecker: Kuu ⊗, Kuf the Khatri–Rao product
_register(AdditiveFeatures, Additive, BlockDiag, lambda rows: jnp.concatenate(rows, axis=0))
_register(KroneckerFeatures, Product, Kronecker, _khatri_rao)


def _outer(vectors):
    out = vectors[0]
    for v in vectors[1:]:
        out = (out[:, None] * v[None, :]).reshape(-1)
    return out


@conditional.register(KroneckerFeatures)
def _conditional_kronecker(feature, kernel, X, q_mu, q_cov=None, *, whiten=False, Kmm=None, rng_key=None):
    """On a Grid, per-axis projections A_d: mean = (⊗A_d)ᵀ m by axis contractions, and
    diag(K_fu K_uu⁻¹ K_uf) = ⊗_d colsums — O(M^D G) with no (M^D × G) matrix. With ``q_cov`` the term
    diag(Aᵀ S A) forms A = ⊗_d A_d (M^D × G), as the default forms Kuf."""
    if not isinstance(X, Grid):
        return conditional.default(feature, kernel, X, q_mu, q_cov, whiten=whiten, Kmm=Kmm)
    feature._check_kernel(kernel, Product)
    X = feature.check_inputs(X)
    Kmm = Kuu(feature, kernel) if Kmm is None else Kmm
    As, qffs, kffs = [], [], []
    with jax.ensure_compile_time_eval():  # concrete axes stay concrete inside a trace (Kuf: constant_kuf)
        columns = [axis[:, None] for axis in X.axes]
    for f, k, K, x in zip(feature.features, kernel.kernels, Kmm.factors, columns):
        Kmn = Kuf(f, k, x)
        A = K.whiten(Kmn) if whiten else K.solve(Kmn)
        As.append(A)
        qffs.append(jnp.sum(A * A, 0) if whiten else jnp.sum(Kmn * A, 0))
        kffs.append(k.diag(x))
    T = q_mu.reshape([A.shape[0] for A in As])
    for d, A in enumerate(As):
        T = jnp.moveaxis(jnp.tensordot(A.T, T, axes=([1], [d])), 0, d)  # contract axis d with A_dᵀ
    mean = T.reshape(-1)
    var = _outer(kffs) - _outer(qffs)
    if q_cov is not None:
        # A = ⊗_d A_d over rows and columns (the grid's points: first axis slowest), (M' × G); not the
        # Khatri–Rao product, which pairs column n of every A_d and so needs equal axis lengths
        A = As[0]
        for B in As[1:]:
            A = jnp.kron(A, B)
        var = var + jnp.sum(A * q_cov.matmul(A), axis=0)  # diag(Aᵀ S A)
    return mean, jnp.maximum(var, 0.0)


class AdditiveOrthogonal(AdditiveFeatures):
    r"""One 1-D orthogonal family per input column, for an :class:`~ppl_sparsegp.kernels.Additive` kernel.

    With :math:`f = \sum_d f_d(x_d)`, independent :math:`f_d \sim GP(0, k_d)` and features of
    :math:`f_d` in block d, :math:`\mathrm{cov}(u^{(d)}, f(\mathbf x)) = K_{uf}^{(d)}(x_d)` and blocks are
    uncorrelated: :math:`K_{uu} = I_{\sum M_d}`, :math:`K_{uf}` the stacked blocks (inherited from
    :class:`~ppl_sparsegp.features.AdditiveFeatures`). M grows linearly in D, not exponentially as a tensor
    product would. Sites: ``feature_<d>_<field>``. In MC mode the per-column estimates are summed: with
    ``q_cov=None`` (SVI's sampled u) each column's :func:`mc_moments` are added (no cross terms); with a
    given S the explicit estimates :math:`\hat K_{uf}` of two independent sets are stacked
    (O(NMT + NM²)); Hermite and exact columns enter with their exact Kuf.

    :param features: a sequence of :class:`HermiteFeatures` / :class:`TrigonometricFeatures`, one per column.
    """

    @validated
    def __init__(self, features: Annotated[Any, SequenceOf(InstanceOf(HermiteFeatures, TrigonometricFeatures),
                                                           "a non-empty list of HermiteFeatures / "
                                                           "TrigonometricFeatures (one per input column)")]):
        features = tuple(features)
        if not features or not all(isinstance(f, (HermiteFeatures, TrigonometricFeatures)) for f in features):
            raise ValueError("features must be a non-empty sequence of HermiteFeatures / TrigonometricFeatures")
        super().__init__(features)

    @property
    def monte_carlo(self) -> bool:
        return any(f.monte_carlo for f in self.features)

    def _blocks(self, kernel, X):
        """[(feature_d, kernel_d, X[:, d:d+1])]."""
        self._check_kernel(kernel, Additive)
        X = self.check_inputs(X)
        return [(f, k, X[:, d:d + 1]) for d, (f, k) in enumerate(zip(self.features, kernel.kernels))]

    def monte_carlo_conditional(self, kernel: Kernel, X: ArrayLike, q_mu: jax.Array, q_cov: Optional[LinearOperator],
                                rng_key: jax.Array):
        """The Monte Carlo ``(mean, var)`` of :func:`~ppl_sparsegp.features.trigonometric.monte_carlo_conditional`
        for this sum of columns: its MC columns use their estimator, the others their exact Kuf (see the class
        docstring)."""
        parts = self._blocks(kernel, X)
        keys = jax.random.split(rng_key, len(parts))
        offsets = np.cumsum([0] + [f.num_features for f, _, _ in parts])
        if q_cov is None:
            mu1 = mu2 = var = 0.0
            for (f, k, Xd), kd, lo, hi in zip(parts, keys, offsets[:-1], offsets[1:]):
                if f.monte_carlo:
                    a, b, c = mc_moments(f, k, Xd, q_mu[lo:hi], None, kd)
                else:
                    K = Kuf(f, k, Xd)
                    a = b = K.T @ q_mu[lo:hi]
                    c = k.diag(Xd) - jnp.sum(K**2, axis=0)
                mu1, mu2, var = mu1 + a, mu2 + b, var + c
            return combine_moments(mu1, mu2, var)
        K1, K2 = [], []
        for (f, k, Xd), kd in zip(parts, keys):
            a, b = mc_kuf_pair(f, k, Xd, kd) if f.monte_carlo else (Kuf(f, k, Xd),) * 2
            K1.append(a)
            K2.append(b)
        K1, K2 = jnp.concatenate(K1), jnp.concatenate(K2)
        var = kernel.diag(X) + jnp.sum(K1 * (q_cov.matmul(K2) - K2), axis=0)
        return combine_moments(K1.T @ q_mu, K2.T @ q_mu, var)


@Kuu.register(AdditiveOrthogonal, Additive)
def _kuu_additive(feature, kernel):
    feature._check_kernel(kernel, Additive)
    for f, k in zip(feature.features, kernel.kernels):
        Kuu.dispatch(f, k)  # each block must be supported (and is the identity)
    return Identity(feature.num_features, dtype=jnp.result_type(kernel.kernels[0].variance, float))


@conditional.register(AdditiveOrthogonal)
def _conditional_additive(feature, kernel, X, q_mu, q_cov=None, *, whiten=False, Kmm=None, rng_key=None):
    if rng_key is None or not feature.monte_carlo:
        return conditional.default(feature, kernel, X, q_mu, q_cov, whiten=whiten, Kmm=Kmm)
    return feature.monte_carlo_conditional(kernel, X, q_mu, q_cov, rng_key)
