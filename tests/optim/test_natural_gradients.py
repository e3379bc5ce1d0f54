"""Natural-gradient steps for q(u) (ppl_sparsegp.optim) against independent computations: one step with
γ = 1 on a Gaussian likelihood lands on the optimal q (dense formula and ``optimal_q``) with the ELBO
equal to the collapsed bound; the step equals F⁻¹∇ with the Fisher matrix of the Gaussian family formed
densely by autodiff of its log-partition; for Bernoulli and Poisson the fixed point equals the optimum
found by Newton's method on a dense ELBO written here (Gauss–Hermite / closed-form expectations);
mean-field steps reach the mean-field optimum; a step whose precision is not positive definite is
rejected. float64 throughout (conftest)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import SVI
from numpyro.optim import Adam

import ppl_sparsegp as psg
from ppl_sparsegp import CollapsedGP, SparseGP
from ppl_sparsegp.approximations.collapsed import collapsed_elbo
from ppl_sparsegp.features import InducingPoints, RandomFourierFeatures
from ppl_sparsegp.kernels import SquaredExponential
from ppl_sparsegp.likelihoods import Bernoulli, Gaussian, Poisson
from ppl_sparsegp.optim import AnalyticELBO, NaturalGradient, gamma_ramp, gamma_schedule

KERNEL = SquaredExponential(variance=1.3, lengthscale=0.8)
NOISE = 0.05


def _data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 1))
    return X, np.sin(2 * X[:, 0]) + np.sqrt(NOISE) * rng.standard_normal(n)


def _features():
    rff = RandomFourierFeatures(np.random.default_rng(1).standard_normal((4, 1)))  # diagonal Kuu
    return {"inducing": InducingPoints(np.linspace(-3, 3, 5)[:, None]), "rff": rff}


def _random_start(gp, X, y, seed=3):
    """Guide params at a random q (any start must do)."""
    site = gp.site
    M = gp._dim(psg.Kuu(gp.feature, KERNEL))
    rng = np.random.default_rng(seed)
    L = np.tril(0.3 * rng.standard_normal((M, M))) + np.diag(rng.uniform(0.5, 1.5, M))
    return {f"{site}_loc": rng.standard_normal(M), f"{site}_scale_tril": L}


def _dense(feature, X):
    Kmm = psg.Kuu(feature, KERNEL).to_dense()
    return np.asarray(Kmm), np.asarray(psg.Kuf(feature, KERNEL, X))


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("name", ["inducing", "rff"])
def test_gaussian_one_step_gamma_one_is_optimal(name, whiten):
    """From a random start, one step with γ = 1 gives the optimal q (whitened: ``optimal_q``; both: the
    dense formula S* = Kuu(Kuu + KufKfu/σ²)⁻¹Kuu, m* = S*Kuu⁻¹Kuf y/σ²) and the ELBO there equals the
    collapsed bound to 1e-8 relative (round-off of M = 5 systems in float64 is ~1e-13)."""
    X, y = _data()
    feature = _features()[name]
    gp = SparseGP(feature, KERNEL, Gaussian(variance=NOISE), whiten=whiten)
    svi = SVI(gp.model, gp.guide, NaturalGradient(gp, gamma=1.0), AnalyticELBO(gp))
    state = svi.init(jax.random.PRNGKey(0), X, y, init_params=_random_start(gp, X, y))
    state, _ = svi.update(state, X, y)
    params = svi.get_params(state)
    m, L = params[f"{gp.site}_loc"], params[f"{gp.site}_scale_tril"]
    S = L @ L.T
    Kmm, Kuf = _dense(feature, X)
    if whiten:
        R = np.linalg.cholesky(Kmm)
        A = np.linalg.solve(R, Kuf)
        S_star = np.linalg.inv(np.eye(len(Kmm)) + A @ A.T / NOISE)
        m_star = S_star @ A @ y / NOISE
        m_c, S_c = CollapsedGP(feature, KERNEL, Gaussian(variance=NOISE)).optimal_q({}, X, y)
        np.testing.assert_allclose(m, m_c, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(S, S_c.to_dense(), rtol=1e-8, atol=1e-10)
    else:
        B = Kmm + Kuf @ Kuf.T / NOISE
        S_star = Kmm @ np.linalg.solve(B, Kmm)
        m_star = Kmm @ np.linalg.solve(B, Kuf @ y) / NOISE
    np.testing.assert_allclose(m, m_star, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(S, S_star, rtol=1e-8, atol=1e-10)
    bound = collapsed_elbo(feature, KERNEL, X, y, NOISE)
    assert abs(float(gp.elbo(params, X, y)) / float(bound) - 1) < 1e-8


def _log_partition(w, M):
    """A(θ) of N(m, S) in natural coordinates w = (θ₁, lower triangle of θ₂): −¼θ₁ᵀθ₂⁻¹θ₁ − ½log|−2θ₂|."""
    theta1, theta2 = w[:M], _sym(w[M:], M)
    return -0.25 * theta1 @ jnp.linalg.solve(theta2, theta1) - 0.5 * jnp.linalg.slogdet(-2 * theta2)[1]


def _sym(v, M):
    T = jnp.zeros((M, M)).at[jnp.tril_indices(M)].set(v)
    return T + T.T - jnp.diag(jnp.diag(T))


def test_step_is_inverse_fisher_times_gradient():
    """θ_new = θ + γ F⁻¹∇_θ ELBO with F = ∇²A(θ) (the Fisher matrix of the Gaussian family in its natural
    coordinates, formed densely by autodiff): Bernoulli, whitened, M = 3."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (15, 1))
    y = (rng.uniform(size=15) < 0.5).astype(float)
    feature = InducingPoints(np.linspace(-2, 2, 3)[:, None])
    gp = SparseGP(feature, KERNEL, Bernoulli())
    M, gamma = 3, 0.3
    start = {"f_v_loc": np.array([0.3, -0.5, 0.2]),
             "f_v_scale_tril": np.array([[0.9, 0, 0], [0.2, 0.7, 0], [-0.1, 0.3, 1.1]])}
    svi = SVI(gp.model, gp.guide, NaturalGradient(gp, gamma=gamma), AnalyticELBO(gp))
    state = svi.init(jax.random.PRNGKey(0), X, y, init_params=start)
    state, _ = jax.jit(svi.update)(state, X, y)  # compiled as one program (op by op: most of the test's time)
    new = svi.get_params(state)

    def elbo_w(w):
        P = -2 * _sym(w[M:], M)
        S = jnp.linalg.inv(P)
        return gp.elbo({"f_v_loc": S @ w[:M], "f_v_scale_tril": jnp.linalg.cholesky(S)}, X, y)

    def natural(m, L):
        P = np.linalg.inv(L @ L.T)
        return np.concatenate([P @ m, (-0.5 * P)[np.tril_indices(M)]])

    w = jnp.asarray(natural(start["f_v_loc"], start["f_v_scale_tril"]))
    F = jax.jit(jax.hessian(_log_partition), static_argnums=1)(w, M)
    w_new = w + gamma * jnp.linalg.solve(F, jax.jit(jax.grad(elbo_w))(w))
    np.testing.assert_allclose(natural(new["f_v_loc"], new["f_v_scale_tril"]), w_new, rtol=1e-8, atol=1e-10)


