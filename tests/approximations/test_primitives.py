"""The primitives for people's own models (:mod:`ppl_sparsegp.approximations.primitives`): ``spectral_gp``
inside a user's model has the log joint of a dense hand computation (inducing points and VFF), and
``inducing_guide`` is the matching q: under ``TraceMeanField_ELBO`` a model holding only ``spectral_gp``
has loss KL(q ‖ p) exactly, which is checked against the dense KL of the guide's params (whitened and
centred, full, diagonal and block-diagonal q), the guide starting at the prior (KL 0) with the params
the docstrings name."""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.infer import TraceMeanField_ELBO
from numpyro.infer.util import log_density
from regression import KERNEL, data
from scipy import stats
from scipy.linalg import block_diag

import ppl_sparsegp as psg
from ppl_sparsegp.features import FourierFeatures, HarmonicFeatures, InducingPoints
from ppl_sparsegp.groups import Negation


def _lp(model, args, values):
    return float(jax.jit(lambda v: log_density(model, args, {}, v)[0])(values))


def test_spectral_gp_primitive_log_density():
    """The primitive inside a user's Poisson model: log joint equals a dense hand computation."""
    X, _ = data(12)
    Z = X[::3]
    counts = jnp.arange(12) % 4

    def model(X, y=None):
        f = psg.spectral_gp("g", psg.InducingPoints(Z), KERNEL, X)
        numpyro.sample("y", dist.Poisson(jnp.exp(f)), obs=y)

    v = jax.random.normal(jax.random.PRNGKey(0), (4,))
    lp = _lp(model, (X, counts), {"g_v": v})
    Kzz = np.asarray(KERNEL(Z)) + 1e-10 * 1.2 * np.eye(4)
    L = np.linalg.cholesky(Kzz)
    f = np.asarray(KERNEL(X, Z)) @ np.linalg.solve(Kzz, L @ np.asarray(v))
    ref = stats.norm.logpdf(v).sum() + stats.poisson.logpmf(np.asarray(counts), np.exp(f)).sum()
    np.testing.assert_allclose(lp, ref, rtol=1e-8)


def test_spectral_gp_with_fourier_features_in_user_model():
    """The primitive with VFF inside a user's Bernoulli model: log joint vs dense."""
    rng = np.random.default_rng(3)
    X = jnp.asarray(rng.uniform(0, 1, (25, 1)))
    labels = jnp.asarray(rng.integers(0, 2, 25))
    feature = FourierFeatures(-1.0, 2.0, 6)

    def model(X, y=None):
        ell = numpyro.sample("ell", dist.LogNormal(-1.0, 0.5))
        f = psg.spectral_gp("f", feature, psg.Matern52(1.0, ell), X)
        numpyro.sample("y", dist.Bernoulli(logits=f), obs=y)

    v = rng.normal(size=11 + 3)  # 2M − 1 features plus rank 3 for Matérn-5/2
    lp = _lp(model, (X, labels), {"ell": 0.3, "f_v": jnp.asarray(v)})
    k = psg.Matern52(1.0, 0.3)
    Kmm = psg.Kuu(feature, k)
    f = np.asarray(psg.Kuf(feature, k, X)).T @ np.linalg.solve(np.asarray(Kmm.to_dense()),
                                                              np.asarray(Kmm.sqrt()) @ v)
    p = 1 / (1 + np.exp(-f))
    ref = (stats.lognorm(0.5, scale=np.exp(-1.0)).logpdf(0.3) + stats.norm.logpdf(v).sum()
           + np.sum(np.asarray(labels) * np.log(p) + (1 - np.asarray(labels)) * np.log1p(-p)))
    np.testing.assert_allclose(lp, ref, rtol=1e-9)


