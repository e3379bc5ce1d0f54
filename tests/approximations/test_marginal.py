"""marginal_spectral_gp against dense Gaussian computations: the integrated-out density, its pointwise
leave-one-out terms, the conditional draws at new inputs, and the refinement check on a posterior the
features displace."""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.infer import MCMC, NUTS, Predictive
from regression import assert_draws_match_conditional, trend_series

import ppl_sparsegp as psg
from ppl_sparsegp import Kuf, Kuu, diagnostics
from ppl_sparsegp.approximations import MarginalGaussian
from ppl_sparsegp.features import FourierFeatures, InducingPoints

jax.config.update("jax_enable_x64", True)

N = 40
x, H, y = trend_series(N)
TREND = (FourierFeatures(-1.0, 4.0, 12), psg.Matern52(0.7, 0.5))
SEASON = (FourierFeatures(0.0, 1.0, 5), psg.Periodic(0.3, 0.8, 1.0))
BETA = dist.Normal(jnp.array([0.2, -0.1]), jnp.array([1.0, 0.5]))
SIGMA = 0.15
LINEAR = lambda t: jnp.stack([jnp.ones_like(t), t], -1)  # noqa: E731 (a mean basis as users write it)


def two_gp_model(y, x_new=None):
    H_new = None if x_new is None else np.stack([np.ones(len(x_new)), x_new], 1)
    return psg.marginal_spectral_gp("y", {"trend": TREND, "season": SEASON}, x, y, SIGMA, mean_basis=H,
                                    mean_prior=BETA, X_new=x_new, mean_basis_new=H_new)


def _q(pair, A, B):
    """Kfu Kuu⁻¹ Kuf between inputs A and B, dense."""
    f, k = pair
    return np.asarray(Kuf(f, k, A).T @ jnp.linalg.solve(Kuu(f, k).to_dense(), Kuf(f, k, B)))


def _dense():
    """(mean, covariance) of y under the latent model, formed densely (two GPs + the linear mean)."""
    X = jnp.asarray(x)[:, None]
    B = np.diag([1.0, 0.25])
    C = _q(TREND, X, X) + _q(SEASON, X, X) + H @ B @ H.T + SIGMA**2 * np.eye(N)
    return H @ np.array([0.2, -0.1]), C


def _site(model, *args):
    return handlers.trace(handlers.seed(model, 0)).get_trace(*args)["y"]["fn"]


def _gaussian_logpdf(r, C):
    L = np.linalg.cholesky(C)
    a = np.linalg.solve(L, r)
    return -0.5 * a @ a - np.sum(np.log(np.diag(L))) - 0.5 * len(r) * np.log(2 * np.pi)


def test_density_is_the_dense_gaussian_integral_of_the_latent_model_on_both_paths():
    m, C = _dense()
    ref = _gaussian_logpdf(y - m, C)
    d = _site(two_gp_model, y)
    assert d.stats is not None  # VFF inside its box and the periodic basis: the statistics path
    np.testing.assert_allclose(float(d.log_prob(d.y)), ref, rtol=1e-10)
    # a traced y cannot have statistics: the data path, O(N M'²)
    traced = jax.jit(lambda v: _site(two_gp_model, v).log_prob(v))(jnp.asarray(y))
    np.testing.assert_allclose(float(traced), ref, rtol=1e-10)


def test_logdet_and_quadratic_rule_against_autodiff_through_the_factor():
    # the rule's every term (dS in log|S| and in the quadratic form, dB), reverse and forward over reverse,
    # against differentiating jnp.linalg.cholesky; S's diagonal spans 1e6 as VFF's Kuu does
    from ppl_sparsegp.linalg.woodbury import logdet_and_quadratic as _logdet_and_quadratic

    rng = np.random.default_rng(3)
    m = 12
    A = rng.normal(size=(m, m))
    S0, S1 = A @ A.T / m + np.diag(np.logspace(0, 6, m)), np.diag(rng.uniform(0.5, 1.5, m))
    B0, B1 = rng.normal(size=(m, 2)), rng.normal(size=(m, 2))

    def through(rule):
        def f(t):
            S = S0 + t[0] * S1 + t[1] * np.outer(B1[:, 0], B1[:, 0])
            ld, q = rule(S, B0 + t[2] * B1)
            return ld + q @ jnp.array([1.0, -0.7])
        return f

    def reference(S, B):
        L = jnp.linalg.cholesky(S)
        E = jax.scipy.linalg.solve_triangular(L, B, lower=True)
        return 2.0 * jnp.sum(jnp.log(jnp.diagonal(L))), jnp.sum(E * E, axis=0)

    t = jnp.array([0.3, 0.2, -0.4])
    for op in (lambda f: f, jax.grad, jax.hessian):
        np.testing.assert_allclose(np.asarray(jax.jit(op(through(_logdet_and_quadratic)))(t)),
                                   np.asarray(jax.jit(op(through(reference)))(t)), rtol=1e-8, atol=1e-10)