def _dense_elbo(lik, feature, X, y):
    """ELBO(m, L) of whitened q = N(m, LLᵀ), written densely: Gauss–Hermite (60 points) for Bernoulli,
    closed form for Poisson; KL to N(0, I)."""
    Kmm, Kuf = _dense(feature, X)
    A = jnp.asarray(np.linalg.solve(np.linalg.cholesky(Kmm), Kuf))
    kff = jnp.asarray(np.asarray(KERNEL.diag(X)))
    t, w = np.polynomial.hermite.hermgauss(60)
    M = A.shape[0]

    def elbo(m, L):
        S = L @ L.T
        mu = A.T @ m
        var = kff - jnp.sum(A * A, 0) + jnp.sum(A * (S @ A), 0)
        if lik == "poisson":
            ve = y * mu - jnp.exp(mu + var / 2) - jax.scipy.special.gammaln(y + 1)
        else:
            f = mu[:, None] + jnp.sqrt(2 * var)[:, None] * t
            ve = jnp.sum(w * jax.nn.log_sigmoid((2 * y[:, None] - 1) * f), 1) / np.sqrt(np.pi)
        kl = 0.5 * (jnp.trace(S) + m @ m - M - 2 * jnp.sum(jnp.log(jnp.abs(jnp.diag(L)))))
        return jnp.sum(ve) - kl

    return elbo, M


