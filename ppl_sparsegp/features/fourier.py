r"""Variational Fourier features (VFF) for Matérn-1/2, 3/2 and 5/2 kernels on an interval [a, b].

Frequencies :math:`\omega_m = 2\pi m/(b-a)`, m = 0..M−1, basis
:math:`\boldsymbol\phi(x) = [1, \cos\omega_m(x-a), \sin\omega_m(x-a)]`, 2M−1 features. The inducing
variables are RKHS projections :math:`u_m = \langle\phi_m, f\rangle_{\mathcal H}` on [a, b] [1, §3], so

* :math:`K_{uf} = \boldsymbol\phi(x)` for x in [a, b]: it does **not** depend on the hyperparameters;
  outside [a, b] it follows the edge formulas of [1, Table 1] (the sine rows with the corrected sign
  :math:`(x - \text{edge})\,\omega_m e^{-\lambda r}\cdots`, which makes Kuf C¹ at the edges);
* :math:`K_{uu} = \operatorname{diag}(\boldsymbol\alpha) + \sum_{k\le K}\boldsymbol\beta_k
  \boldsymbol\beta_k^\top` with K = 1, 2, 3 for ν = 1/2, 3/2, 5/2 [1, eqs. 62–64, App. B], returned as a
  :class:`~ppl_sparsegp.linalg.DiagPlusLowRank` operator, so solves cost O(MK²). The whitening factor is
  square for ν = 1/2, 3/2, whose β columns have disjoint supports: :math:`R = D^{1/2}(I + GG^\top)^{1/2}`,
  :math:`G = D^{-1/2}B`, in closed form; for ν = 5/2 it is :math:`R = [D^{1/2}, B]` (M × (M + 3)).

With :math:`s(\omega)` the 1-D spectral density (library convention), :math:`\lambda = \sqrt{2\nu}/\ell`,
:math:`\sigma^2` the variance: :math:`\boldsymbol\alpha = \frac{b-a}{2}[2/s(0), 1/s(\omega_{1..}),
1/s(\omega_{1..})]`; :math:`\beta_1 = \sigma^{-1}\mathbb 1_{\cos}`; for 3/2 :math:`\beta_2 =
[0; \omega_m/(\lambda\sigma)]_{\sin}`; for 5/2 :math:`\beta_2 = [(3\omega_m^2/\lambda^2-1)/(\sqrt8\sigma)]_{\cos}`,
:math:`\beta_3 = [0; \sqrt3\,\omega_m/(\lambda\sigma)]_{\sin}`.

Kuu's dynamic range grows like :math:`\omega_M^{2\nu+1}`: use float64 (the runner does) for large M.

Choosing [a, b] and M (:meth:`FourierFeatures.from_data`). Every basis function takes the same value at
a and b, so the residual variance :math:`k(x,x) - [Q_{ff}]_{xx}` rises near the edges; inside, it is the
prior variance the frequencies above :math:`\omega_{M-1}` carry. For data in [x₀, x₁] and the shortest
and longest lengthscales of interest ℓ_min ≤ ℓ_max (λ = √(2ν)/ℓ_min; by default ℓ_max = ℓ_min) the rule is

* **margin**: :math:`[a, b] = [x_0 - 3\ell_{max}, x_1 + 3\ell_{max}]`. Measured on 64 points in [0, 1] (ν = 3/2
  with ℓ from 0.03 to 0.3, ν = 1/2 and 5/2 with ℓ = 0.05), margins of 3ℓ make the largest residual variance at the
  data at most 1.6× the mean one (no edge effect), 2ℓ leaves the edges up to 10× worse, and 5ℓ or more
  spends frequencies outside the data;
* **size**: the smallest M with :math:`\omega_{M-1} \ge T\lambda`, where the Matérn-ν prior
  variance above Tλ, :math:`1 - \int_0^T(1+t^2)^{-\nu-1/2}dt \big/ \int_0^\infty(\cdot)`, equals
  ``tolerance``. Measured (64 points, ν = 1/2, 3/2, 5/2, ℓ = 0.02 … 0.3, tolerance 0.03 … 0.003):
  the mean residual variance fraction at the data is 0.46–1.10× ``tolerance``, the largest ≤ 1.5×.
* **which tolerance** (checked against the exact GP): the residual variance is what the posterior
  misses, so it must be small next to the noise. Exact against projected-process posterior means at
  300 points of 2-D data drawn from the prior at ℓ = ℓ_min (additive Matérn-3/2, ℓ = (0.1, 0.3)),
  median |Δmean| in exact-posterior sd for Matérn-3/2 and 5/2 (½ is closer): tolerance 0.01·σ_n²/σ_f²
  gives 0.05–0.10 (max 0.37), 0.1·σ_n²/σ_f² gives 0.23–0.44 (max 1.5), σ_n²/σ_f² gives 1.0 (max 4).
  **Advice: tolerance ≈ 0.01 σ_n²/σ_f²** for
  regression (with Poisson counts, σ_n² ≈ 1/rate); the 0.01 default suits unit noise-to-signal.
* **several dimensions** (:meth:`AdditiveFeatures.from_data`, :meth:`KroneckerFeatures.from_data`):
  the rule per dimension at that dimension's ℓ_d, with the tolerance split so the whole kernel keeps it
  (a sum: each dimension may leave ``tolerance``; a product: :math:`1 - (1-\text{tol})^{1/D}` each).
  Measured on 300 points (Matérn ½, 3/2, 5/2; ℓ = (0.1, 0.3) and (0.2, 0.2); tolerance 0.03 and 0.01):
  the whole kernel's mean residual fraction is 0.57–1.01× ``tolerance`` (Matérn-3/2: the largest ≤ 1.1×).
* **longer lengthscales need the margin, not more frequencies**: the edge effect reaches about one
  *actual* lengthscale into the box, so a box with 3ℓ_min margins leaves posterior draws at ℓ ≫ ℓ_min
  badly resolved near the edges. Measured (64 points in [0, 1], tolerance 0.01, M from the rule at ℓ):
  with margins m·ℓ, Matérn-3/2 misses 0.9–1.4 % of the variance on average at m = 2, 0.7–0.9 % at
  m = 3 (largest 0.9 %) for ℓ from 0.2 to 3; at m = 1 it misses 4–14 %, at m = 0.5 9–24 % (Matérn-5/2
  is worse: 14–40 % at m = 0.5, 0.4–0.5 % at m = 3). A box cut for ℓ_min = 0.05 (margin 0.15) misses
  19 % at ℓ = 0.4. Hence the margin is 3ℓ_max for the **longest** lengthscale of interest, M from the
  **shortest** one: give the lengthscale prior (ℓ_min, ℓ_max its 1 % and 99 % quantiles,
  :func:`lengthscale_range`) or ``max_lengthscale``. [2] found the same for
  HSGP: its boundary factor c must grow with ℓ/S.
* **a wide prior cannot inflate the box**: the margin is capped at one data span (``max_margin``), never
  below 3ℓ_min. Without the cap a prior whose upper quantile is comparable to the span made the box four
  spans wide and left the features unable to resolve the posterior's lengthscale (a monthly series);
  lengthscales beyond the span are then resolved less well (the cost measured in
  :meth:`FourierFeatures.from_data`), which :func:`~ppl_sparsegp.diagnostics.adequacy` reports, and a
  posterior the features displaced fails :func:`~ppl_sparsegp.diagnostics.refinement_check`.

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, JMLR 18.
    2. Riutort-Mayol, Bürkner, Andersen, Solin, Vehtari (2023), Practical Hilbert space approximate
       Bayesian Gaussian processes for probabilistic programming, Statistics and Computing 33.
"""
from __future__ import annotations