def test_spanning_features_give_the_exact_gp_log_marginal_likelihood():
    X = jnp.asarray(x)[:, None]
    kernel = psg.Matern32(0.8, 0.4)

    def model(ell):  # a sampled lengthscale: Kuf depends on it, the data path
        psg.marginal_spectral_gp("y", (InducingPoints(X), psg.Matern32(0.8, ell)), x, y, SIGMA)

    got = jax.jit(lambda ell: _site(model, ell).log_prob(jnp.asarray(y)))(0.4)
    exact = psg.exact_log_marginal_likelihood(kernel, X, jnp.asarray(y), SIGMA**2)
    np.testing.assert_allclose(float(got), float(exact), rtol=1e-6)  # inducing points' jitter


def test_leave_one_out_terms_against_explicit_conditioning():
    m, C = _dense()
    d = _site(two_gp_model, y)
    loo = np.asarray(d.loo_log_prob(d.y))
    for i in (0, 17, N - 1):  # log N(y_i | E[y_i | y_-i], Var[y_i | y_-i]) by partitioning C
        rest = np.delete(np.arange(N), i)
        w = np.linalg.solve(C[np.ix_(rest, rest)], C[rest, i])
        mu = m[i] + w @ (y[rest] - m[rest])
        var = C[i, i] - C[i, rest] @ w
        np.testing.assert_allclose(loo[i], -0.5 * np.log(2 * np.pi * var) - 0.5 * (y[i] - mu) ** 2 / var,
                                   rtol=1e-9)


def test_predictive_draws_at_new_inputs_match_the_dense_conditional():
    x_new = np.linspace(-0.5, 3.5, 6)
    X, Xn = jnp.asarray(x)[:, None], jnp.asarray(x_new)[:, None]
    Hn = np.stack([np.ones(6), x_new], 1)
    m, C = _dense()
    B = np.diag([1.0, 0.25])
    S = 4000
    with warnings.catch_warnings():  # x_new leaves the periodic feature's box, which extends periodically:
        warnings.simplefilter("error", psg.features.OutsideDomainWarning)  # no warning (issue 41)
        draws = Predictive(two_gp_model, num_samples=S)(jax.random.PRNGKey(1), y, x_new)
    sites = [("trend_new", _q(TREND, Xn, X), _q(TREND, Xn, Xn), 0.0),
             ("y_new", _q(TREND, Xn, X) + _q(SEASON, Xn, X) + Hn @ B @ H.T,
              _q(TREND, Xn, Xn) + _q(SEASON, Xn, Xn) + Hn @ B @ Hn.T, Hn @ np.array([0.2, -0.1]))]
    assert_draws_match_conditional(draws, sites, y, m, C, S)
    # the sum site is the GPs' sum plus the mean weights' draw at the new inputs
    total = draws["trend_new"] + draws["season_new"] + draws["y_beta"] @ Hn.T
    np.testing.assert_allclose(draws["y_new"], total, rtol=1e-12, atol=1e-13)


def test_outputs_in_a_plate_are_independent_with_shared_hyperparameters():
    Y = np.stack([y, -y + 0.5 * x])

    def model(Y):
        with numpyro.plate("outputs", 2, dim=-1):
            psg.marginal_spectral_gp("y", [TREND], x, Y, SIGMA)

    def one(v):
        return _site(lambda v: psg.marginal_spectral_gp("y", [TREND], x, v, SIGMA), v).log_prob(v)

    d = _site(model, Y)
    both = np.asarray(d.log_prob(d.y))
    np.testing.assert_allclose(both, [float(one(Y[0])), float(one(Y[1]))], rtol=1e-10)


