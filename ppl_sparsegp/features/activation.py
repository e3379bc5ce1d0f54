r"""Activation features on the sphere (Tiao, Dutordoir & Picheny 2023 [1]; Dutordoir et al. 2021 [4]):
inducing variables that are RKHS projections of f onto neural-network-like functions
:math:`\sigma(\mathbf w_m^\top\hat{\mathbf x})` of learnable unit directions, for the zonal kernels
(:class:`~ppl_sparsegp.kernels.Zonal`), with a dense Kuu from a truncated Gegenbauer series.

**The sphere and the RKHS.** As for :class:`~ppl_sparsegp.features.SphericalHarmonicFeatures`
(:mod:`~ppl_sparsegp.features.spherical`, whose conventions this file keeps): :math:`\tilde{\mathbf x} =
[\mathbf x\oslash\mathbf s, b]`, :math:`r = \|\tilde{\mathbf x}\|`, :math:`\hat{\mathbf x} = \tilde{\mathbf x}/r
\in S^{d-1}`, d = D + 1, α = (d − 2)/2, :math:`k(\mathbf x,\mathbf x') = \sigma^2 r^p r'^p
\kappa(\hat{\mathbf x}\cdot\hat{\mathbf x}') = \sigma^2 r^p r'^p\sum_n a_n\sum_j Y_{n,j}(\hat{\mathbf x})
Y_{n,j}(\hat{\mathbf x}')` (p the kernel's ``order``). Its RKHS holds the functions :math:`r^p g(\hat{\mathbf x})`,
:math:`g = \sum g_{n,j}Y_{n,j}`, with :math:`\langle r^pg, r^ph\rangle_{\mathcal H} = \sum_{n,j}
g_{n,j}h_{n,j}/(\sigma^2 a_n)`.

**The activation's Funk–Hecke coefficients.** A function of :math:`\mathbf w\cdot\hat{\mathbf x}` with
‖w‖ = 1 expands as :math:`\sigma(\mathbf w\cdot\hat{\mathbf x}) = \sum_n\hat\sigma_n\frac{n+\alpha}{\alpha}
C_n^\alpha(\mathbf w\cdot\hat{\mathbf x}) = \sum_n\hat\sigma_n\sum_jY_{n,j}(\mathbf w)Y_{n,j}(\hat{\mathbf x})`
with (the Funk–Hecke formula, eq. (1) of :mod:`~ppl_sparsegp.features.spherical`)

.. math::

    \hat\sigma_n = \frac{c_d}{C_n^\alpha(1)}\int_{-1}^1\sigma(t)\,C_n^\alpha(t)\,(1-t^2)^{\alpha-1/2}\,dt,
    \qquad c_d = \frac{\Gamma(d/2)}{\sqrt\pi\,\Gamma((d-1)/2)}. \tag{1}

**Features.** :math:`u_m = \langle f, \phi_m\rangle_{\mathcal H}`, :math:`\phi_m(\mathbf x) = r^p
\sigma(\mathbf w_m\cdot\hat{\mathbf x})`. By the reproducing property and the expansions above

.. math::

    K_{uf}[m, i] = \phi_m(\mathbf x_i) = r_i^p\,\sigma(\mathbf w_m\cdot\hat{\mathbf x}_i)\ \text{(exact)},
    \tag{2}

    K_{uu}[m, m'] = \langle\phi_m,\phi_{m'}\rangle_{\mathcal H} = \frac{1}{\sigma^2}\sum_n
    \frac{\hat\sigma_n^2}{a_n}\,\frac{n+\alpha}{\alpha}\,C_n^\alpha(\mathbf w_m\cdot\mathbf w_{m'}), \tag{3}

truncated at a declared degree L (``max_degree``). The directions are normalised before use
(:math:`\mathbf w_m = \mathbf v_m/\|\mathbf v_m\|`), so a :class:`~ppl_sparsegp.Param` of unconstrained
vectors (M, d) makes them learnable on the sphere.

**When the series converges** (:math:`\phi_m\in\mathcal H`). The diagonal of (3) is
:math:`\sigma^{-2}\sum_n t_n`, :math:`t_n = N(d, n)\hat\sigma_n^2/a_n` (:math:`(n+\alpha)/\alpha\,C_n^\alpha(1) =
N(d, n)`), and every entry is bounded by it, so (3) converges iff :math:`\sum_n t_n < \infty`. Two conditions:

* *Structure*: no degree with :math:`\hat\sigma_n\ne0` where :math:`a_n = 0` (else :math:`\phi_m\notin\mathcal H`:
  an infinite term). ReLU^q, :math:`\sigma(t) = t^q\,\mathbb 1[t>0] = \tfrac12t^q + \tfrac12t^q\operatorname{sign}t`
  (q = 0: step), has :math:`\hat\sigma_n = 0` exactly for n > q with n ≡ q (mod 2); erf(st) (odd) for even n;
  erf(st + c), c ≠ 0, none. The arc-cosine kernel κ_p has :math:`a_n = 0` for n > p with n ≡ p (mod 2)
  (``ArcCosine.vanishing_degree``): ReLU^q with q > p has :math:`\hat\sigma_{p+2}\ne0`
  there, so **no ReLU^q with q > p pairs with an arc-cosine kernel**, and those with q ≤ p diverge (below).
* *Decay*: :math:`\hat\sigma_n^2\sim n^{-\gamma}`, :math:`a_n\sim n^{-\beta}`, :math:`N(d,n)\sim n^{d-2}`, so
  :math:`t_n\sim n^{-k}` with :math:`k = \gamma - \beta - (d-2)`; converges iff **k > 1**. ReLU^q: γ = d + 2q
  ([3, App. D.2]; exactly: :math:`a_n(\kappa_q) = \hat\sigma_n^2(\mathrm{ReLU}^q)/\mathbb E_{\mathbf u}[\sigma(u_1)^2]`,
  since :math:`\kappa_q(\mathbf x\cdot\mathbf y)\propto\mathbb E_{\mathbf u\sim S^{d-1}}[\sigma(\mathbf u\cdot
  \mathbf x)\sigma(\mathbf u\cdot\mathbf y)]`, tested). Arc-cosine κ_p: β = d + 2p. Chordal Matérn-ν: β = 2ν + d − 1
  (the restriction of :math:`H^{\nu+d/2}(\mathbb R^d)` to the sphere is :math:`H^{\nu+(d-1)/2}(S^{d-1})`, the trace
  theorem). erf: γ = ∞ (an entire function: :math:`\hat\sigma_n` falls faster than any geometric rate). Hence
  ReLU^q against κ_p: k = 2(q − p) − (d − 2) > 1 ⟺ q − p > (d − 1)/2 (never for q ≤ p: **the arc-cosine
  kernel of the activation's own order diverges**, t_n constant per harmonic); ReLU^q against Matérn-ν:
  k = 2q + 3 − 2ν − d > 1 ⟺ q > ν + α (S²: ReLU² with ν = 1/2 only; S³ likewise; none from S⁴); erf:
  every kernel whose zeros it respects (Matérn: all; κ₀ and κ₂ for c = 0). All exponents were measured from
  the computed coefficients (``tests/features/test_activation.py``). Any other pair is refused, naming the pair and
  the fix (:meth:`ActivationFeatures.check_kernel`); a kernel whose decay is not declared here is refused too.

**Completeness.** A convergent pair need not span :math:`\mathcal H`: the span of
:math:`\{\phi_m\}` lacks every degree where :math:`\hat\sigma_n = 0`, e.g. erf(st) has no constant and no even
degree, so its Qff never reaches Kff on a kernel with even degrees (the adequacy check shows it): use a shift
c ≠ 0 for a basis that approaches the exact GP as M grows.

**Truncation.** The tail :math:`\sum_{n>L}t_n` is estimated from the last kept terms (polynomial:
:math:`t_L L/(k-1)`; erf: :math:`t_L\rho/(1-\rho)`, ρ the ratio of the last two nonzero terms) and must be at most
``tolerance`` × :math:`\sum_{n\le L}t_n`; :meth:`ActivationFeatures.from_kernel` picks the smallest such L, and
Kuu refuses a concrete kernel whose declared L leaves more. The truncated Kuu is the Gram matrix of the
projections of :math:`\phi_m` onto degrees ≤ L, below the exact one by a PSD matrix of trace
M × tail/σ², while Kuf (2) is exact; keep the tolerance small (default 1e-6).

**Quadrature of (1).** In θ = arccos t by Gauss–Legendre: ReLU^q on [0, π/2] only (the kink at t = 0 is an end
point, where the integrand :math:`\cos^q\theta\,C_n^\alpha(\cos\theta)\sin^{2\alpha}\theta` is analytic), erf on
[0, π], with L + 200 nodes (the integrand is entire in θ: the error falls geometrically). Tested against
SciPy's Gauss–Gegenbauer rule in t and adaptive quadrature.

**Cost.** Kuf: O(N M d). Kuu: O(M² (d + L)) (the series by the three-term recurrence of
:func:`~ppl_sparsegp.features.spherical_harmonics.gegenbauer`), plus the kernel's coefficients (O(L²) for
the quadrature, differentiable in κ's hyperparameters); a dense M × M Cholesky as for inducing points.

References:
    1. Tiao, Dutordoir, Picheny (2023), Spherical inducing features for orthogonally-decoupled Gaussian
       processes, ICML (quoted in ``shared/papers/inducing_features_overview.txt``).
    2. Dutordoir, Durrande, Hensman (2020), Sparse Gaussian processes with spherical harmonic features, ICML.
    3. Bach (2017), Breaking the curse of dimensionality with convex neural networks, JMLR 18.
    4. Dutordoir, Hensman, van der Wilk, Ek, Ghahramani, Durrande (2021), Deep neural networks as point
       estimates for deep Gaussian processes, NeurIPS (activation features with a truncated Kuu).
"""
from __future__ import annotations

