r"""The streaming engine of VFF's one-pass statistics (:mod:`~ppl_sparsegp.features.fourier_statistics`):
input checks, row chunks spread over the JAX devices (``shard_map``; each device sums its own chunk, the
host adds the per-device results in float64), and the column selection of DataFrames. The per-chunk
mathematics is :mod:`~ppl_sparsegp.features.fourier_nufft`; the Dask path,
:mod:`~ppl_sparsegp.features.fourier_dask`, runs :func:`statistics_pass` and :func:`projection_pass` on
each partition. Internal: no public API (the names without an underscore are shared with
``fourier_statistics`` and ``fourier_dask``)."""
from __future__ import annotations

import os
import sys
from functools import lru_cache, partial

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..validation import warn_user
from .fourier import FourierFeatures
from .fourier_nufft import chunk_projection, chunk_statistics

METHODS = ("dense", "nufft")
DEFAULT_CHUNK = {"dense": 8192, "nufft": 1 << 16}
_AXIS = "data"


def _rows(X, start, stop, D):
    """Rows start:stop of X as a float64 (n, D) NumPy array (works for arrays, memmaps, Dask arrays)."""
    block = np.asarray(X[start:stop], dtype=np.float64)
    return block.reshape(-1, 1) if block.ndim == 1 and D == 1 else block


def check_x_shape(X, D):
    """X of shape (N, D), or (N,) for D = 1 (in memory or Dask); returns the shape."""
    shape = tuple(getattr(X, "shape", ()))
    if not (len(shape) == 2 and shape[1] == D) and not (len(shape) == 1 and D == 1):
        hint = (" (for a DataFrame, name its covariate columns with columns=[...] and the target with "
                "y='name')") if hasattr(X, "columns") else ""
        raise ValueError(f"X must have shape (N, {D}) for {D} Fourier feature dimension(s), got shape "
                         f"{shape}{hint}")
    return shape


def _check_shapes(features, X, y):
    shape = check_x_shape(X, len(features))
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
        if lo < f.lower or hi > f.upper:
            bad = lo if lo < f.lower else hi
            raise ValueError(
                f"{name}[:, {d}] (dimension {d}) has the value {float(bad)!r} outside the box [lower, upper] = "
                f"[{f.lower}, {f.upper}] of its FourierFeatures (rows {start}..{start + len(Xb) - 1}{where}): "
                f"precomputed statistics need the box to contain "
                f"the data (widen [lower, upper], or use CollapsedGP on the raw data)")



def feature_spec(features):
    """A hashable description (lower, upper, M) per dimension, the cache key of the compiled chunk functions."""
    return tuple((f.lower, f.upper, f.num_frequencies) for f in features)


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
    fn = partial({"stats": chunk_statistics, "projection": chunk_projection}[kind], features, method, eps, threads)

    def body(*args):
        local = [x[0] for x in args[:num_sharded]] + list(args[num_sharded:])
        return jax.tree.map(lambda o: o[None], fn(*local))

    specs = (PartitionSpec(_AXIS),) * num_sharded + (PartitionSpec(),) * num_replicated
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=PartitionSpec(_AXIS),
                                 check_vma=False))


def nufft_mesh(mesh, method):
    """The mesh a pass runs on: ``mesh``, except for ``method="nufft"`` on several CPU devices, which runs
    on the first alone. FINUFFT's CPU library plans its FFTs with FFTW, whose planner is not thread-safe,
    and XLA runs the host devices' programs in threads of one process: two type-1 NUFFTs planned at once
    can crash the process (a segfault met in the test suite, two forced host devices; FINUFFT issue
    threads name the same race). FINUFFT keeps the threads per call it had on the mesh given (its
    multi-threaded spreading adds in no fixed order, so the threads are not raised behind the caller's back)."""
    devices = list(mesh.devices.flat)
    if method == "nufft" and len(devices) > 1 and all(d.platform == "cpu" for d in devices):
        return Mesh(np.array(devices[:1]), (_AXIS,))
    return mesh


def device_mesh(devices):
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("devices must be a non-empty sequence of JAX devices")
    return Mesh(np.array(devices), (_AXIS,))


def check_method(method, eps, chunk_size, *, local=True):
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
        warn_user("float64 is disabled (jax_enable_x64): per-chunk statistics are computed in "
                  "float32; enable float64 for large N")
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


def statistics_pass(features, X, y, *, chunk_size, method, eps, mesh, threads=None, offset=0, where="",
                     bucket=False):
    """The one streaming pass in this process: ``[A, c, f1, yy, ysum, n]`` as float64 NumPy sums over
    the rows of (X, y) (A not yet symmetrised); row numbers in errors start at ``offset``, followed by
    ``where``; ``bucket`` as :func:`_stream`. Also the per-partition work of the Dask path
    (:mod:`.fourier_dask`)."""
    N, D = _check_shapes(features, X, y)
    threads, mesh = _threads(mesh, threads), nufft_mesh(mesh, method)  # FINUFFT's threads as on the mesh given
    inside = np.array([f.lower for f in features])  # padding rows: a point inside every box

    def load(start, stop):
        Xb = _rows(X, start, stop, D)
        yb = np.asarray(y[start:stop], dtype=np.float64)
        _check_box(features, Xb, offset + start, where=where)
        if not np.all(np.isfinite(yb)):
            raise ValueError(f"y contains NaN or inf (rows {offset + start}..{offset + stop - 1}{where})")
        return [(Xb, inside), (np.ones(stop - start), 0.0), (yb, 0.0)]

    step = _compiled("stats", feature_spec(features), method, float(eps), mesh, 3, 0, threads)
    total = None
    for out in _stream(X, N, D, chunk_size, mesh, load, step, bucket):
        part = [np.sum(np.asarray(o, np.float64), axis=0) for o in out]
        total = part if total is None else [t + p for t, p in zip(total, part)]
    return total


def projection_pass(features, X, alpha, C, kff, *, chunk_size, method, eps, mesh, threads=None, offset=0,
                     where="", bucket=False):
    """(mean, var) float64 NumPy arrays over the rows of X, streamed in this process (also the
    per-partition work of the Dask path)."""
    N, D = _check_shapes(features, X, None)
    threads, mesh = _threads(mesh, threads), nufft_mesh(mesh, method)
    inside = np.array([f.lower for f in features])

    def load(start, stop):
        Xb = _rows(X, start, stop, D)
        _check_box(features, Xb, offset + start, where=where)
        return [(Xb, inside)]

    step = _compiled("projection", feature_spec(features), method, float(eps), mesh, 1, 2, threads)
    means, quads = [], []
    for mean, quad in _stream(X, N, D, chunk_size, mesh, load, lambda Xs: step(Xs, alpha, C), bucket):
        means.append(np.asarray(mean, np.float64).reshape(-1))
        quads.append(np.asarray(quad, np.float64).reshape(-1))
    mean = np.concatenate(means)[:N]
    var = np.maximum(float(kff) - np.concatenate(quads)[:N], 0.0)
    return mean, var


def is_dask(x) -> bool:
    """Whether x is a Dask collection (without importing Dask: none exists before Dask is imported)."""
    dask = sys.modules.get("dask")
    return x is not None and dask is not None and dask.is_dask_collection(x)


def select_columns(table, y, columns, D, *, target=True):
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


def refuse_devices(devices):
    if devices is not None:
        raise ValueError("devices= is for in-process inputs; with Dask inputs each worker uses its own "
                         "JAX devices: leave devices=None")

