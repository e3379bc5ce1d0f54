r"""Data-sharded likelihoods on JAX's own distributed runtime: the data live on a mesh, the model does not
change.

The likelihood of a sparse GP is a sum over the N data points of terms that each need one column of the
M × N matrix :math:`K_{uf}`,

.. math::

    \log p(\mathbf y\mid\mathbf u, \theta) = \sum_{s=1}^{S}\;\sum_{n\in\mathcal B_s}
    \mathbb E_{p(f_n\mid\mathbf u)}\log p(y_n\mid f_n),

so with the rows split into S blocks :math:`\mathcal B_s` (one per device), each device computes its block
of :math:`K_{uf}` (M × N/S) and its partial sum where its rows live; the inducing variables and the
hyperparameters are replicated, and one all-reduce of a scalar (forward) and of the gradient's
:math:`\dim\theta + M'` numbers (backward) joins the blocks. Per gradient: :math:`O(NM/S)` per device for
the likelihood (:math:`O(NM^2/S)` for inducing points' triangular solve), plus the replicated :math:`K_{uu}`
work (:math:`O(M)` for VFF, :math:`O(M^3)` for inducing points) that does not shrink with S [1, 2].

The recipe (one machine, S devices; on CPU ``XLA_FLAGS=--xla_force_host_platform_device_count=S``
before JAX starts)::

    from ppl_sparsegp.sharding import data_mesh, shard_data
    X, y = shard_data(X, y, data_mesh())  # rows split over the mesh's "data" axis
    mcmc = MCMC(NUTS(gp.model), num_warmup=500, num_samples=500, jit_model_args=True)
    mcmc.run(key, X, y)  # data enter jit as arguments: they stay where they are

    svi_state = svi.init(key, X, y)
    update = jax.jit(svi.update)  # not svi.run: it closes over X, y (see below)
    for _ in range(steps): svi_state, loss = update(svi_state, X, y)

Several processes (one per host on a cluster; ``python -m inference.launch --processes 2 -- <module>``
on one machine): call :func:`initialize_distributed` first, load only this process's rows
(:func:`process_rows`), and :func:`shard_data` assembles the global arrays from them
(``jax.make_array_from_process_local_data``); every process then runs the same program.

**Data must enter ``jit`` as arguments.** A jitted function that *closes over* an array embeds it in the
compiled program as a constant, on one device (its sharding is lost); across processes that is not
possible at all. NumPyro's ``MCMC`` passes the model's arguments through ``jit`` with
``jit_model_args=True``; ``SVI.run`` closes over them, so call ``jax.jit(svi.update)`` with the data.

How the sum is split: inside the models, :func:`map_rows` runs the per-point computation (the
conditional :math:`p(f_n\mid\mathbf u)`, which builds :math:`K_{uf}`) in ``jax.shard_map`` over the
``"data"`` axis of the mesh the data live on (or of the ambient mesh, ``jax.set_mesh``). Sharding
propagation alone is not enough: XLA's partitioner gathers the right-hand side of a triangular solve,
so the whitening :math:`L^{-1}K_{uf}` of inducing points would gather the whole M × N matrix on every
device (and VFF's Woodbury solve an r × N one); inside ``shard_map`` every operation is local.

References:
    1. Hensman, Fusi, Lawrence (2013), Gaussian processes for big data, UAI (the likelihood as a sum over
       data, the basis of data-parallel sparse GPs).
    2. Gal, van der Wilk, Rasmussen (2014), Distributed variational inference in sparse Gaussian process
       regression and latent variable models, NeurIPS (map-reduce over data shards, global parameters
       replicated).
"""
from __future__ import annotations

import os
from typing import Annotated, Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .validation import (
    ArrayOf,
    Boolean,
    Count,
    InstanceOf,
    IsCallable,
    Key,
    NonNegativeInt,
    OrNone,
    PositiveInt,
    SequenceOf,
    validated,
)

# is_distributed and local_blocks are not listed: the approximations' input checks use them on arrays they
# already validated (they are no user's entry point)
__all__ = ["DATA_AXIS", "data_mesh", "shard_data", "process_rows", "map_rows", "find_data_mesh",
           "initialize_distributed", "LAUNCHER_ENV"]

#: the name of a mesh axis
_AXIS = Annotated[str, InstanceOf(str, what="a mesh axis name (a string, e.g. \"data\")")]
#: an array with rows first, read for its shape only (a distributed array cannot be read on one host)
_ROWS = ArrayOf(read=False)
_MESH = InstanceOf(Mesh, type(None), what="a jax.sharding.Mesh (see data_mesh()) or None (every device)")

#: the name of the mesh axis the rows of the data are split over
DATA_AXIS = "data"

