r"""The size rules of variational Fourier features: how long a box and how many frequencies
(:meth:`~ppl_sparsegp.features.FourierFeatures.from_data`, :meth:`~ppl_sparsegp.features.FourierFeatures.resized`,
the pilot): the Matérn spectral tail and the frequency that leaves a given fraction of it unresolved, the
frequency count of a box at a lengthscale, the harmonic count of the periodic kernel on one period, and the
lengthscale range a prior asks the features to serve. The rules and their measurements are in the module
docstring of :mod:`ppl_sparsegp.features.fourier`.

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, JMLR 18.
"""
from __future__ import annotations

import math
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.distributions import Distribution

from ..kernels import Periodic
from ..parameters import is_concrete
from ..validation import AKernel, ArrayOf, Count, Nu, Positive, Quantile, Real, Tolerance, validated
from .base import Lengthscale, MaybeLengthscale, TooManyFeatures

__all__ = ["spectral_tail", "resolved_frequency", "frequencies_needed", "harmonics_needed", "lengthscale_range"]


def _positive(value, what):
    value = np.asarray(value, dtype=float)
    if value.size == 0 or not (np.all(np.isfinite(value)) and np.all(value > 0)):
        raise ValueError(f"{what} must be positive and finite (or a prior), got {value!r}")
    return value


def _require_concrete(*values):
    """The size rule reads numbers: inputs and a prior traced by a model being compiled (x computed from a
    sampled value, a prior whose parameters are sampled) cannot size features; say where to build them."""
    if not all(is_concrete(leaf) for v in values for leaf in jax.tree.leaves(v)):
        raise ValueError("FourierFeatures.from_data needs concrete inputs and a prior with fixed parameters: "
                         "it sizes the features (a static shape), which a value sampled in the model cannot "
                         "do. Build the features outside the model, e.g. feature = FourierFeatures.from_data("
                         "t, Matern52(1.0, ell_prior)) before defining the model, and use `feature` inside it")


def _prior_quantile(prior, q):
    """The q-quantile of a NumPyro distribution (``icdf`` where it has one, else 20 000 fixed-key draws),
    evaluated now even inside a model's trace (the prior's parameters are concrete there: NUTS traces the
    model to compile its potential, and the quantile must stay a number)."""
    with jax.ensure_compile_time_eval():
        try:
            value = prior.icdf(jnp.asarray(q))
        except (NotImplementedError, AttributeError, ImportError):  # e.g. Gamma's icdf needs tfp
            value = jnp.quantile(prior.sample(jax.random.PRNGKey(0), (20_000,)), q, axis=0)
    value = np.asarray(value, dtype=float)
    if not (np.all(np.isfinite(value)) and np.all(value > 0)):
        raise ValueError(f"the lengthscale prior {prior!r} has its {q} quantile at {value!r}: give a prior on "
                         "positive values (e.g. LogNormal, Gamma, InverseGamma)")
    return value


@validated
def lengthscale_range(lengthscale: Lengthscale, max_lengthscale: MaybeLengthscale = None,
                      quantile: Quantile = 0.01) -> tuple:
    """(ℓ_min, ℓ_max): the shortest lengthscale the features must resolve (it sets M) and the longest
    (it sets the box margin: the edge effect reaches about one *actual* lengthscale into the box).

    :param lengthscale: a positive number (or one per dimension), or a prior (a NumPyro distribution,
        scalar or with one entry per dimension): then ℓ_min and ℓ_max are its ``quantile`` and
        ``1 − quantile`` quantiles.
    :param max_lengthscale: ℓ_max explicitly, or a prior whose ``1 − quantile`` quantile is ℓ_max
        (default: the prior's upper quantile, or ℓ_min for a number).
    :returns: two float64 NumPy arrays (shape () or (D,)).
    :raises ValueError: for a non-positive or non-finite value, ℓ_max < ℓ_min, a quantile outside
        (0, ½), a prior whose support is not positive.
    """
    if isinstance(lengthscale, Distribution):
        if not 0 < quantile < 0.5:
            raise ValueError(f"quantile must be in (0, 0.5), got {quantile!r}")
        lo, hi = _prior_quantile(lengthscale, quantile), _prior_quantile(lengthscale, 1 - quantile)
    else:
        lo = hi = _positive(lengthscale, "lengthscale")
    if isinstance(max_lengthscale, Distribution):
        hi = _prior_quantile(max_lengthscale, 1 - quantile)
    elif max_lengthscale is not None:
        hi = _positive(max_lengthscale, "max_lengthscale")
    if not np.all(hi >= lo):
        raise ValueError(f"max_lengthscale {hi!r} must be at least the smallest lengthscale {lo!r}")
    return lo, hi


