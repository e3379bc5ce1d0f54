r"""One-pass sufficient statistics of variational Fourier features for the collapsed Gaussian bound.

When every training input lies in the box [a, b] (per dimension), :math:`K_{uf} = \boldsymbol\phi(X)`
does not depend on the hyperparameters [1, §3.4, §5.2], so the collapsed bound needs the data only
through

.. math::

    A = K_{uf}K_{fu} = \sum_n \boldsymbol\phi_n\boldsymbol\phi_n^\top,\quad
    \mathbf c = K_{uf}\mathbf y,\quad \mathbf f_1 = K_{uf}\mathbf 1,\quad
    \mathbf y^\top\mathbf y,\quad \textstyle\sum_n y_n,\quad N,

computed once in a single streaming pass (chunks of rows, spread over all JAX devices, accumulated on
the host in float64); each optimisation step then costs O(M³) with no N [1, §5.2]. For an additive
kernel :math:`\boldsymbol\phi = [\boldsymbol\phi^{(1)}; \dots; \boldsymbol\phi^{(D)}]` and A has the
blocks :math:`A^{(de)} = \sum_n \boldsymbol\phi^{(d)}(x_{nd})\boldsymbol\phi^{(e)}(x_{ne})^\top`.

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
:math:`\boldsymbol\phi_n^\top\boldsymbol\alpha` are type-2 NUFFTs (:func:`_projection_nufft`), so
:func:`fourier_conditional` streams the predictive marginals of any number of points in O(n w² D²) too.

Inputs may be NumPy arrays, ``np.memmap`` files or chunked arrays: anything with ``.shape`` whose row
slices ``np.asarray`` converts; a pandas DataFrame with ``columns=`` (covariates) and ``y=`` (the
target's name). Chunks are spread over all JAX devices (``shard_map``; each device sums its own chunk,
the host adds the per-device results in float64), so the result does not depend on the number of
devices beyond rounding.

**Dask** arrays and DataFrames are not pulled to this process: each partition's statistics are
computed on the Dask workers (the same per-chunk functions, in float64 whatever the worker's JAX
configuration) and summed in a tree, so only :math:`O(M^2)` numbers per partition travel
(:mod:`~ppl_sparsegp.features.fourier_dask`; Dask is optional and imported only for Dask inputs).

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
import os
import sys
import warnings
from functools import lru_cache, partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..covariances import Kuf, Kuu, SufficientStatistics, sufficient_statistics
from ..kernels import Additive, Kernel, Matern12, Matern32, Matern52, constant_kernel_diagonal
from .combinations import AdditiveFeatures
from .fourier import FourierFeatures

__all__ = ["fourier_statistics", "fourier_conditional", "fourier_box_features", "METHODS"]

METHODS = ("dense", "nufft")
DEFAULT_CHUNK = {"dense": 8192, "nufft": 1 << 16}
_AXIS = "data"


# --- features and inputs ----------------------------------------------------------------------------
def fourier_box_features(feature) -> tuple:
    """The 1-D :class:`FourierFeatures` of a FourierFeatures or an AdditiveFeatures of them."""
    if isinstance(feature, FourierFeatures):
        return (feature,)
    if isinstance(feature, AdditiveFeatures) and all(isinstance(f, FourierFeatures) for f in feature.features):
        return tuple(feature.features)
    raise ValueError("fourier_statistics needs a FourierFeatures or an AdditiveFeatures of FourierFeatures, "
                     f"got {type(feature).__name__}")


def _rows(X, start, stop, D):
    """Rows start:stop of X as a float64 (n, D) NumPy array (works for arrays, memmaps, Dask arrays)."""
    block = np.asarray(X[start:stop], dtype=np.float64)
    return block.reshape(-1, 1) if block.ndim == 1 and D == 1 else block


def _check_x_shape(X, D):
    """X of shape (N, D), or (N,) for D = 1 (in memory or Dask); returns the shape."""
    shape = tuple(getattr(X, "shape", ()))
    if not (len(shape) == 2 and shape[1] == D) and not (len(shape) == 1 and D == 1):
        hint = (" (for a DataFrame, name its covariate columns with columns=[...] and the target with "
                "y='name')") if hasattr(X, "columns") else ""
        raise ValueError(f"X must have shape (N, {D}) for {D} Fourier feature dimension(s), got shape "
                         f"{shape}{hint}")
    return shape


def _check_shapes(features, X, y):
    shape = _check_x_shape(X, len(features))
    if y is not None:
        yshape = tuple(getattr(y, "shape", ()))
        if len(yshape) != 1:
            raise ValueError(f"y must be a vector of shape (N,), got shape {yshape}")
        if yshape[0] != shape[0]:
            raise ValueError(f"X has {shape[0]} rows but y has {yshape[0]}")
    if shape[0] < 1:
        raise ValueError("X has no rows")
    return shape[0], len(features)


def _check_box(features, Xb, start, name="X", where=""):
    """Every value finite and inside its dimension's box [a_d, b_d] (else Kuf depends on λ); ``start``
    is the first row's index, ``where`` a suffix locating the rows (e.g. " of partition 3")."""
    if not np.all(np.isfinite(Xb)):
        raise ValueError(f"{name} contains NaN or inf (rows {start}..{start + len(Xb) - 1}{where})")
    for d, f in enumerate(features):
        col = Xb[:, d]
        lo, hi = col.min(), col.max()
        if lo < f.a or hi > f.b:
            bad = lo if lo < f.a else hi
            raise ValueError(
                f"{name}[:, {d}] (dimension {d}) has the value {float(bad)!r} outside the box [a, b] = "
                f"[{f.a}, {f.b}] of its FourierFeatures (rows {start}..{start + len(Xb) - 1}{where}): "
                f"precomputed statistics need the box to contain "
                f"the data (widen [a, b], or use CollapsedGP on the raw data)")


