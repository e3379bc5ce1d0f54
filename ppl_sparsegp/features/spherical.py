r"""Spherical harmonic features (Dutordoir, Durrande & Hensman 2020): inducing variables that are RKHS
projections onto the spherical harmonics, for zonal kernels (:class:`~ppl_sparsegp.kernels.Zonal`) in any
input dimension, with a diagonal Kuu.

**The sphere.** Inputs map to :math:`S^{d-1}`, d = D + 1, by the kernel's
:math:`\tilde{\mathbf x} = [\mathbf x\oslash\mathbf s, b]`, :math:`r = \|\tilde{\mathbf x}\|`,
:math:`\hat{\mathbf x} = \tilde{\mathbf x}/r`, and :math:`k(\mathbf x,\mathbf x') = \sigma^2 r^p r'^p
\kappa(\hat{\mathbf x}\cdot\hat{\mathbf x}')`. With :math:`\alpha = (d-2)/2` and :math:`C_n^\alpha` the
Gegenbauer polynomials,

.. math::

    \kappa(t) = \sum_n a_n \frac{n+\alpha}{\alpha} C_n^\alpha(t),\qquad
    a_n = \frac{c_d}{C_n^\alpha(1)}\int_{-1}^1 \kappa(t)\,C_n^\alpha(t)\,(1-t^2)^{\alpha-1/2}\,dt,\qquad
    c_d = \frac{\Gamma(d/2)}{\sqrt\pi\,\Gamma((d-1)/2)}
    \tag{1}

(the Funk–Hecke formula [2, Thm 1.2.9], harmonics orthonormal under the uniform probability measure;
equation numbers in the code's ``# Eq.`` tags refer to this docstring: the paper [1] is not in
``../shared/papers``, and every equation here was checked numerically in
``tests/features/test_spherical.py``). Degree n has
:math:`N(d, n) = \frac{2n+d-2}{n}\binom{n+d-3}{n-1}` harmonics (N(d, 0) = 1) and the addition theorem
:math:`\sum_j Y_{n,j}(\mathbf x)Y_{n,j}(\mathbf y) = \frac{n+\alpha}{\alpha}C_n^\alpha(\mathbf x\cdot\mathbf y)`
[2, Thm 1.2.6] gives :math:`k = \sigma^2 r^p r'^p\sum_n a_n\sum_j Y_{n,j}(\hat{\mathbf x})Y_{n,j}(\hat{\mathbf x}')`.

**Features.** :math:`u_{n,j} = \langle g, Y_{n,j}\rangle_{\mathcal H}` for the degrees 0…L (``max_degree``)
whose a_n is not structurally 0 (the arc-cosine kernels' vanishing degrees are dropped, never kept as
infinite entries):

.. math::

    K_{uu} = \operatorname{diag}\big(1/(\sigma^2 a_n)\big)\ \text{(each repeated } N(d, n)\text{ times)},
    \tag{2}\qquad K_{uf}[(n, j), i] = r_i^p\,Y_{n,j}(\hat{\mathbf x}_i), \tag{3}

a :class:`~ppl_sparsegp.linalg.Diagonal` operator, so Qff is the truncated Mercer series and the residual
variance is constant on the sphere: :math:`k(\mathbf x,\mathbf x) - Q_{ff}(\mathbf x,\mathbf x) =
\sigma^2 r^{2p}(1 - \sum_{n\le L}N(d,n)a_n)` (by the addition theorem; :meth:`SphericalHarmonicFeatures.unresolved`).
Kuf depends on the map's s and b only, not on σ² or κ's own hyperparameters.

**Harmonics in any dimension** [2, Def. 3.1; 1, App.]: for each degree a *fundamental system*
:math:`V_n` of N(d, n) unit vectors on which :math:`\{C_n^\alpha(\mathbf v\cdot\mathbf x)\}` spans the
degree, then :math:`Y_n(\mathbf x) = L_n^{-1}C_n^\alpha(V_n\mathbf x)` with :math:`L_nL_n^\top =
\tfrac{\alpha}{n+\alpha}C_n^\alpha(V_nV_n^\top)` (4): then
:math:`Y_n(\mathbf x)^\top Y_n(\mathbf y) = \frac{n+\alpha}{\alpha}C_n^\alpha(\mathbf x\cdot\mathbf y)`, the
addition theorem, which makes the :math:`Y_{n,j}` orthonormal. :math:`V_n` is chosen greedily to maximise
:math:`\det C_n^\alpha(V V^\top)` over a fixed pool of candidate points (the north pole and
:math:`\max(4N, 64)` draws of a seeded PCG64 generator): the pivoted Cholesky factorisation of the pool's
Gram matrix picks, at each step, the candidate with the largest Schur complement, which is the largest
determinant increment. That is LAPACK's pivoted Cholesky (``dpstrf``) of the pool's Gram matrix, the
first N pivots. Computed once per (d, n) and process (``functools.lru_cache``; deterministic: a seeded
pool, LAPACK's pivoting), at :math:`O(P N^2)` time and :math:`P^2` memory per degree, P = max(3N, 64):
measured on the shared 2-core machine (load ≈ 5) 0.2 s for d = 9, n = 3 (N = 156), 1.1 s for n = 4
(N = 450), 3.7 s for n = 5 (N = 1122), 18 s for n = 6 (N = 2508). The condition number of
:math:`A_n` (which bounds the rounding Y carries) was 1.4e3, 3.4e3, 2.2e4 and 7.5e4 there. :math:`C_n^\alpha` is
evaluated by the three-term recurrence, never by the monomial expansion (which loses every digit by
n = 40 in float64; measured).

**Limits.** d ≥ 3 (input_dim ≥ 2; for one input use :class:`~ppl_sparsegp.features.FourierFeatures`)
and at most :data:`MAX_HARMONICS_PER_DEGREE` = 2600 harmonics in any one degree: the highest degree is
1299 for d = 3 (tested to 40 against SciPy's harmonics, 60 for the coefficients), 49 for d = 4, 18 for
d = 5, 11 for d = 6, 8 for d = 7, 6 for d = 8 and 9, 5 for d = 10, 4 for d = 12, 3 for d = 17 … 21; a
larger degree raises ``ValueError`` naming the largest one.

**Quadrature.** The integral is taken in θ = arccos t,
:math:`\int_0^\pi\kappa(\cos\theta)C_n^\alpha(\cos\theta)\sin^{2\alpha}\theta\,d\theta`, by Gauss–Legendre
(Gauss–Jacobi with exponents 0) on [0, π] with Q = 2L + 200 nodes. In t the integrand has a branch point
at t = 1 (the arc-cosine κ_p and the chordal Matérn-ν behave like :math:`(1-t)^{p+1/2}`,
:math:`(1-t)^{\nu}` there), so Gauss–Jacobi in t converges only algebraically. Measured: κ₁ on S², the
largest error of a₀…a₂ against the closed values 3/8, 1/6, 3/128 is 4e-10 with 50 Gauss–Jacobi nodes in
t, 1.4e-11 with 100, 2.7e-14 with 400, and 1e-15 with 20 Gauss–Legendre nodes in θ; chordal Matérn-3/2
on S² with 240 nodes, relative to a₀ and a 4 000-node reference, Gauss–Jacobi in t errs by 1.2e-9
(ℓ = 0.3), 2.9e-7 (ℓ = 0.1), 9.1e-6 (ℓ = 0.05), Gauss–Legendre in θ by ≤ 3.3e-13 for all of them
(d = 3 and 9; the tests check against adaptive quadrature). In θ the integrand is analytic on [0, π] (κ is a
polynomial in θ, cos θ and sin θ, or an entire function of :math:`2\sin(\theta/2)/\ell`), so the
Gauss rule's error falls geometrically. Exactness: a
Q-point Gauss rule integrates polynomials of degree 2Q − 1 in θ exactly; the error is the best
approximation error of the integrand by such polynomials, geometric in Q for an analytic integrand, with a
rate set by the distance of its nearest singularity from [0, π] (∝ ℓ for the chordal Matérn: short
lengthscales need more nodes, ``quadrature_nodes``).

**Cost per step.** Kuu is diagonal: no Cholesky of Kuu. Kuf costs O(N_b M (d + L)) for the projections
and the recurrence and O(N_b Σ_n N(d, n)²) for the per-degree :math:`L_n^{-1}`, which is quadratic in the
largest degree's size: measured for SVGP steps with a mean-field q (batch 256, d = 9) 5.7 ms at M = 210,
28 ms at M = 660, 187 ms at M = 1 782 (``inference/benchmarks/spherical.py``, part c). A full q(u) adds
the O(N_b M²) variance term of every family.

**Inputs far from the data.** :math:`f = r^p g(\hat{\mathbf x})`: along a ray away from the data the
prediction grows like :math:`r^p` (arc-cosine, p ≥ 1) or tends to its value at the ray's point on the
equator (p = 0); it does not revert to the prior as stationary kernels do.
:meth:`SphericalHarmonicFeatures.warn_outside` warns (:class:`~ppl_sparsegp.features.OutsideDomainWarning`)
for inputs beyond the box of the data the feature was built from (:meth:`~SphericalHarmonicFeatures.from_data`).

References:
    1. Dutordoir, Durrande, Hensman (2020), Sparse Gaussian processes with spherical harmonic features,
       ICML.
    2. Dai, Xu (2013), Approximation theory and harmonic analysis on spheres and balls, Springer, §1–3.
    3. Cho, Saul (2009), Kernel methods for deep learning, NeurIPS.
    4. NIST Digital Library of Mathematical Functions, §18.9 (recurrences of the classical orthogonal
       polynomials).
"""
from __future__ import annotations