# --- inducing_guide: q over spectral_gp's site --------------------------------------------------------
Z_H = np.random.default_rng(6).normal(size=(3, 2))  # harmonic: T = 2 blocks of 3 features (Negation)
X_H = np.random.default_rng(7).normal(size=(8, 2))
GUIDE_CASES = {
    # feature, kernel, X, whiten, q_cov, {param: (shape, constraint)}
    "points-whitened-full": (InducingPoints(np.linspace(0.1, 0.9, 4)[:, None]), KERNEL, data(8)[0], True, "full",
                             {"f_v_loc": ((4,), dist.constraints.real),
                              "f_v_scale_tril": ((4, 4), dist.constraints.scaled_unit_lower_cholesky)}),
    "points-centred-diag": (InducingPoints(np.linspace(0.1, 0.9, 4)[:, None]), KERNEL, data(8)[0], False, "diag",
                            {"f_u_loc": ((4,), dist.constraints.real),
                             "f_u_scale": ((4,), dist.constraints.positive)}),
    "harmonic-whitened-auto": (HarmonicFeatures(Negation(), Z_H), psg.SquaredExponential(1.0, 0.8), X_H, True,
                               "auto", {"f_v_loc": ((6,), dist.constraints.real),
                                        "f_v_scale_tril": ((2, 3, 3), dist.constraints.scaled_unit_lower_cholesky)}),
}


def dense_kl(mq, Sq, Sp):
    """KL(N(mq, Sq) ‖ N(0, Sp)) from dense matrices."""
    return 0.5 * (np.trace(np.linalg.solve(Sp, Sq)) + mq @ np.linalg.solve(Sp, mq) - len(mq)
                  + np.linalg.slogdet(Sp)[1] - np.linalg.slogdet(Sq)[1])


def random_params(shapes, rng):
    out = {}
    for name, (shape, _) in shapes.items():
        x = rng.normal(size=shape) * 0.5
        if name.endswith("_scale_tril"):  # lower triangular, positive diagonal
            x = np.tril(x)
            i = np.arange(shape[-1])
            x[..., i, i] = np.abs(x[..., i, i]) + 0.3
        elif name.endswith("_scale"):
            x = np.abs(x) + 0.3
        out[name] = x
    return out


@pytest.mark.parametrize("case", list(GUIDE_CASES))
def test_inducing_guide_kl_to_spectral_gp_prior_is_the_dense_kl(case):
    """A model holding only ``spectral_gp`` and a guide holding only ``inducing_guide``: the
    TraceMeanField_ELBO loss is the analytic KL(q ‖ p), here at the guide's initial params (q = p: KL 0;
    for the centred diagonal q, which starts at diag(Kuu), the dense KL of that) and at random params,
    against dense KLs (p = N(0, I) whitened, N(0, Kuu) centred; relative 1e-9)."""
    feature, kernel, X, whiten, q_cov, shapes = GUIDE_CASES[case]

    def model(X):
        psg.spectral_gp("f", feature, kernel, X, whiten=whiten)

    def guide(X):
        psg.inducing_guide("f", feature, kernel, whiten=whiten, q_cov=q_cov)

    constraint = {}

    @jax.jit
    def run(params):
        tr = handlers.trace(handlers.seed(guide, rng_seed=0)).get_trace(X)
        init = {n: s["value"] for n, s in tr.items() if s["type"] == "param"}
        constraint.update({n: s["kwargs"].get("constraint", dist.constraints.real) for n, s in tr.items()
                           if s["type"] == "param"})
        loss = TraceMeanField_ELBO().loss
        key = jax.random.PRNGKey(0)
        return (init, loss(key, init, model, guide, X), loss(key, params, model, guide, X),
                psg.Kuu(feature, kernel).to_dense())

    params = random_params(shapes, np.random.default_rng(8))
    init, kl_init, kl, Kuu = jax.tree.map(np.asarray, run(params))
    # the params the docstrings name, with their shapes and constraints
    assert {n: v.shape for n, v in init.items()} == {n: s for n, (s, _) in shapes.items()}
    assert constraint == {n: c for n, (_, c) in shapes.items()}
    prior = np.eye(len(init[f"{'f_v' if whiten else 'f_u'}_loc"])) if whiten else Kuu

    def cov(p):
        if q_cov == "diag":
            return np.diag(p["f_u_scale"] ** 2)
        L = p["f_v_scale_tril"]
        return block_diag(*[l @ l.T for l in L]) if L.ndim == 3 else L @ L.T

    loc = next(v for n, v in params.items() if n.endswith("_loc"))
    np.testing.assert_allclose(kl, dense_kl(loc, cov(params), prior), rtol=1e-9)
    if q_cov == "diag":  # started at the prior's variances
        np.testing.assert_allclose(init["f_u_scale"] ** 2, np.diag(Kuu), rtol=1e-12)
        np.testing.assert_allclose(kl_init, dense_kl(0 * loc, np.diag(np.diag(Kuu)), Kuu), rtol=1e-9)
    else:  # started at the prior
        np.testing.assert_allclose(kl_init, 0.0, atol=1e-12)