# --- per-chunk computations (jitted) -----------------------------------------------------------------
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
        self.a = np.array([f.a for f in features])
        self.scale = np.array([2 * math.pi / (f.b - f.a) for f in features])
        j = np.arange(self.M)
        self.plus = j[:, None] + j[None, :] + 2 * (self.M - 1)  # G_{j+k} in the 1-D sums
        self.minus = j[:, None] - j[None, :] + 2 * (self.M - 1)  # G_{j−k}

    def thetas(self, X):
        """θ = 2π(x − a)/(b − a) ∈ [0, 2π] per input: (D, n)."""
        return (self.scale * (X - self.a)).T

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


def _chunk_stats(features, method, eps, threads, X, w, y):
    """(A, c, f1, yy, ysum, n) of one chunk with row weights w (0 for padding rows)."""
    if method == "nufft":
        A, c, f1 = _stats_nufft(features, X, w, w * y, eps, threads)
    else:
        A, c, f1 = _stats_dense(features, X, w, y)
    return A, c, f1, jnp.sum(w * y * y), jnp.sum(w * y), jnp.sum(w)


def _chunk_projection(features, method, eps, threads, X, a, C):
    """(φ_nᵀ a, φ_nᵀ C φ_n) for the rows of a chunk: the dense basis, or the adjoint NUFFTs."""
    if method == "nufft":
        return _projection_nufft(features, X, a, C, eps, threads)
    Phi = _basis(features, X)
    return Phi.T @ a, jnp.sum(Phi * (C @ Phi), axis=0)


# --- sharded streaming driver ------------------------------------------------------------------------
def _spec(features):
    """A hashable description (a, b, M) per dimension, the cache key of the compiled chunk functions."""
    return tuple((f.a, f.b, f.num_frequencies) for f in features)