import functools
from typing import Annotated, Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from numpyro.distributions import Distribution

from ..covariances import Kuf, Kuu, SufficientStatistics, sufficient_statistics
from ..kernels import ArcCosine, ChordalMatern, Kernel, Zonal, check_inputs
from ..linalg import Diagonal
from ..parameters import Param, is_concrete
from ..validation import (
    AFeature,
    AKernel,
    ArrayOf,
    Count,
    Inputs,
    InstanceOf,
    Integer,
    MaybeCount,
    NonNegativeInt,
    OrNone,
    Quantile,
    Tolerance,
    validated,
    warn_user,
)
from .base import InducingFeature, OutsideDomainWarning, TooManyFeatures, constant_kuf
from .spherical_harmonics import (
    MAX_HARMONICS_PER_DEGREE,
    _inverse_factor_product,
    check_degree,
    fundamental_system,
    funk_hecke_coefficients,
    gegenbauer,
    num_harmonics,
)

__all__ = ["SphericalHarmonicFeatures", "num_harmonics", "gegenbauer", "fundamental_system",
           "funk_hecke_coefficients", "spherical_statistics", "MAX_HARMONICS_PER_DEGREE"]


def _shape_probe(kernel, quantile):
    """A concrete kernel with κ's hyperparameters of ``kernel`` (a template: a prior's ``quantile``, a Param's
    initial value); the map and σ² do not enter the coefficients."""
    if isinstance(kernel, ChordalMatern):
        value = kernel.chordal_lengthscale
        if isinstance(value, Param):
            ell = float(np.asarray(value.init))
        elif isinstance(value, Distribution):
            from .fourier_sizes import lengthscale_range
            ell = float(np.reshape(lengthscale_range(value, quantile=quantile)[0], ()))
        else:
            ell = float(np.asarray(value))
        return ChordalMatern(kernel.nu, 1.0, 1.0, 1.0, ell)
    if isinstance(kernel, ArcCosine):
        return type(kernel)(kernel.order)
    return kernel