import functools
import math
from typing import Annotated, Any, Callable, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from ..covariances import Kuf, Kuu
from ..kernels import ArcCosine, ChordalMatern, Kernel, Zonal, check_inputs
from ..linalg import Dense
from ..parameters import Param, as_rng_key, is_concrete
from ..validation import (
    AKernel,
    AnyOf,
    ArrayOf,
    Count,
    Flag,
    InstanceOf,
    Integer,
    NonNegativeInt,
    OneOf,
    OrNone,
    Positive,
    Quantile,
    Real,
    RngKey,
    Tolerance,
    validated,
)
from .base import InducingFeature
from .spherical import _shape_probe
from .spherical_harmonics import _gegenbauer_at_one, funk_hecke_coefficients, num_harmonics

__all__ = ["ActivationFeatures", "activation_coefficients", "ACTIVATIONS", "MAX_SEARCH_DEGREE"]

#: The activations by name, each with the order q of ReLU^q (step 0, ReLU 1, squared ReLU 2), None for erf(st + c)
ACTIVATIONS = {"step": 0, "relu": 1, "relu2": 2, "erf": None}
AnActivation = Annotated[str, OneOf(*ACTIVATIONS)]
Degree = Annotated[int, NonNegativeInt()]
Directions = Annotated[Any, AnyOf(ArrayOf(rank=2), InstanceOf("ppl_sparsegp.parameters.Param",
                                                              what="a Param of shape (M, D + 1)"))]
