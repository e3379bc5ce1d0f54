r"""The per-chunk mathematics of VFF's one-pass statistics (:mod:`~ppl_sparsegp.features.fourier_statistics`):
the sums :math:`A = \sum_n w_n\boldsymbol\phi_n\boldsymbol\phi_n^\top`, :math:`\mathbf c`, :math:`\mathbf f_1`
of one chunk of rows (``chunk_statistics``) and the predictive projections (``chunk_projection``),
by the dense basis or by non-uniform FFTs. The streaming over chunks and devices is
``features/fourier_streaming.py``.

**Two exact identities make every block a non-uniform FFT** [1, §5 remark; this module]. With
:math:`\theta = 2\pi(x-a)/(b-a)` the basis is :math:`[\cos j\theta]_{j<M}, [\sin j\theta]_{1\le j<M}`,
and products of harmonics are harmonics:

.. math::

    \cos j\theta_d\cos k\theta_e = \tfrac12\Re(e^{i(j\theta_d+k\theta_e)} + e^{i(j\theta_d-k\theta_e)}),\quad
    \cos j\theta_d\sin k\theta_e = \tfrac12\Im(e^{i(j\theta_d+k\theta_e)} - e^{i(j\theta_d-k\theta_e)}),

    \sin j\theta_d\cos k\theta_e = \tfrac12\Im(e^{i(j\theta_d+k\theta_e)} + e^{i(j\theta_d-k\theta_e)}),\quad
    \sin j\theta_d\sin k\theta_e = \tfrac12\Re(e^{i(j\theta_d-k\theta_e)} - e^{i(j\theta_d+k\theta_e)}).

So with :math:`F^{(de)}_{jk} = \sum_n w_n e^{i(j\theta_{nd}+k\theta_{ne})}`, :math:`|j|,|k| < M`, a 2-D
type-1 NUFFT [2], every off-diagonal block follows from :math:`F^{(de)}_{j,\pm k}`; a diagonal block
needs only the 1-D sums :math:`G_m = \sum_n w_n e^{im\theta_n}`, :math:`|m| \le 2(M-1)`
(:math:`F_{jk} = G_{j+k}`, :math:`F_{j,-k} = G_{j-k}`), and :math:`\mathbf c`, :math:`\mathbf f_1` are
the 1-D sums with strengths :math:`y_n` and 1. Cost per chunk of n rows: O(n w² D²) with the spreading
width w ≈ 13 at eps = 1e-12 (``method="nufft"``) instead of O(n M² D²) for the dense product
(``method="dense"``, exact to rounding).

**Accuracy of the NUFFT path.** FINUFFT's type-1 error is bounded relative to the ℓ₁ norm of the
strengths [2]: every entry of A and f₁ is within about ``eps · N`` of the exact value (and
:math:`|A_{jk}| \le A_{00} = N`), every entry of c within about ``eps · Σ|y_n|``. Measured max-norm
relative errors ``max|ΔA| / max|A|`` against ``method="dense"`` on 8-input airline-like data: 1.1e-12 at
the default ``eps=1e-12`` for every N from 10⁴ to 3.95·10⁶ (c: 1e-13), 1.6e-9 at 1e-9, 1.3e-6 at 1e-6,
i.e. about 1–2 × eps. **Documented guarantee: relative error < 1e-9 at the default eps = 1e-12**
(the tests check it, the 2-D off-diagonal blocks included).

**Prediction** uses the adjoints: the per-point quadratic form :math:`\boldsymbol\phi_n^\top C
\boldsymbol\phi_n = \partial\langle C, A(\mathbf w)\rangle/\partial w_n` and the mean
:math:`\boldsymbol\phi_n^\top\boldsymbol\alpha` are type-2 NUFFTs (``chunk_projection``), so
:func:`~ppl_sparsegp.features.fourier_statistics.fourier_conditional` streams the predictive marginals of any
number of points in O(n w² D²) too.

``method="nufft"`` needs ``jax-finufft`` (``nufft1``/``nufft2``; checked with jax 0.10.2, jax-finufft
1.3.1, FINUFFT 2.5.0); without it only ``method="dense"`` is available. All inputs are padded to the
largest M so that one batched 1-D transform (all inputs) and one batched 2-D transform (all pairs)
serve a chunk; the fine grids are tiny, so points are not sorted (``spread_sort=0``), and each device
gets ``cpu_count // num_devices`` FINUFFT threads.

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, JMLR 18.
    2. Barnett, Magland, af Klinteberg (2019), A parallel nonuniform fast Fourier transform library
       based on an "exponential of semicircle" kernel, SIAM J. Sci. Comput. 41(5).
"""
from __future__ import annotations