def _vanishing_rule(kernel):
    """A hashable stand-in for ``kernel.vanishing_degree`` (a static field of the features): (the kernel's
    class, its static fields), on which the rule depends alone (it holds for every value of the
    hyperparameters: ArcCosine's ``order``); None for a kernel without vanishing degrees (Zonal's rule)."""
    if type(kernel).vanishing_degree is Zonal.vanishing_degree:
        return None
    return type(kernel), tuple(getattr(kernel, n) for n in type(kernel)._static)


def _vanishing_probe(rule):
    """A kernel of the rule's class and static fields (no hyperparameters) whose ``vanishing_degree`` is the
    rule's."""
    cls, static = rule if isinstance(rule, tuple) and len(rule) == 2 else (None, None)
    if not (isinstance(cls, type) and issubclass(cls, Zonal) and isinstance(static, tuple)
            and len(static) == len(cls._static)):
        raise ValueError(f"vanishing must be (a Zonal kernel class, its static fields), got {rule!r}: pass the "
                         "kernel as kernel= instead")
    return cls._tree_unflatten(static, (None,) * len(cls._params))


class SphericalHarmonicFeatures(InducingFeature):
    r"""Spherical harmonic features of degrees 0…``max_degree`` on :math:`S^{d-1}`, d = input_dim + 1
    (module docstring), for :class:`~ppl_sparsegp.kernels.Zonal` kernels
    (:class:`~ppl_sparsegp.kernels.ArcCosine`, :class:`~ppl_sparsegp.kernels.ChordalMatern`).

    :param input_dim: D ≥ 2, the number of input columns.
    :param max_degree: L ≥ 0, the highest degree kept.
    :param kernel: optional kernel (or kernel template): its structurally vanishing degrees (the
        arc-cosine kernels' odd or even degrees) are dropped, and :meth:`refined` skips them (the rule is
        kept in ``vanishing``). Without it every degree 0…L is kept, and Kuu refuses a kernel with a
        vanishing degree among them.
    :param degrees: optional explicit tuple of degrees (overrides ``max_degree``'s range; each ≤ the
        supported limit).
    :param lower: optional (input_dim,) minima per column of the training inputs' box, for
        :meth:`warn_outside` (set by :meth:`from_data`); given with ``upper``.
    :param upper: optional (input_dim,) maxima per column of that box; given with ``lower``.
    :param vanishing: the kernel's vanishing-degree rule, (kernel class, its static fields), which
        :meth:`refined` uses to skip the vanishing degrees; set from ``kernel`` (give ``kernel`` instead).
    :raises ValueError: input_dim < 2, a negative or too large degree (naming the largest supported one).

    ``num_features`` = Σ N(d, n) over the kept degrees; e.g. input_dim = 8, L = 4: 1 + 9 + 44 + 156 + 450 = 660.
    """

    kuf_kernel_fields = ("lengthscale", "bias")  # the input mapping x -> [x / s, b] / r
    one_pass_with_fixed_map = True  # spherical_statistics, registered as sufficient_statistics (fit_spherical)

    _static = ("input_dim", "degrees", "lower", "upper", "vanishing")
    _static_defaults = {"vanishing": None}  # fits saved before it: no rule, the degrees as saved
    _renamed_fields = {"data_box": ("lower", "upper")}  # fits saved before the box was lower/upper

    @classmethod
    @validated
    def from_data(cls, X: Inputs, kernel: AKernel, *, tolerance: Tolerance = 0.01, max_features: MaybeCount = None,
                  quantile: Quantile = 0.05):
        r"""The fewest degrees that leave at most ``tolerance`` of κ(1) = 1 unresolved,
        :math:`1 - \sum_{n\le L}N(d,n)a_n \le \text{tolerance}` (the residual variance fraction, the same
        at every input), with the kernel's vanishing degrees dropped and the data's box kept for
        :meth:`warn_outside`. As for VFF, tolerance ≈ 0.01 σ_n²/σ_f² keeps the posterior mean within
        a small fraction of a posterior sd of the exact one.

        :param X: training inputs (N, D).
        :param kernel: a :class:`~ppl_sparsegp.kernels.Zonal` kernel or template; a prior on the
            ChordalMatern ``chordal_lengthscale`` is read at its ``quantile`` (shorter lengthscales need
            more degrees); the other hyperparameters do not enter the rule.
        :param tolerance: in (0, 1).
        :param max_features: optional cap on M: raise if the rule needs more.
        :raises ValueError: for a bad tolerance, or when the rule needs more degrees than are supported;
            :class:`~ppl_sparsegp.features.TooManyFeatures` (a ``ValueError``) when it needs more than
            ``max_features`` (naming the size it wants and what the largest allowed degree resolves).
        """
        X = check_inputs(np.asarray(X, dtype=float), "X")
        if not 0 < tolerance < 1:
            raise ValueError(f"tolerance must be in (0, 1), got {tolerance!r}")
        if not isinstance(kernel, Zonal):
            raise ValueError(f"kernel must be a Zonal kernel (ArcCosine, ChordalMatern), got {type(kernel).__name__}")
        D = X.shape[1]
        if D < 2:
            raise ValueError(f"X has {D} input column: SphericalHarmonicFeatures need D ≥ 2 columns (mapped to "
                             "the sphere in D + 1 ≥ 3 dimensions); for one column use FourierFeatures.from_data")
        d = D + 1
        probe = _shape_probe(kernel, quantile)
        top, total = 0, 1
        while (num_harmonics(d, top + 1) <= MAX_HARMONICS_PER_DEGREE and top < 500
               and total + num_harmonics(d, top + 1) <= 50_000):  # the search stops at M = 50 000
            top += 1
            total += num_harmonics(d, top)
        with jax.ensure_compile_time_eval():
            a = np.asarray(funk_hecke_coefficients(probe, d, top), dtype=float)
        counts = np.array([num_harmonics(d, n) for n in range(top + 1)])
        unresolved = 1.0 - np.cumsum(counts * a)
        keep = np.array([not kernel.vanishing_degree(n, d) for n in range(top + 1)])
        sizes = np.cumsum(counts * keep)
        ok = np.nonzero(unresolved <= tolerance)[0]
        if ok.size == 0:
            error = ValueError if max_features is None or sizes[-1] <= max_features else TooManyFeatures
            raise error(f"tolerance {tolerance!r} needs more than the supported degree {top} for input_dim = {D} "
                        f"({int(sizes[-1])} features leave {unresolved[-1]:.3g} of κ(1) unresolved): raise the "
                        "tolerance")
        L = int(ok[0])
        if max_features is not None and sizes[L] > max_features:
            fit = np.nonzero(sizes <= max_features)[0]
            best = int(fit[-1]) if fit.size else None
            raise TooManyFeatures(
                f"tolerance {tolerance!r} needs max_degree = {L} with M' = {int(sizes[L])} features, more than "
                f"max_features = {max_features}; " + (f"max_degree = {best} ({int(sizes[best])} features) leaves "
                                                      f"{unresolved[best]:.3g} unresolved: raise the tolerance or "
                                                      "max_features" if best is not None else "raise max_features"),
                int(sizes[L]), max_features)
        return cls(D, L, kernel=kernel, lower=tuple(float(v) for v in X.min(0)),
                   upper=tuple(float(v) for v in X.max(0)))

    def refined(self) -> "SphericalHarmonicFeatures":
        """Degrees up to twice the highest (a chordal lengthscale about half as long: the coefficients'
        tail scales with the degree times ℓ), within the supported degree, skipping the kernel's vanishing
        degrees (an arc-cosine kernel's odd or even degrees). Features built with ``kernel=`` (as
        :meth:`from_data` and :meth:`resized` build them) know which degrees vanish
        (``kernel.vanishing_degree``) and skip exactly those, whatever the max_degree (where every degree up
        to twice the highest vanishes, the next one that does not is added). Without it the
        parity is read from the kept degrees (the parity they skip above 2), so arc-cosine features of
        max_degree ≤ 3 built without ``kernel=`` (no gap yet) refine to every degree and Kuu refuses the
        vanishing ones: build them with ``kernel=``."""
        L, top = self.max_degree, max(2 * self.max_degree, 1)
        while top > L and num_harmonics(self.d, top) > MAX_HARMONICS_PER_DEGREE:
            top -= 1
        if self.vanishing is not None:
            probe = _vanishing_probe(self.vanishing)
            extra = [n for n in range(L + 1, top + 1) if not probe.vanishing_degree(n, self.d)]
            n = top + 1
            while not extra and num_harmonics(self.d, n) <= MAX_HARMONICS_PER_DEGREE:  # every new degree
                extra = [n] if not probe.vanishing_degree(n, self.d) else []  # vanishes (order 0 at L = 1):
                n += 1  # the next degree that does not
        else:
            gone = {n % 2 for n in range(3, L + 1) if n not in self.degrees}
            extra = [n for n in range(L + 1, top + 1) if n < 3 or n % 2 not in gone]
        return type(self)(self.input_dim, top, degrees=self.degrees + tuple(extra), lower=self.lower,
                          upper=self.upper, vanishing=self.vanishing)

    @validated
    def resized(self, X: Inputs, kernel: AKernel, tolerance: Tolerance, max_features: MaybeCount = None):
        """:meth:`from_data`'s degree for the concrete zonal kernel (a ChordalMatern's chordal lengthscale as
        given), keeping the data box (:meth:`~ppl_sparsegp.features.InducingFeature.resized`; at most
        ``max_features`` features); None for a kernel that is not zonal."""
        if not isinstance(kernel, Zonal):
            return None
        out = type(self).from_data(X, kernel, tolerance=tolerance, max_features=max_features)
        box = self if self.lower is not None else out  # keep the training inputs' box where it is known
        return type(self)(self.input_dim, out.max_degree, kernel=kernel, lower=box.lower, upper=box.upper)

    @validated
    def __init__(self, input_dim: Annotated[int, Integer(2)], max_degree: Annotated[int, NonNegativeInt()], *,
                 kernel: Annotated[Any, OrNone(AKernel.__metadata__[0])] = None,
                 degrees: Annotated[Any, OrNone(InstanceOf(list, tuple, range, what="a sequence of degrees"))] = None,
                 lower: Annotated[Any, OrNone(InstanceOf(list, tuple, np.ndarray, what="(input_dim,) minima"))] = None,
                 upper: Annotated[Any, OrNone(InstanceOf(list, tuple, np.ndarray, what="(input_dim,) maxima"))] = None,
                 vanishing: Annotated[Any, OrNone(InstanceOf(tuple, what="(a Zonal kernel class, its static fields)"))]
                 = None):
        if isinstance(input_dim, bool) or not isinstance(input_dim, (int, np.integer)) or input_dim < 2:
            raise ValueError(f"input_dim must be an integer >= 2 (the sphere S^D lives in D + 1 >= 3 dimensions), got "
                             f"{input_dim!r}; for one input use FourierFeatures")
        if isinstance(max_degree, bool) or not isinstance(max_degree, (int, np.integer)) or max_degree < 0:
            raise ValueError(f"max_degree must be a non-negative integer, got {max_degree!r}")
        d = int(input_dim) + 1
        if kernel is not None:
            if not isinstance(kernel, Zonal):
                raise ValueError(f"kernel must be a Zonal kernel (ArcCosine, ChordalMatern), got "
                                 f"{type(kernel).__name__}")
            vanishing = _vanishing_rule(kernel)
        if degrees is None:
            degrees = range(int(max_degree) + 1)
            if kernel is not None:
                degrees = [n for n in degrees if not kernel.vanishing_degree(n, d)]
        degrees = tuple(sorted({int(n) for n in degrees}))
        if not degrees or degrees[0] < 0:
            raise ValueError(f"degrees must be non-negative integers (at least one), got {degrees!r}")
        check_degree(d, degrees[-1], "max_degree")
        if (lower is None) != (upper is None):
            raise ValueError("lower and upper (the training inputs' box) are given together or not at all")
        if lower is not None:
            lower, upper = (tuple(float(v) for v in b) for b in (lower, upper))
            if len(lower) != input_dim or len(upper) != input_dim:
                raise ValueError(f"lower and upper must each hold input_dim = {input_dim} values, got "
                                 f"{len(lower)} and {len(upper)}")
            if not all(lo <= hi for lo, hi in zip(lower, upper)):
                raise ValueError(f"the box must satisfy lower <= upper in every column, got {lower} and {upper}")
        if vanishing is not None:
            _vanishing_probe(vanishing)  # refuses anything but a rule of _vanishing_rule's form
        self._set(input_dim=int(input_dim), degrees=degrees, lower=lower, upper=upper, vanishing=vanishing)

    @property
    def d(self) -> int:
        """The ambient dimension of the sphere, input_dim + 1."""
        return self.input_dim + 1

    @property
    def max_degree(self) -> int:
        return self.degrees[-1]

    @property
    def counts(self) -> tuple:
        """N(d, n) for each kept degree."""
        return tuple(num_harmonics(self.d, n) for n in self.degrees)

    @property
    def num_features(self):
        return sum(self.counts)

    def check_inputs(self, X: ArrayLike, name: str = "X"):
        X = check_inputs(X, name)
        if X.shape[1] != self.input_dim:
            raise ValueError(f"{name} has {X.shape[1]} input columns but the SphericalHarmonicFeatures were built for "
                             f"input_dim = {self.input_dim}: build them with SphericalHarmonicFeatures({X.shape[1]}, "
                             f"max_degree)")
        return X

    def check_kernel(self, kernel: Kernel):
        if not isinstance(kernel, Zonal):
            raise NotImplementedError(f"spherical harmonic features need a Zonal kernel (ArcCosine, ChordalMatern), "
                                      f"got {type(kernel).__name__}")
        D = kernel.input_dim if not isinstance(kernel.lengthscale, (Distribution, Param)) else None
        if isinstance(kernel.lengthscale, Distribution) and len(kernel.lengthscale.batch_shape) == 1:
            D = kernel.lengthscale.batch_shape[0]
        if D is not None and D != self.input_dim:
            raise ValueError(f"the kernel's lengthscale has {D} entries but the features have input_dim = "
                             f"{self.input_dim}: give a scalar or {self.input_dim} scales")
        vanishing = [n for n in self.degrees if kernel.vanishing_degree(n, self.d)]
        if vanishing:
            raise ValueError(f"{type(kernel).__name__}(order={kernel.order}) has a_n = 0 at degrees {vanishing} (no "
                             "feature there, an infinite Kuu entry): build the features with "
                             f"SphericalHarmonicFeatures({self.input_dim}, {self.max_degree}, kernel=kernel)")

    @validated
    def coefficients(self, kernel: AKernel):
        """a_n for the kept degrees, each repeated N(d, n) times (M,), without σ²."""
        index = np.repeat(np.asarray(self.degrees), np.asarray(self.counts))  # static: one gather
        return funk_hecke_coefficients(kernel, self.d, self.max_degree)[index]

    @validated
    def unresolved(self, kernel: AKernel):
        r"""The fraction of the prior variance the features miss, :math:`1 - \sum_{n\in\text{kept}} N(d,n)a_n`
        (the same at every input: :math:`k(\mathbf x,\mathbf x) - Q_{ff}(\mathbf x,\mathbf x) =
        \sigma^2 r^{2p}\times` this)."""
        a = funk_hecke_coefficients(kernel, self.d, self.max_degree)[np.asarray(self.degrees)]
        return 1.0 - jnp.sum(np.asarray(self.counts, float) * a)

    @validated
    def harmonics(self, U: Annotated[Any, ArrayOf(rank=2)]):
        r""":math:`Y_{n,j}(\hat{\mathbf x})` for unit vectors U (N, d): (M, N), degrees in order (one compiled
        program per (d, degrees, shape, dtype))."""
        return _harmonics(self.d, self.degrees, U)

    def warn_outside(self, X: ArrayLike, name: str = "X_new", *, kernel: Optional[Kernel] = None):
        """Warn (:class:`OutsideDomainWarning`) when concrete inputs lie more than 10 % of the data's range
        outside the box of the training inputs (:meth:`from_data`): there r grows, and f = r^p g(x̂)
        extrapolates along rays (grows like r^p for the arc-cosine kernels, tends to its value on the
        equator for p = 0) instead of reverting to the prior."""
        if self.lower is None or not is_concrete(X):
            return X
        x = np.asarray(X, dtype=float)
        lo, hi = np.asarray(self.lower), np.asarray(self.upper)
        span = np.maximum(hi - lo, 1e-12)
        out = np.any((x < lo - 0.1 * span) | (x > hi + 0.1 * span), axis=1)
        if out.any():
            warn_user(
                f"{name} has {int(out.sum())} of {x.shape[0]} points more than 10% of the data's range outside the "
                "box of the training inputs: with spherical harmonic features (a zonal kernel on the sphere) the "
                "prediction there extrapolates along rays, f = r^p g(x̂), growing like r^p for ArcCosine(order p) and "
                "tending to its value on the equator for p = 0; it does not revert to the prior as a stationary GP "
                "would. Use a stationary kernel (e.g. VFF) if that matters, or rebuild the features with from_data on "
                "the training and prediction inputs together",
                OutsideDomainWarning)
        return X


