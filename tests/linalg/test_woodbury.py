"""ppl_sparsegp.linalg.woodbury against dense Gaussian densities: the capacitance form, the precision form
(value and gradient) and the block whitening against the dense R^T K^-1."""
import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from ppl_sparsegp.linalg import BlockDiag, Dense
from ppl_sparsegp.linalg.woodbury import (
    capacitance_cholesky,
    precision_log_density,
    whiten_blocks,
    woodbury_log_density,
)

jax.config.update("jax_enable_x64", True)
rng = np.random.default_rng(0)
N, M, S2 = 30, 7, 0.3
Z = rng.normal(size=(N, M))
R = rng.normal(size=(N, 2))


def _dense(r, s2=S2):
    return dist.MultivariateNormal(jnp.zeros(N), jnp.asarray(Z @ Z.T + s2 * np.eye(N))).log_prob(r.T)


def test_capacitance_form_is_the_dense_gaussian_for_each_right_hand_side():
    LB = capacitance_cholesky(jnp.asarray(Z.T), S2)
    got = woodbury_log_density(LB, jnp.asarray(Z.T @ R), N, jnp.sum(R * R, 0), S2)
    np.testing.assert_allclose(np.asarray(got), np.asarray(_dense(jnp.asarray(R))), rtol=1e-12)


def test_precision_form_and_its_gradient_are_the_dense_gaussian():
    # C = Ψ P⁻¹ Ψᵀ + σ²I with P SPD; the precision form's value and σ²-gradient against the dense density
    A = rng.normal(size=(M, M))
    P = A @ A.T + M * np.eye(M)
    Psi = Z @ np.linalg.cholesky(P).T  # Ψ P⁻¹ Ψᵀ = Z Zᵀ

    def form(s2):
        S = jnp.asarray(P) + jnp.asarray(Psi.T @ Psi) / s2
        return precision_log_density(S, jnp.linalg.slogdet(P)[1], jnp.asarray(Psi.T @ R), N, jnp.sum(R * R, 0), s2)

    np.testing.assert_allclose(np.asarray(form(S2)), np.asarray(_dense(jnp.asarray(R))), rtol=1e-11)
    g = jax.grad(lambda s2: jnp.sum(form(s2)))(S2)
    g_ref = jax.grad(lambda s2: jnp.sum(_dense(jnp.asarray(R), s2)))(S2)
    np.testing.assert_allclose(float(g), float(g_ref), rtol=1e-9)


def test_block_whitening_is_the_dense_root_times_the_inverse():
    blocks = [Dense(jnp.asarray(B @ B.T + 3 * np.eye(3))) for B in rng.normal(size=(2, 3, 3))]
    K = BlockDiag(blocks)
    X = jnp.asarray(rng.normal(size=(6, 4)))
    Rt = np.asarray(K.sqrt()).T
    np.testing.assert_allclose(np.asarray(whiten_blocks(K, X)), Rt @ np.linalg.solve(np.asarray(K.to_dense()), X),
                               rtol=1e-10)