# --- people's own models: templates, vector inputs, several outputs over one basis, prediction --------
def _own_model(x, y=None, x_new=None, feature=None):
    k = psg.Matern32(variance=dist.LogNormal(0.0, 1.0), lengthscale=dist.LogNormal(-1.0, 0.5))
    out = psg.spectral_gp("f", feature, k, x, X_new=x_new, return_variance=True)
    (f, var), new = out if x_new is not None else (out, None)
    numpyro.sample("y", numpyro.distributions.Normal(f, 0.1), obs=y)
    return f, var, new


def test_own_model_template_vector_inputs_and_prediction_equal_the_dense_conditional():
    """A kernel template with priors is sampled as f_kernel_<field>; x of shape (N,) is one input
    dimension; with X_new the same inducing variables give f at X_new (site f_new), equal to the dense
    conditional K_*u K_uu⁻¹ u, with the residual k_** − Q_** — at the training X it is the fit's f."""
    feature = psg.FourierFeatures(-0.5, 1.5, 12)
    x, x_new = np.linspace(0.0, 1.0, 25), np.linspace(-0.2, 1.2, 9)
    tr = handlers.trace(handlers.seed(_own_model, 3)).get_trace(x, None, x_new, feature)
    assert {"f_kernel_variance", "f_kernel_lengthscale", "f_v", "f_new"} <= set(tr)
    k = psg.Matern32(tr["f_kernel_variance"]["value"], tr["f_kernel_lengthscale"]["value"])
    v = tr["f_v"]["value"]
    f, var, (f_new, var_new) = handlers.substitute(handlers.seed(_own_model, 0), {
        "f_kernel_variance": k.variance, "f_kernel_lengthscale": k.lengthscale, "f_v": v})(x, None, x_new, feature)
    Kuu = np.asarray(psg.Kuu(feature, k).to_dense())
    u = np.asarray(psg.Kuu(feature, k).sqrt_matmul(v))
    for X, fx, vx in ((x, f, var), (x_new, f_new, var_new)):
        Kuf = np.asarray(psg.Kuf(feature, k, X[:, None]))
        np.testing.assert_allclose(fx, Kuf.T @ np.linalg.solve(Kuu, u), rtol=1e-9, atol=1e-10)
        q = np.einsum("mn,mn->n", Kuf, np.linalg.solve(Kuu, Kuf))
        np.testing.assert_allclose(vx, np.maximum(np.asarray(k.diag(X[:, None])) - q, 0), atol=1e-9)
    np.testing.assert_allclose(tr["f_new"]["value"].shape, (9,))


def test_outputs_in_a_plate_share_one_basis_and_equal_single_output_gps():
    """Inside numpyro.plate("out", K) the inducing site has shape (K, M') and f (K, N); each row equals
    the single-output spectral_gp evaluated at that row's inducing values."""
    feature, k, x = psg.FourierFeatures(-0.5, 1.5, 10), psg.Matern52(1.3, 0.25), np.linspace(0, 1, 30)

    def multi():
        with numpyro.plate("out", 3):
            return psg.spectral_gp("f", feature, k, x)

    tr = handlers.trace(handlers.seed(multi, 0)).get_trace()
    V, F = tr["f_v"]["value"], handlers.seed(multi, 0)()
    assert V.shape == (3, psg.Kuu(feature, k).sqrt_cols) and F.shape == (3, 30)
    assert tr["f_v"]["fn"].log_prob(V).shape == (3,)
    for i in range(3):
        fi = handlers.substitute(handlers.seed(lambda: psg.spectral_gp("f", feature, k, x), 1), {"f_v": V[i]})()
        np.testing.assert_allclose(F[i], fi, rtol=1e-12, atol=1e-13)