_UNROLL_MAX = 16  # the highest degree whose Gegenbauer recurrence is unrolled (see _gegenbauer_rows)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _harmonics(d, degrees, U):
    """Y for the kept degrees (M, N): L_n⁻¹ per degree (Eq. (4)) applied to :func:`_gegenbauer_rows`."""
    return _orthonormalise(d, degrees, _gegenbauer_rows(d, degrees, U))


def _gegenbauer_rows(d, degrees, U):
    r""":math:`C_n^\alpha(\mathbf v\cdot\hat{\mathbf x})` for every vector v of every kept degree's fundamental
    system, (M, N): every row's Gegenbauer polynomial of its own degree in one recurrence over the projections
    V x̂ (Eq. (5); a row keeps the value of its degree)."""
    alpha = 0.5 * (d - 2)
    systems = [fundamental_system(d, n) for n in degrees]
    V = np.concatenate([v for v, _ in systems])
    row_degree = jnp.asarray(np.repeat(degrees, [len(v) for v, _ in systems]))[:, None]
    T = jnp.clip(jnp.asarray(V, U.dtype) @ U.T, -1.0, 1.0)
    one = jnp.ones_like(T)
    c_prev, c = one, 2.0 * alpha * T
    out = jnp.where(row_degree == 0, one, jnp.where(row_degree == 1, c, 0.0))

    def step(k, carry):
        c_prev, c, out = carry
        k = jnp.asarray(k, T.dtype)
        c_prev, c = c, (2.0 * T * (k + alpha - 1) * c - (k + 2 * alpha - 2) * c_prev) / k  # Eq. (5)
        return c_prev, c, jnp.where(row_degree == k, c, out)

    if degrees[-1] >= 2:
        # unrolled up to degree _UNROLL_MAX: XLA then fuses the recurrence into one elementwise pass (on a CPU
        # core at d = 9, L = 3, 8 192 rows: 5 ms against 91 ms as a while loop, which dominated the one-pass
        # statistics); beyond, a loop of 8 unrolled steps (d = 3, L = 64, 1 000 rows: 1.0 s against 2.3 s as a
        # plain loop and 0.3 s unrolled, whose compilation takes 30 s against 5 s)
        _, _, out = jax.lax.fori_loop(2, degrees[-1] + 1, step, (c_prev, c, out),
                                      unroll=True if degrees[-1] <= _UNROLL_MAX else 8)
    return out