import math
from functools import partial

import jax.numpy as jnp
import numpy as np

#: no public names: the chunk workers of the streaming pass (features/fourier_streaming.py), called on inputs
#: that fourier_statistics / fourier_conditional validated (their entry points are public there)
__all__: list = []


class _Layout:
    """Static index bookkeeping: every input is padded to the largest M (modes of a smaller M are a
    subset, so slicing the padded result is exact), giving per input the layout
    [cos 0..M_max−1, sin 1..M_max−1] of length L = 2M_max − 1, and one batched transform per kind."""

    def __init__(self, features):
        self.D = len(features)
        self.M = max(f.num_frequencies for f in features)
        self.L = 2 * self.M - 1
        self.pairs = [(d, e) for d in range(self.D) for e in range(d + 1, self.D)]
        self.first = np.array([d for d, _ in self.pairs], dtype=np.int64)
        self.second = np.array([e for _, e in self.pairs], dtype=np.int64)
        # position of each actual feature (in Kuf order) in the padded (D·L) layout
        self.sel = np.concatenate([d * self.L + np.concatenate([np.arange(f.num_frequencies),
                                                                self.M + np.arange(f.num_frequencies - 1)])
                                   for d, f in enumerate(features)])
        self.lower = np.array([f.lower for f in features])
        self.scale = np.array([2 * math.pi / (f.upper - f.lower) for f in features])
        j = np.arange(self.M)
        self.plus = j[:, None] + j[None, :] + 2 * (self.M - 1)  # G_{j+k} in the 1-D sums
        self.minus = j[:, None] - j[None, :] + 2 * (self.M - 1)  # G_{j−k}

    def thetas(self, X):
        """θ = 2π(x − a)/(b − a) ∈ [0, 2π] per input: (D, n)."""
        return (self.scale * (X - self.lower)).T

    def gather(self, padded):
        """(D·L, D·L) or (D·L,) padded → the actual features."""
        if padded.ndim == 1:
            return padded[self.sel]
        return padded[self.sel[:, None], self.sel[None, :]]

    def scatter(self, actual):
        """Actual features → padded layout (zeros at padded modes), reshaped (D, L[, D, L])."""
        n = self.D * self.L
        if actual.ndim == 1:
            return jnp.zeros(n, actual.dtype).at[self.sel].set(actual).reshape(self.D, self.L)
        out = jnp.zeros((n, n), actual.dtype).at[self.sel[:, None], self.sel[None, :]].set(actual)
        return out.reshape(self.D, self.L, self.D, self.L)


def _block(Fp, Fm):
    """The (..., L, L) blocks [[cc, cs], [sc, ss]] from F_{j,k} and F_{j,−k} (j, k ≥ 0), batched."""
    cc = 0.5 * jnp.real(Fp + Fm)
    cs = 0.5 * jnp.imag(Fp - Fm)[..., :, 1:]
    sc = 0.5 * jnp.imag(Fp + Fm)[..., 1:, :]
    ss = 0.5 * jnp.real(Fm - Fp)[..., 1:, 1:]
    return jnp.concatenate([jnp.concatenate([cc, cs], -1), jnp.concatenate([sc, ss], -1)], -2)


def _harmonics(G, M):
    """[Re G_m (m < M), Im G_m (1 ≤ m < M)] from 1-D sums G (..., 4M − 3) indexed m + 2(M − 1)."""
    g = G[..., 2 * (M - 1):2 * (M - 1) + M]
    return jnp.concatenate([jnp.real(g), jnp.imag(g[..., 1:])], -1)


def _finufft(eps, threads):
    from jax_finufft import nufft1, nufft2, options

    # the fine grids are tiny (≤ 240², in cache): sorting the points costs more than it saves
    kw = dict(iflag=1, eps=eps, opts=options.Opts(nthreads=threads, spread_sort=0))
    return partial(nufft1, **kw), partial(nufft2, **kw)