@pytest.mark.parametrize("basis", ["numpy array", "jnp function"])
def test_statistics_path_has_no_data_sized_array_per_gradient(monkeypatch, basis):
    n = 2003  # a size no feature count has
    # past the cap on a Kuf embedded in a program (as N = 100 000 is): the statistics path must still hold
    monkeypatch.setattr("ppl_sparsegp.features.base.CONSTANT_KUF_MAX", 1000)
    xs = np.linspace(0.0, 3.0, n)

    def model(ys):  # two GPs and a linear mean, as in a user's model (the mean's basis is data too)
        H = np.stack([np.ones(n), xs], 1) if basis == "numpy array" else LINEAR  # jnp: evaluated at compile time
        psg.marginal_spectral_gp("y", {"trend": (TREND[0], psg.Matern52(1.0, dist.LogNormal(0.0, 0.5))),
                                       "season": (psg.FourierFeatures(0.0, 1.0, 4), psg.Periodic(0.3, 1.0, 1.0))},
                                 xs, ys, dist.HalfNormal(1.0), mean_basis=H, mean_prior=dist.Normal(np.zeros(2), 1.0))

    from numpyro.infer.util import initialize_model

    info, potential, _, _ = initialize_model(jax.random.PRNGKey(0), model, model_args=(np.sin(xs),))
    jaxpr = jax.make_jaxpr(jax.value_and_grad(potential))(info.z)

    def shapes(jx):
        for v in list(jx.jaxpr.invars) + list(jx.jaxpr.constvars) + [o for e in jx.jaxpr.eqns for o in e.outvars]:
            yield getattr(v.aval, "shape", ())
        for c in jx.consts:
            yield np.shape(c)

    assert all(n not in s for s in shapes(jaxpr))


def test_bad_inputs_get_clear_errors():
    run = lambda model: handlers.trace(handlers.seed(model, 0)).get_trace()  # noqa: E731
    with pytest.raises(ValueError, match="y must have N = 40"):
        run(lambda: psg.marginal_spectral_gp("y", TREND, x, y[:-1], SIGMA))
    with pytest.raises(ValueError, match="needs both mean_basis"):
        run(lambda: psg.marginal_spectral_gp("y", TREND, x, y, SIGMA, mean_basis=H))
    with pytest.raises(ValueError, match="mean_basis must be"):
        run(lambda: psg.marginal_spectral_gp("y", TREND, x, y, SIGMA, mean_basis=H[:-1], mean_prior=BETA))
    with pytest.raises(ValueError, match="noise_scale must be positive"):
        run(lambda: psg.marginal_spectral_gp("y", TREND, x, y, -1.0))
    with pytest.raises(ValueError, match="y contains NaN"):
        run(lambda: psg.marginal_spectral_gp("y", TREND, x, np.where(x > 1, np.nan, y), SIGMA))
    with pytest.raises(ValueError, match="gps must be"):
        run(lambda: psg.marginal_spectral_gp("y", [TREND[0]], x, y, SIGMA))
    with pytest.raises(ValueError, match="X_new needs the observations"):
        run(lambda: psg.marginal_spectral_gp("y", TREND, x, None, SIGMA, X_new=x))
    with pytest.raises(ValueError, match="inside a NumPyro model"):
        psg.marginal_spectral_gp("y", TREND, x, y, SIGMA)
    d = _site(two_gp_model, y)
    with pytest.raises(ValueError, match="evaluates its own y only"):
        d.log_prob(jnp.asarray(y) + 1.0)


