r"""Hermite features: variational orthogonal features (VOF, :math:`K_{uu} = I`) for the squared-exponential
kernel in 1-D [1, §3.1.1, App. B].

Features :math:`u_m = \int g_m(x) f(x)\,dx` built on an orthonormal set :math:`\{\psi_m\}` of
:math:`L^2(\mathbb R)` are uncorrelated with unit variance [1, Prop. 1], so :math:`K_{uu}` is the
:class:`~ppl_sparsegp.linalg.Identity` operator (the general construction and the real form of
:math:`K_{uf}`: :mod:`~ppl_sparsegp.features.trigonometric`). Here :math:`\psi_m` are Hermite functions:

* :class:`HermiteFeatures` (SE kernel, 1-D): closed-form :math:`K_{uf}` [1, §3.1.1], parameterised by the
  input-density scale :math:`\sigma_p` of the equivalent eigenfunction features [1, App. B], so that the
  Hermite width :math:`r = (\ell^2\sigma_p^2 + \ell^4/4)^{1/4}` satisfies :math:`2r^2 > \ell^2` by
  construction.

The trigonometric family is :mod:`~ppl_sparsegp.features.trigonometric`; one family per input column is
:class:`~ppl_sparsegp.features.AdditiveOrthogonal` (:mod:`~ppl_sparsegp.features.combinations`).

References:
    1. Burt, Rasmussen, van der Wilk (2020), Variational orthogonal features, arXiv:2006.13170.
    2. ``shared/notes/vof.md``: the formulas rebuilt from the LaTeX, with the printed errors corrected.
"""
from __future__ import annotations

import functools
import math
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from numpyro.distributions import Distribution

from ..conditionals import conditional  # noqa: F401  (registers the default conditional)
from ..covariances import Kuf, Kuu
from ..kernels import Kernel, SquaredExponential
from ..linalg import Identity
from ..parameters import Param, is_concrete
from ..validation import (
    AKernel,
    ArrayOf,
    Count,
    Inputs,
    MaybeCount,
    Positive,
    Quantile,
    Template,
    Tolerance,
    validated,
)
from .base import InducingFeature, template_lengthscale
from .orthogonal import check_num_features, fewest_resolving, one_column, rule_inputs, scalar_field, scalar_lengthscale

__all__ = ["HermiteFeatures", "hermite_width", "hermite_unresolved"]

#: positive finite numbers (a number or an array; a traced one is not judged)
PositiveArray = Annotated[Any, ArrayOf(positive=True)]


@validated
def hermite_width(lengthscale: PositiveArray, input_scale: PositiveArray):
    r"""The Hermite width :math:`r = (\ell^2\sigma_p^2 + \ell^4/4)^{1/4}` (notes §1.4 [2]); always
    :math:`2r^2 > \ell^2`."""
    l2 = jnp.asarray(lengthscale) ** 2
    return (l2 * jnp.asarray(input_scale) ** 2 + 0.25 * l2**2) ** 0.25



@validated
def hermite_unresolved(lengthscale: Positive, input_scale: Positive, num_features: Count) -> float:
    r"""The fraction of the SE prior variance, averaged over inputs :math:`\mathcal N(c, \sigma_p^2)`,
    that M Hermite features leave unresolved: :math:`B^M` (:meth:`HermiteFeatures.from_data`)."""
    a, b = 0.25 / input_scale**2, 0.5 / lengthscale**2
    return (b / (a + b + math.sqrt(a * a + 2 * a * b))) ** num_features