def _threads(mesh, threads=None):
    """FINUFFT threads per device: ``threads``, by default the cores shared among the devices that run
    at once."""
    return max(1, (os.cpu_count() or 1) // mesh.devices.size) if threads is None else int(threads)


@lru_cache(maxsize=64)
def _compiled(kind, spec, method, eps, mesh, num_sharded, num_replicated, threads):
    """The jitted per-chunk function of ``kind`` run on each device's local chunk (shard_map).

    The first ``num_sharded`` arguments are stacked (num_devices, chunk, ...) along the mesh axis, the
    others are replicated; the outputs come back stacked (num_devices, ...) for a host-side sum.
    ``threads``: FINUFFT threads per device (:func:`_threads`).
    """
    features = tuple(FourierFeatures(*s) for s in spec)
    fn = partial({"stats": _chunk_stats, "projection": _chunk_projection}[kind], features, method, eps, threads)

    def body(*args):
        local = [x[0] for x in args[:num_sharded]] + list(args[num_sharded:])
        return jax.tree.map(lambda o: o[None], fn(*local))

    specs = (PartitionSpec(_AXIS),) * num_sharded + (PartitionSpec(),) * num_replicated
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=PartitionSpec(_AXIS),
                                 check_vma=False))


def _mesh(devices):
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("devices must be a non-empty sequence of JAX devices")
    return Mesh(np.array(devices), (_AXIS,))