def _orthonormalise(d, degrees, C, *, both_sides=False):
    """B C with B = blockdiag(L_n⁻¹) over the kept degrees (Eq. (4): Y_n = L_n⁻¹ C_n(V_n x̂)); B C Bᵀ with
    ``both_sides`` (C then (M, M): the statistics' Gram of :func:`_gegenbauer_rows`)."""
    BC = _inverse_factor_product(d, tuple(degrees), C)  # its reverse mode: row-major L_n⁻ᵀ products
    return _orthonormalise(d, degrees, BC.T).T if both_sides else BC


def _check_pair(feature, kernel):
    if not isinstance(feature, SphericalHarmonicFeatures):
        raise TypeError(f"expected SphericalHarmonicFeatures, got {type(feature).__name__}")
    feature.check_kernel(kernel)


@jax.jit
def _feature_coefficients(feature, kernel):
    return feature.coefficients(kernel)


@Kuu.register(SphericalHarmonicFeatures, Zonal)
def _kuu_spherical(feature, kernel):
    _check_pair(feature, kernel)
    a = _feature_coefficients(feature, kernel)
    if is_concrete(a) and not np.all(np.asarray(a) > 0):
        bad = int(np.argmax(~(np.asarray(a) > 0)))
        raise ValueError(f"SphericalHarmonicFeatures: the Funk–Hecke coefficient of feature {bad} is "
                         f"{float(a[bad]):.3g} <= 0 for this kernel (below the dtype's range or the quadrature's "
                         "accuracy): use a lower max_degree (from_data) or float64")
    return Diagonal(1.0 / (kernel.variance * a))  # Eq. (2)


