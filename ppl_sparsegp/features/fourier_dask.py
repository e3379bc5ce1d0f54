r"""Dask inputs for the one-pass VFF statistics and the streaming conditional: the work runs on the workers.

:func:`~ppl_sparsegp.features.fourier_statistics.fourier_statistics` and
:func:`~ppl_sparsegp.features.fourier_statistics.fourier_conditional` dispatch here when X (or y) is a
Dask array or DataFrame; call those two (nothing here is public). Dask is optional: this module is
imported only for Dask inputs (``pip install 'ppl-sparsegp[dask]'``).

**Statistics.** Every statistic is a sum over rows, so with the rows split into partitions p

.. math::

    A = \sum_p A_p,\quad A_p = \sum_{n\in p}\boldsymbol\phi_n\boldsymbol\phi_n^\top,

and likewise :math:`\mathbf c, \mathbf f_1, \mathbf y^\top\mathbf y, \sum_n y_n, N` [1, §5.2]. Each
partition's sums are computed where the partition is (a Dask task on a worker) by the same streaming
pass as in memory (``fourier_streaming.statistics_pass``: chunks over
the worker's JAX devices, the box and NaN checks, ``method="dense"`` or ``"nufft"``), then added in a
tree whose nodes each add ``split_every`` partial sums, on the workers too. No row reaches the driver:
each partition sends one tuple of :math:`M^2 + 2M + 3` float64 numbers (M features; e.g. 1.8 MB for
the 472 airline features) to its tree node, and the driver receives the root's tuple. The tree's
grouping is fixed by the graph, so the result does not depend on which worker computed which partition
(a task lost with its worker is recomputed by Dask, ``distributed.scheduler.allowed-failures``).

**Precision.** Each task runs under ``jax.enable_x64(True)`` (thread-local), so its sums are float64
whatever its worker process's JAX configuration (a fresh worker process has float64 off); the tree adds
NumPy float64 arrays.

**Threads and shapes.** A task runs FINUFFT with one thread per JAX device of its worker: Dask's
parallelism is across tasks (workers × threads per worker), so give the workers one thread per core.
A partition smaller than one group of chunks is padded (weight 0) to a power of two rows per device,
so partitions of many sizes share a few compiled shapes per worker.

**Prediction.** ``dask_conditional`` maps the in-memory projection pass over X's row blocks
(``map_blocks``); the O(M²) operands (α, C, k(x, x)) enter the graph once, as one Delayed. It returns
lazy Dask arrays (mean, var) with X's row chunks; nothing is computed until the caller computes them.

References:
    1. Hensman, Durrande, Solin (2018), Variational Fourier features for Gaussian processes, JMLR 18.
"""
from __future__ import annotations

import math

import jax
import numpy as np

from .fourier import FourierFeatures
from .fourier_streaming import (
    check_x_shape,
    device_mesh,
    feature_spec,
    projection_pass,
    select_columns,
    statistics_pass,
)

try:
    import dask
    import dask.array as da
except ImportError as e:  # pragma: no cover - only reached for Dask inputs, so Dask is there
    raise ImportError("Dask inputs need Dask: pip install 'ppl-sparsegp[dask]'") from e

#: no public names: the Dask backends of fourier_statistics / fourier_conditional (the public entry points,
#: which validate the arguments and pass Dask inputs here)
__all__: list = []