def test_from_mcmc_stores_the_leave_one_out_terms_and_nuts_needs_few_steps():
    def model(y):
        psg.marginal_spectral_gp("y", (TREND[0], psg.Matern52(dist.LogNormal(0.0, 1.0), dist.LogNormal(0.0, 0.5))),
                                 x, y, dist.HalfNormal(1.0))

    mcmc = MCMC(NUTS(model), num_warmup=100, num_samples=50, num_chains=1, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), y, extra_fields=("num_steps",))
    assert np.mean(mcmc.get_extra_fields()["num_steps"]) < 16  # nothing latent: no funnel
    idata = diagnostics.from_mcmc(mcmc, model)
    ll = idata.log_likelihood["y"].values
    assert ll.shape == (1, 50, N)
    draw = {k: v[7] for k, v in mcmc.get_samples().items()}
    tr = handlers.trace(handlers.substitute(handlers.seed(model, 0), draw)).get_trace(y)
    np.testing.assert_allclose(ll[0, 7], tr["y"]["fn"].loo_log_prob(tr["y"]["value"]), rtol=1e-9)
    assert isinstance(tr["y"]["fn"], MarginalGaussian)


def _grid_posterior_draws(model, args, site, grid, num=400):
    """Draws of a one-hyperparameter posterior by inverse-CDF sampling on a grid (an exact computation
    standing in for MCMC)."""
    from numpyro.infer.util import log_density

    lp = np.asarray(jax.jit(jax.vmap(lambda v: log_density(model, args, {}, {site: v})[0]))(jnp.asarray(grid)))
    cdf = np.cumsum(np.exp(lp - lp.max()))
    u = (np.arange(num) + 0.5) / num
    return {site: jnp.asarray(np.interp(u * cdf[-1], cdf, grid))}


def test_refinement_check_fails_a_posterior_the_features_displace_and_passes_when_they_resolve_it():
    """Data from a lengthscale in the prior's 1% tail: features from the prior's 5% quantile (the old
    default rule) cannot resolve it, the posterior (exact, on a grid) moves away from it and the check
    fails, by the importance weights and by the refit; features that resolve it (the rule's 1% quantile
    at the tolerance 0.01·σ_n²/σ_f² its docstring advises) survive refinement."""
    rng = np.random.default_rng(3)
    n, noise = 100, 0.1
    xs = np.sort(rng.uniform(0.0, 10.0, n))
    prior = dist.LogNormal(np.log(3.0), 0.5)
    ell = float(prior.icdf(0.01))
    K = np.asarray(psg.Matern52(1.0, ell)(jnp.asarray(xs)[:, None]))
    ys = np.linalg.cholesky(K + 1e-9 * np.eye(n)) @ rng.normal(size=n) + noise * rng.normal(size=n)
    grid = np.linspace(0.3, 8.0, 300)

    def check(feature, refit):
        def model(xs, ys):
            psg.marginal_spectral_gp("y", {"f": (feature, psg.Matern52(1.0, prior))}, xs, ys, noise)
        draws = _grid_posterior_draws(model, (xs, ys), "f_kernel_lengthscale", grid)
        return draws, diagnostics.refinement_check(model, draws, xs, ys, refit=refit, num_warmup=50, num_samples=50)

    coarse = FourierFeatures.from_data(xs, psg.Matern52(1.0, prior), quantile=0.05, max_margin=np.inf)
    draws, bad = check(coarse, True)
    assert not bad["ok"] and "fails refinement" in bad["message"]
    site = "f_kernel_lengthscale"  # the importance weights and the refit each see the move
    assert (bad["k_hat"] > 0.7 or bad["shift_is"][site] > 0.5) and bad["shift_refit"][site] > 0.5
    # the fix, from the refit's lengthscales, keeps the box (the prior's long lengthscales) and converges:
    # one more fit with the advised features passes
    advised = bad["advised_features"]["f"]
    assert (advised.lower, advised.upper) == (coarse.lower, coarse.upper)
    assert advised.num_frequencies > coarse.num_frequencies
    assert f"FourierFeatures({advised.lower:.6g}, {advised.upper:.6g}, {advised.num_frequencies})" in bad["message"]
    _, again = check(advised, None)
    assert again["ok"], again["message"]
    resolved, good = check(FourierFeatures.from_data(xs, psg.Matern52(1.0, prior), tolerance=0.01 * noise**2), None)
    ells, ref = np.asarray(draws["f_kernel_lengthscale"]), np.asarray(resolved["f_kernel_lengthscale"])
    assert abs(ells.mean() - ref.mean()) > ref.std()  # the coarse features displaced the posterior
    assert good["ok"], good["message"]
    assert good["k_hat"] <= 0.7 and good["shift_is"]["f_kernel_lengthscale"] < 0.5
    assert good["shift_refit"] == {}  # k̂ ≤ 0.7: the weights decide, no refit by default


