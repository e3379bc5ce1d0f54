r"""The algebra of a natural-gradient step for one Gaussian q = N(m, S), per family, with the fewest
factorisations (:class:`~ppl_sparsegp.optim.NaturalGradient`'s helpers).

**From the gradient in the factor to the step.** q is held as its mean m and the lower Cholesky factor L
of S (full q; a batch of factors for the block-diagonal q; the scale s for the mean-field q). One
reverse-mode pass gives the loss' gradient in (m, L): :math:`\bar g_m`, :math:`\bar G_L` (the same pass
Adam makes). The Cholesky map's derivative, :math:`dL = L\,\Phi(L^{-1}dS\,L^{-\top})` with Φ the lower
triangle with half its diagonal, gives the gradient in S with no factorisation:
:math:`\partial\ell/\partial S = L^{-\top} C L^{-1}`, :math:`C = \mathrm{sym}\,\Phi(L^\top\bar G_L)`;
in the expectation parameters η = (m, S + mmᵀ), :math:`\partial\ell/\partial\eta_2 = \partial\ell/\partial S`
and :math:`\partial\ell/\partial\eta_1 = \bar g_m - 2(\partial\ell/\partial S)m`. The step in the natural
parameters (ℓ the loss, minimised), :math:`S_{new}^{-1} = S^{-1} + 2\gamma\,\partial\ell/\partial\eta_2`
and :math:`S_{new}^{-1}m_{new} = S^{-1}m - \gamma\,\partial\ell/\partial\eta_1`, is then

.. math::
    S_{new}^{-1} = L^{-\top} B L^{-1},\quad B = I + 2\gamma C,\qquad
    S_{new} = L B^{-1} L^\top,\qquad m_{new} = m - \gamma\,S_{new}\,\bar g_m .

With :math:`J` the reversal permutation and :math:`L_B = \mathrm{chol}(JBJ)`, :math:`B^{-1} = KK^\top`
for the *lower* :math:`K = J L_B^{-\top} J`, so :math:`\mathrm{chol}(S_{new}) = LK`. Per trial γ: one
Cholesky of an M × M matrix (M³/3), one triangular inverse and one product of triangular factors; no
inverse of S, no Cholesky of the new precision *and* of its inverse, and no pass through the Cholesky
of :math:`\eta_2 - \eta_1\eta_1^\top` (which the η-parameterised loss needed, with its derivative).
B is positive definite exactly when the new precision is: a non-finite :math:`L_B` rejects the step.

Mean-field q: the same per coordinate (O(M)): :math:`\partial\ell/\partial s^2 = \bar g_s/(2s)`.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular
from numpyro.distributions import constraints
from numpyro.distributions.transforms import biject_to

__all__: list = []  # helpers of NaturalGradient, not API

_TRIL = biject_to(constraints.scaled_unit_lower_cholesky)
_POS = biject_to(constraints.positive)


def family(prefix: str, params: dict) -> str:
    """'full' / 'block' / 'diag' from the q params present (the families of approximations.variational).

    :raises ValueError: for a site without ``<prefix>_loc`` or with another family (two-Kronecker, unequal
        blocks)."""
    if f"{prefix}_loc" not in params:
        raise ValueError(f"NaturalGradient: no param {prefix}_loc: the guide has no q over site {prefix!r} "
                         f"(params: {sorted(params)}); pass the model whose guide SVI runs")
    if f"{prefix}_scale_tril" in params:  # unconstrained: (M(M+1)/2,) full, (T, m(m+1)/2) equal blocks
        return "full" if jnp.ndim(params[f"{prefix}_scale_tril"]) == 1 else "block"
    if f"{prefix}_scale" in params:
        return "diag"
    raise ValueError(f"NaturalGradient: q over {prefix!r} is not a full, diagonal or equal-block "
                     f"block-diagonal Gaussian (params {sorted(k for k in params if k.startswith(prefix))}); "
                     f"a two-Kronecker q or unequal blocks have no natural-parameter step: use "
                     f"q_cov='full' or 'diag', or Adam (--optimizer adam)")


def moments(fam: str, prefix: str, params: dict) -> tuple:
    """(m, factor) of the q params: the factor L (lower, (..., M, M)) for full/block (m (..., M) alike),
    the scale s (M,) for diag."""
    m = params[f"{prefix}_loc"]
    if fam == "diag":
        return m, _POS(params[f"{prefix}_scale"])
    L = _TRIL(params[f"{prefix}_scale_tril"])
    return (m if fam == "full" else m.reshape(L.shape[:-1])), L


def to_params(fam: str, prefix: str, m: jax.Array, F: jax.Array) -> dict:
    """The unconstrained q params of (m, factor) (differentiable; inverse of :func:`moments`)."""
    if fam == "diag":
        return {f"{prefix}_loc": m, f"{prefix}_scale": _POS.inv(F)}
    return {f"{prefix}_loc": m.reshape(-1), f"{prefix}_scale_tril": _TRIL.inv(F)}


def direction(fam: str, m: jax.Array, F: jax.Array, g_m: jax.Array, g_F: jax.Array) -> tuple:
    """What every trial γ of one step shares, from the loss' gradient (g_m, g_F) in (m, factor): full and
    block: (C, Lᵀḡ_m) (module docstring); diag: the precision and the loss' gradient in η."""
    if fam == "diag":
        g_S = g_F / (2.0 * F)                                         # ∂ℓ/∂s² = ḡ_s / (2s)
        return 1.0 / F**2, g_m - 2.0 * g_S * m, g_S
    A = jnp.swapaxes(F, -1, -2) @ g_F                                 # Lᵀ Ḡ_L
    low = jnp.tril(A, -1)
    C = 0.5 * (low + jnp.swapaxes(low, -1, -2)) + 0.5 * (A * jnp.eye(A.shape[-1], dtype=A.dtype))  # sym Φ(A)
    return C, (jnp.swapaxes(F, -1, -2) @ g_m[..., None])[..., 0]


def step(fam: str, m: jax.Array, F: jax.Array, d: tuple, gamma: Any) -> tuple:
    """The step of size γ along :func:`direction`'s ``d``: (m_new, factor_new, ok), ok False where the new
    precision is not positive definite (then the values are not to be used)."""
    if fam == "diag":
        prec, g1, g2 = d
        prec_new = prec + 2.0 * gamma * g2                            # θ₂ ← θ₂ − γ ∂ℓ/∂η₂
        theta1 = prec * m - gamma * g1                                # θ₁ ← θ₁ − γ ∂ℓ/∂η₁
        ok = jnp.all(prec_new > 0)
        prec_new = jnp.where(ok, prec_new, prec)
        return theta1 / prec_new, jnp.sqrt(1.0 / prec_new), ok
    C, v = d
    eye = jnp.eye(C.shape[-1], dtype=C.dtype)
    B = eye + 2.0 * gamma * C
    Lb = jnp.linalg.cholesky(B[..., ::-1, ::-1])                      # the step's one factorisation
    K = solve_triangular(Lb, jnp.broadcast_to(eye, Lb.shape), lower=True, trans=1)[..., ::-1, ::-1]  # J Lb⁻ᵀ J
    F_new = F @ K                                                     # chol(S_new) = L K
    m_new = m - gamma * (F_new @ (jnp.swapaxes(K, -1, -2) @ v[..., None]))[..., 0]  # m − γ L K Kᵀ Lᵀ ḡ_m
    ok = jnp.all(jnp.isfinite(Lb)) & jnp.all(jnp.isfinite(m_new))
    return m_new, F_new, ok