import math
from typing import Annotated, Any, Callable, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from numpyro.distributions import Distribution

from ..covariances import Kuf, Kuu, kuf_basis
from ..kernels import Kernel, Matern12, Matern32, Matern52, Periodic, check_inputs
from ..linalg import Diagonal, DiagPlusLowRank
from ..parameters import Param, is_concrete
from ..validation import (
    AKernel,
    ArrayOf,
    Count,
    Inputs,
    MaxMargin,
    MaybeCount,
    NonNegative,
    Nu,
    Quantile,
    Real,
    Tolerance,
    validated,
    warn_user,
)
from . import base as _base
from .base import (
    FloatDtype,
    InducingFeature,
    MaybeLengthscale,
    OutsideDomainWarning,
    check_feature_cap,
    constant_kuf,
    matern_template,
)
from .fourier_sizes import (
    MAX_FREQUENCIES,
    _capped,
    _check_scalar_lengthscale,
    _require_concrete,
    frequencies_needed,
    harmonics_needed,
    lengthscale_range,
    resolved_frequency,
)

__all__ = ["FourierFeatures"]

SUPPORTED = (Matern12, Matern32, Matern52)



#: the Matérn class of each ν, for the refinement advice's from_data call (the kernel's class gives ν)
_MATERN_NAMES = {0.5: "Matern12", 1.5: "Matern32", 2.5: "Matern52"}