# --- the mean basis as a function of the inputs (jax.numpy inside the model, evaluated at compile time) ---
def _mean_model(basis, y, x_new=None, basis_new=None, exact=False, ell=dist.LogNormal(np.log(0.5), 0.3)):
    gps = {"trend": (TREND[0], psg.Matern52(0.7, ell)), "season": SEASON}
    return psg.marginal_spectral_gp("y", gps, x, y, SIGMA, mean_basis=basis, mean_prior=BETA, X_new=x_new,
                                    mean_basis_new=basis_new, exact=exact)


def _y_density(basis, ell, paths=None, exact=False):
    """log p(y | ℓ) of the observed site, with the trend lengthscale substituted (traced under jit)."""
    model = handlers.substitute(handlers.seed(_mean_model, 0), {"trend_kernel_lengthscale": ell})
    site = handlers.trace(model).get_trace(basis, y, exact=exact)["y"]
    if paths is not None:
        paths.append(getattr(site["fn"], "stats", None) is not None)
    return site["fn"].log_prob(site["value"])


def _dense_y_density(ell):
    """The same density as a dense Gaussian integral of the latent model (jnp, differentiable in ℓ)."""
    X = jnp.asarray(x)[:, None]

    def q(f, k):
        Kuf_ = Kuf(f, k, X)
        return Kuf_.T @ jnp.linalg.solve(Kuu(f, k).to_dense(), Kuf_)

    C = (q(TREND[0], psg.Matern52(0.7, ell)) + q(*SEASON) + H @ np.diag([1.0, 0.25]) @ H.T
         + SIGMA**2 * jnp.eye(N))
    L = jnp.linalg.cholesky(C)
    a = jax.scipy.linalg.solve_triangular(L, y - H @ np.array([0.2, -0.1]), lower=True)
    return -0.5 * a @ a - jnp.sum(jnp.log(jnp.diagonal(L))) - 0.5 * N * np.log(2 * np.pi)


def test_a_jnp_function_as_mean_basis_gives_the_numpy_arrays_density_and_gradient_on_the_statistics_path():
    ell = 0.45
    ref = jax.value_and_grad(_dense_y_density)(ell)
    paths = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a function of the inputs: no warning under jit
        got = {form: jax.jit(jax.value_and_grad(lambda e, b=basis: _y_density(b, e, paths)))(ell)
               for form, basis in (("numpy array", H), ("jnp function", LINEAR))}
    assert paths == [True, True]  # both traced once by jit, both on the statistics path
    for value, grad in got.values():
        np.testing.assert_allclose([float(value), float(grad)], [float(ref[0]), float(ref[1])], rtol=1e-9)
    np.testing.assert_allclose(np.array(got["jnp function"]), np.array(got["numpy array"]), rtol=1e-10)
    # exact=True: the same basis by either form, the same dense density
    np.testing.assert_allclose(float(jax.jit(lambda e: _y_density(LINEAR, e, exact=True))(ell)),
                               float(jax.jit(lambda e: _y_density(H, e, exact=True))(ell)), rtol=1e-12)


def test_mean_basis_array_traced_by_jnp_warns_naming_the_function_form_and_a_basis_of_sampled_values_warns():
    with pytest.warns(UserWarning, match=r"mean_basis is traced.*mean_basis=lambda t: jnp.stack"):
        traced = jax.jit(lambda e: _y_density(LINEAR(jnp.asarray(x)), e))(0.45)  # the array, built by jnp
    np.testing.assert_allclose(float(traced), float(_dense_y_density(0.45)), rtol=1e-9)

    def shifted(y, shift):  # a basis that really uses a sampled value: the data path, and it says so
        s = numpyro.sample("shift", dist.Normal(0.0, 1.0)) if shift is None else shift
        basis = lambda t: jnp.stack([jnp.ones_like(t), t - s], -1)  # noqa: E731
        psg.marginal_spectral_gp("y", [TREND], x, y, SIGMA, mean_basis=basis, mean_prior=BETA)

    lp = lambda shift, z: numpyro.infer.util.log_density(shifted, (y, shift), {}, z)[0]  # noqa: E731
    with pytest.warns(UserWarning, match=r"mean_basis\(X\) is traced.*sampled value"):
        sampled = jax.jit(lambda v: lp(None, {"shift": v}))(0.3)
    fixed = lp(0.3, {}) + dist.Normal(0.0, 1.0).log_prob(0.3)  # the same basis at a number: statistics path
    np.testing.assert_allclose(float(sampled), float(fixed), rtol=1e-10)