def _stats_nufft(features, X, w, wy, eps, threads):
    """(A, c, f1) by type-1 NUFFTs; linear in the strengths (w, wy) = (weights, weights · y).

    One batched 1-D transform (all inputs, modes |m| ≤ 2(M−1), strengths w + i·wy packed) gives the
    diagonal blocks, c and f1; one batched 2-D transform (all pairs d < e, modes |j|, |k| < M) gives
    the off-diagonal blocks.
    """
    nufft1, _ = _finufft(eps, threads)
    lay = _Layout(features)
    M, L, D = lay.M, lay.L, lay.D
    theta = lay.thetas(X)
    cdtype = jnp.result_type(X.dtype, jnp.complex64)
    wc = w.astype(cdtype)
    packed = wc + 1j * wy.astype(cdtype)  # two real strengths in one complex transform
    H = nufft1(4 * M - 3, jnp.broadcast_to(packed, theta.shape), theta)  # H_m = G_m + i G^y_m, (D, ·)
    Hc = jnp.conj(H[:, ::-1])  # conj(H_{−m}) = G_m − i G^y_m for real strengths
    g, gy = 0.5 * (H + Hc), -0.5j * (H - Hc)
    A = jnp.zeros((D, L, D, L), X.dtype)
    diag = _block(g[:, lay.plus], g[:, lay.minus])  # F_{jk} = G_{j+k}, F_{j,−k} = G_{j−k}
    A = A.at[np.arange(D), :, np.arange(D), :].set(diag)
    if lay.pairs:
        F = nufft1((L, L), jnp.broadcast_to(wc, (len(lay.pairs), w.shape[0])), theta[lay.first],
                   theta[lay.second])  # (P, L, L), modes −(M−1)..M−1 each
        off = _block(F[:, M - 1:, M - 1:], F[:, M - 1:, M - 1::-1])  # k ≥ 0 and −k
        A = A.at[lay.first, :, lay.second, :].set(off)
        A = A.at[lay.second, :, lay.first, :].set(jnp.swapaxes(off, -1, -2))
    A = lay.gather(A.reshape(D * L, D * L))
    return A, lay.gather(_harmonics(gy, M).reshape(-1)), lay.gather(_harmonics(g, M).reshape(-1))


def _hermitian(u):
    """û with Σ_m û_m e^{imθ} = Re Σ_m u_m e^{imθ} for modes m = −K..K: û = (u + conj(u_{−m})) / 2."""
    return 0.5 * (u + jnp.conj(u[..., ::-1]))


def _pq(Cb, M):
    """P = ½(C_cc − iC_cs − iC_sc − C_ss), Q = ½(C_cc + iC_cs − iC_sc + C_ss) from (..., L, L) blocks
    (C_cs, C_sc, C_ss zero-padded at the sine-free index 0)."""
    zc = jnp.zeros(Cb.shape[:-2] + (M, 1), Cb.dtype)
    zr = jnp.zeros(Cb.shape[:-2] + (1, M), Cb.dtype)
    cc = Cb[..., :M, :M]
    cs = jnp.concatenate([zc, Cb[..., :M, M:]], -1)
    sc = jnp.concatenate([zr, Cb[..., M:, :M]], -2)
    ss = jnp.concatenate([zr, jnp.concatenate([zc[..., 1:, :], Cb[..., M:, M:]], -1)], -2)
    return 0.5 * (cc - 1j * cs - 1j * sc - ss), 0.5 * (cc + 1j * cs - 1j * sc + ss)


