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

The sums of one chunk, by the dense basis or by non-uniform FFTs (two exact identities make every
block of A a type-1 NUFFT, and the predictive projections type-2 ones; the documented accuracy and the
``jax-finufft`` requirement), are in :mod:`~ppl_sparsegp.features.fourier_nufft`; the streaming over
chunks and devices in ``features/fourier_streaming.py``. Cost per chunk of n rows:
O(n w² D²) with ``method="nufft"`` (w ≈ 13 at eps = 1e-12) instead of O(n M² D²) with
``method="dense"``; max-norm relative error below 1e-9 at the default eps.

Inputs may be NumPy arrays, ``np.memmap`` files or chunked arrays: anything with ``.shape`` whose row
slices ``np.asarray`` converts; a pandas DataFrame with ``columns=`` (covariates) and ``y=`` (the
target's name). Chunks are spread over all JAX devices (``shard_map``; each device sums its own chunk,
the host adds the per-device results in float64), so the result does not depend on the number of
devices beyond rounding.

**Dask** arrays and DataFrames are not pulled to this process: each partition's statistics are
computed on the Dask workers (the same per-chunk functions, in float64 whatever the worker's JAX
configuration) and summed in a tree, so only :math:`O(M^2)` numbers per partition travel
(:mod:`~ppl_sparsegp.features.fourier_dask`; Dask is optional and imported only for Dask inputs).

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, JMLR 18.
    2. Barnett, Magland, af Klinteberg (2019), A parallel nonuniform fast Fourier transform library
       based on an "exponential of semicircle" kernel, SIAM J. Sci. Comput. 41(5).
"""
from __future__ import annotations

from functools import partial
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np

from ..covariances import Kuf, Kuu, SufficientStatistics, sufficient_statistics
from ..kernels import Additive, Kernel, Matern12, Matern32, Matern52, constant_kernel_diagonal
from ..validation import (
    AFeature,
    AKernel,
    AnyOf,
    ArrayOf,
    Flag,
    InstanceOf,
    Integer,
    MaybeCount,
    Names,
    OneOf,
    OrNone,
    Real,
    validated,
)
from .combinations import AdditiveFeatures
from .fourier import FourierFeatures
from .fourier_streaming import (
    METHODS,
    check_method,
    device_mesh,
    is_dask,
    projection_pass,
    refuse_devices,
    select_columns,
    statistics_pass,
)

__all__ = ["fourier_statistics", "fourier_conditional", "METHODS"]  # fourier_box_features: a helper of the two


#: inputs of any array kind, checked for their rank only (a memory-mapped or Dask array is not read to be
#: checked: the pass refuses NaN/inf and values outside the box where it reads them)
Rows = Annotated[Any, ArrayOf(rank=(1, 2), read=False)]
Targets = Annotated[Any, AnyOf(ArrayOf(read=False), InstanceOf(str, what="a column name"))]  # its shape: the pass
Eps = Annotated[float, Real(0.0, 1.0, low_open=True, high_open=True)]  # nufft: [1e-15, 1), checked by the pass
_SPLIT = Integer(2)
_SPLIT.allowed = "an integer ≥ 2"
SplitEvery = Annotated[int, _SPLIT]
MaybeNames = Annotated[Any, OrNone(Names())]
Method = Annotated[str, OneOf(*METHODS)]
Devices = Annotated[Any, OrNone(InstanceOf(list, tuple, what="a list of JAX devices (e.g. jax.devices())"))]
MaybeOperator = Annotated[Any, OrNone(InstanceOf("ppl_sparsegp.linalg.base.LinearOperator",
                                                 what="a linear operator (e.g. Dense(S))"))]


# --- features and inputs ----------------------------------------------------------------------------
def fourier_box_features(feature) -> tuple:
    """The 1-D :class:`FourierFeatures` of a FourierFeatures or an AdditiveFeatures of them."""
    if isinstance(feature, FourierFeatures):
        return (feature,)
    if isinstance(feature, AdditiveFeatures) and all(isinstance(f, FourierFeatures) for f in feature.features):
        return tuple(feature.features)
    raise ValueError("fourier_statistics needs a FourierFeatures or an AdditiveFeatures of FourierFeatures, "
                     f"got {type(feature).__name__}")


def _finish(total) -> SufficientStatistics:
    A, c, f1, yy, ysum, n = total
    if not n > 0:
        raise ValueError("X has no rows")
    A = 0.5 * (A + A.T)
    return SufficientStatistics(A=jnp.asarray(A), c=jnp.asarray(c), yy=jnp.asarray(yy), n=jnp.asarray(n),
                                f1=jnp.asarray(f1), ysum=jnp.asarray(ysum))


@validated
def fourier_statistics(feature: AFeature, X: Rows, y: Targets, *, columns: MaybeNames = None,
                       chunk_size: MaybeCount = None, method: Method = "dense", eps: Eps = 1e-12,
                       devices: Devices = None, split_every: SplitEvery = 8) -> SufficientStatistics:
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
    if is_dask(X) or is_dask(y):
        refuse_devices(devices)
        chunk_size = check_method(method, eps, chunk_size, local=False)
        from .fourier_dask import dask_statistics

        return _finish(dask_statistics(features, X, y, columns=columns, chunk_size=chunk_size, method=method,
                                       eps=float(eps), split_every=split_every))
    chunk_size = check_method(method, eps, chunk_size)
    if columns is not None:
        names = select_columns(X, y, columns, len(features))
        X, y = X[names[:-1]].to_numpy(np.float64), X[names[-1]].to_numpy(np.float64)
    return _finish(statistics_pass(features, X, y, chunk_size=chunk_size, method=method, eps=eps,
                                    mesh=device_mesh(devices)))


@validated
def fourier_conditional(feature: AFeature, kernel: AKernel, X: Rows, q_mu: Annotated[Any, ArrayOf(rank=1)],
                        q_cov: MaybeOperator = None, *, whiten: Flag = False, Kmm: MaybeOperator = None,
                        columns: MaybeNames = None, chunk_size: MaybeCount = None, method: Method = "dense",
                        eps: Eps = 1e-12, devices: Devices = None):
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
    dask_input = is_dask(X)
    chunk_size = check_method(method, eps, chunk_size, local=not dask_input)
    alpha, C, kff = _projection_operands(feature, kernel, q_mu, q_cov, Kmm, whiten)
    if dask_input:
        refuse_devices(devices)
        from .fourier_dask import dask_conditional

        return dask_conditional(features, X, (np.asarray(alpha, np.float64), np.asarray(C, np.float64),
                                              float(kff)), columns=columns, chunk_size=chunk_size,
                                method=method, eps=float(eps))
    if columns is not None:
        X = X[select_columns(X, None, columns, len(features), target=False)].to_numpy(np.float64)
    return projection_pass(features, X, alpha, C, kff, chunk_size=chunk_size, method=method, eps=eps,
                            mesh=device_mesh(devices))


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