@pytest.mark.parametrize("exact", [False, True])
def test_draws_at_new_inputs_with_a_mean_function_equal_those_with_mean_basis_new_given(exact):
    x_new = np.linspace(-0.5, 3.5, 6)
    Hn = np.stack([np.ones(6), x_new], 1)
    draws = {form: Predictive(_mean_model, num_samples=20)(jax.random.PRNGKey(2), basis, y, x_new, basis_new,
                                                              exact, 0.5)
             for form, basis, basis_new in (("function", LINEAR, None), ("arrays", H, Hn),
                                            ("function and array", LINEAR, Hn))}
    assert set(draws["function"]) >= {"trend_new", "season_new", "y_beta", "y_new"}
    for form in ("arrays", "function and array"):
        for site in draws["function"]:
            np.testing.assert_allclose(draws[form][site], draws["function"][site], rtol=1e-12, atol=1e-13)
    with pytest.raises(ValueError, match="mean_basis_new has 3 columns where mean_basis has 2"):
        handlers.trace(handlers.seed(_mean_model, 0)).get_trace(LINEAR, y, x_new, np.c_[Hn, x_new**2], exact, 0.5)


def test_a_mean_function_in_a_plate_of_outputs_gives_the_arrays_densities():
    Y = np.stack([y, -y + 0.5 * x])

    def model(basis):
        with numpyro.plate("outputs", 2, dim=-1):
            psg.marginal_spectral_gp("y", [TREND], x, Y, SIGMA, mean_basis=basis, mean_prior=BETA)

    def density(basis):
        d = _site(model, basis)
        assert d.stats is not None  # under jit too: the statistics path
        return d.log_prob(d.y)

    both = {form: jax.jit(lambda b=basis: density(b))() for form, basis in (("function", LINEAR), ("array", H))}
    assert both["function"].shape == (2,)
    np.testing.assert_allclose(both["function"], both["array"], rtol=1e-10)


def test_refinement_check_reads_a_mean_function_as_the_array():
    def model(basis, y, features={"trend": TREND[0]}):
        trend = (features["trend"], psg.Matern52(0.7, dist.LogNormal(np.log(0.5), 0.3)))
        psg.marginal_spectral_gp("y", {"trend": trend, "season": SEASON}, x, y, SIGMA, mean_basis=basis,
                                 mean_prior=BETA)

    draws = {"trend_kernel_lengthscale": jnp.linspace(0.35, 0.65, 30)}
    out = {form: diagnostics.refinement_check(model, draws, basis, y, refit=False) for form, basis in
           (("function", LINEAR), ("array", H))}
    assert out["function"]["k_hat"] == pytest.approx(out["array"]["k_hat"], rel=1e-8)
    assert out["function"]["shift_is"] == pytest.approx(out["array"]["shift_is"], rel=1e-8)


@pytest.mark.parametrize("basis, error", [
    (lambda t: LINEAR(t)[:-1], r"mean_basis\(X\) must be \(N, P\) with N = 40 rows"),
    (lambda t: jnp.stack([jnp.ones_like(t), jnp.where(t > 1, jnp.nan, t)], -1), r"mean_basis\(X\) contains NaN"),
    (lambda t: jnp.stack([jnp.ones_like(t), t, t**2], -1), "mean_prior must be over the 3 columns of mean_basis"),
    (lambda t: None, r"mean_basis\(X\) must be an array"),
])
def test_a_bad_mean_function_is_refused_naming_mean_basis(basis, error):
    with pytest.raises(ValueError, match=error):
        handlers.trace(handlers.seed(_mean_model, 0)).get_trace(basis, y, ell=0.5)
    with pytest.raises(ValueError, match="needs mean_basis_new .* or mean_basis as a function"):
        handlers.trace(handlers.seed(_mean_model, 0)).get_trace(H, y, np.zeros(3), ell=0.5)