class HermiteFeatures(InducingFeature):
    r"""Hermite-function VOF for the squared-exponential kernel in 1-D [1, §3.1.1, App. B].

    :math:`\psi_m(\omega) \propto H_m(r\omega)e^{-r^2\omega^2/2}` (orthonormal in :math:`L^2(\mathbb R)`),
    :math:`K_{uu} = I` and, with :math:`Q = r^2 + \ell^2/2`, :math:`P = r^2 - \ell^2/2 = \ell^2\sigma_p^2/Q`
    (so :math:`\sqrt{PQ} = \ell\sigma_p`),

    .. math::

        K_{uf}[m](x) = \pm\, 2^{1/4}\,\sqrt{\frac{v\ell r}{2^m m!}}\;Q^{-1/2}\,(P/Q)^{m/2}\,
        e^{-x^2/(2Q)}\,H_m\!\Big(\frac{r x}{\sqrt{PQ}}\Big),

    (eq. (18) of [1] simplified, notes §1.4 [2]; the sign is :math:`(-1)^{\lfloor m/2\rfloor}`, that of the
    real form of eq. (8)). It is evaluated by the three-term recurrence of the normalised Hermite
    polynomials with :math:`(P/Q)^{m/2}` inside and a running log-scale for :math:`e^{-x^2/(2Q)}` and the
    polynomial growth, so nothing overflows or underflows early, in float32 too
    (:math:`|K_{uf}[m](x)| \le \sqrt v`). Cost O(NM) per evaluation. These are the eigenfunction
    features of the SE kernel under the input density :math:`\mathcal N(c, \sigma_p^2)` [1, App. B].

    :param num_features: M.
    :param input_scale: :math:`\sigma_p > 0`: a number, a :class:`~ppl_sparsegp.Param` (positive
        constraint; optimised by SVI, site ``feature_input_scale``) or a prior. The width
        :math:`r` follows from it and the kernel lengthscale (:func:`hermite_width`).
    :param centre: c, the centre of the features (inputs enter as x − c); default 0.
    """

    _params = ("input_scale", "centre")
    _static = ("M",)
    _positive = ("input_scale",)

    @validated
    def __init__(self, num_features: Count, input_scale: Annotated[Any, Template(rank=0)] = 1.0,
                 centre: Annotated[Any, Template(rank=0, positive=False)] = 0.0):
        M = check_num_features(num_features)
        self._set(M=M, input_scale=scalar_field(input_scale, "input_scale", positive=True),
                  centre=scalar_field(centre, "centre"))

    @classmethod
    @validated
    def from_data(cls, X: Inputs, kernel: AKernel, *, tolerance: Tolerance = 0.01, quantile: Quantile = 0.05,
                  max_features: Count = 4096):
        r"""Hermite features sized for the data: centre c = mean(x), input scale σ_p = sd(x), and the
        fewest M that leave at most ``tolerance`` of the prior variance unresolved at every input, at
        ℓ_min (a shorter ℓ needs more features, so M comes from ℓ_min).

        For inputs distributed as N(c, σ_p²) these are the eigenfunction features of the SE kernel under
        that density, with eigenvalues :math:`\lambda_m \propto B^m`, :math:`B = b/(a + b + \sqrt{a^2 +
        2ab})`, :math:`a = 1/(4\sigma_p^2)`, :math:`b = 1/(2\ell^2)` ([2, §4.3.1]), so M features leave
        :math:`B^M` of the variance averaged over the density (:func:`hermite_unresolved`). An average is
        not enough: the unresolved variance grows with |x − c|, and with that M a sample's outer points
        keep up to all of it (measured on 400 normal inputs at ℓ = 0.05 σ_p: the mean at the data 1.4×
        the tolerance, the worst point 100×). So M is chosen at the data: the residual
        :math:`1 - \sum_{m<M} K_{uf}[m](x)^2/v` at 257 quantiles of x (the extremes included) is below the
        tolerance for every M above the one returned (it only decreases with M), evaluated once at an
        upper bound found by doubling from the density's M. Heavy-tailed inputs need many features (the
        features resolve a band of width ~ :math:`\sqrt{2M}` scales around c): past ``max_features`` the
        rule refuses and names the alternatives.

        :param X: the 1-D inputs (N,) or (N, 1) (at least two distinct values).
        :param kernel: the :class:`~ppl_sparsegp.SquaredExponential` kernel or kernel template the features
            serve (the one kernel Hermite features support), e.g. ``SquaredExponential(1.0, ell_prior)``: its
            lengthscale is ℓ_min > 0 (a number), or its prior (ℓ_min is the prior's ``quantile`` quantile,
            :func:`~ppl_sparsegp.features.fourier_sizes.lengthscale_range`; a :class:`~ppl_sparsegp.Param` at its
            initial value); the variance does not enter the rule.
        :param tolerance: the unresolved fraction of the prior variance, in (0, 1).
        :param max_features: the largest M the rule may return.

        References: 2. Rasmussen & Williams (2006), Gaussian processes for machine learning, §4.3.1.
        """
        if not isinstance(kernel, SquaredExponential):
            raise ValueError(f"HermiteFeatures.from_data: kernel must be a SquaredExponential kernel (the one kernel "
                             f"Hermite features support), e.g. SquaredExponential(1.0, 0.3), got "
                             f"{type(kernel).__name__}; for a Matérn kernel use TrigonometricFeatures.from_data")
        x, lo = rule_inputs(cls, X, template_lengthscale(kernel), tolerance, quantile)
        return cls._sized(x, lo, float(np.std(x)), float(np.mean(x)), tolerance, max_features)

    def refined(self) -> "HermiteFeatures":
        r"""Twice the features at the same input scale and centre: they resolve a lengthscale about half as
        long (for ℓ ≪ σ_p, :math:`-\log B \approx \ell/(\sqrt2\sigma_p)`, so :meth:`from_data`'s M ∝ 1/ℓ)."""
        with jax.ensure_compile_time_eval():  # the fields stay numbers inside a model being traced
            return type(self)(2 * self.M, self.input_scale, self.centre)

    @validated
    def resized(self, X: Inputs, kernel: AKernel, tolerance: Tolerance, max_features: MaybeCount = None):
        """:meth:`from_data`'s M at ``kernel``'s lengthscale, keeping the input scale and centre
        (:meth:`~ppl_sparsegp.features.InducingFeature.resized`; its search stops at ``max_features``, at
        most 4096); None for a kernel other than the squared exponential or an input scale or centre that
        is sampled."""
        fields = (self.input_scale, self.centre)
        if (not isinstance(kernel, SquaredExponential) or jnp.size(kernel.lengthscale) != 1
                or not all(is_concrete(v) for v in fields)):
            return None
        x, _ = rule_inputs(type(self), X, 1.0, tolerance, 0.05)
        lo = float(jnp.reshape(kernel.lengthscale, ()))
        cap = 4096 if max_features is None else min(4096, int(max_features))
        return type(self)._sized(x, lo, float(self.input_scale), float(self.centre), tolerance, cap)

    @classmethod
    def _sized(cls, x, lo, scale, centre, tolerance, max_features):
        """from_data's fewest M at ℓ_min = lo for the input scale and centre given."""
        kernel = SquaredExponential(1.0, lo)
        M = max(2, math.ceil(math.log(tolerance) / math.log(hermite_unresolved(lo, scale, 1))))
        M = fewest_resolving(
            lambda M: cls(M, scale, centre), kernel, x, M, tolerance, max_features,
            lambda worst: f"HermiteFeatures.from_data: {max_features} features leave {worst:.3g} of the prior "
                          f"variance unresolved at the outermost inputs (tolerance {tolerance:g}; inputs from "
                          f"{x.min():.4g} to {x.max():.4g} around {centre:.4g} ± {scale:.4g}): Hermite features "
                          f"resolve a band around the centre, and these inputs have heavy tails. Use "
                          f"FourierFeatures.from_data (a box over the data), or raise max_features or tolerance")
        return cls(M, input_scale=scale, centre=centre)

    @property
    def num_features(self):
        return self.M

    def check_kernel(self, kernel: Kernel):
        ls = getattr(kernel, "lengthscale", None)
        if ls is not None and not isinstance(ls, (Distribution, Param)) and np.size(ls) != 1:
            raise ValueError(f"HermiteFeatures are 1-D: the kernel's lengthscale must be a scalar, got shape "
                             f"{np.shape(ls)}; for D > 1 use AdditiveOrthogonal with one 1-D kernel per input")

    @validated
    def width(self, kernel: AKernel):
        """The Hermite width r for this kernel's lengthscale."""
        return hermite_width(scalar_lengthscale(kernel), self.input_scale)

    def check_inputs(self, X: ArrayLike, name: str = "X"):
        return one_column(self, X, name)