#: the highest degree the truncation rule (:meth:`ActivationFeatures.from_kernel`) searches
MAX_SEARCH_DEGREE = 2048
_ACCURACY = 1e-12  # below this fraction of a_0 a kernel coefficient is quadrature rounding, not signal
_ROUNDING = 1e-15  # a term of the Kuu series below this fraction of the sum is rounding (erf's σ̂_n ~ 1e-17)


def _activation(activation, t, scale, shift):
    """σ(s t + c) for erf; ReLU^q(t) = max(t, 0)^q (step: 1[t > 0]); NumPy or JAX arrays."""
    xp = np if isinstance(t, np.ndarray) else jnp
    q = ACTIVATIONS[activation]
    if q is None:
        return jax.scipy.special.erf(scale * t + shift) if xp is jnp else _np_erf(scale * t + shift)
    if q == 0:
        return xp.where(t > 0, 1.0, 0.0)
    return xp.maximum(t, 0.0) ** q


def _np_erf(x):
    import scipy.special
    return scipy.special.erf(x)


def _activation_vanishes(activation, shift, n):
    """Whether σ̂_n = 0 structurally (module docstring: ReLU^q for n > q, n ≡ q mod 2; erf(st) for even n)."""
    q = ACTIVATIONS[activation]
    if q is None:
        return shift == 0 and n % 2 == 0
    return n > q and (n - q) % 2 == 0