def _check_method(method, eps, chunk_size, *, local=True):
    """Validate method/eps/chunk_size; ``local``: the pass runs in this process (warn without float64)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "nufft":
        try:
            import jax_finufft  # noqa: F401
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("method='nufft' needs the package jax-finufft (pip install jax-finufft); "
                              "method='dense' works without it") from e
        if not (isinstance(eps, (int, float)) and 1e-15 <= eps < 1):
            raise ValueError(f"eps must be a float in [1e-15, 1), got {eps!r}")
    chunk_size = DEFAULT_CHUNK[method] if chunk_size is None else chunk_size
    if int(chunk_size) != chunk_size or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    if local and not jax.config.jax_enable_x64:
        warnings.warn("float64 is disabled (jax_enable_x64): per-chunk statistics are computed in "
                      "float32; enable float64 for large N", stacklevel=3)
    return int(chunk_size)


def _stream(X, N, D, chunk_size, mesh, load, call, bucket=False):
    """Yield the per-group outputs of ``call`` (already on the host) over row groups of X.

    Each group holds ``num_devices`` chunks of ``chunk`` rows (the last one padded: weight 0, inputs at
    the left box edges); the
    next group is dispatched before the previous one's result is read back, so host loading overlaps
    device work. ``chunk`` is ``chunk_size``, or less for a small X: ⌈N / num_devices⌉, rounded up to a
    power of two with ``bucket`` (Dask partitions of many sizes then share a few compiled shapes).
    """
    n_dev = mesh.devices.size
    chunk = -(-N // n_dev)
    chunk = min(chunk_size, 1 << (chunk - 1).bit_length() if bucket else chunk)
    rows = chunk * n_dev
    sharding = NamedSharding(mesh, PartitionSpec(_AXIS))
    pending = None
    for start in range(0, N, rows):
        stop = min(start + rows, N)
        padded = []
        for arr, fill in load(start, stop):  # (n, ...) float64 arrays and their padding values
            full = np.empty((rows,) + arr.shape[1:], np.float64)
            full[:stop - start] = arr
            full[stop - start:] = fill
            padded.append(jax.device_put(full.reshape((n_dev, chunk) + arr.shape[1:]), sharding))
        out = call(*padded)
        if pending is not None:
            yield jax.device_get(pending)
        pending = out
    yield jax.device_get(pending)


def _statistics_pass(features, X, y, *, chunk_size, method, eps, mesh, threads=None, offset=0, where="",
                     bucket=False):
    """The one streaming pass in this process: ``[A, c, f1, yy, ysum, n]`` as float64 NumPy sums over
    the rows of (X, y) (A not yet symmetrised); row numbers in errors start at ``offset``, followed by
    ``where``; ``bucket`` as :func:`_stream`. Also the per-partition work of the Dask path
    (:mod:`.fourier_dask`)."""
    N, D = _check_shapes(features, X, y)
    inside = np.array([f.a for f in features])  # padding rows: a point inside every box

    def load(start, stop):
        Xb = _rows(X, start, stop, D)
        yb = np.asarray(y[start:stop], dtype=np.float64)
        _check_box(features, Xb, offset + start, where=where)
        if not np.all(np.isfinite(yb)):
            raise ValueError(f"y contains NaN or inf (rows {offset + start}..{offset + stop - 1}{where})")
        return [(Xb, inside), (np.ones(stop - start), 0.0), (yb, 0.0)]

    step = _compiled("stats", _spec(features), method, float(eps), mesh, 3, 0, _threads(mesh, threads))
    total = None
    for out in _stream(X, N, D, chunk_size, mesh, load, step, bucket):
        part = [np.sum(np.asarray(o, np.float64), axis=0) for o in out]
        total = part if total is None else [t + p for t, p in zip(total, part)]
    return total


def _projection_pass(features, X, alpha, C, kff, *, chunk_size, method, eps, mesh, threads=None, offset=0,
                     where="", bucket=False):
    """(mean, var) float64 NumPy arrays over the rows of X, streamed in this process (also the
    per-partition work of the Dask path)."""
    N, D = _check_shapes(features, X, None)
    inside = np.array([f.a for f in features])

    def load(start, stop):
        Xb = _rows(X, start, stop, D)
        _check_box(features, Xb, offset + start, where=where)
        return [(Xb, inside)]

    step = _compiled("projection", _spec(features), method, float(eps), mesh, 1, 2, _threads(mesh, threads))
    means, quads = [], []
    for mean, quad in _stream(X, N, D, chunk_size, mesh, load, lambda Xs: step(Xs, alpha, C), bucket):
        means.append(np.asarray(mean, np.float64).reshape(-1))
        quads.append(np.asarray(quad, np.float64).reshape(-1))
    mean = np.concatenate(means)[:N]
    var = np.maximum(float(kff) - np.concatenate(quads)[:N], 0.0)
    return mean, var


def _is_dask(x) -> bool:
    """Whether x is a Dask collection (without importing Dask: none exists before Dask is imported)."""
    dask = sys.modules.get("dask")
    return x is not None and dask is not None and dask.is_dask_collection(x)


def _select_columns(table, y, columns, D, *, target=True):
    """Validate ``columns=`` (D covariate names) and, with ``target``, ``y`` (the target's name) against a
    pandas or Dask DataFrame; returns the list of columns to read (covariates, then the target)."""
    if not hasattr(table, "columns") or not hasattr(table, "dtypes"):
        raise ValueError(f"columns= names DataFrame columns, but X is a {type(table).__name__}; pass X as "
                         "an (N, D) array without columns=, or a (pandas or Dask) DataFrame")
    if isinstance(columns, (str, bytes)) or not hasattr(columns, "__len__"):
        raise ValueError(f"columns must be a list of the {D} covariate column names, got {columns!r}")
    columns = list(columns)
    if len(columns) != D:
        raise ValueError(f"columns names {len(columns)} column(s) but the feature has {D} input "
                         f"dimension(s): give one covariate column per FourierFeatures")
    if len(set(columns)) != len(columns):
        raise ValueError(f"columns names a column twice: {columns!r}")
    names = columns
    if target:
        if not isinstance(y, str):
            raise ValueError("with columns=, y must be the name of the target column (a string), got a "
                             f"{type(y).__name__}")
        if y in columns:
            raise ValueError(f"the target column y={y!r} is also among the covariate columns")
        names = columns + [y]
    have = list(table.columns)
    missing = [c for c in names if c not in have]
    if missing:
        raise ValueError(f"column(s) {missing!r} not in X; its columns are {have!r}")
    dtypes = table.dtypes
    bad = [c for c in names if getattr(dtypes[c], "kind", "O") not in "iuf"]
    if bad:
        raise ValueError(f"column(s) {bad!r} are not numeric (dtypes {[str(dtypes[c]) for c in bad]}): "
                         "covariates and target must be integer or float columns")
    return names


def _no_devices(devices):
    if devices is not None:
        raise ValueError("devices= is for in-process inputs; with Dask inputs each worker uses its own "
                         "JAX devices: leave devices=None")


def _finish(total) -> SufficientStatistics:
    A, c, f1, yy, ysum, n = total
    if not n > 0:
        raise ValueError("X has no rows")
    A = 0.5 * (A + A.T)
    return SufficientStatistics(A=jnp.asarray(A), c=jnp.asarray(c), yy=jnp.asarray(yy), n=jnp.asarray(n),
                                f1=jnp.asarray(f1), ysum=jnp.asarray(ysum))


def fourier_statistics(feature, X, y, *, columns=None, chunk_size: int | None = None, method: str = "dense",
                       eps: float = 1e-12, devices=None, split_every: int = 8) -> SufficientStatistics:
    r"""Sufficient statistics of the collapsed bound for VFF with all inputs in the box, in one pass.

    :param feature: a :class:`FourierFeatures` (1-D) or an :class:`AdditiveFeatures` of them (the
        statistics of the stacked Kuf, in the feature order of ``Kuf(feature, ...)``).
    :param X: inputs (N, D) (or (N,) for 1-D): a NumPy array, ``np.memmap`` or chunked array whose
        row slices ``np.asarray`` converts; a Dask array; or a pandas or Dask DataFrame with
        ``columns``. Every value must lie in its dimension's [a, b]. Dask inputs are computed by the
        current Dask scheduler (a ``distributed.Client``'s where one is the default, else Dask's
        threads): each partition's sums on the worker that holds it, added in a tree there
        (:mod:`~ppl_sparsegp.features.fourier_dask`); the call returns the computed statistics.
    :param y: targets (N,), same kinds; with ``columns``, the name of the target column of X.
    :param columns: the D covariate column names of a DataFrame X, in the order of the features
        (e.g. ``fourier_statistics(feature, df, "delay", columns=["distance", "dep_time"])``).
    :param chunk_size: rows per device per step (default 8192 dense, 65536 nufft); on Dask, within
        each partition.
    :param method: ``"dense"`` (exact GEMM, O(N M² D²)) or ``"nufft"`` (type-1 NUFFTs, O(N w² D²),
        max-norm relative error below 1e-9 at the default eps; see the module docstring).
    :param eps: NUFFT tolerance (ignored by ``"dense"``).
    :param devices: JAX devices to shard the chunks over (default all ``jax.devices()``); not for Dask
        inputs (each worker uses its own devices).
    :param split_every: Dask inputs: how many partial sums each node of the reduction tree adds (≥ 2).
    :returns: :class:`~ppl_sparsegp.covariances.SufficientStatistics` with ``A, c, yy, n, f1, ysum``
        (float64 when float64 is enabled).
    :raises ValueError: for a value of X outside [a, b] (naming the dimension), NaN/inf, bad shapes or
        column names.
    """
    features = fourier_box_features(feature)
    if _is_dask(X) or _is_dask(y):
        _no_devices(devices)
        chunk_size = _check_method(method, eps, chunk_size, local=False)
        from .fourier_dask import dask_statistics

        return _finish(dask_statistics(features, X, y, columns=columns, chunk_size=chunk_size, method=method,
                                       eps=float(eps), split_every=split_every))
    chunk_size = _check_method(method, eps, chunk_size)
    if columns is not None:
        names = _select_columns(X, y, columns, len(features))
        X, y = X[names[:-1]].to_numpy(np.float64), X[names[-1]].to_numpy(np.float64)
    return _finish(_statistics_pass(features, X, y, chunk_size=chunk_size, method=method, eps=eps,
                                    mesh=_mesh(devices)))


def fourier_conditional(feature, kernel, X, q_mu, q_cov=None, *, whiten: bool = False, Kmm=None,
                        columns=None, chunk_size: int | None = None, method: str = "dense",
                        eps: float = 1e-12, devices=None):
    r"""Streaming :func:`~ppl_sparsegp.conditionals.conditional` for VFF at inputs inside the box.

    Same mathematics and signature as ``conditional`` (mean :math:`\mathbf a_n^\top\mathbf m`,
    variance :math:`k_{nn} - \mathbf q_n + \mathbf a_n^\top S\mathbf a_n`), rewritten as
    :math:`\boldsymbol\phi_n^\top\boldsymbol\alpha` and :math:`k_{nn} - \boldsymbol\phi_n^\top
    C\boldsymbol\phi_n` with :math:`\boldsymbol\alpha = K_{uu}^{-1}R\mathbf m` and
    :math:`C = K_{uu}^{-1} - K_{uu}^{-1}RSR^\top K_{uu}^{-1}` (R = I when not whitened), computed once
    in O(M³); then one pass over X in chunks (any array kind, sharded over devices) with the dense basis
    or the adjoint NUFFT (type 2), never forming the (M, N) Kuf.

    ``X`` as in :func:`fourier_statistics` (with ``columns`` for a DataFrame: the covariate names).

    :returns: ``(mean, var)`` NumPy float64 arrays of shape (N,); for a Dask X, lazy float64 Dask arrays
        with X's row chunks, computed blockwise on the workers when computed (a value outside the box
        raises then).
    """
    features = fourier_box_features(feature)
    dask_input = _is_dask(X)
    chunk_size = _check_method(method, eps, chunk_size, local=not dask_input)
    alpha, C, kff = _projection_operands(feature, kernel, q_mu, q_cov, Kmm, whiten)
    if dask_input:
        _no_devices(devices)
        from .fourier_dask import dask_conditional

        return dask_conditional(features, X, (np.asarray(alpha, np.float64), np.asarray(C, np.float64),
                                              float(kff)), columns=columns, chunk_size=chunk_size,
                                method=method, eps=float(eps))
    if columns is not None:
        X = X[_select_columns(X, None, columns, len(features), target=False)].to_numpy(np.float64)
    return _projection_pass(features, X, alpha, C, kff, chunk_size=chunk_size, method=method, eps=eps,
                            mesh=_mesh(devices))


@partial(jax.jit, static_argnums=(5,))
def _projection_operands(feature, kernel, q_mu, q_cov, Kmm, whiten):
    """α = Kuu⁻¹ R m and C = Kuu⁻¹ − Kuu⁻¹ R S Rᵀ Kuu⁻¹ (R = I unwhitened), and k(x, x); O(M³) once."""
    Kmm = Kuu(feature, kernel) if Kmm is None else Kmm
    m = Kmm.sqrt_matmul(q_mu) if whiten else q_mu
    alpha = Kmm.solve(m)
    C = Kmm.solve(jnp.eye(Kmm.size, dtype=Kmm.dtype))
    if q_cov is not None:
        S = q_cov.to_dense()
        if whiten:
            S = Kmm.sqrt_matmul(Kmm.sqrt_matmul(S).T).T  # R S Rᵀ
        C = C - Kmm.solve(Kmm.solve(S).T).T
    return alpha, 0.5 * (C + C.T), constant_kernel_diagonal(kernel)


@sufficient_statistics.register(FourierFeatures, Kernel)
@sufficient_statistics.register(AdditiveFeatures, Kernel)
def _fourier_sufficient_statistics(feature, kernel, X, y, **options):
    """VFF with Matérn kernels and every input inside the box: Kuf is the kernel-free basis, so the
    statistics are :func:`fourier_statistics` (one streaming pass; ``options`` as there). Other kernels
    (e.g. Periodic, whose Kuf scales the basis by its Fourier coefficients) take the dense default."""
    kernels = kernel.kernels if isinstance(kernel, Additive) else (kernel,)
    if not all(isinstance(k, (Matern12, Matern32, Matern52)) for k in kernels):
        return SufficientStatistics.from_kuf(Kuf(feature, kernel, jnp.asarray(X)), jnp.asarray(y))
    return fourier_statistics(feature, X, y, **options)
