"""choose_features against a dense sweep of M: data whose lengthscale sits in the prior's 1% tail, little
noise; the exact posterior of the lengthscale on a grid for each M (an independent computation standing in
for MCMC) says which M first holds the posterior within 0.1 sd of its converged value; the pilot's choice
must be at least that and not wastefully more."""
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer.util import log_density

import ppl_sparsegp as psg
from ppl_sparsegp import FourierFeatures

jax.config.update("jax_enable_x64", True)

_rng = np.random.default_rng(3)
N, NOISE = 100, 0.1
XS = np.sort(_rng.uniform(0.0, 10.0, N))
PRIOR = dist.LogNormal(np.log(3.0), 0.5)
_K = np.asarray(psg.Matern52(1.0, float(PRIOR.icdf(0.01)))(jnp.asarray(XS)[:, None]))
YS = np.linalg.cholesky(_K + 1e-9 * np.eye(N)) @ _rng.normal(size=N) + NOISE * _rng.normal(size=N)
START = {"f": FourierFeatures.from_data(XS, psg.Matern52(1.0, PRIOR))}  # the documented start: the prior's rule


def model(xs, ys, features=START):
    psg.marginal_spectral_gp("y", {"f": (features["f"], psg.Matern52(1.0, PRIOR))}, xs, ys, NOISE)


def exact_model(xs, ys, features=START):
    psg.marginal_spectral_gp("y", {"f": (features["f"], psg.Matern52(1.0, PRIOR))}, xs, ys, NOISE, exact=True)


def _grid_moments(m, grid=np.linspace(0.3, 8.0, 400)):
    """The posterior mean and sd of the lengthscale on a grid: with m frequencies over the prior's box, or the
    exact GP (``m=None``)."""
    feats = {"f": FourierFeatures(START["f"].lower, START["f"].upper, m or 1)}
    lp = np.asarray(jax.jit(jax.vmap(lambda v: log_density(exact_model if m is None else model, (XS, YS),
                                                           {"features": feats},
                                                           {"f_kernel_lengthscale": v})[0]))(jnp.asarray(grid)))
    w = np.exp(lp - lp.max())
    w /= w.sum()
    mean = w @ grid
    return mean, np.sqrt(w @ (grid - mean) ** 2)


def test_pilot_choice_against_a_dense_sweep_of_the_feature_count():
    chosen = psg.choose_features(model, XS, YS)
    f = chosen["f"]
    assert (f.lower, f.upper) == (START["f"].lower, START["f"].upper)  # the prior's box is kept
    ref_mean, ref_sd = _grid_moments(None)  # the exact GP (300 frequencies agree to 1e-6 sd; 60x the time)
    sweep = [30, 40, 50, 60, 80]
    dist_sd = [abs(_grid_moments(m)[0] - ref_mean) / ref_sd for m in sweep]
    m_min = next(m for i, m in enumerate(sweep) if max(dist_sd[i:]) < 0.1)  # measured: 50
    assert _grid_moments(START["f"].num_frequencies)[0] < ref_mean - ref_sd  # the prior's rule displaces it
    assert m_min <= f.num_frequencies <= 2 * m_min, (f.num_frequencies, m_min, dist_sd)
    mode = chosen.info["modes"][0]["gps"]["f"]
    assert mode["lengthscale_q"] < mode["lengthscale"] < 1.5  # found where the data put ℓ (0.94), not the prior


def test_pilot_refuses_latent_models_and_bad_options():
    def latent(xs, ys):
        f = psg.spectral_gp("f", START["f"], psg.Matern52(1.0, PRIOR), xs)
        numpyro.sample("y", dist.Normal(f, NOISE), obs=ys)

    with pytest.raises(ValueError, match="only latent sites are hyperparameters"):
        psg.choose_features(latent, XS, YS)
    with pytest.raises(ValueError, match="starts must be a positive integer"):
        psg.choose_features(model, XS, YS, starts=0)


