"""diagnostics.from_svi's pointwise groups under the cap max_pointwise: evaluated for evenly spaced draws,
labelled by the posterior draws they belong to, with the values of those draws (an independent dense
computation; an uncapped run)."""
import jax
import numpy as np
import pytest
from test_diagnostics import M, data, dense_conditional, gaussian_ve, make_gp

from ppl_sparsegp import diagnostics


def params_of(gp):
    """The guide's params moved off their initial values (as after a fit): a loc, a lower-triangular factor,
    point estimates."""
    rng = np.random.default_rng(3)
    L = np.tril(0.2 * rng.normal(size=(M, M)), -1) + np.diag(rng.uniform(0.2, 0.6, M))
    return {"f_v_loc": rng.normal(size=M), "f_v_scale_tril": L, "kernel_variance_map": np.array(1.3),
            "kernel_lengthscale_map": np.array(0.2), "likelihood_variance_map": np.array(0.05)}


def test_thinned_pointwise_groups_hold_the_kept_draws_values():
    """⌊159 / 20⌋ = 7 of 50 draws, evenly spaced, labelled by their posterior draw: the log likelihood of
    each is E_p(f|u)[log N(y | f, σ²)] of that posterior draw (dense), and f, y follow its p(f | u) and
    noise (z-scores over the 7 × 20 values: 5 standard errors); the user's coords label the observations."""
    X, y = data()  # N = 20
    gp = make_gp()
    idata = diagnostics.from_svi(params_of(gp), gp, X, y, num_samples=50, max_pointwise=7 * 20 + 19,
                                 rng_key=jax.random.PRNGKey(4), coords={"obs": 7.0 * X[:, 0]})
    kept = np.round(np.linspace(0, 49, 7)).astype(int)
    assert idata.posterior.sizes["draw"] == 50 and idata.posterior.attrs["pointwise_draws"] == 7
    for group in ("log_likelihood", "posterior_predictive"):
        np.testing.assert_array_equal(getattr(idata, group).draw.values, kept)
        np.testing.assert_array_equal(getattr(idata, group).obs.values, 7.0 * X[:, 0])  # the user's coords kept
    zf, zy = [], []
    for d in kept:
        s = {k: idata.posterior[k].values[0, d] for k in idata.posterior.data_vars}
        mean, var = dense_conditional(X, s["kernel_variance"], s["kernel_lengthscale"], s["f_v"])
        np.testing.assert_allclose(idata.log_likelihood["y"].sel(draw=d).values[0],
                                   gaussian_ve(y, mean, var, s["likelihood_variance"]), rtol=1e-8, atol=1e-10)
        f = idata.posterior_predictive["f"].sel(draw=d).values[0]
        zf.append((f - mean) / np.sqrt(var))
        zy.append((idata.posterior_predictive["y"].sel(draw=d).values[0] - f) / np.sqrt(s["likelihood_variance"]))
    for z in (np.ravel(zf), np.ravel(zy)):
        assert abs(z.mean()) < 5 / np.sqrt(z.size) and abs(z.var() - 1) < 5 * np.sqrt(2 / z.size)
    with pytest.raises(ValueError, match="max_pointwise must be None or a positive integer, got 0"):
        diagnostics.from_svi(params_of(gp), gp, X, y, max_pointwise=0)


@pytest.mark.slow
def test_thinned_pointwise_groups_are_the_full_groups_at_the_kept_draws():
    """One key per draw: a draw's values do not depend on which other draws are evaluated with it."""
    X, y = data()
    gp = make_gp()
    params, key = params_of(gp), jax.random.PRNGKey(4)
    capped = diagnostics.from_svi(params, gp, X, y, num_samples=50, max_pointwise=7 * 20 + 19, rng_key=key)
    full = diagnostics.from_svi(params, gp, X, y, num_samples=50, max_pointwise=None, rng_key=key)
    kept = capped.log_likelihood.draw.values
    np.testing.assert_array_equal(full.log_likelihood.draw.values, np.arange(50))
    np.testing.assert_array_equal(capped.posterior["f_v"].values, full.posterior["f_v"].values)
    for group, name in (("log_likelihood", "y"), ("posterior_predictive", "y"), ("posterior_predictive", "f")):
        np.testing.assert_allclose(getattr(capped, group)[name].values[0],
                                   getattr(full, group)[name].values[0, kept], rtol=1e-12, atol=1e-12)


@pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto:UserWarning")
def test_from_mcmc_of_a_users_own_model_thins_its_log_likelihood_under_max_pointwise():
    """A user's model function (spectral_gp and a Normal site y, N = 20; a marginal_spectral_gp site z,
    N = 10, whose terms are leave-one-out): 2 chains × 30 draws at the cap 2·7·20 + 5 keep ⌊145 / 2 / 20⌋ = 7
    evenly spaced draws per chain, labelled by their posterior draw, with the values the uncapped group
    holds at those draws (computed by az.from_numpyro / the LOO pass over every draw) and the user's dims
    and coords (both sites, the LOO one too); az.loo runs."""
    import arviz as az
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    import ppl_sparsegp as psg

    x = np.linspace(0.0, 1.0, 20)
    y = np.sin(5 * x) + 0.1 * np.random.default_rng(0).normal(size=20)
    feature = psg.FourierFeatures(-0.5, 1.5, 6)

    def model(x, y):
        k = psg.Matern32(1.0, numpyro.sample("ell", dist.LogNormal(-1.0, 0.3)))
        f = psg.spectral_gp("f", feature, k, x)
        numpyro.sample("y", dist.Normal(f, 0.2), obs=y)
        psg.marginal_spectral_gp("z", (feature, k), x[::2][:12], y[::2][:12], 0.2)

    mcmc = MCMC(NUTS(model), num_warmup=20, num_samples=30, num_chains=2, chain_method="sequential",
                progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), x, y)
    # the user's dims and coords: the capped group carries them as the uncapped one (az.from_numpyro's) does
    coords, dims = {"obs": 10.0 * x, "zobs": 100 + np.arange(10)}, {"y": ["obs"], "z": ["zobs"]}
    full = diagnostics.from_mcmc(mcmc, model, coords=coords, dims=dims)
    capped = diagnostics.from_mcmc(mcmc, model, coords=coords, dims=dims, max_pointwise=2 * 7 * 20 + 5)
    kept = np.round(np.linspace(0, 29, 7)).astype(int)
    np.testing.assert_array_equal(capped.log_likelihood.draw.values, kept)
    assert capped.posterior.sizes["draw"] == 30 and capped.posterior.attrs["pointwise_draws"] == 7
    assert "pointwise_draws" not in full.posterior.attrs and full.log_likelihood.sizes["draw"] == 30
    for site, dim, n in (("y", "obs", 20), ("z", "zobs", 10)):
        assert capped.log_likelihood[site].dims == full.log_likelihood[site].dims == ("chain", "draw", dim)
        assert capped.log_likelihood[site].shape == (2, 7, n)
        np.testing.assert_array_equal(capped.log_likelihood[dim].values, coords[dim])
        np.testing.assert_array_equal(full.log_likelihood[dim].values, coords[dim])
        np.testing.assert_allclose(capped.log_likelihood[site].values,
                                   full.log_likelihood[site].sel(draw=kept).values, rtol=1e-10, atol=1e-12)
    assert np.isfinite(az.loo(capped, var_name="y").elpd_loo)
    for cap in (None, 2 * 7 * 20 + 5):  # a coordinate of the wrong length: the same error, capped or not
        with pytest.raises(ValueError, match="conflicting sizes for dimension 'obs'"):
            diagnostics.from_mcmc(mcmc, model, coords={"obs": x[:-1]}, dims=dims, max_pointwise=cap)
    off = diagnostics.from_mcmc(mcmc, model, log_likelihood=False, max_pointwise=10)
    assert "log_likelihood" not in off.groups()
    with pytest.raises(ValueError, match="max_pointwise must be None or a positive integer, got 0"):
        diagnostics.from_mcmc(mcmc, model, max_pointwise=0)


_FACTORISATIONS = {"cholesky", "triangular_solve", "lu", "eigh", "qr", "svd"}


def _factorisation_ranks(jaxpr):
    """The operand rank of every matrix factorisation or triangular solve in ``jaxpr`` and its sub-jaxprs."""
    ranks = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _FACTORISATIONS:
            ranks.append((eqn.primitive.name, eqn.invars[0].aval.ndim))
        for value in eqn.params.values():
            for sub in value if isinstance(value, (list, tuple)) else [value]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    ranks += _factorisation_ranks(inner)
    return ranks


def test_per_draw_programs_factorise_one_matrix_at_a_time(monkeypatch):
    """from_mcmc's leave-one-out terms of a marginal_spectral_gp site (every draw its own hyperparameters)
    and from_svi's pointwise groups of MCMC-like draws compile no batched Cholesky or triangular solve:
    jaxlib's CPU kernels split a batch over XLA's pool and block a pool thread on it, and two at once
    wedged a 2-core machine for good (diagnostics.inference_data._map_draws). The program's jaxpr is read
    where the library jits it; the values are checked by the tests of from_mcmc and from_svi."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    import ppl_sparsegp as psg
    from ppl_sparsegp.diagnostics import inference_data

    seen = []
    real_jit = jax.jit

    def recording_jit(fn, *args, **kwargs):
        def traced(*a):
            seen.append(_factorisation_ranks(jax.make_jaxpr(fn)(*a).jaxpr))
            return fn(*a)
        return real_jit(traced, *args, **kwargs)

    monkeypatch.setattr(inference_data.jax, "jit", recording_jit)
    t = np.linspace(0.0, 1.0, 30)
    y = np.sin(6 * t)
    feature = psg.FourierFeatures(-0.5, 1.5, 6)

    def model(t, y=None):
        kernel = psg.Matern32(1.0, numpyro.sample("ell", dist.LogNormal(np.log(0.3), 0.3)))
        psg.marginal_spectral_gp("y", (feature, kernel), t, y, numpyro.sample("noise", dist.HalfNormal(0.5)))

    mcmc = MCMC(NUTS(model), num_warmup=5, num_samples=6, progress_bar=False)
    with monkeypatch.context() as m:
        m.setattr(inference_data.jax, "jit", real_jit)
        mcmc.run(jax.random.PRNGKey(0), t, y)
    diagnostics.from_mcmc(mcmc, model)
    X, yy = data()
    gp = make_gp()
    draws = {k: jnp.stack([jnp.asarray(v) * (1 + 0.1 * i) for i in range(4)]) for k, v in params_of(gp).items()}
    draws = {"f_v": draws["f_v_loc"], "kernel_variance": draws["kernel_variance_map"],
             "kernel_lengthscale": draws["kernel_lengthscale_map"],
             "likelihood_variance": draws["likelihood_variance_map"]}
    inference_data._pointwise_groups(gp, X, yy, draws, np.arange(4), {}, jax.random.PRNGKey(1),
                                     log_likelihood=True, predictive=True)
    found = [r for program in seen for r in program]
    assert any(name == "cholesky" for name, _ in found), found  # the programs were seen
    assert all(rank == 2 for _, rank in found), found