@functools.lru_cache(maxsize=64)
def _coefficients(activation, d, max_degree, scale, shift):
    alpha = 0.5 * (d - 2)
    q = ACTIVATIONS[activation]
    hi = np.pi / 2 if q is not None else np.pi  # ReLU^q vanishes for θ > π/2: the kink is an end point
    x, w = np.polynomial.legendre.leggauss(max_degree + 200)
    theta, w = 0.5 * hi * (x + 1.0), 0.5 * hi * w
    t = np.cos(theta)
    c_d = math.exp(math.lgamma(d / 2) - math.lgamma((d - 1) / 2)) / math.sqrt(math.pi)
    g = w * np.sin(theta) ** (2 * alpha) * (t**q if q is not None else _activation(activation, t, scale, shift))
    out = np.empty(max_degree + 1)
    c_prev, c = np.ones_like(t), 2.0 * alpha * t
    for n in range(max_degree + 1):
        if n >= 2:
            c_prev, c = c, (2.0 * t * (n + alpha - 1) * c - (n + 2 * alpha - 2) * c_prev) / n
        cn = c_prev if n == 0 else c
        out[n] = 0.0 if _activation_vanishes(activation, shift, n) else c_d / _gegenbauer_at_one(n, alpha) * (g @ cn)
    out.setflags(write=False)  # Eq. (1)
    return out


@validated
def activation_coefficients(activation: AnActivation, d: Annotated[int, Integer(3)], max_degree: Degree,
                            scale: Positive = 1.0, shift: Annotated[float, Real()] = 0.0) -> np.ndarray:
    r"""The Funk–Hecke coefficients :math:`\hat\sigma_0, \dots, \hat\sigma_L` of an activation on
    :math:`S^{d-1}` (Eq. (1) of the module docstring): :math:`\sigma(\mathbf w\cdot\hat{\mathbf x}) =
    \sum_n\hat\sigma_n\frac{n+\alpha}{\alpha}C_n^\alpha(\mathbf w\cdot\hat{\mathbf x})`; structural zeros are exact.

    :param activation: ``"step"``, ``"relu"``, ``"relu2"`` (ReLU², homogeneous: ``scale``, ``shift`` unused)
        or ``"erf"`` (:math:`\mathrm{erf}(s t + c)`).
    :param d: the sphere's ambient dimension (input_dim + 1), ≥ 3.
    :param max_degree: L ≥ 0.
    :param scale: s > 0 (erf only).
    :param shift: c (erf only; c ≠ 0 gives every degree, c = 0 only the odd ones).
    :returns: (L + 1,) NumPy array (read-only, cached).
    :raises InvalidArgument: for an unknown activation or bad numbers.
    """
    return _coefficients(activation, int(d), int(max_degree), float(scale), float(shift))


def _kernel_decay(kernel, d):
    """β with a_n ~ n^-β on the degrees that do not vanish (module docstring), or None when not declared."""
    if isinstance(kernel, ArcCosine):
        return d + 2 * kernel.order
    if isinstance(kernel, ChordalMatern):
        return 2 * kernel.nu + d - 1
    return None


def _describe(kernel):
    if isinstance(kernel, ArcCosine):
        return f"ArcCosine(order={kernel.order})"
    if isinstance(kernel, ChordalMatern):
        return f"ChordalMatern(nu={kernel.nu})"
    return type(kernel).__name__


def _pair_problem(activation, shift, kernel, d):
    """Why (activation, kernel) gives no convergent Kuu on S^{d-1}, or None (module docstring's rule)."""
    beta = _kernel_decay(kernel, d)
    if beta is None:
        return "its coefficients' decay is not declared (ActivationFeatures know ArcCosine and ChordalMatern)"
    q = ACTIVATIONS[activation]
    for n in range(max(q or 0, 1) + 5):  # the parity patterns repeat from here on
        if kernel.vanishing_degree(n, d) and not _activation_vanishes(activation, shift, n):
            return (f"the activation has a nonzero coefficient at degree {n}, where the kernel's a_{n} = 0: "
                    "σ(w·x̂) is not in the kernel's RKHS")
    if q is not None:
        k = (d + 2 * q) - beta - (d - 2)
        if k <= 1:
            return (f"the terms N(d,n) σ̂_n²/a_n behave like n^({-k:g}) (σ̂_n² ~ n^-{d + 2 * q}, a_n ~ n^-{beta:g}, "
                    f"N(d,n) ~ n^{d - 2}): the series diverges (it needs an exponent > 1)")
    return None