def test_spectral_gp_refuses_inputs_outside_a_features_domain_and_a_bad_kernel():
    with pytest.raises(NotImplementedError, match="supported kernels"):
        handlers.seed(lambda: psg.spectral_gp("f", psg.FourierFeatures(0, 1, 5), psg.SquaredExponential(),
                                              np.zeros(3)), 0)()
    with pytest.raises(ValueError, match="X_new"):
        handlers.seed(lambda: psg.spectral_gp("f", psg.FourierFeatures(0, 1, 5), psg.Matern32(), np.zeros(3),
                                              X_new=np.zeros((3, 2))), 0)()


def test_prediction_outside_the_box_warns_naming_the_points_and_the_fix():
    """The documented choice for predictions where VFF resolves nothing: an OutsideDomainWarning (not a
    silent prior). It is warranted: 5ℓ beyond the box the projected mean is ~0 and the residual variance
    ~k(x, x) whatever u is, i.e. the prior. Inside the box nothing warns; Kronecker features name the
    dimension; SparseGP.predict warns too."""
    from ppl_sparsegp.features import OutsideDomainWarning
    feature, k = psg.FourierFeatures(0.0, 1.0, 12), psg.Matern32(1.0, 0.2)
    x, x_new = np.linspace(0.1, 0.9, 20), np.array([0.5, 1.0, 2.0])
    v = jax.random.normal(jax.random.PRNGKey(0), (psg.Kuu(feature, k).sqrt_cols,))
    run = handlers.substitute(handlers.seed(lambda xn: psg.spectral_gp("f", feature, k, x, X_new=xn,
                                                                        return_variance=True), 0), {"f_v": v})
    with pytest.warns(OutsideDomainWarning,
                      match=r"1 of 3 points outside the box \[lower, upper\] = \[0, 1\].*from_data"):
        _, (mean, var) = run(x_new)
    # the prior at x = 2: Kuf decays from the edge like the Matérn-3/2 kernel, (1 + √3·5) e^(−√3·5) ≈ 2e-3
    assert abs(mean[2]) < 1e-2 * np.abs(mean[:2]).max() and var[2] > 0.999 * k.variance
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(np.array([0.0, 0.3, 1.0]))  # the box edges are inside
    kron = psg.KroneckerFeatures([psg.FourierFeatures(0, 1, 4), psg.FourierFeatures(0, 2, 4)])
    with pytest.warns(OutsideDomainWarning, match=r"X_new\[:, 1\] has 1 of 2"):
        kron.warn_outside(np.array([[0.5, 0.5], [0.5, 2.5]]))
    gp = psg.SparseGP(feature, k, psg.Gaussian(0.1))
    with pytest.warns(OutsideDomainWarning, match="X_new has 1 of 3"):
        gp.predict(x_new[:, None], samples={"f_v": v[None], "likelihood_variance": jnp.full((1,), 0.1)})


def _heteroscedastic(x, y=None):
    """Two GPs over one VFF basis: the mean f and the log noise scale g (a user's own model)."""
    feature = psg.FourierFeatures(-0.6, 1.6, 10)
    f = psg.spectral_gp("f", feature, psg.Matern52(1.0, dist.LogNormal(np.log(0.3), 0.3)), x)
    g = psg.spectral_gp("g", feature, psg.Matern52(0.5, 0.5), x)
    c = numpyro.sample("c", dist.Normal(-1.5, 1.0))
    numpyro.sample("y", dist.Normal(f, jnp.exp(c + g)), obs=y)