def _newton(elbo, M, iters=40):
    """Maximise ELBO(m, L) by Newton's method in (m, lower triangle of L) (concave there for log-concave
    likelihoods: Challis & Barber 2013), with step halving. The objective, its gradient and Hessian are each
    compiled once (run op by op, the 40 iterations took 12 of the test's 17 CPU-s)."""
    idx = jnp.tril_indices(M)

    @jax.jit
    def f(x):
        return -elbo(x[:M], jnp.zeros((M, M)).at[idx].set(x[M:]))

    hessian, grad = jax.jit(jax.hessian(f)), jax.jit(jax.grad(f))
    x = jnp.concatenate([jnp.zeros(M), jnp.eye(M)[idx]])
    for _ in range(iters):
        step = jnp.linalg.solve(hessian(x), grad(x))
        t = 1.0
        while not f(x - t * step) <= f(x) + 1e-12 and t > 1e-6:
            t /= 2
        x = x - t * step
    return x[:M], jnp.zeros((M, M)).at[idx].set(x[M:])


@pytest.mark.parametrize("lik", ["bernoulli", "poisson"])
def test_fixed_point_is_dense_optimum(lik):
    """Natural-gradient steps (γ ramped to 1) reach the optimum that Newton's method finds on the dense
    ELBO; GH(20) of the library against GH(60) here: differences ~1e-9, so 1e-6 on m and S."""
    rng = np.random.default_rng(2)
    X = rng.uniform(-3, 3, (30, 1))
    f = np.sin(2 * X[:, 0])
    y = (rng.uniform(size=30) < 1 / (1 + np.exp(-2 * f))).astype(float) if lik == "bernoulli" \
        else rng.poisson(np.exp(f + 0.5)).astype(float)
    feature = InducingPoints(np.linspace(-3, 3, 4)[:, None])
    gp = SparseGP(feature, KERNEL, Bernoulli() if lik == "bernoulli" else Poisson())
    svi = SVI(gp.model, gp.guide, NaturalGradient(gp, gamma=gamma_ramp(1e-2, 1.0, 5)), AnalyticELBO(gp))
    result = svi.run(jax.random.PRNGKey(0), 60, X, y, progress_bar=False)
    m, L = result.params["f_v_loc"], result.params["f_v_scale_tril"]
    m_ref, L_ref = _newton(*_dense_elbo(lik, feature, X, y))
    np.testing.assert_allclose(m, m_ref, atol=1e-6)
    np.testing.assert_allclose(L @ L.T, L_ref @ L_ref.T, atol=1e-6)
    assert NaturalGradient.rejected_steps(result.state.optim_state) == 0