def _working_pairs(d, shift):
    kernels = [ArcCosine(p) for p in (0, 1, 2)] + [ChordalMatern(nu) for nu in (0.5, 1.5, 2.5)]
    return [f"{a!r} with {_describe(k)}" for a in ACTIVATIONS for k in kernels
            if _pair_problem(a, shift if a == "erf" else 0.0, k, d) is None]


def _terms(sig, a, d):
    """t_n = N(d, n) σ̂_n² / a_n over the degrees where both are nonzero (NumPy)."""
    N = np.array([num_harmonics(d, n) for n in range(len(sig))], dtype=float)
    keep = (sig != 0) & (a != 0)
    return np.where(keep, N * sig**2 / np.where(keep, a, 1.0), 0.0)


def _tail(t, k):
    """The estimated Σ_{n>L} t_n from the envelope of the last kept terms, e₁ = max of the last two and
    e₀ = max of the two before (the even and odd terms may alternate): e₁ L/(g (k − 1)) for t_n ~ n^-k
    (g the mean step between kept degrees), 2 e₁ ρ/(1 − ρ) with ρ = e₁/e₀ for a faster decay; inf where
    the envelope does not fall yet."""
    nz = np.nonzero(t)[0]
    if len(nz) < 4:
        return math.inf
    e1, e0 = max(t[nz[-1]], t[nz[-2]]), max(t[nz[-3]], t[nz[-4]])
    if not e1 < e0:
        return math.inf
    if math.isfinite(k):
        return e1 * nz[-1] / (0.5 * (nz[-1] - nz[-3]) * (k - 1))
    rho = e1 / e0
    return 2.0 * e1 * rho / (1.0 - rho)


def _unit(V):
    return V / jnp.sqrt(jnp.sum(V**2, axis=-1, keepdims=True))