def _projection_nufft(features, X, a, C, eps, threads):
    r"""(φ_nᵀ a, φ_nᵀ C φ_n) by type-2 NUFFTs, the adjoints of :func:`_stats_nufft`.

    For a block :math:`A^{(de)} = \mathrm{block}(F_{j,k}, F_{j,-k})` and its cotangent
    :math:`C^{(de)} + C^{(ed)\top} = [[C_{cc}, C_{cs}], [C_{sc}, C_{ss}]]`,
    :math:`\langle C, A\rangle = \Re\sum_{jk} P_{jk}F_{j,k} + Q_{jk}F_{j,-k}` (:func:`_pq`), so
    :math:`\partial/\partial w_n = \Re\sum G_{jk}e^{i(j\theta_{nd}+k\theta_{ne})}` with G holding P at
    k ≥ 0 and Q at −k (both at k = 0). Diagonal blocks fold P, Q onto the 1-D modes j + k and j − k;
    the mean uses :math:`b_m = a^{\cos}_m - i a^{\sin}_m`. Real parts are taken by Hermitian
    symmetrisation, so one complex 1-D transform per input carries the quadratic form and the mean.
    """
    _, nufft2 = _finufft(eps, threads)
    lay = _Layout(features)
    M, L, D = lay.M, lay.L, lay.D
    theta = lay.thetas(X)
    cdtype = jnp.result_type(X.dtype, jnp.complex64)
    Cp, ap = lay.scatter(C), lay.scatter(a)
    P, Q = _pq(Cp[np.arange(D), :, np.arange(D), :], M)  # (D, M, M)
    h = jnp.zeros((D, 4 * M - 3), cdtype)
    h = h.at[:, lay.plus.ravel()].add(P.reshape(D, -1)).at[:, lay.minus.ravel()].add(Q.reshape(D, -1))
    b = jnp.zeros((D, 4 * M - 3), cdtype).at[:, 2 * (M - 1):2 * (M - 1) + M].set(
        ap[:, :M] - 1j * jnp.concatenate([jnp.zeros((D, 1), ap.dtype), ap[:, M:]], -1))
    out = nufft2(_hermitian(h) + 1j * _hermitian(b), theta)  # (D, n): Re quad, Im mean
    quad, mean = jnp.sum(jnp.real(out), 0), jnp.sum(jnp.imag(out), 0)
    if lay.pairs:
        Cb = Cp[lay.first, :, lay.second, :] + jnp.swapaxes(Cp[lay.second, :, lay.first, :], -1, -2)
        P, Q = _pq(Cb, M)  # (P, M, M)
        top = jnp.concatenate([Q[..., :, :0:-1], P[..., :, :1] + Q[..., :, :1], P[..., :, 1:]], -1)
        G = jnp.concatenate([jnp.zeros(top.shape[:-2] + (M - 1, L), cdtype), top], -2)  # rows j < 0: 0
        quad = quad + jnp.sum(jnp.real(nufft2(G, theta[lay.first], theta[lay.second])), 0)
    return mean, quad


def _basis(features, X):
    """Kuf inside the box: the stacked bases φ^(d)(x_d), (M, n)."""
    return jnp.concatenate([f.basis(X[:, d]) for d, f in enumerate(features)], axis=0)


def _stats_dense(features, X, w, y):
    Phi = _basis(features, X)
    Pw = Phi * w[None, :]
    return Pw @ Phi.T, Pw @ y, jnp.sum(Pw, axis=1)


def chunk_statistics(features, method, eps, threads, X, w, y):
    """(A, c, f1, yy, ysum, n) of one chunk with row weights w (0 for padding rows).

    :param features: the 1-D :class:`~ppl_sparsegp.features.FourierFeatures` of the inputs (D of them).
    :param method: ``"dense"`` (the basis, exact to rounding) or ``"nufft"`` (type-1 NUFFTs).
    :param eps: the NUFFT tolerance; ``threads``: FINUFFT threads.
    :param X: the chunk's inputs (n, D), inside the boxes; ``w``: row weights (n,); ``y``: targets (n,).
    :returns: A (M, M), c (M,), f1 (M,) and the scalars Σ w y², Σ w y, Σ w.
    """
    if method == "nufft":
        A, c, f1 = _stats_nufft(features, X, w, w * y, eps, threads)
    else:
        A, c, f1 = _stats_dense(features, X, w, y)
    return A, c, f1, jnp.sum(w * y * y), jnp.sum(w * y), jnp.sum(w)


def chunk_projection(features, method, eps, threads, X, a, C):
    """(φ_nᵀ a, φ_nᵀ C φ_n) for the rows of a chunk: the dense basis, or the adjoint NUFFTs (type 2).

    :param features: ``method``, ``eps``, ``threads``, ``X``: as ``chunk_statistics``.
    :param a: a vector (M,); ``C``: a symmetric matrix (M, M).
    :returns: two arrays (n,).
    """
    if method == "nufft":
        return _projection_nufft(features, X, a, C, eps, threads)
    Phi = _basis(features, X)
    return Phi.T @ a, jnp.sum(Phi * (C @ Phi), axis=0)