def test_mean_field_reaches_mean_field_optimum():
    """Diagonal q, Gaussian likelihood: the mean-field optimum is m = Λ⁻¹b, s² = 1/diag(Λ) with
    Λ = I + AAᵀ/σ², b = Ay/σ² (whitened). The mean's step is damped Jacobi (it converges for γ < 2/M:
    γ = 0.3, M = 5); the variances are exact after one step."""
    X, y = _data()
    feature = _features()["inducing"]
    noise = 0.5
    gp = SparseGP(feature, KERNEL, Gaussian(variance=noise), q_cov="diag")
    svi = SVI(gp.model, gp.guide, NaturalGradient(gp, gamma=0.3), AnalyticELBO(gp))
    result = svi.run(jax.random.PRNGKey(0), 300, X, y, progress_bar=False)
    Kmm, Kuf = _dense(feature, X)
    A = np.linalg.solve(np.linalg.cholesky(Kmm), Kuf)
    Lam = np.eye(5) + A @ A.T / noise
    np.testing.assert_allclose(result.params["f_v_loc"], np.linalg.solve(Lam, A @ y / noise), atol=1e-8)
    np.testing.assert_allclose(result.params["f_v_scale"] ** 2, 1 / np.diag(Lam), rtol=1e-8)


def test_non_positive_definite_step_is_rejected():
    """A loss whose gradient in η₂ is +10·I makes S⁻¹ − 2γ·10·I indefinite for γ = 1: the step is
    rejected (q unchanged), γ's factor halves and the state counts the rejection."""
    from numpyro.distributions import constraints
    from numpyro.distributions.transforms import biject_to

    opt = NaturalGradient("f_v", Adam(0.1), gamma=1.0)
    L = np.eye(3)
    params = {"f_v_loc": jnp.ones(3), "f_v_scale_tril": biject_to(constraints.scaled_unit_lower_cholesky).inv(L),
              "other": jnp.array(1.0)}

    def fn(p):
        S = biject_to(constraints.scaled_unit_lower_cholesky)(p["f_v_scale_tril"])
        eta2 = S @ S.T + jnp.outer(p["f_v_loc"], p["f_v_loc"])
        return -10.0 * jnp.trace(eta2) + p["other"] ** 2, None

    state = opt.init(params)
    _, state = opt.eval_and_update(fn, state)
    new = opt.get_params(state)
    np.testing.assert_array_equal(new["f_v_scale_tril"], params["f_v_scale_tril"])
    np.testing.assert_array_equal(new["f_v_loc"], params["f_v_loc"])
    assert NaturalGradient.rejected_steps(state) == 1 and float(state[1][2]["scale"]) == 0.5
    assert float(new["other"]) < 1.0  # Adam still stepped the rest


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="gamma"):
        NaturalGradient("f_v", gamma=1.5)
    with pytest.raises(ValueError, match="num_steps"):
        gamma_ramp(1e-4, 0.1, 0)
    gp = SparseGP(_features()["inducing"], KERNEL, Gaussian(variance=NOISE))
    with pytest.raises(ValueError, match="no param g_v_loc"):
        NaturalGradient("g_v").init({"f_v_loc": jnp.zeros(5)})
    X, y = _data()
    svi = SVI(gp.model, gp.guide, NaturalGradient(gp), AnalyticELBO(gp))
    state = svi.init(jax.random.PRNGKey(0), X, y)  # Gaussian: γ = 1 by default
    assert float(svi.optim.gamma(0)) == 1.0 and state is not None