class ActivationFeatures(InducingFeature):
    r"""Activation features :math:`u_m = \langle f, r^p\sigma(\mathbf w_m\cdot\hat{\mathbf x})\rangle_{\mathcal H}`
    on :math:`S^{d-1}`, d = input_dim + 1 (module docstring), for the :class:`~ppl_sparsegp.kernels.Zonal`
    kernels whose pair with the activation converges: Kuf (M, N) exact (Eq. (2)), Kuu a
    :class:`~ppl_sparsegp.linalg.Dense` (M, M) of the Gegenbauer series (3) to degree ``max_degree``, with
    relative jitter.

    :param directions: the unnormalised directions :math:`\mathbf v_m`, shape (M, input_dim + 1) (the last
        column pairs with the bias coordinate b): an array (fixed) or a :class:`~ppl_sparsegp.Param`
        (learned by SVI, site ``feature_directions``; they are normalised where used, so any nonzero
        vectors are valid).
    :param activation: one of :data:`ACTIVATIONS`: ``"step"``, ``"relu"``, ``"relu2"``, ``"erf"``.
    :param max_degree: L, the series' last degree (:meth:`from_kernel` picks it for a tolerance).
    :param scale: s > 0 of erf(s t + c) (ignored by the homogeneous ReLU^q, which must keep 1).
    :param shift: c of erf(s t + c) (0 for ReLU^q).
    :param tolerance: the largest estimated relative tail of the series that Kuu accepts for a concrete
        kernel (module docstring, *Truncation*).
    :param jitter: relative jitter of Kuu's diagonal (default 1e-10 in float64, 1e-5 in float32).
    :raises InvalidArgument: for a bad argument (naming it); ``ValueError`` for directions of zero length or
        a scale/shift given to a ReLU^q.

    References:
        1. Tiao, Dutordoir, Picheny (2023), Spherical inducing features for orthogonally-decoupled Gaussian
           processes, ICML.
    """

    _params = ("directions",)
    _static = ("activation", "max_degree", "scale", "shift", "tolerance", "jitter")
    kuf_kernel_fields = ("lengthscale", "bias")

    @validated
    def __init__(self, directions: Directions, activation: AnActivation = "erf", max_degree: Degree = 20,
                 *, scale: Positive = 1.0, shift: Annotated[float, Real()] = 0.0, tolerance: Tolerance = 1e-6,
                 jitter: Annotated[Any, OrNone(Real(0.0, None))] = None):
        V = directions.init if isinstance(directions, Param) else directions
        shape = np.shape(V)
        if len(shape) != 2 or shape[0] == 0 or shape[1] < 3:
            raise ValueError(f"ActivationFeatures: directions must have shape (M, input_dim + 1) with M >= 1 and "
                             f"input_dim >= 2 (the sphere S^d-1, d >= 3), got shape {shape}")
        if is_concrete(V) and not np.all(np.linalg.norm(np.asarray(V, dtype=float), axis=1) > 0):
            raise ValueError("ActivationFeatures: a direction has length 0: give nonzero vectors (they are "
                             "normalised), e.g. from ActivationFeatures.from_kernel")
        if ACTIVATIONS[activation] is not None and (scale != 1.0 or shift != 0.0):
            raise ValueError(f"ActivationFeatures: scale and shift are for 'erf'; {activation!r} is homogeneous "
                             "(a scale only multiplies it, a shift moves its kink off the equator): leave them at "
                             "1 and 0")
        if not isinstance(directions, Param):
            directions = jnp.asarray(V, dtype=jnp.result_type(float)) if is_concrete(V) else V
        self._set(directions=directions, activation=activation, max_degree=int(max_degree), scale=float(scale),
                  shift=float(shift), tolerance=float(tolerance), jitter=None if jitter is None else float(jitter))

    @classmethod
    @validated
    def from_kernel(cls, kernel: AKernel, input_dim: Annotated[int, Integer(2)], num_features: Count, *,
                    activation: AnActivation = "erf", scale: Positive = 1.0, shift: Annotated[float, Real()] = 0.0,
                    tolerance: Tolerance = 1e-6, rng_key: RngKey = 0, learnable: Flag = True,
                    quantile: Quantile = 0.05) -> "ActivationFeatures":
        r"""M directions drawn uniformly on :math:`S^{d-1}` and the smallest degree L whose estimated tail
        is at most ``tolerance`` of the series (module docstring), for ``kernel`` (a template: a prior on the
        chordal lengthscale is read at its ``quantile``; σ² and the map do not enter the rule).

        :param kernel: an :class:`~ppl_sparsegp.kernels.ArcCosine` or
            :class:`~ppl_sparsegp.kernels.ChordalMatern` kernel (or template) that pairs with the activation.
        :param input_dim: D ≥ 2.
        :param num_features: M ≥ 1.
        :param activation: as for the class; ``scale``, ``shift``: erf's.
        :param tolerance: the relative tail, in (0, 1).
        :param rng_key: the key (or seed) of the directions.
        :param learnable: directions as a :class:`~ppl_sparsegp.Param` (learned) or fixed.
        :param quantile: the prior quantile of the chordal lengthscale read by the rule.
        :raises ValueError: for a pair that does not converge (naming it and the pairs that do), or when the
            tolerance needs more than :data:`MAX_SEARCH_DEGREE` degrees or more accuracy than the kernel's
            coefficients have.
        """
        feature = cls(np.ones((num_features, input_dim + 1)), activation, 0, scale=scale, shift=shift,
                      tolerance=tolerance)
        feature.check_kernel(kernel)
        L = feature.degree_for(_shape_probe(kernel, quantile))
        V = np.asarray(_unit(jax.random.normal(as_rng_key(rng_key), (num_features, input_dim + 1))))
        return cls(Param(V) if learnable else V, activation, L, scale=scale, shift=shift, tolerance=tolerance)

    @property
    def num_features(self):
        return np.shape(self.directions.init if isinstance(self.directions, Param) else self.directions)[0]

    @property
    def d(self):
        """d = input_dim + 1, the ambient dimension of the sphere."""
        return np.shape(self.directions.init if isinstance(self.directions, Param) else self.directions)[1]

    @property
    def input_dim(self):
        """D, the number of input columns."""
        return self.d - 1

    def coefficients(self):
        r""":math:`\hat\sigma_0, \dots, \hat\sigma_L` (NumPy, :func:`activation_coefficients`)."""
        return _coefficients(self.activation, self.d, self.max_degree, self.scale, self.shift)

    def check_kernel(self, kernel: Kernel):
        """Refuse a kernel that is not zonal, of another input dimension, or whose pair with the activation
        does not converge (module docstring), naming the pair and the pairs that converge."""
        if not isinstance(kernel, Zonal):
            raise ValueError(f"ActivationFeatures need a Zonal kernel (ArcCosine, ChordalMatern), got "
                             f"{type(kernel).__name__}")
        if kernel.input_dim is not None and kernel.input_dim != self.input_dim:
            raise ValueError(f"ActivationFeatures of input_dim = {self.input_dim} (directions of {self.d} columns) "
                             f"with a kernel of {kernel.input_dim} lengthscales: give directions of shape "
                             f"(M, {kernel.input_dim + 1})")
        problem = _pair_problem(self.activation, self.shift, kernel, self.d)
        if problem is not None:
            works = "; ".join(_working_pairs(self.d, self.shift)) or "none"
            raise ValueError(f"ActivationFeatures({self.activation!r}) with {_describe(kernel)} on S^{self.d - 1} "
                             f"(input_dim = {self.input_dim}): Kuu is an infinite series: {problem}. Pairs that "
                             f"converge here: {works} (erf pairs with every kernel whose zero degrees it shares)")

    @validated
    def decay_exponent(self, kernel: AKernel):
        """k with t_n ~ n^-k (module docstring; inf for erf)."""
        q = ACTIVATIONS[self.activation]
        return math.inf if q is None else (self.d + 2 * q) - _kernel_decay(kernel, self.d) - (self.d - 2)

    @validated
    def tail(self, kernel: AKernel, kernel_coefficients: Annotated[Any, OrNone(ArrayOf(rank=1))] = None):
        """(estimated relative tail, series sum) of the Kuu diagonal series at ``max_degree`` for a concrete
        kernel (``kernel_coefficients``: its Funk–Hecke coefficients a_0…a_L, (L + 1,), computed when not
        given)."""
        if kernel_coefficients is None:
            kernel_coefficients = funk_hecke_coefficients(kernel, self.d, self.max_degree)
        t = _terms(self.coefficients(), np.asarray(kernel_coefficients, dtype=float), self.d)
        total = float(np.sum(t))
        rounding = t < _ROUNDING * total
        last = np.nonzero(~rounding)[0][-1]
        if np.any(t[last + 1:] > 0):  # the series reached the coefficients' rounding before L: the tail is below it
            return float(np.sum(t[last + 1:])) / total + _ROUNDING, total
        return _tail(t, self.decay_exponent(kernel)) / total, total

    @validated
    def degree_for(self, kernel: AKernel):
        """The smallest L ≤ :data:`MAX_SEARCH_DEGREE` whose estimated relative tail is ≤ ``tolerance``
        for a concrete kernel (coefficients of the kernel above a 1e-12 fraction of a_0 only)."""
        self.check_kernel(kernel)
        k, top = self.decay_exponent(kernel), 32
        while True:
            with jax.ensure_compile_time_eval():
                a = np.asarray(funk_hecke_coefficients(kernel, self.d, top), dtype=float)
            sig = _coefficients(self.activation, self.d, top, self.scale, self.shift)
            t = _terms(sig, a, self.d)
            for L in range(2, top + 1):
                if t[L] != 0 and not a[L] > _ACCURACY * a[0]:
                    raise ValueError(f"ActivationFeatures({self.activation!r}) with {_describe(kernel)}: the "
                                     f"tolerance {self.tolerance:g} needs degrees past {L - 1}, where the kernel's "
                                     "coefficients fall below 1e-12 of a_0 (quadrature rounding): use a larger "
                                     "tolerance, or a smaller erf scale")
                if t[L] != 0 and _tail(t[:L + 1], k) <= self.tolerance * np.sum(t[:L + 1]):
                    return L
            if top >= MAX_SEARCH_DEGREE:
                raise ValueError(f"ActivationFeatures({self.activation!r}) with {_describe(kernel)}: the tolerance "
                                 f"{self.tolerance:g} needs more than {MAX_SEARCH_DEGREE} degrees (the terms fall "
                                 f"like n^-{k:g}): use a larger tolerance or erf")
            grow = 2 * top
            if math.isfinite(k):  # the tail falls like L^(1-k): jump to the degree that rate predicts
                rel = _tail(t, k) / np.sum(t)
                if math.isfinite(rel):
                    grow = max(grow, math.ceil(1.2 * top * (rel / self.tolerance) ** (1.0 / (k - 1))))
            top = min(grow, MAX_SEARCH_DEGREE)

    def check_inputs(self, X: ArrayLike, name: str = "X"):
        X = check_inputs(X, name)
        if X.shape[1] != self.input_dim:
            raise ValueError(f"{name} has {X.shape[1]} input columns but the features' directions have "
                             f"{self.d} = input_dim + 1: give directions of shape (M, {X.shape[1] + 1})")
        return X

    def relative_jitter(self, dtype: DTypeLike):
        if self.jitter is not None:
            return self.jitter
        return 1e-10 if jnp.finfo(dtype).bits == 64 else 1e-5

    def adequacy_advice(self, lengthscales: Optional[ArrayLike], X: ArrayLike,
                        kernel: Union[Kernel, Callable[[Any], Kernel]], tolerance: float) -> str:
        """More directions, or an activation whose span holds the kernel's degrees (module docstring)."""
        return ("increase num_features (more directions), or use erf with shift != 0 (erf(st) spans only the odd "
                "degrees)")


