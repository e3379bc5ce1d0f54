"""choose_features for every family with a size rule (``InducingFeature.resized``) and for a sum of GPs of
two families, against the exact GP: data whose lengthscale sits in the prior's tail and little noise, so
that the prior's rule displaces the posterior; the exact posterior of the lengthscales on a grid (the
dense covariance, ``marginal_spectral_gp(..., exact=True)``: an independent computation standing in for
MCMC) against the same grid under the chosen features. The pilot runs with ``refine=1, starts=3`` to stay
fast (the defaults only add starts and resolution)."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro.infer.util import log_density
from scipy.special import ive

import ppl_sparsegp as psg
from ppl_sparsegp import (
    AdditiveFeatures,
    FourierFeatures,
    HermiteFeatures,
    KroneckerFeatures,
    SphericalHarmonicFeatures,
    TrigonometricFeatures,
)
from ppl_sparsegp.features.fourier import frequencies_needed, harmonics_needed

jax.config.update("jax_enable_x64", True)

PRIOR = dist.LogNormal(np.log(3.0), 0.5)  # its 1% quantile 0.94: where the data put the lengthscale
NOISE = 0.1


def _draw(K, rng):
    N = K.shape[0]
    return np.linalg.cholesky(K + 1e-9 * np.eye(N)) @ rng.normal(size=N) + NOISE * rng.normal(size=N)


def _grid_moments(model, args, features, sites, axes, exact=False):
    """Posterior mean and sd of each site on the product grid ``axes`` (flat priors aside: the model's)."""
    mesh = [m.ravel() for m in np.meshgrid(*axes, indexing="ij")]
    lp = np.asarray(jax.jit(jax.vmap(lambda *v: log_density(
        model, args, {"features": features, "exact": exact}, dict(zip(sites, v)))[0]))(*map(jnp.asarray, mesh)))
    w = np.exp(lp - lp.max())
    w /= w.sum()
    means = [w @ m for m in mesh]
    return np.array(means), np.array([math.sqrt(w @ (m - mu) ** 2) for m, mu in zip(mesh, means)])


def _shift(model, args, features, sites, axes, exact):
    mean, _ = _grid_moments(model, args, features, sites, axes)
    return np.abs(mean - exact[0]) / exact[1]


# --- VOF: trigonometric features ---------------------------------------------------------------------
_rng = np.random.default_rng(3)
XT = np.sort(_rng.uniform(0.0, 10.0, 100))
YT = _draw(np.asarray(psg.Matern52(1.0, float(PRIOR.icdf(0.01)))(jnp.asarray(XT)[:, None])), _rng)
TRIG = {"f": TrigonometricFeatures.from_data(XT, psg.Matern52(1.0, PRIOR))}  # the prior's rule


def trig_model(xs, ys, features=TRIG, exact=False):
    psg.marginal_spectral_gp("y", {"f": (features["f"], psg.Matern52(1.0, PRIOR))}, xs, ys, NOISE, exact=exact)


def test_pilot_trigonometric_features_against_the_exact_gp():
    sites, axes = ["f_kernel_lengthscale"], [np.linspace(0.3, 4.0, 200)]
    exact = _grid_moments(trig_model, (XT, YT), TRIG, sites, axes, exact=True)  # measured: 0.977 ± 0.087
    chosen = psg.choose_features(trig_model, XT, YT, refine=1, starts=3)
    f, need = chosen["f"], chosen.info["needed"]["f"]
    assert float(f.centre) == float(TRIG["f"].centre) and f.basis == TRIG["f"].basis  # the centre is kept
    assert _shift(trig_model, (XT, YT), TRIG, sites, axes, exact)[0] > 1.0  # the prior's rule: measured 3.7 sd
    assert _shift(trig_model, (XT, YT), chosen, sites, axes, exact)[0] < 0.1, need  # measured 0.007 sd
    # the rule of from_data at the needed lengthscale and tolerance (band and M), the centre kept
    ref = TrigonometricFeatures.from_data(XT, psg.Matern52(1.0, need["lengthscale"]), tolerance=need["tolerance"])
    assert (f.M, float(f.band)) == (ref.M, float(ref.band))
    assert need["lengthscale"] < 0.95 and need["tolerance"] == pytest.approx(0.01 * NOISE**2 / 1.0)


# --- VOF: Hermite features (the SE kernel) -----------------------------------------------------------
_rng = np.random.default_rng(13)
XE = np.sort(_rng.normal(0.0, 2.0, 100))
YE = _draw(np.asarray(psg.SquaredExponential(1.0, float(PRIOR.icdf(0.01)))(jnp.asarray(XE)[:, None])), _rng)
HERM = {"f": HermiteFeatures.from_data(XE, psg.SquaredExponential(1.0, PRIOR))}


def hermite_model(xs, ys, features=HERM, exact=False):
    kernel = psg.SquaredExponential(1.0, PRIOR)
    psg.marginal_spectral_gp("y", {"f": (features["f"], kernel)}, xs, ys, NOISE, exact=exact)


def test_pilot_hermite_features_against_the_exact_gp():
    sites, axes = ["f_kernel_lengthscale"], [np.linspace(0.3, 4.0, 200)]
    exact = _grid_moments(hermite_model, (XE, YE), HERM, sites, axes, exact=True)
    chosen = psg.choose_features(hermite_model, XE, YE, refine=1, starts=3)
    f, need = chosen["f"], chosen.info["needed"]["f"]
    assert (float(f.input_scale), float(f.centre)) == (float(HERM["f"].input_scale), float(HERM["f"].centre))
    assert _shift(hermite_model, (XE, YE), HERM, sites, axes, exact)[0] > 1.0  # the prior's M = 13: 1.45 sd
    assert _shift(hermite_model, (XE, YE), chosen, sites, axes, exact)[0] < 0.1, need  # M = 29: 0.0004 sd
    assert f.M == HermiteFeatures.from_data(XE, psg.SquaredExponential(1.0, need["lengthscale"]),
                                            tolerance=need["tolerance"]).M
    sweep = [14, 16, 18, 20, 24]  # measured shifts 1.36, 0.40, 0.094, 0.029, < 0.01 sd
    shifts = [_shift(hermite_model, (XE, YE), {"f": HermiteFeatures(M, f.input_scale, f.centre)}, sites, axes,
                     exact)[0] for M in sweep]
    fewest = next(M for i, M in enumerate(sweep) if max(shifts[i:]) < 0.1)
    assert fewest <= f.M <= 2 * fewest, (f.M, shifts)


# --- multi-D VFF: additive features, one lengthscale per dimension ------------------------------------
_rng = np.random.default_rng(5)
XA = _rng.uniform(0.0, 10.0, (120, 2))
_KA = (np.asarray(psg.Matern52(0.5, float(PRIOR.icdf(0.01)))(jnp.asarray(XA[:, :1])))
       + np.asarray(psg.Matern52(0.5, 3.0)(jnp.asarray(XA[:, 1:]))))
YA = _draw(_KA, _rng)
ADD = {"f": AdditiveFeatures.from_data(XA, psg.Additive([psg.Matern52(0.5, PRIOR), psg.Matern52(0.5, PRIOR)]))}


def additive_model(xs, ys, features=ADD, exact=False):
    kernel = psg.Additive([psg.Matern52(0.5, PRIOR), psg.Matern52(0.5, PRIOR)])
    psg.marginal_spectral_gp("y", {"f": (features["f"], kernel)}, xs, ys, NOISE, exact=exact)


@pytest.mark.slow
def test_pilot_additive_fourier_features_per_dimension_against_the_exact_gp():
    sites = ["f_kernel_0_lengthscale", "f_kernel_1_lengthscale"]
    axes = [np.linspace(0.4, 2.5, 36), np.linspace(0.8, 12.0, 30)]
    exact = _grid_moments(additive_model, (XA, YA), ADD, sites, axes, exact=True)
    chosen = psg.choose_features(additive_model, XA, YA, refine=1, starts=3)
    f = chosen["f"]
    assert [(g.lower, g.upper) for g in f.features] == [(g.lower, g.upper) for g in ADD["f"].features]  # the boxes kept
    assert _shift(additive_model, (XA, YA), ADD, sites, axes, exact)[0] > 1.0  # measured 1.36 sd (ℓ_0)
    assert np.all(_shift(additive_model, (XA, YA), chosen, sites, axes, exact) < 0.3)  # measured 0.012, 0.042
    # each dimension by its own lengthscale's lower quantile (independently: frequencies_needed per box)
    low = chosen.info["modes"][0]["gps"]["f"]["lowered"]
    tol = chosen.info["needed"]["f"]["tolerance"]
    for d, g in enumerate(f.features):
        assert g.num_frequencies == frequencies_needed(g.lower, g.upper, low[sites[d]], 2.5, tol)
    assert f.features[0].num_frequencies > f.features[1].num_frequencies  # dimension 0 is the short one


# --- a sum of two families: a VFF trend and the periodic kernel's harmonics ----------------------------
_rng = np.random.default_rng(7)
XS = np.sort(_rng.uniform(0.0, 6.0, 100))
_KS = (np.asarray(psg.Matern52(1.0, float(PRIOR.icdf(0.01)))(jnp.asarray(XS)[:, None]))
       + np.asarray(psg.Periodic(0.3, 0.3, 1.0)(jnp.asarray(XS)[:, None])))
YS = _draw(_KS, _rng)
PERIOD_PRIOR = dist.LogNormal(0.0, 0.5)  # the periodic lengthscale; the data's 0.3 sits at its 0.8% quantile
SUM = {"trend": FourierFeatures.from_data(XS, psg.Matern52(1.0, PRIOR)), "season": FourierFeatures(0.0, 1.0, 4)}


def sum_model(xs, ys, features=SUM, exact=False):
    gps = {"trend": (features["trend"], psg.Matern52(1.0, PRIOR)),
           "season": (features["season"], psg.Periodic(0.3, PERIOD_PRIOR, 1.0))}
    psg.marginal_spectral_gp("y", gps, xs, ys, NOISE, exact=exact)


def test_pilot_chooses_for_each_gp_of_a_sum_of_two_families():
    sites = ["trend_kernel_lengthscale", "season_kernel_lengthscale"]
    axes = [np.linspace(0.4, 3.0, 36), np.linspace(0.15, 0.8, 30)]
    exact = _grid_moments(sum_model, (XS, YS), SUM, sites, axes, exact=True)
    chosen = psg.choose_features(sum_model, XS, YS, refine=1, starts=3)
    trend, season = chosen["trend"], chosen["season"]
    assert (trend.lower, trend.upper) == (SUM["trend"].lower, SUM["trend"].upper)
    assert (season.lower, season.upper) == (0.0, 1.0)
    assert np.max(_shift(sum_model, (XS, YS), SUM, sites, axes, exact)) > 1.0
    assert np.all(_shift(sum_model, (XS, YS), chosen, sites, axes, exact) < 0.3)
    low, tol = chosen.info["modes"][0]["gps"], {g: chosen.info["needed"][g]["tolerance"] for g in chosen}
    assert trend.num_frequencies == frequencies_needed(trend.lower, trend.upper, low["trend"]["lowered"][sites[0]], 2.5,
                                                       tol["trend"])
    assert season.num_frequencies == _harmonics_by_bessel(low["season"]["lowered"][sites[1]], tol["season"])
    assert tol["season"] == pytest.approx(0.01 * NOISE**2 / 0.3)  # each GP's own variance


def _harmonics_by_bessel(ell, tolerance):
    """The fewest M with 1 − Σ_{j<M} q_j/σ² ≤ tolerance from scipy's exponentially scaled Bessel functions
    (q_0 = σ² e^{−z}I_0(z), q_j = 2σ² e^{−z}I_j(z), z = 1/ℓ²): independent of Periodic.fourier_coefficients."""
    j = np.arange(400)
    q = np.where(j == 0, 1.0, 2.0) * ive(j, 1.0 / ell**2)
    return int(np.argmax(1.0 - np.cumsum(q) <= tolerance)) + 1


@pytest.mark.parametrize("ell", [0.1, 0.3, 1.0, 3.0])
@pytest.mark.parametrize("tolerance", [1e-2, 1e-4])
def test_harmonics_needed_against_bessel_functions(ell, tolerance):
    assert harmonics_needed(psg.Periodic(2.0, ell, 1.0), tolerance) == _harmonics_by_bessel(ell, tolerance)


@pytest.mark.parametrize("cls", [AdditiveFeatures, KroneckerFeatures])
def test_resized_per_dimension_by_each_dimensions_lengthscale(cls):
    """The fast test of the additive pilot test's property: dimension d is sized by its own kernel's
    lengthscale on its own box, at from_data's per-dimension tolerance (the Kronecker split
    1 − (1 − τ)^{1/D}, checked here through its definition)."""
    X = np.stack([np.linspace(0.0, 10.0, 50), np.linspace(-1.0, 1.0, 50)], 1)
    start = cls.from_data(X, psg.Matern32(1.0, PRIOR))
    combine = psg.Additive if cls is AdditiveFeatures else psg.Product
    kernel = combine([psg.Matern32(1.0, 0.5), psg.Matern32(1.0, 2.0)])
    new = start.resized(X, kernel, 1e-3)
    t = 1e-3 if cls is AdditiveFeatures else 1.0 - math.sqrt(1.0 - 1e-3)  # (1 − t)² = 1 − τ
    for g, s, ell in zip(new.features, start.features, (0.5, 2.0)):
        assert (g.lower, g.upper) == (s.lower, s.upper)
        assert g.num_frequencies == frequencies_needed(s.lower, s.upper, ell, 1.5, t)
    assert start.resized(X, psg.Matern32(1.0, 0.5), 1e-3) is None  # not per dimension


def test_resized_keeps_the_domain_and_applies_the_family_rule():
    x = np.linspace(-2.0, 3.0, 60)[:, None]
    h = HermiteFeatures(5, input_scale=1.5, centre=0.5).resized(x, psg.SquaredExponential(1.0, 0.3), 1e-3)
    assert (float(h.input_scale), float(h.centre)) == (1.5, 0.5)
    # the Hermite rule, independently: the residual 1 − Σ_{m<M} Kuf[m](x)² at the data, fewest M below 1e-3
    q = np.quantile(x, np.linspace(0.0, 1.0, 257))[:, None]  # the rule's points: 257 quantiles of x
    r = 1.0 - np.cumsum(np.asarray(psg.Kuf(HermiteFeatures(200, 1.5, 0.5), psg.SquaredExponential(1.0, 0.3),
                                           q)) ** 2, axis=0)
    assert h.M == int(np.argmax(np.max(r, axis=1) <= 1e-3)) + 1
    assert HermiteFeatures(5).resized(x, psg.Matern52(1.0, 0.3), 1e-3) is None  # no rule for Matérn
    assert psg.InducingPoints(x[:5]).resized(x, psg.Matern52(1.0, 0.3), 1e-3) is None


# --- spherical harmonic features: the degree from the chordal lengthscale -----------------------------
_rng = np.random.default_rng(11)
XH = _rng.uniform(-1.0, 1.0, (100, 2))
CHORDAL_PRIOR = dist.LogNormal(np.log(1.5), 0.4)  # its 1% quantile 0.59: the data's
YH = _draw(np.asarray(psg.ChordalMatern(2.5, 1.0, 1.0, 1.0, float(CHORDAL_PRIOR.icdf(0.01)))(jnp.asarray(XH))), _rng)
SPH = {"f": SphericalHarmonicFeatures.from_data(XH, psg.ChordalMatern(2.5, 1.0, 1.0, 1.0, CHORDAL_PRIOR))}


def sphere_model(xs, ys, features=SPH, exact=False):
    kernel = psg.ChordalMatern(2.5, 1.0, 1.0, 1.0, CHORDAL_PRIOR)
    psg.marginal_spectral_gp("y", {"f": (features["f"], kernel)}, xs, ys, NOISE, exact=exact)


@pytest.mark.slow
def test_pilot_spherical_harmonic_features_against_the_exact_gp_and_a_sweep_of_the_degree():
    sites, axes = ["f_kernel_chordal_lengthscale"], [np.linspace(0.1, 1.5, 60)]
    exact = _grid_moments(sphere_model, (XH, YH), SPH, sites, axes, exact=True)  # measured: 0.641 ± 0.056
    chosen = psg.choose_features(sphere_model, XH, YH, refine=1, starts=3)
    f = chosen["f"]
    assert (f.lower, f.upper) == (SPH["f"].lower, SPH["f"].upper)
    assert _shift(sphere_model, (XH, YH), SPH, sites, axes, exact)[0] > 1.0  # the prior's rule (L = 6): 2.8 sd
    assert _shift(sphere_model, (XH, YH), chosen, sites, axes, exact)[0] < 0.1  # measured 0.006 sd at L = 25
    sweep = [8, 10, 12, 15]  # measured shifts 1.28, 0.29, 0.006, 0.002 sd (L = 6: 2.8)
    shifts = [_shift(sphere_model, (XH, YH), {"f": SphericalHarmonicFeatures(2, L)}, sites, axes, exact)[0]
              for L in sweep]
    fewest = next(L for i, L in enumerate(sweep) if max(shifts[i:]) < 0.1)
    # the tolerance rule is conservative for this family (the coefficients' tail, not the posterior): the
    # degree within 2.5x the fewest that hold the posterior (measured 25 against 12: 676 features, not 169)
    assert fewest <= f.max_degree <= 2.5 * fewest, (f.max_degree, shifts)


def test_pilot_keeps_a_family_without_a_rule_and_says_so():
    x = np.linspace(0.0, 5.0, 40)
    y = np.sin(x) + NOISE * np.random.default_rng(0).normal(size=40)
    feats = {"trend": FourierFeatures.from_data(x, psg.Matern52(1.0, PRIOR)),
             "points": psg.InducingPoints(x[::8, None])}

    def model(xs, ys, features=feats):
        psg.marginal_spectral_gp("y", {"trend": (features["trend"], psg.Matern52(1.0, PRIOR)),
                                       "points": (features["points"], psg.Matern32(0.1, 1.0))}, xs, ys, NOISE)

    with pytest.raises(ValueError, match="'points' cannot be refined for the pilot.*refine=0"):
        psg.choose_features(model, x, y, refine=1, starts=1, exact_rows=None)  # the refined-feature pilot
    chosen = psg.choose_features(model, x, y, refine=0, starts=1)
    assert chosen["points"] is feats["points"] and "InducingPoints has no size rule" in chosen.info["kept"]["points"]
    assert "trend" in chosen.info["needed"] and "trend" not in chosen.info["kept"]


# --- the cap on the features of one GP (max_features) ----------------------------------------------------
def test_pilot_refuses_a_choice_over_max_features_at_tiny_noise_naming_the_gp_and_the_fix():
    """Noise sd 1e-5 against a unit signal: τ = 0.01·σ_n²/σ_f² = 1e-12, and VFF's rule wants 2 333 features
    (above the default cap of 2 000). The refusal names the GP, τ, the size and the fixes; with the cap at
    exactly that size the same choice is returned, and it is frequencies_needed at the recorded lengthscale
    and tolerance (the independent closed form)."""
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(0.0, 10.0, 40))
    y, noise, prior = np.sin(2 * x) + 1e-5 * rng.normal(size=40), 1e-5, dist.LogNormal(0.0, 0.3)
    feats = {"f": FourierFeatures.from_data(x, psg.Matern52(1.0, prior))}

    def model(xs, ys, features=feats):
        psg.marginal_spectral_gp("y", {"f": (features["f"], psg.Matern52(1.0, prior))}, xs, ys, noise)

    with pytest.raises(psg.features.TooManyFeatures,
                       match=r"GP 'f' \(FourierFeatures\) wants M' = \d+ features at tolerance 1e-12.*max_features "
                             r"= 2000.*raise max_features.*noise_fraction.*another family") as err:
        psg.choose_features(model, x, y, refine=0, starts=1)
    wanted = err.value.wanted
    assert wanted > 2000 and err.value.max_features == 2000 and isinstance(err.value, ValueError)
    chosen = psg.choose_features(model, x, y, refine=0, starts=1, max_features=wanted)
    need, f = chosen.info["needed"]["f"], chosen["f"]
    assert need["tolerance"] == pytest.approx(1e-12) and f.num_features == wanted
    assert f.num_frequencies == frequencies_needed(f.lower, f.upper, need["lengthscale"], 2.5, need["tolerance"])
    with pytest.raises(ValueError, match="max_features must be a positive integer"):
        psg.choose_features(model, x, y, refine=0, starts=1, max_features=0)