@functools.lru_cache(maxsize=None)
def _hermite_recurrence(M):
    """Coefficients of h_{m+1} = sqrt(2/(m+1)) z h_m - sqrt(m/(m+1)) h_{m-1}, h_m = H_m/sqrt(2^m m!)."""
    m = np.arange(max(M - 1, 0), dtype=float)
    sign = np.where((np.arange(M) // 2) % 2 == 0, 1.0, -1.0)
    return np.sqrt(2.0 / (m + 1)), np.sqrt(m / (m + 1)), sign


@Kuu.register(HermiteFeatures, SquaredExponential)
def _kuu_hermite(feature, kernel):
    return Identity(feature.M, dtype=jnp.result_type(kernel.variance, float))


@Kuf.register(HermiteFeatures, SquaredExponential)
def _kuf_hermite(feature, kernel, X):
    feature.check_kernel(kernel)
    return _hermite_kuf(feature, kernel, feature.check_inputs(X)[:, 0])


@jax.jit  # one program per M and N: eagerly (the size rule, predictions) each operation would compile alone
def _hermite_kuf(feature, kernel, x):
    x = x - feature.centre
    v, ell, sp = kernel.variance, scalar_lengthscale(kernel), jnp.asarray(feature.input_scale)
    l2 = ell**2
    r2 = jnp.sqrt(l2 * sp**2 + 0.25 * l2**2)  # r² (notes §1.4 [2])
    Q = r2 + 0.5 * l2
    P = l2 * sp**2 / Q  # = r² − ℓ²/2 without cancellation
    rho = jnp.sqrt(P / Q)
    z = jnp.sqrt(r2) * x / (ell * sp)  # r x / sqrt(PQ)
    # log g_0, Eq. (18) [1] at m = 0; g_m = (P/Q)^{m/2} h_m(z) g_0 with h_m = H_m / sqrt(2^m m!)
    log_g0 = 0.25 * math.log(2.0) + 0.5 * jnp.log(v * ell * jnp.sqrt(r2) / Q) - 0.5 * x**2 / Q
    a, b, sign = (jnp.asarray(c, x.dtype) for c in _hermite_recurrence(feature.M))

    def step(carry, coef):
        # the pair (g_{m-1}, g_m) is kept as (prev, cur)·e^{log_scale} with max(|prev|, |cur|) = 1, so
        # neither the Gaussian factor (underflow) nor the polynomial (overflow) leaves the range in float32
        prev, cur, log_scale = carry
        new = rho * coef[0] * z * cur - rho**2 * coef[1] * prev
        s = jnp.maximum(jnp.abs(new), jnp.abs(cur))
        s = jnp.where(s > 0, s, 1.0)
        log_scale = log_scale + jnp.log(s)
        cur, new = cur / s, new / s
        return (cur, new, log_scale), new * jnp.exp(log_scale)

    init = (jnp.zeros_like(x), jnp.ones_like(x), log_g0)
    _, rest = jax.lax.scan(step, init, jnp.stack([a, b], axis=1))
    return sign[:, None] * jnp.concatenate([jnp.exp(log_g0)[None], rest], axis=0)