@pytest.mark.slow
def test_inducing_guides_with_an_autoguide_fit_a_two_gp_model_like_nuts():
    """The documented SVI recipe for a user's model (module docstring of approximations.primitives):
    AutoNormal over the user's own sites (the inducing sites hidden) plus one inducing_guide per
    spectral_gp, under TraceMeanField_ELBO (analytic KL for the inducing sites). On a heteroscedastic
    two-GP model its posterior means at the data agree with NUTS's: f within 0.15 of NUTS's posterior sd
    at the median point and 0.4 at every point (measured 0.08, 0.23), the noise scale exp(c + g) within
    0.3 and 0.5 (measured 0.20, 0.32: q is mean-field between c and g); the lengthscale's mean too."""
    from numpyro.infer import MCMC, NUTS, SVI, Predictive
    from numpyro.infer.autoguide import AutoNormal

    rng = np.random.default_rng(3)
    x = np.sort(rng.uniform(0, 1, 120))
    y = np.sin(6 * x) + np.exp(-2.0 + 1.2 * x) * rng.normal(size=120)
    feature = psg.FourierFeatures(-0.6, 1.6, 10)
    auto = AutoNormal(handlers.block(_heteroscedastic, hide=["f_v", "g_v"]))

    def guide(x, y=None):
        auto(x, y)
        psg.inducing_guide("f", feature, psg.Matern52())  # whitened: q(v) = N(m, LLᵀ) over f_v
        psg.inducing_guide("g", feature, psg.Matern52())

    svi = SVI(_heteroscedastic, guide, numpyro.optim.Adam(0.005), TraceMeanField_ELBO())
    res = svi.run(jax.random.PRNGKey(0), 20_000, x, y, progress_bar=False)  # 3 000 steps: f off by 1.8 sd
    q = Predictive(guide, params=res.params, num_samples=1000)(jax.random.PRNGKey(1), x, y)
    mcmc = MCMC(NUTS(_heteroscedastic), num_warmup=400, num_samples=600, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(2), x, y)
    p = mcmc.get_samples()

    def f_and_scale(draws):
        def one(d):
            with handlers.seed(rng_seed=0), handlers.substitute(data=d):
                f = psg.spectral_gp("f", feature, psg.Matern52(1.0, d["f_kernel_lengthscale"]), x)
                g = psg.spectral_gp("g", feature, psg.Matern52(0.5, 0.5), x)
            return f, jnp.exp(d["c"] + g)
        return jax.vmap(one)({k: draws[k] for k in ("f_v", "g_v", "c", "f_kernel_lengthscale")})

    (fs, ss), (fn, sn) = f_and_scale(q), f_and_scale(p)
    for a, b, bound in ((fs, fn, (0.15, 0.4)), (ss, sn, (0.3, 0.5))):
        d = np.abs(np.asarray(a.mean(0) - b.mean(0))) / np.asarray(b.std(0))
        assert np.median(d) < bound[0] and d.max() < bound[1], (np.median(d), d.max())
    ell_q, ell_p = np.asarray(q["f_kernel_lengthscale"]), np.asarray(p["f_kernel_lengthscale"])
    assert abs(ell_q.mean() - ell_p.mean()) < 0.5 * ell_p.std()


def test_outputs_in_a_plate_with_their_own_hyperparameters_equal_single_output_gps():
    """batched_kernel=True: lengthscales sampled inside the plate (a template's prior) give one kernel per
    output; each row of f and of the residual variance equals the single-output spectral_gp with that
    output's lengthscale and inducing values (shared variance), at X and at X_new."""
    feature, x, x_new = psg.FourierFeatures(-0.5, 1.5, 10), np.linspace(0, 1, 30), np.array([0.25, 0.8])
    template = psg.Matern52(1.3, dist.LogNormal(np.log(0.3), 0.5))

    def multi():
        with numpyro.plate("out", 3):
            return psg.spectral_gp("f", feature, template, x, X_new=x_new, return_variance=True,
                                   batched_kernel=True)

    tr = handlers.trace(handlers.seed(multi, 0)).get_trace()
    ells, V = tr["f_kernel_lengthscale"]["value"], tr["f_v"]["value"]
    assert ells.shape == (3,) and len(np.unique(np.asarray(ells))) == 3
    (F, var), (F_new, var_new) = handlers.seed(multi, 0)()
    for i in range(3):
        k = psg.Matern52(1.3, ells[i])
        (fi, vi), (fn, vn) = handlers.substitute(handlers.seed(lambda: psg.spectral_gp(
            "f", feature, k, x, X_new=x_new, return_variance=True), 1), {"f_v": V[i]})()
        for a, b in ((F[i], fi), (var[i], vi), (F_new[i], fn), (var_new[i], vn)):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="inside a numpyro.plate"):
        handlers.seed(lambda: psg.spectral_gp("f", feature, psg.Matern52(1.0, jnp.array([0.2, 0.3])), x,
                                              batched_kernel=True), 0)()
    with pytest.raises(ValueError, match="whiten=True"):
        handlers.seed(lambda: psg.spectral_gp("f", feature, template, x, whiten=False, batched_kernel=True), 0)()


