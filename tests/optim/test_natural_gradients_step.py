"""The natural-gradient step's algebra and its compiled form (ppl_sparsegp.optim.natural_gradients and
natural_gradients_algebra) against independent computations: the step equals the update of the natural
parameters θ ← θ − γ ∂ℓ/∂η (ℓ the loss, η = (m, S + mmᵀ)) computed with dense NumPy inverses and the
loss written in (m, S) (no Cholesky factor), for a full, a mean-field and an equal-block q stepped
together; the optimiser's state keeps its dtypes, weak types and structure, so a jitted ``svi.update``
compiles once; an accepted first trial of the line search evaluates the loss twice per step (its
gradient in q, then the loss and gradient in the other params at the new q), not three times.
float64 throughout (conftest)."""
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro.distributions import constraints
from numpyro.distributions.transforms import biject_to
from numpyro.infer import SVI

import ppl_sparsegp as psg
from ppl_sparsegp.approximations.decoupled import OrthogonallyDecoupledGP
from ppl_sparsegp.optim import AnalyticELBO, NaturalGradient

TRIL = biject_to(constraints.scaled_unit_lower_cholesky)
POS = biject_to(constraints.positive)
RNG = np.random.default_rng(7)
M_FULL, M_DIAG, T, B = 5, 4, 2, 3
A = {"a": RNG.standard_normal((6, M_FULL)), "b": RNG.standard_normal((6, M_DIAG)),
     "c": RNG.standard_normal((6, T * B))}


def _loss_mS(m, S, h):
    """A smooth non-quadratic loss of one Gaussian (m, S) (a logistic data term and the KL to N(0, I)),
    with a scalar hyperparameter h."""
    rows = A[m["key"]]
    mu, var = rows @ m["m"], jnp.einsum("ij,jk,ik->i", rows, S, rows)
    data = jnp.sum(jax.nn.softplus(jnp.exp(h) * mu + 0.5 * var) - 0.3 * mu)
    return data + 0.5 * (jnp.trace(S) + m["m"] @ m["m"] - jnp.linalg.slogdet(S)[1])


def _block_dense(Ls):
    out = jnp.zeros((T * B, T * B))
    for t in range(T):
        out = out.at[t * B:(t + 1) * B, t * B:(t + 1) * B].set(Ls[t])
    return out


def _loss(params):
    """ℓ of three q's: 'a' full, 'b' mean field, 'c' two equal blocks (params as the guides hold them)."""
    h = params.get("h", 0.0)
    La = TRIL(params["a_scale_tril"])
    Lc = TRIL(params["c_scale_tril"])
    Sb = jnp.diag(POS(params["b_scale"]) ** 2)
    Sc = _block_dense(Lc @ jnp.swapaxes(Lc, -1, -2))
    return (_loss_mS({"key": "a", "m": params["a_loc"]}, La @ La.T, h)
            + _loss_mS({"key": "b", "m": params["b_loc"]}, Sb, h)
            + _loss_mS({"key": "c", "m": params["c_loc"]}, Sc, h)), None


def _start():
    La = np.tril(0.3 * RNG.standard_normal((M_FULL, M_FULL)), -1) + np.diag(RNG.uniform(0.6, 1.3, M_FULL))
    Lc = np.tril(0.3 * RNG.standard_normal((T, B, B)), -1) + 0.9 * np.eye(B)
    return {"a_loc": jnp.asarray(RNG.standard_normal(M_FULL)), "a_scale_tril": TRIL.inv(jnp.asarray(La)),
            "b_loc": jnp.asarray(RNG.standard_normal(M_DIAG)),
            "b_scale": POS.inv(jnp.asarray(RNG.uniform(0.5, 1.5, M_DIAG))),
            "c_loc": jnp.asarray(RNG.standard_normal(T * B)), "c_scale_tril": TRIL.inv(jnp.asarray(Lc))}