@jax.jit
def _kuf(feature, kernel, X):
    r, U = kernel.to_sphere(X)
    Y = feature.harmonics(U)
    return Y * r[None, :] ** kernel.order if kernel.order else Y  # Eq. (3)


@Kuf.register(SphericalHarmonicFeatures, Zonal)
def _kuf_spherical(feature, kernel, X):
    _check_pair(feature, kernel)
    X = feature.check_inputs(X)
    if is_concrete(X) and is_concrete(kernel.lengthscale) and is_concrete(kernel.bias):
        with constant_kuf(X, feature.num_features):  # fixed map: Kuf is a constant of the program
            return _kuf(feature, kernel, X)
    return _kuf(feature, kernel, X)


@jax.jit
def _chunk_statistics(feature, kernel, X, y, w):
    """One chunk's statistics of the Gegenbauer rows C (Kuf = B C r^p with B = blockdiag(L_n⁻¹)): B is applied
    once to the sums (:func:`spherical_statistics`), not to every row, which saves N Σ_n N(d, n)² products."""
    r, U = kernel.to_sphere(X)
    K = _gegenbauer_rows(feature.d, feature.degrees, U) * (w * r ** kernel.order if kernel.order else w)[None, :]
    return K @ K.T, K @ y, jnp.sum(K, axis=1), jnp.sum(w * y * y), jnp.sum(w * y), jnp.sum(w)