def _x64():
    """A thread-local float64 context (``jax.enable_x64``; ``jax.experimental.enable_x64`` before 0.8)."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64  # pragma: no cover - older JAX

    return enable_x64()


# --- inputs ----------------------------------------------------------------------------------------
def _known(chunks) -> bool:
    return all(not math.isnan(c) for c in chunks)


def _rows_of(X, y, columns, D, *, target=True):
    """(X, y) as Dask arrays with the same row chunks, X (N, D) in one column chunk; y None without
    ``target``, and for a DataFrame, whose (N, D + 1) table [covariates | target] is returned as X (one
    array: each partition is read once). Validates shapes, row counts and DataFrame column names with
    the in-memory messages."""
    if columns is not None or hasattr(X, "columns"):
        if columns is None:
            raise ValueError("X is a DataFrame: name its covariate columns with columns=[...] (one per input "
                             "dimension, in the features' order)" + (" and the target with y='name'"
                                                                    if target else ""))
        names = select_columns(X, y, columns, D, target=target)
        return X[names].astype("float64").to_dask_array(), None  # row chunks unknown: nothing computed
    if hasattr(y, "to_dask_array"):  # a Dask Series
        y = y.to_dask_array()
    if not dask.is_dask_collection(X):  # an in-memory X with a Dask y: X's blocks follow y's
        if not _known(y.chunks[0]):
            raise ValueError("y is a Dask array of unknown chunk sizes and X is in memory: pass X as a Dask "
                             "array with the same row chunks (or call y.compute_chunk_sizes())")
        X = np.asarray(X)
        if X.ndim and len(X) != y.shape[0]:
            raise ValueError(f"X has {len(X)} rows but y has {y.shape[0]}")
        X = da.from_array(X, chunks=(y.chunks[0],) + X.shape[1:])
    shape = check_x_shape(X, D)
    if len(shape) == 1:
        X = X[:, None]
    if X.numblocks[1] > 1:
        X = X.rechunk({1: -1})
    if not target:
        return X, None
    if not dask.is_dask_collection(y):
        y = np.asarray(y)
        if y.ndim != 1:
            raise ValueError(f"y must be a vector of shape (N,), got shape {y.shape}")
        if not _known(X.chunks[0]):
            raise ValueError("X is a Dask array of unknown chunk sizes and y is in memory: pass y as a Dask "
                             "array with the same row chunks (or call X.compute_chunk_sizes())")
        if len(y) != X.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {len(y)}")
        y = da.from_array(y, chunks=(X.chunks[0],))
    if y.ndim != 1:
        raise ValueError(f"y must be a vector of shape (N,), got shape {tuple(y.shape)}")
    if _known(X.chunks[0]) and _known(y.chunks[0]):
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
        if y.chunks[0] != X.chunks[0]:
            y = y.rechunk({0: X.chunks[0]})
    elif X.numblocks[0] != y.numblocks[0]:
        raise ValueError(f"X and y have {X.numblocks[0]} and {y.numblocks[0]} row blocks of unknown sizes: "
                         "give them the same partitions (e.g. both columns of one DataFrame)")
    return X, y


def _locations(chunks):
    """Per row block (offset, where) for error messages: global row numbers where the chunk sizes are
    known, else rows within the partition and its index."""
    if _known(chunks):
        return [(int(o), "") for o in np.cumsum((0,) + tuple(chunks[:-1]))]
    return [(0, f" of partition {i}") for i in range(len(chunks))]


# --- statistics -----------------------------------------------------------------------------------
def _partition_statistics(Xb, yb, spec, method, eps, chunk_size, offset, where):
    """The worker task: ``[A, c, f1, yy, ysum, n]`` of one partition, float64 NumPy (``yb`` None: the
    target is Xb's last column)."""
    features = tuple(FourierFeatures(*s) for s in spec)
    with _x64():  # thread-local: whatever the worker's configuration
        Xb = np.asarray(Xb, np.float64)
        Xb, yb = (Xb[:, :-1], Xb[:, -1]) if yb is None else (Xb, np.asarray(yb, np.float64))
        if len(Xb) != len(yb):
            raise ValueError(f"X has {len(Xb)} rows but y has {len(yb)}{where}")
        if len(Xb) == 0:  # e.g. a filtered-out Parquet partition
            m = sum(f.num_features for f in features)
            return [np.zeros((m, m)), np.zeros(m), np.zeros(m), np.float64(0), np.float64(0), np.float64(0)]
        return statistics_pass(features, Xb, yb, chunk_size=chunk_size, method=method, eps=eps,
                                mesh=device_mesh(None), threads=1, offset=offset, where=where, bucket=True)


def _add(*parts):
    """One node of the reduction tree: the elementwise sum of partial statistics, in a fixed order."""
    total = [np.array(p, np.float64, copy=True) for p in parts[0]]
    for part in parts[1:]:
        for t, p in zip(total, part):
            t += p
    return total


def _tree_sum(parts, split_every):
    """Delayed partial sums added ``split_every`` at a time until one is left (depth ⌈log_k P⌉)."""
    add = dask.delayed(_add, pure=True)
    while len(parts) > 1:
        parts = [add(*parts[i:i + split_every]) if len(parts[i:i + split_every]) > 1 else parts[i]
                 for i in range(0, len(parts), split_every)]
    return parts[0]


def dask_statistics(features, X, y, *, columns, chunk_size, method, eps, split_every):
    """``[A, c, f1, yy, ysum, n]`` (A not symmetrised) of Dask inputs, computed on the workers with the
    current Dask scheduler (a ``distributed.Client`` when one is the default, else Dask's default)."""
    if int(split_every) != split_every or split_every < 2:
        raise ValueError(f"split_every must be an integer ≥ 2, got {split_every!r}")
    X, y = _rows_of(X, y, columns, len(features))
    if y is None:  # a DataFrame's table: one array, its graph optimised (read, select, convert fused)
        xs, ys = X.to_delayed().ravel(), [None] * X.numblocks[0]
    else:  # two arrays may share their sources (slices of one array): optimised apart, they would be
        # computed twice, so their graphs are kept as they are
        xs, ys = X.to_delayed(optimize_graph=False).ravel(), y.to_delayed(optimize_graph=False).ravel()
    task = dask.delayed(_partition_statistics, pure=True)
    spec = feature_spec(features)
    parts = [task(xb, yb, spec, method, eps, chunk_size, offset, where)
             for xb, yb, (offset, where) in zip(xs, ys, _locations(X.chunks[0]))]
    return dask.compute(_tree_sum(parts, int(split_every)))[0]


# --- prediction -----------------------------------------------------------------------------------
def _partition_projection(Xb, operands, spec, method, eps, chunk_size, block_info=None):
    """The worker task: [mean, var] of one row block, (n, 2) float64."""
    features = tuple(FourierFeatures(*s) for s in spec)
    start = block_info[0]["array-location"][0][0]
    offset, where = ((0, f" of partition {block_info[0]['chunk-location'][0]}") if math.isnan(start)
                     else (int(start), ""))
    with _x64():
        Xb = np.asarray(Xb, np.float64)
        if len(Xb) == 0:
            return np.zeros((0, 2))
        alpha, C, kff = operands
        mean, var = projection_pass(features, Xb, alpha, C, kff, chunk_size=chunk_size, method=method,
                                     eps=eps, mesh=device_mesh(None), threads=1, offset=offset, where=where,
                                     bucket=True)
    return np.stack([mean, var], axis=1)


def dask_conditional(features, X, operands, *, columns, chunk_size, method, eps):
    """Lazy ``(mean, var)`` Dask arrays over X's row blocks; ``operands`` = (α, C, k(x, x)) in float64."""
    X, _ = _rows_of(X, None, columns, len(features), target=False)
    out = X.map_blocks(_partition_projection, operands=dask.delayed(operands, pure=True), spec=feature_spec(features),
                       method=method, eps=eps, chunk_size=chunk_size, chunks=(X.chunks[0], (2,)),
                       dtype=np.float64, meta=np.empty((0, 2), np.float64))
    return out[:, 0], out[:, 1]