def test_concrete_per_output_per_dimension_kernels_by_stacking_equal_the_dense_conditional():
    """``stack_modules`` of K concrete ARD kernels (variance (K,), lengthscale (K, D)) in a plate with
    batched_kernel=True: each row of f equals the dense K_xz K_zz⁻¹ u_k with that output's kernel and
    u_k = L_k v_k, and each residual variance k_xx − Q_xx; mixed types or shapes are refused."""
    rng = np.random.default_rng(0)
    X, Z = rng.uniform(0, 1, (25, 2)), rng.uniform(0, 1, (8, 2))
    kernels = [psg.Matern32(1.0, [0.2, 0.5]), psg.Matern32(2.0, [0.4, 0.3]), psg.Matern32(0.5, [0.3, 0.3])]
    stacked = psg.stack_modules(kernels)
    assert stacked.variance.shape == (3,) and stacked.lengthscale.shape == (3, 2)
    feature = psg.InducingPoints(Z)

    def multi():
        with numpyro.plate("out", 3):
            return psg.spectral_gp("f", feature, stacked, X, return_variance=True, batched_kernel=True)

    V = handlers.trace(handlers.seed(multi, 0)).get_trace()["f_v"]["value"]
    F, var = handlers.seed(multi, 0)()
    for k, v, f, r in zip(kernels, V, F, var):
        Kzz = np.asarray(psg.Kuu(feature, k).to_dense())
        Kxz = np.asarray(k(X, Z))
        np.testing.assert_allclose(f, Kxz @ np.linalg.solve(Kzz, np.linalg.cholesky(Kzz) @ np.asarray(v)),
                                   rtol=1e-7, atol=1e-9)
        q = np.einsum("nm,nm->n", Kxz, np.linalg.solve(Kzz, Kxz.T).T)
        np.testing.assert_allclose(r, np.maximum(np.asarray(k.diag(X)) - q, 0.0), atol=1e-8)
    with pytest.raises(ValueError, match="one type and structure"):
        psg.stack_modules([psg.Matern32(1.0, 0.2), psg.Matern52(1.0, 0.2)])
    with pytest.raises(ValueError, match="same shapes"):
        psg.stack_modules([psg.Matern32(1.0, 0.2), psg.Matern32(1.0, [0.2, 0.3])])


@pytest.mark.parametrize("X", [np.zeros(0), np.zeros((0, 1))], ids=["vector", "matrix"])
def test_spectral_gp_refuses_inputs_without_rows(X):
    """spectral_gp with an X of zero rows raises (it used to be accepted and return an empty f): the
    check lives in kernels.check_inputs, which every feature, kernel and approximation calls."""
    def model(X):
        return psg.spectral_gp("f", FourierFeatures(0.0, 1.0, 5), psg.Matern32(1.0, 0.3), X)

    with pytest.raises(ValueError, match=r"X has no rows \(shape \(0, 1\)\): give at least one input"):
        handlers.seed(model, 0)(X)
    with pytest.raises(ValueError, match="X_new has no rows"):
        psg.kernels.check_inputs(np.zeros((0, 2)), "X_new")