@validated
def spectral_tail(nu: Nu, T: Annotated[Any, ArrayOf()]) -> np.ndarray:
    r"""The fraction of a 1-D Matérn-ν prior's variance at frequencies above Tλ:
    :math:`1 - \int_0^T(1+t^2)^{-\nu-1/2}dt \big/ \int_0^\infty(1+t^2)^{-\nu-1/2}dt` (closed forms).

    :param nu: the Matérn order (0.5, 1.5 or 2.5).
    :param T: the frequency in units of λ = √(2ν)/ℓ (a number or an array, ≥ 0).
    :returns: the fraction, of T's shape."""
    return _tail(nu, T)


def _tail(nu, T):
    """:func:`spectral_tail` unchecked (the bisection of :func:`resolved_frequency` calls it ~100 times)."""
    t = np.asarray(T, dtype=float)
    a = np.arctan(t)
    if nu == 0.5:
        inside = a / (math.pi / 2)
    elif nu == 1.5:
        inside = 0.5 * (t / (1 + t**2) + a) / (math.pi / 4)
    elif nu == 2.5:
        inside = (t / (4 * (1 + t**2) ** 2) + 3 * t / (8 * (1 + t**2)) + 3 * a / 8) / (3 * math.pi / 16)
    else:
        raise ValueError(f"nu must be 0.5, 1.5 or 2.5 (the orders VFF supports), got {nu!r}")
    return 1.0 - inside


@validated
def frequencies_needed(lower: Annotated[float, Real()], upper: Annotated[float, Real()], lengthscale: Positive, nu: Nu,
                       tolerance: Tolerance) -> int:
    """The size rule: the fewest M on [a, b] with :math:`\\omega_{M-1} \\ge T\\lambda` at ℓ (λ = √(2ν)/ℓ).

    :param lower: a, the box's left end; ``upper`` (b) its right end, upper > lower.
    :param lengthscale: ℓ > 0, the shortest lengthscale to resolve; ``nu`` the Matérn order (0.5, 1.5, 2.5).
    :param tolerance: the unresolved fraction of the prior variance, in (0, 1).
    :raises ValueError: for upper ≤ lower."""
    if not lower < upper:
        raise ValueError(f"frequencies_needed: the box must satisfy lower < upper, got lower={lower!r}, "
                         f"upper={upper!r}")
    T = resolved_frequency(nu, tolerance)
    return 1 + math.ceil(T * math.sqrt(2 * nu) / lengthscale * (upper - lower) / (2 * math.pi))


#: the most frequencies :meth:`FourierFeatures.from_data` returns (the constructor takes any M)
MAX_FREQUENCIES = 20_000