def _dense_step(m, S, key, gamma):
    """θ ← θ − γ ∂ℓ/∂η with η = (m, S + mmᵀ): the gradient by autodiff of ℓ(η₁, η₂ − η₁η₁ᵀ) (ℓ in (m, S)), the
    natural parameters θ = (S⁻¹m, −½S⁻¹) and back with NumPy's dense inverse."""
    def loss_eta(e1, e2):
        return _loss_mS({"key": key, "m": e1}, e2 - jnp.outer(e1, e1), 0.0)

    g1, g2 = jax.grad(loss_eta, argnums=(0, 1))(jnp.asarray(m), jnp.asarray(S + np.outer(m, m)))
    g2 = 0.5 * (np.asarray(g2) + np.asarray(g2).T)
    P = np.linalg.inv(S)
    theta1, theta2 = P @ m - gamma * np.asarray(g1), -0.5 * P - gamma * g2
    S_new = np.linalg.inv(-2.0 * theta2)
    return S_new @ theta1, S_new


def test_step_equals_the_dense_natural_parameter_update():
    """One step (γ = 0.3, no line search) of three q's of different families together equals, for each,
    the dense update of its natural parameters (the mean-field and block q: their gradient's diagonal,
    resp. diagonal blocks, as the family's natural parameters hold only those)."""
    start, gamma = _start(), 0.3
    opt = NaturalGradient(["a", "b", "c"], gamma=gamma)
    _, state = jax.jit(lambda st: opt.eval_and_update(_loss, st))(opt.init(start))  # as SVI runs it: one program
    new = opt.get_params(state)
    La = np.asarray(TRIL(start["a_scale_tril"]))
    m_ref, S_ref = _dense_step(np.asarray(start["a_loc"]), La @ La.T, "a", gamma)
    L = np.asarray(TRIL(new["a_scale_tril"]))
    np.testing.assert_allclose(new["a_loc"], m_ref, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(L @ L.T, S_ref, rtol=1e-9, atol=1e-11)
    # mean field: the full dense step projected on the family: its diagonal precision and θ₁
    s = np.asarray(POS(start["b_scale"]))
    mb = np.asarray(start["b_loc"])
    g1, g2 = jax.grad(lambda e1, e2: _loss_mS({"key": "b", "m": e1}, jnp.diag(e2 - e1**2), 0.0),
                      argnums=(0, 1))(jnp.asarray(mb), jnp.asarray(s**2 + mb**2))
    prec = 1 / s**2 + 2 * gamma * np.asarray(g2)
    np.testing.assert_allclose(new["b_loc"], (mb / s**2 - gamma * np.asarray(g1)) / prec, rtol=1e-9)
    np.testing.assert_allclose(POS(new["b_scale"]), 1 / np.sqrt(prec), rtol=1e-9)
    # equal blocks: each block's dense update with the block's own gradient
    Lc0, mc = np.asarray(TRIL(start["c_scale_tril"])), np.asarray(start["c_loc"])
    Sc = np.asarray(_block_dense(jnp.asarray(Lc0 @ np.swapaxes(Lc0, -1, -2))))

    def loss_c(e1, e2):  # the family's η₂: one (B, B) block per block, S off the blocks is 0
        mt = e1.reshape(T, B)
        return _loss_mS({"key": "c", "m": e1}, _block_dense(e2 - mt[:, :, None] * mt[:, None, :]), 0.0)

    mt = mc.reshape(T, B)
    e2 = np.stack([Sc[t * B:(t + 1) * B, t * B:(t + 1) * B] + np.outer(mt[t], mt[t]) for t in range(T)])
    g1, g2 = jax.grad(loss_c, argnums=(0, 1))(jnp.asarray(mc), jnp.asarray(e2))
    Lc = np.asarray(TRIL(new["c_scale_tril"]))
    for t in range(T):
        k = slice(t * B, (t + 1) * B)
        P = np.linalg.inv(Sc[k, k])
        g2t = 0.5 * (np.asarray(g2)[t] + np.asarray(g2)[t].T)
        S_new = np.linalg.inv(P + 2 * gamma * g2t)
        np.testing.assert_allclose(Lc[t] @ Lc[t].T, S_new, rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(new["c_loc"][k], S_new @ (P @ mc[k] - gamma * np.asarray(g1)[k]), rtol=1e-9)


def _signature(state):
    return jax.tree.map(lambda a: (jnp.shape(a), jnp.result_type(a), getattr(a, "weak_type", None)), state)


@pytest.mark.parametrize("line_search", [True, False])
def test_state_types_are_stable_and_the_step_compiles_once(line_search):
    """Three jitted steps trace once; the state after them has the structure, dtypes and weak types of
    the state ``init`` made (they differed: a second compilation per fit)."""
    opt = NaturalGradient(["a", "b", "c"], numpyro.optim.Adam(0.01), gamma=0.5, line_search=line_search)
    state = opt.init({**_start(), "h": jnp.asarray(0.1)})
    traces = [0]

    @jax.jit
    def step(state):
        traces[0] += 1
        return opt.eval_and_update(_loss, state)[1]

    new = state
    for _ in range(3):
        new = step(new)
    assert traces[0] == 1
    assert jax.tree.structure(new) == jax.tree.structure(state)
    assert _signature(new) == _signature(state)


def test_svi_update_of_sparse_and_decoupled_models_compiles_once():
    """``jax.jit(svi.update)`` of a SparseGP (Bernoulli: the default γ ramp with the line search) and of the
    decoupled model (both q's, minibatches) compiles once over three steps."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (30, 2))
    y = (X[:, 0] > 0).astype(float)
    kernel = psg.SquaredExponential(1.0, numpyro.distributions.LogNormal(0.0, 1.0))
    Z = psg.InducingPoints(X[:4])
    gps = {"sparse": (psg.SparseGP(Z, kernel, psg.Bernoulli()), {}),
           "decoupled": (OrthogonallyDecoupledGP(psg.SphericalHarmonicFeatures(2, 2), Z,
                                                 psg.ArcCosine(1, 1.0, 1.0, 1.0), psg.Gaussian(0.1)),
                         {"batch_size": 10})}
    for name, (gp, kwargs) in gps.items():
        svi = SVI(gp.model, gp.guide, NaturalGradient(gp, numpyro.optim.Adam(0.01)), AnalyticELBO(gp))
        state = svi.init(jax.random.PRNGKey(0), X, y, **kwargs)
        traces = [0]

        def update(state, svi=svi, traces=traces, kwargs=kwargs):
            traces[0] += 1
            return svi.update(state, X, y, **kwargs)[0]

        fn = jax.jit(update)
        new = fn(fn(fn(state)))
        assert traces[0] == 1, name
        assert _signature(new) == _signature(state), name


def test_accepted_first_trial_evaluates_the_loss_twice_and_the_inner_step_uses_the_new_q():
    """With the line search, a step accepted at its first trial runs the loss twice (counted at run time):
    the gradient in q, then one loss-and-gradient at the new q, whose gradient in ``h`` is the Adam step's
    (checked against Adam on the gradient at the new q computed apart)."""
    count = [0]

    def counted(params):
        jax.debug.callback(lambda: count.__setitem__(0, count[0] + 1))
        return _loss(params)

    start = {**_start(), "h": jnp.asarray(0.1)}
    opt = NaturalGradient(["a", "b", "c"], numpyro.optim.Adam(0.01), gamma=0.2, line_search=True)
    state = opt.init(start)
    _, new_state = jax.jit(lambda s: opt.eval_and_update(counted, s))(state)
    jax.block_until_ready(new_state)
    assert NaturalGradient.halvings(new_state) == 0 and NaturalGradient.rejected_steps(new_state) == 0
    assert count[0] == 2
    new = opt.get_params(new_state)
    q_new = {k: v for k, v in new.items() if k != "h"}
    g = jax.grad(lambda h: _loss({**q_new, "h": h})[0])(start["h"])
    adam = numpyro.optim.Adam(0.01)
    expected = adam.get_params(adam.update({"h": g}, adam.init({"h": start["h"]})))["h"]
    np.testing.assert_allclose(new["h"], expected, rtol=1e-12)