def _capped_cases():
    """(feature, inputs, kernel, tolerance) of every family with a rule, at a tolerance that needs many
    features."""
    x = np.linspace(-2.0, 3.0, 60)[:, None]
    X2 = np.stack([np.linspace(0.0, 10.0, 50), np.linspace(-1.0, 1.0, 50)], 1)
    m = psg.Matern32(1.0, 0.3)
    return {
        "vff": (FourierFeatures(-3.0, 4.0, 5), x, psg.Matern52(1.0, 0.2), 1e-8),
        "periodic": (FourierFeatures(0.0, 1.0, 4), x, psg.Periodic(1.0, 0.05, 1.0), 1e-8),
        "hermite": (HermiteFeatures(5, 1.5, 0.5), x, psg.SquaredExponential(1.0, 0.05), 1e-6),
        "trig": (TrigonometricFeatures(5, 1.0, centre=0.5), x, psg.Matern52(1.0, 0.1), 1e-6),
        "additive": (AdditiveFeatures.from_data(X2, psg.Matern32(1.0, PRIOR)), X2, psg.Additive([m, m]), 1e-6),
        "kronecker": (KroneckerFeatures.from_data(X2, psg.Matern32(1.0, PRIOR)), X2, psg.Product([m, m]), 1e-6),
        "spherical": (SphericalHarmonicFeatures(2, 2), X2, psg.ArcCosine(1), 1e-6),
    }