@validated
def harmonics_needed(kernel: AKernel, tolerance: Tolerance, max_harmonics: Count = MAX_FREQUENCIES) -> int:
    r"""The size rule of the periodic kernel on one period: the fewest M whose truncated series leaves at
    most ``tolerance`` of σ² unresolved, :math:`1 - \sum_{j<M} q_j/\sigma^2 \le` tolerance (the same at
    every input: :math:`Q_{ff}(x, x) = \sum_{j<M} q_j`; ``Periodic.fourier_coefficients``). A shorter
    lengthscale needs more harmonics (:math:`q_j` decays once :math:`j \gtrsim 1/\ell`).

    :param kernel: a concrete :class:`~ppl_sparsegp.kernels.Periodic` kernel.
    :param tolerance: the unresolved fraction, in (0, 1).
    :param max_harmonics: the most harmonics the search tries (default and at most ``MAX_FREQUENCIES``).
    :raises ValueError: for a tolerance outside (0, 1); :class:`~ppl_sparsegp.features.TooManyFeatures` (a
        ``ValueError``) for one that needs more than ``max_harmonics`` harmonics.
    """
    if not isinstance(kernel, Periodic):
        raise ValueError(f"harmonics_needed: kernel must be a Periodic kernel, got {type(kernel).__name__}")
    M = min(8, max_harmonics)
    while True:
        with jax.ensure_compile_time_eval():
            q = np.asarray(kernel.fourier_coefficients(M), dtype=float) / float(np.asarray(kernel.variance))
        ok = np.nonzero(1.0 - np.cumsum(q) <= tolerance)[0]
        if ok.size:
            return int(ok[0]) + 1
        if M >= max_harmonics:
            raise TooManyFeatures(f"harmonics_needed: {M} harmonics ({2 * M - 1} features) leave {1.0 - np.sum(q):.3g} "
                                  f"of the periodic kernel's variance unresolved (lengthscale "
                                  f"{float(kernel.lengthscale):.3g}, tolerance {tolerance:g}); raise the tolerance",
                                  None, 2 * M - 1)
        M = min(2 * M, max_harmonics)


def _capped(M: int, a: float, b: float, lengthscale: float, tolerance: float) -> int:
    """M, refused above ``MAX_FREQUENCIES`` (20 000): 2M − 1 features need (2M − 1)² float64 values (8 bytes
    each) for Kuu's dense forms and the marginal model's M' × M' system."""
    if M <= MAX_FREQUENCIES:
        return M
    gib = 8.0 * (2 * M - 1) ** 2 / 2**30
    raise ValueError(f"FourierFeatures.from_data: tolerance={tolerance:g} at lengthscale {lengthscale:.3g} on the box "
                     f"[{a:.4g}, {b:.4g}] asks for M = {M} frequencies ({2 * M - 1} features), above the cap of "
                     f"{MAX_FREQUENCIES}: their M' × M' float64 matrices need {gib:.3g} GiB of memory. Raise the "
                     f"tolerance (e.g. 0.01), the shortest lengthscale of interest or narrow the box (margin); or, "
                     f"knowing the cost, build FourierFeatures(a, b, M) directly")


def _check_scalar_lengthscale(lengthscale, max_lengthscale):
    """from_data's rule is 1-D: one lengthscale (a number or a scalar prior)."""
    for name, v in (("lengthscale", lengthscale), ("max_lengthscale", max_lengthscale)):
        shape = v.shape() if isinstance(v, Distribution) else np.shape(v)
        if v is not None and int(np.prod(shape, dtype=int)) != 1:
            raise ValueError(f"FourierFeatures.from_data takes one {name} (a scalar number or a scalar prior; the "
                             f"features are 1-D), got shape {tuple(shape)}: for several input columns use "
                             f"AdditiveFeatures.from_data or one FourierFeatures.from_data per column")


@validated
def resolved_frequency(nu: Nu, tolerance: Tolerance) -> float:
    r"""T with :func:`spectral_tail`\ (ν, T) = tolerance (bisection; the tail decreases in T).

    :param nu: the Matérn order (0.5, 1.5 or 2.5).
    :param tolerance: the tail fraction, in (0, 1)."""
    lo, hi = 0.0, 1.0
    while _tail(nu, hi) > tolerance:
        lo, hi = hi, 2 * hi
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _tail(nu, mid) > tolerance else (lo, mid)
    return hi