class FourierFeatures(InducingFeature):
    """Variational Fourier features on the box [a, b] = [lower, upper] for 1-D inputs (X of shape (N, 1)).

    :param lower: a, the left end of the box (wider than the data; see [1, §6.1.2]).
    :param upper: b, the right end, upper > lower.
    :param num_frequencies: M ≥ 1 frequencies including 0, giving 2M − 1 features.
    """

    _static = ("lower", "upper", "num_frequencies")
    _renamed_fields = {"a": "lower", "b": "upper"}  # fits saved before the box was lower/upper

    @classmethod
    @validated
    def from_data(cls, X: Inputs, kernel: AKernel, *, tolerance: Tolerance = 0.01, margin: NonNegative = 3.0,
                  max_lengthscale: MaybeLengthscale = None, quantile: Quantile = 0.01,
                  max_margin: MaxMargin = 1.0):
        """The box and M of the rule in the module docstring: [min x − pad, max x + pad] with
        pad = min(margin·ℓ_max, max(margin·ℓ_min, max_margin·span)) (span = max x − min x), and the
        fewest frequencies that leave at most ``tolerance`` of the Matérn-ν prior variance unresolved at
        ℓ_min (the shortest lengthscale of interest: shorter ones are resolved less well).

        The cap ``max_margin``: a wide prior's upper quantile comparable to the span would otherwise make
        the box several spans wide and spend most frequencies outside the data (measured on a monthly
        series: ℓ_max = 23 years, span 44, box 180 years, 28 frequencies resolving only ℓ ≥ 4.4 while
        the exact posterior sat at 0.95). The price is at lengthscales beyond the span, where any box
        of a few spans misses much of the prior variance (measured, data in [0, 1], Matérn-5/2, margin
        one span: 1.0% at ℓ = 0.5, 20% at ℓ = 1, most of it the near-linear part a parametric mean
        absorbs); :func:`~ppl_sparsegp.diagnostics.adequacy` reports it where the posterior goes there.

        :param X: the 1-D inputs (N,) or (N, 1) (only their range is used).
        :param kernel: the kernel or kernel template the features serve: its class gives ν
            (:class:`~ppl_sparsegp.Matern12`, :class:`~ppl_sparsegp.Matern32`,
            :class:`~ppl_sparsegp.Matern52`), its lengthscale ℓ_min > 0 (a number), or its prior (a NumPyro
            distribution): then ℓ_min and ℓ_max are the prior's ``quantile`` and ``1 − quantile``
            quantiles (:func:`lengthscale_range`); a :class:`~ppl_sparsegp.Param` is read at its initial
            value. The variance does not enter the rule. E.g. ``from_data(x, Matern52(1.0, ell_prior))``.
        :param tolerance: the unresolved fraction of the prior variance, in (0, 1).
        :param margin: the box margin in lengthscales ℓ_max (≥ 0).
        :param max_lengthscale: ℓ_max, the longest lengthscale of interest, or the lengthscale's prior
            (its ``1 − quantile`` quantile). Default: the prior's upper quantile, or ℓ_min for a number,
            so ``from_data(x, Matern32(1.0, 0.5))`` sizes its box for ℓ ≈ 0.5 only; to resolve a short
            lengthscale and keep the box that serves a prior's long ones, pass the prior here:
            ``from_data(x, Matern32(1.0, 0.5), max_lengthscale=ell_prior)``. :meth:`served_lengthscales`
            says which lengthscales a feature serves.
        :param quantile: the prior's quantiles taken as ℓ_min and ℓ_max (default 1%: a posterior in the
            prior's tail is still resolved; it was 5%, which the refinement check showed too short).
        :param max_margin: the cap of the margin, in data spans (≥ 0, ``inf`` for none; it never goes below
            margin·ℓ_min).
        :raises ValueError: for empty or non-finite X, a kernel other than Matérn ½, 3/2, 5/2, more than one
            lengthscale, a tolerance outside (0, 1), a negative margin.
        """
        nu, lengthscale = matern_template(kernel, "FourierFeatures.from_data")
        _require_concrete(X, lengthscale, max_lengthscale)
        x = np.asarray(X, dtype=float)
        if x.size == 0 or not np.all(np.isfinite(x)):
            raise ValueError("X must be a non-empty array of finite inputs")
        _check_scalar_lengthscale(lengthscale, max_lengthscale)
        lo, hi = (float(np.reshape(v, ())) for v in lengthscale_range(lengthscale, max_lengthscale, quantile))
        if not 0 < tolerance < 1:
            raise ValueError(f"tolerance must be in (0, 1), got {tolerance!r}")
        if not (np.isfinite(margin) and margin >= 0):
            raise ValueError(f"margin must be a non-negative number of lengthscales, got {margin!r}")
        if not max_margin >= 0:  # inf: no cap
            raise ValueError(f"max_margin must be a non-negative number of data spans, got {max_margin!r}")
        pad = min(margin * hi, max(margin * lo, max_margin * float(x.max() - x.min())))
        a, b = float(x.min()) - pad, float(x.max()) + pad
        return cls(a, b, _capped(frequencies_needed(a, b, lo, nu, tolerance), a, b, lo, tolerance))

    @validated
    def __init__(self, lower: Annotated[float, Real()], upper: Annotated[float, Real()], num_frequencies: Count):
        if not (np.isfinite(lower) and np.isfinite(upper) and float(lower) < float(upper)):
            raise ValueError(f"the box must satisfy lower < upper (finite), got lower={lower!r}, upper={upper!r}")
        if (isinstance(num_frequencies, bool) or not isinstance(num_frequencies, (int, np.integer, float))
                or int(num_frequencies) != num_frequencies or num_frequencies < 1):
            raise ValueError(f"num_frequencies must be a positive integer, got {num_frequencies!r}")
        self._set(lower=float(lower), upper=float(upper), num_frequencies=int(num_frequencies))

    @property
    def num_features(self):
        return 2 * self.num_frequencies - 1

    def refined(self) -> "FourierFeatures":
        """The same box with twice the highest frequency (2M − 1 frequencies): it resolves lengthscales
        half as long (:meth:`resolved_lengthscale`)."""
        return FourierFeatures(self.lower, self.upper, 2 * self.num_frequencies - 1)

    @validated
    def served_lengthscales(self, x: Inputs, nu: Nu = 1.5, tolerance: Tolerance = 0.01,
                            margin: NonNegative = 3.0) -> tuple:
        """(ℓ_short, ℓ_long): the lengthscales these features serve for inputs x. ℓ_short is
        :meth:`resolved_lengthscale` (shorter ones leave more than ``tolerance`` of the prior variance
        unresolved); ℓ_long = pad / margin, with pad the box's smaller margin beyond x, is the longest
        lengthscale whose edge effect (about ``margin`` lengthscales into the box) stays off the data,
        the rule of :meth:`from_data` read backwards."""
        x = np.asarray(x, dtype=float)
        pad = min(float(x.min()) - self.lower, self.upper - float(x.max()))
        return self.resolved_lengthscale(nu, tolerance), max(pad, 0.0) / margin if margin > 0 else math.inf

    @validated
    def resolved_lengthscale(self, nu: Nu = 1.5, tolerance: Tolerance = 0.01) -> float:
        """The shortest Matérn-ν lengthscale of which these frequencies leave at most ``tolerance`` of the
        prior variance unresolved (the inverse of the size rule :func:`frequencies_needed`)."""
        w_max = float(self.omegas()[-1]) if self.num_frequencies > 1 else 2 * math.pi / (self.upper - self.lower)
        return resolved_frequency(nu, tolerance) * math.sqrt(2 * nu) / w_max

    @validated
    def resized(self, X: Inputs, kernel: AKernel, tolerance: Tolerance, max_features: MaybeCount = None):
        """The same box with the fewest frequencies resolving ``kernel``
        (:meth:`~ppl_sparsegp.features.InducingFeature.resized`): for a Matérn kernel
        :func:`frequencies_needed` at its (shortest) lengthscale, :meth:`from_data`'s rule; for the
        periodic kernel on one period :func:`harmonics_needed`. None for other kernels. M frequencies are
        2M − 1 features, at most ``max_features``."""
        if isinstance(kernel, Periodic):
            cap = MAX_FREQUENCIES if max_features is None else min(MAX_FREQUENCIES, (max_features + 1) // 2)
            return FourierFeatures(self.lower, self.upper,
                                   harmonics_needed(kernel, tolerance, max_harmonics=max(cap, 1)))
        nu = getattr(kernel, "nu", None)
        if nu not in (0.5, 1.5, 2.5):
            return None
        ell = float(np.min(np.asarray(kernel.lengthscale)))
        M = frequencies_needed(self.lower, self.upper, ell, nu, tolerance)
        check_feature_cap(2 * M - 1, max_features, f"FourierFeatures on [{self.lower:.4g}, {self.upper:.4g}] at "
                                                   "lengthscale "
                                                   f"{ell:.3g} (Matérn-{nu}) and tolerance {tolerance:.3g}")
        return FourierFeatures(self.lower, self.upper, _capped(M, self.lower, self.upper, ell, tolerance))

    def adequacy_advice(self, lengthscales: Optional[ArrayLike], X: ArrayLike,
                        kernel: Union[Kernel, Callable[[Any], Kernel]], tolerance: float) -> str:
        """The fix from the posterior's lengthscales
        (:meth:`~ppl_sparsegp.features.InducingFeature.adequacy_advice`): the box 3 lengthscales, at the
        95% quantile, beyond the data; M to resolve the 5% quantile over that box, as :meth:`from_data`."""
        if lengthscales is None:
            return super().adequacy_advice(lengthscales, X, kernel, tolerance)
        short, long = float(np.quantile(lengthscales, 0.05)), float(np.quantile(lengthscales, 0.95))
        nu = float(getattr(kernel, "nu", 1.5))
        x = np.asarray(X)[:, 0]
        lo, hi = min(float(x.min()) - 3 * long, self.lower), max(float(x.max()) + 3 * long, self.upper)
        need = frequencies_needed(lo, hi, short, nu, tolerance / 2)  # from_data's rule
        tips = []
        if (lo, hi) != (self.lower, self.upper):
            tips.append(f"widen the box to [{lo:.4g}, {hi:.4g}] (3 lengthscales beyond the data at the 95% "
                        f"quantile {long:.3g})")
        if need > self.num_frequencies:
            tips.append(f"increase num_frequencies to {need} (to resolve the 5% lengthscale quantile "
                        f"{short:.3g} over that box)")
        return "; ".join(tips) or "increase num_frequencies"

    def check_free_hyperparameters(self, kernel: Kernel, what: str) -> None:
        """A periodic kernel's period must be fixed: the box [a, b] is one period
        (:meth:`~ppl_sparsegp.features.InducingFeature.check_free_hyperparameters`)."""
        if isinstance(kernel, Periodic) and isinstance(kernel.period, (Distribution, Param)):
            raise ValueError(f"{what}: FourierFeatures with a Periodic kernel need a fixed period: the box "
                             "[lower, upper] = "
                             f"[{self.lower:g}, {self.upper:g}] is one period, so the period cannot be sampled; give "
                             f"period={self.upper - self.lower:g} (a number), or use features that do not fix it "
                             f"(InducingPoints) to learn the period")

    def refinement_note(self, finer: InducingFeature, nu: Optional[float]) -> str:
        """The lengthscales resolved before and after (:meth:`resolved_lengthscale`, 1% unresolved)."""
        if nu is None:
            return ""
        return (f", resolving ℓ ≥ {self.resolved_lengthscale(nu):.3g} → {finer.resolved_lengthscale(nu):.3g} "
                f"(Matérn-{nu:g}, 1% of the prior variance unresolved)")

    def refinement_advice(self, name: str, shortest: Optional[float], nu: Optional[float]):
        """The same box (built from the prior, it serves its long lengthscales; a box for ℓ_min alone would
        take them away) with the frequencies that resolve ``shortest`` at 1% of the prior variance, and at
        least the refined count, under which the refined posterior was found
        (:meth:`~ppl_sparsegp.features.InducingFeature.refinement_advice`). None without a Matérn ν."""
        if nu is None:
            return None
        m = self.refined().num_frequencies
        if shortest is not None and shortest > 0:
            m = max(m, frequencies_needed(self.lower, self.upper, shortest, nu, 0.01))
        new, site = FourierFeatures(self.lower, self.upper, m), f"{name}_kernel_lengthscale"
        reach = "" if shortest is None else (f"{site}'s refined posterior reaches {shortest:.3g} (5% quantile) where "
                                             f"the features resolve {self.resolved_lengthscale(nu):.3g}: ")
        lengthscale = f"{shortest:.3g}" if shortest is not None else f"{new.resolved_lengthscale(nu):.3g}"
        return new, (f"{reach}use {name}'s FourierFeatures({new.lower:.6g}, {new.upper:.6g}, "
                     f"{new.num_frequencies}) (the "
                     f"same box, which keeps the prior's long lengthscales; or FourierFeatures.from_data(x, "
                     f"{_MATERN_NAMES.get(float(nu), 'Matern32')}(1.0, {lengthscale}), "
                     f"max_lengthscale=<the lengthscale prior>))")

    @validated
    def omegas(self, dtype: FloatDtype = None):
        """ω_m = 2πm/(b − a), m = 0..M−1, of ``dtype`` (default: the float of JAX's precision)."""
        w = 2 * math.pi * np.arange(self.num_frequencies) / (self.upper - self.lower)  # static: no program to compile
        return jnp.asarray(w, dtype=jnp.result_type(float) if dtype is None else dtype)

    def check_inputs(self, X: ArrayLike, name: str = "X"):
        return check_inputs(X, name, 1)

    def warn_outside(self, X: ArrayLike, name: str = "X_new", *, kernel: Optional[Kernel] = None):
        """Warn when concrete inputs lie outside [a, b]: there Kuf decays like the kernel from the edge
        [1, Table 1], so the prediction reverts to the prior within a few lengthscales of the box, which
        the exact GP does not do. The fix: a box that covers X (:meth:`from_data` on the training and
        the prediction inputs together). Not for a :class:`~ppl_sparsegp.kernels.Periodic` ``kernel``:
        its box is one period and the features extend periodically, as the exact periodic GP does."""
        if isinstance(kernel, Periodic):
            return X
        if is_concrete(X) and not hasattr(X, "points"):
            x = np.asarray(X, dtype=float).reshape(-1)
            out = (x < self.lower) | (x > self.upper)
            if out.any():
                warn_user(
                    f"{name} has {int(out.sum())} of {x.size} points outside the box [lower, upper] = "
                    f"[{self.lower:.4g}, "
                    f"{self.upper:.4g}] of its FourierFeatures (from {x.min():.4g} to {x.max():.4g}): there the "
                    f"features resolve nothing and the prediction reverts to the prior; widen the box, e.g. "
                    f"FourierFeatures.from_data(concatenate([x_train, x_new]), kernel)",
                    OutsideDomainWarning)
        return X

    @validated
    def inside(self, X: Inputs) -> bool:
        """Whether every input lies in [a, b] (then Kuf does not depend on the hyperparameters)."""
        x = np.asarray(X)
        return bool(np.all((x >= self.lower) & (x <= self.upper)))

    @validated
    def basis(self, x: Annotated[Any, ArrayOf(rank=1)]):
        """The basis φ(x) = [1, cos ω_m(x−a), sin ω_m(x−a)] for a vector x: (2M−1, N). For concrete x of at most
        ``CONSTANT_KUF_MAX`` entries (where ``constant_kuf`` would evaluate it now) it is computed in NumPy:
        no XLA program per shape."""
        if is_concrete(x) and np.shape(x)[0] * self.num_features <= _base.CONSTANT_KUF_MAX:
            xs = np.asarray(x)
            t = np.asarray(self.omegas(xs.dtype))[:, None] * (xs[None, :] - self.lower)
            return jnp.asarray(np.concatenate([np.cos(t), np.sin(t[1:])], axis=0), dtype=xs.dtype)
        w = self.omegas(x.dtype)
        t = w[:, None] * (x[None, :] - self.lower)
        return jnp.concatenate([jnp.cos(t), jnp.sin(t[1:])], axis=0)


def _check_kernel(kernel):
    if not isinstance(kernel, SUPPORTED):
        raise NotImplementedError(
            f"variational Fourier features support Matern12, Matern32 and Matern52 kernels, got "
            f"{type(kernel).__name__}")
    if jnp.ndim(kernel.lengthscale) > 0 and jnp.size(kernel.lengthscale) != 1:
        raise ValueError("FourierFeatures are 1-D: the kernel's lengthscale must be a scalar")


@Kuu.register(FourierFeatures, Matern12)
@Kuu.register(FourierFeatures, Matern32)
@Kuu.register(FourierFeatures, Matern52)
def _kuu_fourier(feature, kernel):
    _check_kernel(kernel)
    d, B = _kuu_fourier_parts(feature, kernel)
    if is_concrete(d) and not np.all(np.isfinite(np.asarray(d))):  # d_m = (b − a)/(2 s(ω_m)) overflowed
        M = int(np.argmax(~np.isfinite(np.asarray(d)[:feature.num_frequencies])))
        raise ValueError(
            f"FourierFeatures: Kuu's diagonal (b − a)/(2 s(ω_m)) overflows {jnp.dtype(d.dtype).name} from frequency "
            f"{M} on (ω = {float(feature.omegas()[M]):.4g}) for this kernel: at most M = {M} frequencies in "
            f"{jnp.dtype(d.dtype).name} here; use float64 or fewer frequencies")
    # ν = 1/2, 3/2: one column on the cosine block, one on the sine block (disjoint: a diagonal capacitance)
    return DiagPlusLowRank(d, B, disjoint=kernel.nu != 2.5)  # validates concrete (d, B)


@jax.jit
def _kuu_fourier_parts(feature, kernel):
    """(d, B) of Kuu = diag(d) + B Bᵀ: one compiled program (see ``conditionals._mean_of``)."""
    dtype = jnp.result_type(kernel.variance, float)
    w = feature.omegas(dtype)
    s = kernel.spectral_density(w[:, None])  # s(ω_m), library convention = [1, eq. 5-10]
    half = 0.5 * (feature.upper - feature.lower)
    d = half * jnp.concatenate([2.0 / s[:1], 1.0 / s[1:], 1.0 / s[1:]])  # Eq. (62-64) [1]
    sigma = jnp.sqrt(kernel.variance)
    lam = jnp.reshape(kernel.lam, ())
    Mc, Ms = feature.num_frequencies, feature.num_frequencies - 1
    zc, zs = jnp.zeros(Mc, dtype), jnp.zeros(Ms, dtype)
    cols = [jnp.concatenate([jnp.ones(Mc, dtype) / sigma, zs])]  # β₁ = σ⁻¹ 1_cos
    if kernel.nu == 1.5:
        cols.append(jnp.concatenate([zc, w[1:] / (lam * sigma)]))  # β₂, App. B [1]
    elif kernel.nu == 2.5:
        cols.append(jnp.concatenate([(3 * w**2 / lam**2 - 1) / (math.sqrt(8.0) * sigma), zs]))
        cols.append(jnp.concatenate([zc, math.sqrt(3.0) * w[1:] / (lam * sigma)]))
    return d, jnp.stack(cols, axis=1)


@Kuf.register(FourierFeatures, Matern12)
@Kuf.register(FourierFeatures, Matern32)
@Kuf.register(FourierFeatures, Matern52)
def _kuf_fourier(feature, kernel, X):
    _check_kernel(kernel)
    X = feature.check_inputs(X)
    dtype = jnp.result_type(X.dtype, float)
    if is_concrete(X) and feature.inside(X):  # the usual case (data, grids): no edge formulas, and Kuf does
        with constant_kuf(X, feature.num_features):  # not depend on the hyperparameters: once per program
            return feature.basis(jnp.asarray(X[:, 0], dtype))
    x = X[:, 0].astype(dtype)
    w = feature.omegas(dtype)[:, None]
    xc = jnp.clip(x, feature.lower, feature.upper)
    r = jnp.abs(x - xc)[None, :]  # distance to the nearest edge; 0 inside
    lam = jnp.reshape(kernel.lam, ())
    e = jnp.exp(-lam * r)
    # Table 1 [1]: cos rows (cos ω(x_c−a) = 1 at both edges) and sin rows with the corrected sign
    if kernel.nu == 0.5:
        cos_edge, sin_edge = e, jnp.zeros_like(r)
    elif kernel.nu == 1.5:
        cos_edge, sin_edge = (1 + lam * r) * e, e
    else:
        cos_edge = (1 + lam * r + 0.5 * (lam**2 - w**2) * r**2) * e
        sin_edge = (1 + lam * r) * e
    t = w * (xc[None, :] - feature.lower)
    outside = r > 0
    cos_rows = jnp.where(outside, cos_edge, jnp.cos(t))
    sin_rows = jnp.where(outside, (x - xc)[None, :] * w * sin_edge, jnp.sin(t))
    return jnp.concatenate([cos_rows, sin_rows[1:]], axis=0)


# --- the periodic kernel on one period -------------------------------------------------------------
# With b − a = p and k(τ) = Σ_j q_j cos(ω_j τ) (ω_j = 2πj/p, Periodic.fourier_coefficients), the features
# u_j = (1/p)·∫ f φ_0 and (2/p)·∫ f φ_j over one period give cov(u_j, f(x)) = q_j φ_j(x) for every x
# (k is periodic) and cov(u_j, u_k) = q_j δ_jk: Kuu is exactly diagonal and
# K_fu K_uu⁻¹ K_uf (x, x') = Σ_{j<M} q_j cos(ω_j (x − x')), the series truncated after M terms.
def _periodic_coefficients(feature, kernel):
    if not is_concrete(kernel.period):
        raise ValueError("FourierFeatures with a Periodic kernel need a fixed period (the box is one period): "
                         "give period as a number, not a prior")
    p = float(kernel.period)
    if abs((feature.upper - feature.lower) - p) > 1e-9 * p:
        raise ValueError(f"FourierFeatures for a Periodic kernel must span one period: b − a = "
                         f"{feature.upper - feature.lower:g} but period = {p:g}; use FourierFeatures(lower, "
                         "lower + period, num_frequencies)")
    q = kernel.fourier_coefficients(feature.num_frequencies)
    # coefficients below the dtype's range are 0; Kuu = diag(q) must stay invertible, and a floor at the
    # smallest normal number changes Q = Σ q_j φ_j φ_jᵀ by less than rounding (Kuu⁻¹Kuf = φ is unchanged)
    q = jnp.maximum(q, jnp.finfo(q.dtype).tiny)
    return jnp.concatenate([q, q[1:]])


@Kuu.register(FourierFeatures, Periodic)
def _kuu_periodic(feature, kernel):
    return Diagonal(_periodic_coefficients(feature, kernel))


@Kuf.register(FourierFeatures, Periodic)
def _kuf_periodic(feature, kernel, X):
    s, basis = _kuf_basis_periodic(feature, kernel, X)
    return s[:, None] * basis


@kuf_basis.register(FourierFeatures, Periodic)
def _kuf_basis_periodic(feature, kernel, X):
    """Kuf = diag(q) φ(x): the basis φ is free of the hyperparameters (a constant of the program for
    concrete inputs, as VFF's inside its box)."""
    X = feature.check_inputs(X)
    dtype = jnp.result_type(X.dtype, float)
    with constant_kuf(X, feature.num_features):
        basis = feature.basis(jnp.asarray(X[:, 0], dtype))
    return _periodic_coefficients(feature, kernel), basis