@pytest.mark.parametrize("family", ["vff", "periodic", "hermite", "trig", "additive", "kronecker", "spherical"])
def test_resized_stops_at_max_features(family):
    """Every family's rule under a cap: the uncapped choice is returned unchanged when it fits exactly, and a
    cap one below (or a tenth of it) raises TooManyFeatures, with the size wanted where the rule knows it
    (VFF, per-dimension sums and products, spherical: there it equals the uncapped choice's size)."""
    feature, X, kernel, tol = _capped_cases()[family]
    free = feature.resized(X, kernel, tol)
    M = free.num_features
    assert M > 200, M  # the case needs many features (measured: vff 801, periodic 231, hermite 401, trig 595,
    # additive 5 200, kronecker 6 938 709 (only sizes: nothing of that size is built), spherical 2 418)
    assert feature.resized(X, kernel, tol, M).num_features == M  # the cap at the size: the same choice
    with pytest.raises(psg.features.TooManyFeatures) as err:
        feature.resized(X, kernel, tol, M - 1)
    assert err.value.wanted in (None, M)
    if family in ("vff", "additive", "kronecker", "spherical"):
        assert err.value.wanted == M
    if family == "vff":  # the size wanted is the closed-form rule's
        assert M == 2 * frequencies_needed(-3.0, 4.0, 0.2, 2.5, tol) - 1
    with pytest.raises(psg.features.TooManyFeatures):  # the search stops at a small cap
        feature.resized(X, kernel, tol, M // 10)


def test_pilot_refines_arccos_spherical_features_of_max_degree_two():
    """refine=2 on arc-cosine features of max_degree 2 built with kernel= (no gap in the degrees yet): the
    refined features skip the vanishing odd degrees, so the pilot runs (it used to fail: Kuu refused degree
    3), and the chosen degrees are the non-vanishing ones up to the fewest degree whose raw (unmasked)
    Funk–Hecke coefficients leave at most the recorded tolerance unresolved."""
    from ppl_sparsegp.features.spherical_harmonics import _quadrature, num_harmonics

    rng = np.random.default_rng(1)
    X = rng.uniform(-1.0, 1.0, (30, 2))
    y = np.sin(X.sum(1)) + NOISE * rng.normal(size=30)
    feats = {"f": SphericalHarmonicFeatures(2, 2, kernel=psg.ArcCosine(1))}

    def model(xs, ys, features=feats):
        kernel = psg.ArcCosine(1, dist.LogNormal(0.0, 0.5), 1.0, 1.0)
        psg.marginal_spectral_gp("y", {"f": (features["f"], kernel)}, xs, ys, NOISE)

    chosen = psg.choose_features(model, X, y, refine=2, starts=1)
    f, tol = chosen["f"], chosen.info["needed"]["f"]["tolerance"]
    t, P = _quadrature(3, 40, 280)
    raw = P @ np.asarray(psg.ArcCosine(1).kappa(jnp.asarray(t)))
    unresolved = 1.0 - np.cumsum([num_harmonics(3, n) * raw[n] for n in range(41)])
    L = int(np.argmax(unresolved <= tol))
    assert f.degrees == tuple(n for n in range(L + 1) if abs(raw[n]) > 1e-9 * raw[0]), (f.degrees, L, tol)
    assert f.lower is not None and f.vanishing is not None