#: environment variables the launcher (``python -m inference.launch``) sets for each process, read by
#: :func:`initialize_distributed` (JAX itself reads ``JAX_COORDINATOR_ADDRESS``)
LAUNCHER_ENV = ("JAX_COORDINATOR_ADDRESS", "PPL_SPARSEGP_NUM_PROCESSES", "PPL_SPARSEGP_PROCESS_ID")

#: cluster managers whose process count :func:`initialize_distributed` reads to decide whether to join
#: (``jax.distributed.initialize()`` then detects the coordinator, the process count and id itself)
_CLUSTER_SIZE = ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


@validated
def initialize_distributed(*, coordinator_address: Annotated[str | None, OrNone(InstanceOf(str, what="a host:port"))]
                           = None, num_processes: Annotated[int | None, OrNone(PositiveInt())] = None,
                           process_id: Annotated[int | None, OrNone(NonNegativeInt())] = None, **kwargs) -> bool:
    """Join JAX's distributed runtime when this process is one of several; returns whether it did.

    Call it first, before anything runs on a JAX device. In order:

    * explicit arguments, or the launcher's environment (:data:`LAUNCHER_ENV`, set by ``python -m
      inference.launch --processes N -- ...``): ``jax.distributed.initialize(coordinator_address,
      num_processes, process_id)``;
    * a cluster job with more than one task (``SLURM_NTASKS``, ``OMPI_COMM_WORLD_SIZE``, ``PMI_SIZE``):
      ``jax.distributed.initialize()`` with no arguments, which reads the coordinator (the job's first
      node), the process count and this process's id from the cluster manager;
    * otherwise: nothing (one process), returns False.

    On CPU the collectives between processes are gloo's (``jax_cpu_collectives_implementation``, set
    here when unset); on GPU they are NCCL's. ``kwargs`` go to ``jax.distributed.initialize`` (e.g.
    ``initialization_timeout``, ``local_device_ids``).

    :raises ValueError: a launcher variable that is not an integer, or a process id out of range.
    """
    if jax.distributed.is_initialized():
        return True
    env = os.environ
    if num_processes is None and env.get(LAUNCHER_ENV[1]):
        num_processes = _env_int(LAUNCHER_ENV[1])
    if process_id is None and env.get(LAUNCHER_ENV[2]):
        process_id = _env_int(LAUNCHER_ENV[2])
    explicit = coordinator_address is not None or num_processes is not None or process_id is not None
    cluster = any(_env_int(k, default=1) > 1 for k in _CLUSTER_SIZE if env.get(k))
    if not explicit and not cluster:
        return False
    if num_processes is not None and process_id is not None and not 0 <= process_id < num_processes:
        raise ValueError(f"process_id must be in 0..{num_processes - 1}, got {process_id}")
    if jax.config.jax_cpu_collectives_implementation is None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                               process_id=process_id, **kwargs)
    return True


def _env_int(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} must be an integer") from None


@validated
def data_mesh(devices: Annotated[Any, OrNone(SequenceOf(InstanceOf("jax.Device", what="a JAX device (jax.devices())"),
                                                        min_len=0))] = None, *, axis: _AXIS = DATA_AXIS) -> Mesh:
    """A one-dimensional mesh whose axis ``axis`` runs over ``devices`` (default ``jax.devices()``: every
    device of every process, in process order).

    :raises ValueError: when ``devices`` is empty.
    """
    devices = jax.devices() if devices is None else list(devices)
    if len(devices) == 0:
        raise ValueError("data_mesh: devices is empty; pass None for every device, or a non-empty list")
    return Mesh(np.asarray(devices, dtype=object), (axis,))


@validated
def process_rows(n: Count, *, process_id: Annotated[int | None, OrNone(NonNegativeInt())] = None,
                 num_processes: Annotated[int | None, OrNone(PositiveInt())] = None) -> slice:
    """The contiguous rows ``[i n/P, (i+1) n/P)`` of an N-row data set that process i of P loads (and
    passes to :func:`shard_data`): the global row order is then the data set's.

    :param n: N, the rows of the whole data set.
    :param process_id: i (default ``jax.process_index()``); ``num_processes``: P (default
        ``jax.process_count()``).
    :returns: a slice of the rows.
    :raises ValueError: when n is not divisible by the number of devices of all processes (every device
        holds the same number of rows; the message says how many rows to drop).
    """
    P = jax.process_count() if num_processes is None else int(num_processes)
    i = jax.process_index() if process_id is None else int(process_id)
    devices = jax.device_count() if num_processes is None else P * jax.local_device_count()
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < devices:
        raise ValueError(f"process_rows: n must be an integer ≥ the {devices} device(s), got {n!r}")
    if n % devices:
        raise ValueError(f"process_rows: n = {n} rows do not split evenly over {devices} devices; "
                         f"use the first {n - n % devices} rows (drop {n % devices})")
    k = n // P
    return slice(i * k, (i + 1) * k)