def test_laplace_log_mass_is_the_evidence_of_a_posterior_gaussian_in_the_unconstrained_coordinates():
    """Modes are kept by their Laplace mass, not their peak height. Where the posterior is Gaussian in the
    unconstrained coordinates (u = log θ for a LogNormal prior with y ~ N(log θ, 0.5²); an unbounded b with
    a Normal prior and likelihood) Laplace's mass is exact: the log evidence, here in closed form (y ~ N(0.3,
    0.7² + 0.5²), y₂ ~ N(0, 1 + 0.3²)), to round-off. Dropping the Jacobian (the peak of p(y, θ) in θ)
    would be off by log θ̂ ≈ 0.9."""
    from ppl_sparsegp.approximations.pilot import _laplace_log_mass

    def toy(y, y2):
        theta = numpyro.sample("theta", dist.LogNormal(0.3, 0.7))
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(jnp.log(theta), 0.5), obs=y)
        numpyro.sample("y2", dist.Normal(b, 0.3), obs=y2)

    y, y2 = 1.1, 0.4
    u_hat = (0.3 / 0.49 + y / 0.25) / (1 / 0.49 + 1 / 0.25)  # the posterior mode of log θ
    b_hat = (y2 / 0.09) / (1 + 1 / 0.09)
    sites = {"theta": dist.LogNormal(0.3, 0.7), "b": dist.Normal(0.0, 1.0)}
    mass = _laplace_log_mass(toy, (y, y2), {}, sites, {"theta": np.exp(u_hat), "b": b_hat})
    evidence = (dist.Normal(0.3, np.sqrt(0.49 + 0.25)).log_prob(y) + dist.Normal(0.0, np.sqrt(1.09)).log_prob(y2))
    np.testing.assert_allclose(mass, float(evidence), rtol=0, atol=1e-10)


def test_pilot_refuses_refined_features_over_the_cap_before_fitting():
    """The refined-feature pilot (``exact_rows=None``; the default's exact-GP pilot fits no features) fits
    the features refined ``refine`` times (VFF: M → 2M − 1 frequencies each time); where that exceeds
    ``max_features`` it refuses before any L-BFGS run, naming the size and the fixes, and one refinement
    less runs (the error's own advice)."""
    pilot = START["f"].refined().refined()
    with pytest.raises(psg.features.TooManyFeatures, match=f"would fit M' = {pilot.num_features} features .* "
                                                           "pass refine=1"):
        psg.choose_features(model, XS, YS, max_features=pilot.num_features - 1, starts=1, exact_rows=None)
    once = START["f"].refined()
    assert once.num_features < pilot.num_features  # the advice's refine=1 is under the cap
    chosen = psg.choose_features(model, XS, YS, refine=1, starts=1, max_features=pilot.num_features - 1,
                                 exact_rows=None)
    assert chosen.info["refine"] == 1


@pytest.mark.slow
def test_pilot_reads_a_mean_function_as_the_numpy_array():
    # the linear mean as users write it (jax.numpy, a function of the inputs) and as a NumPy array: the same
    # pilot, the same choice
    def with_mean(xs, ys, basis, features=START):
        psg.marginal_spectral_gp("y", {"f": (features["f"], psg.Matern52(1.0, PRIOR))}, xs, ys, NOISE,
                                 mean_basis=basis, mean_prior=dist.Normal(np.zeros(2), 1.0))

    forms = {"function": lambda t: jnp.stack([jnp.ones_like(t), t / 10], -1),
             "array": np.stack([np.ones(N), XS / 10], 1)}
    chosen = {form: psg.choose_features(with_mean, XS, YS, basis, starts=1, refine=1, num_steps=40)
              for form, basis in forms.items()}
    assert chosen["function"]["f"].num_frequencies == chosen["array"]["f"].num_frequencies
    got, ref = (chosen[form].info["modes"][0]["gps"]["f"] for form in ("function", "array"))
    assert got["lengthscale"] == pytest.approx(ref["lengthscale"], rel=1e-6)