def test_several_latent_gps_step_is_inverse_fisher_times_gradient():
    """Three latent GPs (RobustMax, 3 classes, one q per class): the joint step equals θ + γF⁻¹∇θ with F
    the dense Hessian of the sum of the three log-partitions (the family is the product of the three)."""
    rng = np.random.default_rng(4)
    X = rng.uniform(-3, 3, (20, 1))
    y = np.digitize(X[:, 0], [-1.0, 1.0]).astype(float)
    gp = SparseGP(InducingPoints(np.linspace(-3, 3, 3)[:, None]), KERNEL, psg.RobustMax(3, epsilon=1e-2))
    M, C, gamma = 3, 3, 0.05  # RobustMax is not log-concave: γ = 0.4 makes this start's precision indefinite
    start = {}
    for c in range(C):
        start[f"f_v_{c}_loc"] = rng.standard_normal(M)
        start[f"f_v_{c}_scale_tril"] = np.tril(0.2 * rng.standard_normal((M, M))) + np.diag(rng.uniform(0.6, 1.2, M))
    svi = SVI(gp.model, gp.guide, NaturalGradient(gp, gamma=gamma), AnalyticELBO(gp))
    state = svi.init(jax.random.PRNGKey(0), X, y, init_params=start)
    state, _ = svi.update(state, X, y)
    new = svi.get_params(state)
    K = M + M * (M + 1) // 2

    def elbo_w(w):
        params = {}
        for c in range(C):
            wc = w[c * K:(c + 1) * K]
            S = jnp.linalg.inv(-2 * _sym(wc[M:], M))
            params.update({f"f_v_{c}_loc": S @ wc[:M], f"f_v_{c}_scale_tril": jnp.linalg.cholesky(S)})
        return gp.elbo(params, X, y)

    def natural(p):
        out = []
        for c in range(C):
            L = p[f"f_v_{c}_scale_tril"]
            P = np.linalg.inv(L @ L.T)
            out.append(np.concatenate([P @ p[f"f_v_{c}_loc"], (-0.5 * P)[np.tril_indices(M)]]))
        return np.concatenate(out)

    w = jnp.asarray(natural(start))
    F = jax.hessian(lambda w: sum(_log_partition(w[c * K:(c + 1) * K], M) for c in range(C)))(w)
    w_new = w + gamma * jnp.linalg.solve(F, jax.grad(elbo_w)(w))
    assert NaturalGradient.rejected_steps(state.optim_state) == 0
    np.testing.assert_allclose(natural(new), w_new, rtol=1e-8, atol=1e-10)


def test_minibatch_loss_is_unbiased():
    """AnalyticELBO with batch_size = N/4: the mean over 400 keys equals the full-batch loss within 4
    standard errors (the N/B scaling), and batch_size = N gives the full loss exactly."""
    X, y = _data()
    gp = SparseGP(_features()["inducing"], KERNEL, Gaussian(variance=NOISE))
    loss = AnalyticELBO(gp)
    params = _random_start(gp, X, y)
    full = loss.loss(jax.random.PRNGKey(0), params, gp.model, gp.guide, X, y)
    same = loss.loss(jax.random.PRNGKey(1), params, gp.model, gp.guide, X, y, batch_size=40)
    np.testing.assert_allclose(same, full, rtol=1e-12)
    keys = jax.random.split(jax.random.PRNGKey(2), 400)
    draws = jax.vmap(lambda k: loss.loss(k, params, gp.model, gp.guide, X, y, batch_size=10))(keys)
    assert abs(float(draws.mean() - full)) < 4 * float(draws.std()) / 20


def test_given_minibatches_of_one_permutation_average_to_the_full_loss():
    """AnalyticELBO with ``num_data=N`` on rows the caller drew: over the four disjoint blocks of one
    permutation the losses average to the full-batch loss (the data term scaled by N/B sums back; the KL
    and the log prior are the same in every block), to round-off; batch_size with num_data is refused."""
    X, y = _data()
    gp = SparseGP(_features()["inducing"], KERNEL, Gaussian(variance=NOISE))
    loss = AnalyticELBO(gp)
    params = _random_start(gp, X, y)
    full = loss.loss(jax.random.PRNGKey(0), params, gp.model, gp.guide, X, y)
    perm = np.random.default_rng(3).permutation(len(y)).reshape(4, -1)
    blocks = [loss.loss(jax.random.PRNGKey(0), params, gp.model, gp.guide, X[i], y[i], num_data=len(y))
              for i in perm]
    np.testing.assert_allclose(np.mean(blocks), full, rtol=1e-12)
    assert np.ptp(blocks) > 1e-6 * abs(float(full))  # the blocks differ: the average is not trivial
    with pytest.raises(ValueError, match="batch_size.*num_data"):
        loss.loss(jax.random.PRNGKey(0), params, gp.model, gp.guide, X, y, batch_size=10, num_data=len(y))