def _row_sharding(mesh: Mesh, ndim: int, axis: str) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec(axis, *([None] * (ndim - 1))))


@validated
def shard_data(X: Annotated[Any, _ROWS], y: Annotated[Any, OrNone(_ROWS)] = None,
               mesh: Annotated[Mesh | None, _MESH] = None,
               *, axis: _AXIS = DATA_AXIS, process_local: Annotated[bool | None, OrNone(Boolean())] = None):
    """Place ``X`` (N, D) and ``y`` (N,) (and any array with rows first) on ``mesh`` with their rows split
    over the axis ``axis``: device s holds rows ``[s N/S, (s+1) N/S)``. Returns ``(X, y)`` (``y`` None
    when not given).

    :param mesh: default :func:`data_mesh` (every device of every process).
    :param process_local: whether each process passes only its own rows (default: when there are
        several processes). Then the global arrays are assembled with
        ``jax.make_array_from_process_local_data`` (every process must hold the same number of rows; see
        :func:`process_rows`); otherwise every process passes all N rows and keeps the ones its devices
        own.

    Every device must hold the same number of rows: the models do not weight observations, so padding
    with dummy rows would change the likelihood. N not divisible by the number of devices raises
    ``ValueError`` with the number of rows to drop (or subsample the data to a multiple).
    """
    mesh = data_mesh(axis=axis) if mesh is None else mesh
    if not isinstance(mesh, Mesh):
        raise TypeError(f"shard_data: mesh must be a jax.sharding.Mesh (see data_mesh()), got "
                        f"{type(mesh).__name__}")
    if axis not in mesh.axis_names:
        raise ValueError(f"shard_data: mesh has axes {mesh.axis_names}, not {axis!r}; build it with "
                         f"data_mesh() or pass axis=")
    if process_local is None:
        process_local = jax.process_count() > 1
    arrays = {"X": X, "y": y}
    if hasattr(X, "points"):
        raise TypeError("shard_data: X is a Grid; pass its points (X.points()) to shard them by rows")
    size = mesh.shape[axis]
    local = sum(d.process_index == jax.process_index() for d in mesh.devices.flat)
    out, n_rows = [], None
    for name, a in arrays.items():
        if a is None:
            out.append(None)
            continue
        a = a if isinstance(a, jax.Array) and not process_local else np.asarray(a)
        if a.ndim == 0:
            raise ValueError(f"shard_data: {name} must have rows (shape (N, ...)), got a scalar")
        if n_rows is not None and a.shape[0] != n_rows:
            raise ValueError(f"shard_data: X has {n_rows} rows but y has {a.shape[0]}")
        n_rows = a.shape[0]
        sharding = _row_sharding(mesh, a.ndim, axis)
        if process_local:
            if local == 0 or n_rows % local:
                raise ValueError(f"shard_data: this process holds {n_rows} rows of {name}, not divisible by "
                                 f"its {local} device(s) on the mesh; load process_rows(N) rows per process "
                                 f"(N a multiple of {size})")
            _same_everywhere(n_rows, name)
            out.append(jax.make_array_from_process_local_data(sharding, a))
        else:
            if n_rows % size:
                raise ValueError(f"shard_data: N = {n_rows} rows of {name} do not split evenly over {size} "
                                 f"devices; use {name}[:{n_rows - n_rows % size}] (drop {n_rows % size} rows) "
                                 f"or subsample to a multiple of {size}: the models do not weight "
                                 f"observations, so rows cannot be padded")
            if isinstance(a, jax.Array) and a.is_fully_addressable:
                out.append(jax.device_put(a, sharding))
            else:
                arr = np.asarray(a)
                out.append(jax.make_array_from_callback(arr.shape, sharding, lambda idx, arr=arr: arr[idx]))
    return tuple(out)


def _same_everywhere(n_local: int, name: str):
    """Every process must pass the same number of rows (a collective: every process calls it)."""
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    counts = np.asarray(multihost_utils.process_allgather(np.asarray([n_local]))).ravel()
    if np.any(counts != counts[0]):
        raise ValueError(f"shard_data: the processes hold different numbers of rows of {name} "
                         f"({counts.tolist()}); load process_rows(N) rows in each")