@validated
def spherical_statistics(feature: AFeature, kernel: AKernel, X: Annotated[Any, ArrayOf(rank=(1, 2), read=False)],
                         y: Annotated[Any, ArrayOf(read=False)], *, chunk_size: Count = 4096) -> SufficientStatistics:
    r"""The collapsed bound's sufficient statistics :math:`A = K_{uf}K_{fu}`, :math:`\mathbf c = K_{uf}\mathbf y`,
    :math:`\mathbf y^\top\mathbf y`, N, :math:`K_{uf}\mathbf 1`, Σy in one pass over X in chunks (any
    array with ``.shape`` and row slicing: NumPy arrays, ``np.memmap``), never forming the (M, N) Kuf.
    Kuf depends only on the kernel's map (s, b), so these hold for any σ² and κ hyperparameters: with
    them fixed, :class:`~ppl_sparsegp.CollapsedGP` (``statistics=``) costs O(M³) per step (a Cholesky of
    I + A/σ² in the whitened frame: Kuu is diagonal). Cost: O(N M²) for A, plus O(N M (d + L)) for the
    projections and the Gegenbauer recurrence; the per-degree L_n⁻¹ of Eq. (4) is applied once to the sums
    (O(M Σ_n N(d, n)²)), not to every row. Measured at N = 3.95 M, d = 9, L = 3, M = 210, chunks of 8 192,
    on one unloaded core: 17 s (extrapolated from 400 000 rows; 64 s before the recurrence was unrolled).

    :param feature: :class:`SphericalHarmonicFeatures`.
    :param kernel: a Zonal kernel whose ``lengthscale`` and ``bias`` are numbers (the others may be
        templates).
    :param X: (N, D) inputs; ``y``: (N,) targets.
    :param chunk_size: rows per chunk (the last is padded with zero weight, so one compilation).
    :raises ValueError: for a map with free hyperparameters, mismatched shapes, NaN.
    """
    for name in ("lengthscale", "bias"):
        if not is_concrete(getattr(kernel, name)):
            raise ValueError(f"one-pass spherical statistics need a fixed map: the kernel's {name} is a prior, Param "
                             f"or traced value; give a number for {name} (variance and the shape of κ may stay free)")
    if int(chunk_size) != chunk_size or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    N = X.shape[0]
    if len(X.shape) != 2 or X.shape[1] != feature.input_dim or N == 0:
        raise ValueError(f"X must have shape (N, {feature.input_dim}) with N ≥ 1 rows, got {X.shape}")
    if np.shape(y) != (N,):
        raise ValueError(f"y must have shape ({N},), got {np.shape(y)}")
    feature.check_kernel(kernel)
    # the map's hyperparameters as concrete values of the compute dtype; the others do not enter Kuf
    dtype = jnp.result_type(float)
    probe = kernel.replace(**{f: (jnp.ones((), dtype) if not is_concrete(getattr(kernel, f)) else getattr(kernel, f))
                              for f in kernel._params})
    chunk = int(min(chunk_size, max(N, 1)))
    acc = None
    for start in range(0, N, chunk):
        Xb = np.asarray(X[start:start + chunk], dtype=np.float64)
        yb = np.asarray(y[start:start + chunk], dtype=np.float64)
        if not (np.all(np.isfinite(Xb)) and np.all(np.isfinite(yb))):
            raise ValueError(f"X or y contains NaN or inf (rows {start} to {start + len(Xb)})")
        w = np.ones(len(Xb))
        if len(Xb) < chunk:
            pad = chunk - len(Xb)
            Xb = np.concatenate([Xb, np.repeat(Xb[:1], pad, 0)])
            yb, w = np.concatenate([yb, np.zeros(pad)]), np.concatenate([w, np.zeros(pad)])
        part = _chunk_statistics(feature, probe, jnp.asarray(Xb, dtype), jnp.asarray(yb, dtype), jnp.asarray(w, dtype))
        acc = part if acc is None else tuple(a + b for a, b in zip(acc, part))
    A, c, f1, yy, ysum, n = acc
    d, degrees = feature.d, feature.degrees
    A = _orthonormalise(d, degrees, A, both_sides=True)
    c, f1 = (_orthonormalise(d, degrees, v[:, None])[:, 0] for v in (c, f1))
    return SufficientStatistics(A, c, yy, n, f1, ysum)


@sufficient_statistics.register(SphericalHarmonicFeatures, Zonal)
def _spherical_sufficient_statistics(feature, kernel, X, y, **options):
    """One pass (:func:`spherical_statistics`) when the kernel's map is fixed; the dense default otherwise."""
    if is_concrete(kernel.lengthscale) and is_concrete(kernel.bias):
        return spherical_statistics(feature, kernel, X, y, **options)
    return SufficientStatistics.from_kuf(Kuf(feature, kernel, jnp.asarray(X)), jnp.asarray(y))