def test_block_diagonal_q_one_step_on_a_quadratic_objective():
    """Equal-block q (params ``<site>_scale_tril`` of shape (T, m, m), HVGP's family): on the Gaussian
    objective Σ_t [b_tᵀm_t − ½m_tᵀΛ_t m_t − ½tr(Λ_tS_t) + ½log|S_t|] one step with γ = 1 lands on
    m_t = Λ_t⁻¹b_t, S_t = Λ_t⁻¹ (computed densely per block)."""
    from numpyro.distributions import constraints
    from numpyro.distributions.transforms import biject_to

    tril = biject_to(constraints.scaled_unit_lower_cholesky)
    rng = np.random.default_rng(5)
    T, m = 3, 4
    R = rng.standard_normal((T, m, m))
    Lam = np.eye(m) + np.einsum("tij,tkj->tik", R, R)
    b = rng.standard_normal((T, m))

    def fn(p):
        mu = p["f_v_loc"].reshape(T, m)
        L = tril(p["f_v_scale_tril"])
        S = L @ jnp.swapaxes(L, -1, -2)
        val = (jnp.sum(b * mu) - 0.5 * jnp.einsum("ti,tij,tj->", mu, Lam, mu)
               - 0.5 * jnp.einsum("tij,tji->", Lam, S) + jnp.sum(jnp.log(jnp.diagonal(L, axis1=-2, axis2=-1))))
        return -val, None

    opt = NaturalGradient("f_v", gamma=1.0)
    L0 = np.tril(0.3 * rng.standard_normal((T, m, m))) + 1.5 * np.eye(m)
    state = opt.init({"f_v_loc": jnp.asarray(rng.standard_normal(T * m)), "f_v_scale_tril": tril.inv(L0)})
    _, state = opt.eval_and_update(fn, state)
    new = opt.get_params(state)
    L = tril(new["f_v_scale_tril"])
    np.testing.assert_allclose(new["f_v_loc"].reshape(T, m), np.linalg.solve(Lam, b[..., None])[..., 0], rtol=1e-9)
    np.testing.assert_allclose(L @ np.swapaxes(L, -1, -2), np.linalg.inv(Lam), rtol=1e-9, atol=1e-12)


def test_gamma_schedule_values():
    """The ramp (log-linear from γ₀ to γ_max over T steps), then γ_max (1 + (t − T)/τ)^(−κ), against
    the formula evaluated here; the default τ = 1/γ_max, κ = 1 is the running mean's 1/(t − T + 1/γ_max)."""
    t = np.arange(0, 40)
    g = np.asarray(jax.vmap(gamma_schedule(1e-3, 0.4, 6, tau=3.0, kappa=0.7))(t))
    ref = np.where(t <= 6, 1e-3 * (0.4 / 1e-3) ** (np.minimum(t, 6) / 6),
                   0.4 * (1 + np.maximum(t - 6, 0) / 3.0) ** -0.7)
    np.testing.assert_allclose(g, ref, rtol=1e-12)  # the step index in float64 (x64): γ to round-off
    g = np.asarray(jax.vmap(gamma_schedule(1e-4, 0.5, 5))(t))
    np.testing.assert_allclose(g[5:], 1 / (t[5:] - 5 + 2.0), rtol=1e-6)
    # no ramp, γ_max = 1: the running mean 1/(t + 1) from the first step (float64 under x64: exact to
    # round-off, which one pass of minibatches needs to land on the optimum); a floor holds it at 0.05
    g = np.asarray(jax.vmap(gamma_schedule(peak=1.0, ramp_steps=0))(t))
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, 1 / (t + 1.0), rtol=1e-15)
    g = np.asarray(jax.vmap(gamma_schedule(1e-3, 0.4, 6, floor=0.1))(t))
    np.testing.assert_allclose(g, np.where(t <= 6, 1e-3 * (0.4 / 1e-3) ** (np.minimum(t, 6) / 6),
                                           np.maximum(1 / (t - 6 + 2.5), 0.1)), rtol=1e-12)
    for bad, match in [({"kappa": 0.5}, "kappa"), ({"tau": 0.0}, "tau"), ({"peak": 1.5}, "peak"),
                       ({"ramp_steps": -1}, "ramp_steps"), ({"ramp_steps": 2.5}, "ramp_steps"),
                       ({"floor": 0.6}, "floor"), ({"floor": -0.1}, "floor")]:
        with pytest.raises(ValueError, match=match):
            gamma_schedule(**bad)