@validated
def find_data_mesh(*arrays, axis: _AXIS = DATA_AXIS) -> Mesh | None:
    """The mesh whose axis ``axis`` the arrays' rows are split over, or None.

    Looked up on the first array that has one: a concrete ``jax.Array``'s ``NamedSharding``, or, under
    ``jit``, the abstract mesh of its type (``jax.typeof(x).sharding``); then the ambient mesh
    (``jax.set_mesh``). None when the arrays live on one device (every computation then runs as before).
    """
    for a in arrays:
        if a is None:
            continue
        if isinstance(a, jax.core.Tracer):
            sharding = getattr(jax.typeof(a), "sharding", None)
        else:
            sharding = getattr(a, "sharding", None)
        mesh = getattr(sharding, "mesh", None) if isinstance(sharding, NamedSharding) else None
        if mesh is not None and axis in mesh.axis_names and mesh.shape[axis] > 1:
            return mesh
    ambient = jax.sharding.get_abstract_mesh()
    if axis in ambient.axis_names and ambient.shape[axis] > 1:
        return ambient
    return None


@validated
def map_rows(fn: Annotated[Any, IsCallable()], *rows, rng_key: Annotated[Any, OrNone(Key(allow_int=False))] = None,
             out_rows: Any = 0, axis: _AXIS = DATA_AXIS) -> Any:
    """``fn(*rows)`` computed block by block where the rows live.

    ``fn`` maps arrays whose leading axis is the data rows to a pytree of per-row arrays, e.g. the
    conditional :math:`p(f_n\\mid\\mathbf u)` marginals; everything it closes over (inducing variables,
    hyperparameters, :math:`K_{uu}`) is replicated. When the rows live on a mesh with an axis ``axis`` of
    S > 1 devices (:func:`find_data_mesh`) and N is divisible by S, ``fn`` runs in ``jax.shard_map`` on
    each device's N/S rows and the outputs come back split the same way (a sum over them is then an
    all-reduce of one number per device); otherwise it is simply ``fn(*rows)``. Gradients flow through
    both: the cotangents of the replicated values are summed over the blocks once, at the boundary.

    :param rng_key: a PRNG key for a Monte Carlo ``fn``, passed as ``fn(*rows, rng_key=...)``: unchanged when
        not sharded, and with the block index folded in per block (independent draws per block; the values
        then differ from the unsharded run's, their distribution does not).
    :param out_rows: the axis of the outputs that runs over the rows: an int for every output (default
        0), or a pytree of ints, a prefix of the output's (e.g. ``(1, 0)`` for a (K, N) mean and an (N,)
        variance).
    """
    if not rows:
        raise ValueError("map_rows: give at least one array of rows")
    for i in jax.tree.leaves(out_rows):  # checked whether sharded or not (a pytree: judged leaf by leaf)
        _out_axis(i, axis)
    mesh = find_data_mesh(*rows, axis=axis)
    n = np.shape(rows[0])[0] if mesh is not None else None
    call = fn if rng_key is None else (lambda *r: fn(*r, rng_key=rng_key))
    if mesh is None or n % mesh.shape[axis] or any(not isinstance(r, (jax.Array, np.ndarray))
                                                  or np.shape(r)[0] != n for r in rows):
        return call(*rows)

    def block(*blocks):
        if rng_key is None:
            return fn(*blocks)
        return fn(*blocks, rng_key=jax.random.fold_in(rng_key, jax.lax.axis_index(axis)))

    in_specs = tuple(PartitionSpec(axis) for _ in rows)
    out_specs = jax.tree.map(lambda i: _out_axis(i, axis), out_rows)
    mapped = jax.shard_map(block, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    if not any(isinstance(r, jax.core.Tracer) for r in rows):
        # outside jit (NumPyro's first, eager run of a model): one compiled program instead of one per
        # operation (which, across processes, synchronises every operation)
        mapped = jax.jit(mapped)
    # check_vma=False: the closed-over replicated values then enter without a per-row "pvary", whose
    # transpose would all-reduce an N/S-vector per broadcast (e.g. k(x, x) = σ² per row); their
    # cotangents are summed at the boundary instead (fn uses no collectives, so this is exact)
    return mapped(*rows)


def _out_axis(i, axis: str) -> PartitionSpec:
    """The output spec of a leaf of ``out_rows`` (a non-negative int: the axis that runs over the rows)."""
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or i < 0:
        raise ValueError(f"map_rows: out_rows must hold non-negative ints (the output axis over the rows, e.g. 0 or "
                         f"(1, 0)), got {i!r}")
    return PartitionSpec(*([None] * int(i)), axis)


def is_distributed(x) -> bool:
    """Whether ``x`` is a concrete ``jax.Array`` some of whose rows live in other processes (then it
    cannot be read on this host: ``np.asarray`` raises)."""
    return isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer) and not x.is_fully_addressable


def local_blocks(x) -> list:
    """The distinct blocks of ``x`` held by this process's devices, as numpy arrays (for validating the
    rows where they live)."""
    seen, out = set(), []
    for shard in x.addressable_shards:
        index = tuple((s.start, s.stop, s.step) if isinstance(s, slice) else s for s in shard.index)
        if index not in seen:
            seen.add(index)
            out.append(np.asarray(shard.data))
    return out