@functools.partial(jax.jit, static_argnums=(2,))
def _gegenbauer_series(c, T, alpha):
    r""":math:`\sum_n c_n C_n^\alpha(T)` elementwise by the three-term recurrence (Eq. (5) of
    :mod:`~ppl_sparsegp.features.spherical_harmonics`)."""
    L = c.shape[0] - 1
    c_prev, cur = jnp.ones_like(T), 2.0 * alpha * T
    acc = c[0] * c_prev + (c[1] * cur if L >= 1 else 0.0)

    def step(n, carry):
        c_prev, cur, acc = carry
        m = jnp.asarray(n, T.dtype)
        c_prev, cur = cur, (2.0 * T * (m + alpha - 1) * cur - (m + 2 * alpha - 2) * c_prev) / m
        return c_prev, cur, acc + c[n] * cur

    if L >= 2:
        _, _, acc = jax.lax.fori_loop(2, L + 1, step, (c_prev, cur, acc))
    return acc


@Kuu.register(ActivationFeatures, Zonal)
def _kuu_activation(feature, kernel):
    feature.check_kernel(kernel)
    d, L = feature.d, feature.max_degree
    alpha = 0.5 * (d - 2)
    a = funk_hecke_coefficients(kernel, d, L)
    sig = feature.coefficients()
    if is_concrete(a):
        a_np = np.asarray(a, dtype=float)
        keep = sig != 0
        if not np.all(a_np[keep] > 0):
            raise ValueError(f"ActivationFeatures: the kernel's Funk–Hecke coefficient at degree "
                             f"{int(np.argmax(keep & ~(a_np > 0)))} is <= 0 (below the quadrature's accuracy): "
                             "use a lower max_degree (from_kernel) or float64")
        rel, _ = feature.tail(kernel, a_np)
        if not rel <= feature.tolerance:
            raise ValueError(f"ActivationFeatures: max_degree = {L} leaves an estimated {rel:.2g} of the Kuu series "
                             f"unresolved, more than tolerance = {feature.tolerance:g}: use max_degree = "
                             f"{feature.degree_for(kernel)} (ActivationFeatures.from_kernel picks it) or a larger "
                             "tolerance")
    keep = jnp.asarray(sig != 0)
    n = np.arange(L + 1)
    a_safe = jnp.where(keep, a, 1.0)
    c = jnp.where(keep, jnp.asarray(sig, a.dtype) ** 2 / a_safe, 0.0) * jnp.asarray((n + alpha) / alpha, a.dtype)
    W = _unit(feature.directions)
    T = jnp.clip(W @ W.T, -1.0, 1.0)
    K = _gegenbauer_series(c / kernel.variance, T, alpha)  # Eq. (3)
    K = 0.5 * (K + K.T)
    eps = feature.relative_jitter(K.dtype) * jnp.mean(jnp.diagonal(K))
    return Dense(K, jitter=eps)


@functools.partial(jax.jit, static_argnums=(3, 4, 5))
def _kuf(directions, kernel, X, activation, scale, shift):
    r, U = kernel.to_sphere(X)
    K = _activation(activation, _unit(directions) @ U.T, scale, shift)  # Eq. (2)
    return K * r[None, :] ** kernel.order if kernel.order else K


@Kuf.register(ActivationFeatures, Zonal)
def _kuf_activation(feature, kernel, X):
    feature.check_kernel(kernel)
    X = feature.check_inputs(X)
    return _kuf(feature.directions, kernel, X, feature.activation, feature.scale, feature.shift)