def test_minibatch_decaying_gamma_reaches_full_batch_optimum():
    """Bernoulli, N = 40, minibatches of 10, 2 000 steps: with ``gamma_schedule`` (ramp to 0.5, then
    1/t) the iterate reaches the full-batch optimum (Newton on the dense ELBO, as above) to 0.05 in m and
    0.01 in S (measured over keys 0-2: ≤ 0.016 and ≤ 0.0034); a constant γ = 0.1 after the same ramp keeps
    the minibatch noise in q (0.27-0.35 in m over the same keys) and fails the same tolerance."""
    rng = np.random.default_rng(2)
    X = rng.uniform(-3, 3, (40, 1))
    y = (rng.uniform(size=40) < 1 / (1 + np.exp(-2 * np.sin(2 * X[:, 0])))).astype(float)
    feature = InducingPoints(np.linspace(-3, 3, 4)[:, None])
    gp = SparseGP(feature, KERNEL, Bernoulli())
    m_ref, L_ref = _newton(*_dense_elbo("bernoulli", feature, X, y))
    errors = {}
    for name, gamma in [("decay", gamma_schedule(1e-2, 0.5, 5)), ("constant", gamma_ramp(1e-2, 0.1, 5))]:
        svi = SVI(gp.model, gp.guide, NaturalGradient(gp, gamma=gamma), AnalyticELBO(gp))
        r = svi.run(jax.random.PRNGKey(0), 2000, X, y, batch_size=10, progress_bar=False)
        m, L = r.params["f_v_loc"], r.params["f_v_scale_tril"]
        errors[name] = (np.max(np.abs(m - m_ref)), np.max(np.abs(L @ L.T - L_ref @ L_ref.T)))
        assert NaturalGradient.rejected_steps(r.state.optim_state) == 0
    assert errors["decay"][0] < 0.05 and errors["decay"][1] < 0.01, errors
    assert errors["constant"][0] > 0.05, errors  # the tolerance a constant γ does not meet


def _coupled(family):
    """A strongly coupled posterior (inputs correlated across the inducing variables, small noise) for q
    family ``family``; returns (gp, X, y, Λ, b, block size): whitened, the ELBO is quadratic in q with
    precision Λ = I + AAᵀ/σ² and linear term b = Ay/σ² (A = R⁻¹Kuf, R = chol Kuu)."""
    from ppl_sparsegp.groups import Rotation

    rng = np.random.default_rng(7)
    noise = 0.3 if family == "block-diag" else 1e-2  # λ_max(D⁻¹Λ) ≈ 2.9 and 2.8, condition of Λ ~150 for both
    if family == "block-diag":  # harmonic features: a block-diagonal Kuu (T = 3 blocks of 3), blocks coupled by Kuf
        X = rng.uniform(0.3, 1, (40, 2))  # off-centre: the rotation's harmonics are far from orthogonal here
        feature, size = psg.HarmonicFeatures(Rotation(4), rng.uniform(0.3, 1, (3, 2))), 3
        kernel = SquaredExponential(variance=1.0, lengthscale=0.7)
    else:
        X = rng.uniform(-1, 1, (40, 1))
        feature, size = InducingPoints(np.linspace(-1, 1, 6)[:, None]), 1
        kernel = SquaredExponential(variance=1.0, lengthscale=0.5)
    y = np.sin(3 * X[:, 0]) + np.sqrt(noise) * rng.standard_normal(len(X))
    gp = SparseGP(feature, kernel, Gaussian(variance=noise), q_cov=family)
    Kmm = np.asarray(psg.Kuu(feature, kernel).to_dense())
    A = np.linalg.solve(np.linalg.cholesky(Kmm), np.asarray(psg.Kuf(feature, kernel, X)))
    return gp, X, y, np.eye(len(Kmm)) + A @ A.T / noise, A @ y / noise, size


@pytest.mark.parametrize("family", ["full", "diag", "block-diag"])
def test_default_step_never_raises_the_loss_and_reaches_the_optimum(family):
    """The default step (γ₀ = 1 with the backtracking acceptance) on a strongly coupled posterior, every q
    family with natural parameters: the loss never rises (beyond round-off) and q reaches the family's
    optimum, computed densely here: full q: m = Λ⁻¹b, S = Λ⁻¹ (in one step); mean-field / block q: the
    fixed point m = Λ⁻¹b (the mean is exact for a Gaussian target), S = the inverse of Λ's diagonal
    blocks. The posterior is coupled enough that the factorised families' γ = 1 (a Jacobi iteration,
    λ_max(D⁻¹Λ) > 2) diverges: checked. Two-Kronecker q has no natural parameters: refused (below)."""
    gp, X, y, Lam, b, size = _coupled(family)
    M = len(b)
    blocks = [slice(i, i + size) for i in range(0, M, size)]
    D = np.zeros_like(Lam)
    for s in blocks:
        D[s, s] = Lam[s, s]
    svi = SVI(gp.model, gp.guide, NaturalGradient(gp), AnalyticELBO(gp))
    steps = 2 if family == "full" else 1500
    result = svi.run(jax.random.PRNGKey(0), steps, X, y, progress_bar=False)
    losses = np.asarray(result.losses)
    assert np.max(np.diff(losses)) <= 1e-10 * np.max(np.abs(losses)), np.max(np.diff(losses))
    assert NaturalGradient.rejected_steps(result.state.optim_state) == 0
    p = result.params
    np.testing.assert_allclose(p["f_v_loc"], np.linalg.solve(Lam, b), atol=1e-7)
    if family == "full":
        L = p["f_v_scale_tril"]
        np.testing.assert_allclose(L @ L.T, np.linalg.inv(Lam), rtol=1e-8, atol=1e-12)
        assert NaturalGradient.halvings(result.state.optim_state) == 0  # γ = 1 kept: the exact step
        return
    if family == "diag":
        S = np.diag(p["f_v_scale"] ** 2)
    else:
        L = p["f_v_scale_tril"]
        S = np.zeros_like(Lam)
        for t, s in enumerate(blocks):
            S[s, s] = L[t] @ L[t].T
    np.testing.assert_allclose(S, np.linalg.inv(D), rtol=1e-8, atol=1e-12)
    assert np.max(np.linalg.eigvals(np.linalg.solve(D, Lam)).real) > 2  # γ = 1 overshoots here
    plain = SVI(gp.model, gp.guide, NaturalGradient(gp, gamma=1.0), AnalyticELBO(gp))
    diverged = np.asarray(plain.run(jax.random.PRNGKey(0), 30, X, y, progress_bar=False).losses)
    assert diverged[-1] > 1e3 * abs(losses[0])  # the step the default replaced


def test_line_search_arguments_and_two_kronecker_are_refused():
    with pytest.raises(ValueError, match="line_search"):
        NaturalGradient("f_v", line_search="yes")
    with pytest.raises(ValueError, match="max_halvings"):
        NaturalGradient("f_v", max_halvings=0)
    assert NaturalGradient("f_v").line_search and not NaturalGradient("f_v", gamma=0.5).line_search
    assert NaturalGradient("f_v", gamma=0.5, line_search=True).line_search
    # a two-Kronecker q's params (approximations.variational.two_kronecker_covariance): no natural step
    two_kron = {"f_v_loc": jnp.zeros(4), "f_v_L0": jnp.eye(2), "f_v_J0": jnp.eye(2), "f_v_L1": jnp.eye(2),
                "f_v_J1": jnp.eye(2)}
    with pytest.raises(ValueError, match="two-Kronecker q .* no natural-parameter step"):
        NaturalGradient("f_v").init(two_kron)
