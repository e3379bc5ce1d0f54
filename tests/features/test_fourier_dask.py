"""The one-pass VFF statistics and the streaming conditional on Dask, against the in-memory path.

The in-memory :func:`fourier_statistics` is itself checked against the dense Kuf in
test_fourier_statistics.py; here each Dask route (arrays, Parquet files read as a Dask DataFrame, the
lazy conditional) must reproduce it to rounding: the same per-row terms added in another grouping, so
a relative max-norm difference of 1e-12 (the sums have ~3000 terms of size ≤ 1: ~1e-13 is rounding).
Each route runs on Dask's default threaded scheduler and on a ``distributed`` scheduler with an
in-process worker (fast), and on a ``LocalCluster`` of two single-threaded worker processes (slow:
worker start-up, JAX import and compilation in each), whose JAX has float64 *off* (a float32
computation would differ by ~1e-7); there a worker is also killed mid-computation.
"""
import os
import signal
import threading
import time

import jax
import numpy as np
import pytest

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")
pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")

from test_fourier_statistics import FEATURE, KERNEL, data  # noqa: E402

from ppl_sparsegp.features.fourier_dask import _tree_sum  # noqa: E402
from ppl_sparsegp.features.fourier_statistics import fourier_conditional, fourier_statistics  # noqa: E402
from ppl_sparsegp.linalg import Dense  # noqa: E402

N = 3000
CHUNKS = 750  # 4 partitions; chunks of 256 rows per device as in the in-memory reference (one compiled shape)
FIELDS = ("A", "c", "f1", "yy", "ysum", "n")


def rel_err(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(np.asarray(b))))


def assert_same(stats, ref, tol=1e-12):
    for field in FIELDS:
        value = getattr(stats, field)
        assert value.dtype == np.float64, field
        assert rel_err(value, getattr(ref, field)) < tol, field


@pytest.fixture(scope="module")
def client():
    """The cluster: two single-threaded worker processes (fresh Python processes, float64 off in their
    JAX). Not Dask's default scheduler: the tests choose theirs."""
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                                  worker_dashboard_address=None) as cluster, \
            distributed.Client(cluster, set_as_default=False) as c:
        yield c


@pytest.fixture(scope="module")
def thread_client():
    """A distributed scheduler with its worker in this process: the distributed code path (graphs
    pickled to the scheduler, results fetched from a worker) at the cost of a thread pool."""
    with distributed.LocalCluster(n_workers=1, processes=False, threads_per_worker=2,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster, set_as_default=False) as c:
        yield c


@pytest.fixture(params=["threads", "distributed-inprocess", pytest.param("distributed", marks=pytest.mark.slow)])
def scheduler(request):
    """Dask's default threaded scheduler; a distributed scheduler with an in-process worker; the
    two-process cluster (slow: worker start-up, JAX import and compilation per worker)."""
    which = {"threads": lambda: "threads", "distributed-inprocess": lambda: request.getfixturevalue("thread_client"),
             "distributed": lambda: request.getfixturevalue("client")}[request.param]()
    with dask.config.set(scheduler=which):
        yield request.param


@pytest.fixture
def scheduler_cluster(client):
    """The two-process cluster as Dask's scheduler for one test."""
    with dask.config.set(scheduler=client):
        yield client


@pytest.fixture(scope="module")
def problem():
    X, y = data(N)
    ref = {m: fourier_statistics(FEATURE, X, y, method=m, chunk_size=256) for m in ("dense", "nufft")}
    return X, y, ref


@pytest.mark.slow
def test_on_worker_processes_in_float64_with_the_in_memory_errors(scheduler_cluster, problem):
    """The cluster: partitions computed in worker processes whose JAX has float64 off equal the
    in-memory sums to rounding; a value outside the box raises the in-memory error, with global rows."""
    X, y, ref = problem
    client = scheduler_cluster
    assert not any(client.run(lambda: jax.config.jax_enable_x64).values())  # float64 comes from the task
    Xd, yd = da.from_array(X, chunks=(CHUNKS, 2)), da.from_array(y, chunks=CHUNKS)  # two column blocks too
    stats = fourier_statistics(FEATURE, Xd, yd, method="dense", chunk_size=256, split_every=2)
    assert_same(stats, ref["dense"])
    np.testing.assert_array_equal(stats.A, stats.A.T)
    bad = X.copy()
    bad[1600, 1] = 2.2  # outside [-1, 2] of dimension 1, in the third partition (rows 1500..2249)
    # the rows of the chunk that holds it, numbered in the whole array
    with pytest.raises(ValueError, match=r"X\[:, 1\] \(dimension 1\) has the value 2.2 outside the box "
                                         r"\[lower, upper\] = \[-1.0, 2.0\] of its FourierFeatures "
                                         r"\(rows 1500\.\.\d+\)"):
        fourier_statistics(FEATURE, da.from_array(bad, chunks=(CHUNKS, 3)), yd, method="dense", chunk_size=256)
    with pytest.raises(ValueError, match=r"X\[:, 1\] \(dimension 1\) has the value 2.2 outside the box"):
        fourier_statistics(FEATURE, bad, y)  # the same message in memory


def test_dask_arrays(scheduler, problem):
    X, y, ref = problem
    Xd, yd = da.from_array(X, chunks=(CHUNKS, 3)), da.from_array(y, chunks=CHUNKS // 2)  # y realigned
    for method in ("dense", "nufft"):
        stats = fourier_statistics(FEATURE, Xd, yd, method=method, chunk_size=256)
        assert_same(stats, ref[method])
        assert float(stats.n) == N
    # an in-memory X with a Dask y (X's blocks follow y's)
    assert_same(fourier_statistics(FEATURE, X, yd, method="dense", chunk_size=256), ref["dense"])


def test_parquet_dataframe(scheduler, problem, tmp_path):
    X, y, ref = problem
    frame = pd.DataFrame({"target": y, "x2": X[:, 2], "x0": X[:, 0], "x1": X[:, 1],
                          "carrier": np.where(np.arange(N) % 2, "AA", "UA")})
    frame["x1"] = frame["x1"].astype("float32").astype("float64")  # a column stored as float32 below
    X32 = X.copy()
    X32[:, 1] = frame["x1"].to_numpy()
    dd.from_pandas(frame.astype({"x1": "float32"}), npartitions=4).to_parquet(tmp_path / "flights")
    df = dd.read_parquet(tmp_path / "flights")
    # the row count per file is unknown to the driver until read: nothing is computed there
    reference = fourier_statistics(FEATURE, X32, y, method="nufft", chunk_size=256)
    stats = fourier_statistics(FEATURE, df, "target", columns=["x0", "x1", "x2"], method="nufft", chunk_size=256)
    assert_same(stats, reference)
    # a pandas DataFrame takes the same arguments (in memory)
    np.testing.assert_array_equal(
        fourier_statistics(FEATURE, frame, "target", columns=["x0", "x1", "x2"], method="nufft", chunk_size=256).A,
        reference.A)

    ynan = y.copy()
    ynan[2500] = np.nan
    frame["target"] = ynan
    dd.from_pandas(frame, npartitions=3).to_parquet(tmp_path / "nan")  # rows per file unknown to the driver
    with pytest.raises(ValueError, match=r"y contains NaN or inf \(rows \d+\.\.\d+ of partition \d\)"):
        fourier_statistics(FEATURE, dd.read_parquet(tmp_path / "nan"), "target", columns=["x0", "x1", "x2"],
                           chunk_size=256)


def test_column_and_argument_errors(problem, tmp_path):
    """Raised on the driver before anything is computed."""
    X, y, _ = problem
    frame = pd.DataFrame({"x0": X[:, 0], "x1": X[:, 1], "x2": X[:, 2], "target": y,
                          "carrier": np.where(np.arange(N) % 2, "AA", "UA")})
    df = dd.from_pandas(frame, npartitions=2)
    for kwargs, message in [
            (dict(y="target"), r"name its covariate columns with columns=\[...\]"),
            (dict(y="target", columns=["x0", "x1"]), "columns names 2 column.* feature has 3 input dimension"),
            (dict(y="target", columns=["x0", "x1", "x3"]), r"column\(s\) \['x3'\] not in X; its columns are"),
            (dict(y="delay", columns=["x0", "x1", "x2"]), r"column\(s\) \['delay'\] not in X"),
            (dict(y="x2", columns=["x0", "x1", "x2"]), "target column y='x2' is also among the covariate"),
            (dict(y="target", columns=["x0", "x0", "x2"]), "columns names a column twice"),
            (dict(y="target", columns=["x0", "carrier", "x2"]), r"\['carrier'\] are not numeric"),
            (dict(y="target", columns="x0"), "columns must be a list of the 3 covariate column names"),
            (dict(y=y, columns=["x0", "x1", "x2"]), "y must be the name of the target column")]:
        for table in (df, frame):  # Dask and pandas alike
            with pytest.raises(ValueError, match=message):
                fourier_statistics(FEATURE, table, kwargs.get("y"), **{k: v for k, v in kwargs.items() if k != "y"})
    Xd = da.from_array(X, chunks=(CHUNKS, 3))
    for args, kwargs, message in [
            ((Xd, "target"), dict(columns=["x0", "x1", "x2"]), "columns= names DataFrame columns, but X is a Array"),
            ((Xd[:, :2], y), {}, r"X must have shape \(N, 3\)"),
            ((Xd, y[:-1]), {}, "3000 rows but y has 2999"),
            ((X[:-1], da.from_array(y, chunks=CHUNKS)), {}, "2999 rows but y has 3000"),
            ((Xd, da.from_array(y[:, None])), {}, r"y must be a vector of shape \(N,\)"),
            ((Xd, y), dict(devices=jax.devices()), "devices= is for in-process inputs"),
            ((Xd, y), dict(split_every=1), "split_every must be an integer ≥ 2"),
            ((Xd, y), dict(method="fft"), "method must be one of")]:
        with pytest.raises(ValueError, match=message):
            fourier_statistics(FEATURE, *args, **kwargs)


def test_conditional(scheduler, problem):
    """Lazy Dask (mean, var) with X's row blocks, equal to the in-memory streaming conditional (itself
    checked against ``conditional`` in test_fourier_statistics.py); a value outside the box raises when
    computed."""
    X, _, _ = problem
    rng = np.random.default_rng(5)
    m = FEATURE.num_features
    q_mu = rng.normal(size=m)
    L = rng.normal(size=(m, m)) / m
    q_cov = Dense(L @ L.T + 1e-3 * np.eye(m))
    Xd = da.from_array(X, chunks=(CHUNKS, 3))
    refs = {}
    for method in ("dense", "nufft"):
        mean, var = fourier_conditional(FEATURE, KERNEL, Xd, q_mu, q_cov, method=method, chunk_size=256)
        assert isinstance(mean, da.Array) and mean.chunks == Xd.chunks[:1]
        mean, var = dask.compute(mean, var)
        m_ref, v_ref = refs[method] = fourier_conditional(FEATURE, KERNEL, X, q_mu, q_cov, method=method,
                                                          chunk_size=256)
        assert mean.dtype == var.dtype == np.float64
        assert rel_err(mean, m_ref) < 1e-12 and rel_err(var, v_ref) < 1e-12, method
    frame = pd.DataFrame({"x0": X[:, 0], "x1": X[:, 1], "x2": X[:, 2]})
    mean, var = fourier_conditional(FEATURE, KERNEL, dd.from_pandas(frame, npartitions=2), q_mu, q_cov,
                                    columns=["x0", "x1", "x2"], method="dense", chunk_size=256)
    m_ref = refs["dense"][0]
    np.testing.assert_allclose(mean.compute(), m_ref, rtol=0, atol=1e-12 * np.max(np.abs(m_ref)))
    in_memory = fourier_conditional(FEATURE, KERNEL, frame, q_mu, q_cov, columns=["x0", "x1", "x2"], method="dense",
                                    chunk_size=256)  # a pandas DataFrame: the same arguments
    np.testing.assert_array_equal(in_memory[0], m_ref)
    bad = X.copy()
    bad[10, 0] = 3.5
    lazy = fourier_conditional(FEATURE, KERNEL, da.from_array(bad, chunks=(CHUNKS, 3)), q_mu, q_cov, chunk_size=256)
    with pytest.raises(ValueError, match=r"X\[:, 0\] \(dimension 0\) has the value 3.5 outside the box"):
        dask.compute(*lazy)


def test_tree_sum_adds_every_part_in_a_tree():
    """Seven parts, three at a time: ⌈log₃ 7⌉ = 2 levels (2 + 1 additions; the seventh part waits for
    the second level), the exact sum."""
    parts = [dask.delayed([np.full(2, 2.0 ** k), np.float64(k)]) for k in range(7)]
    tree = _tree_sum(parts, 3)
    total = tree.compute(scheduler="sync")
    np.testing.assert_array_equal(total[0], [127.0, 127.0])
    assert total[1] == 21
    adds = [k for k in dict(tree.__dask_graph__()) if str(k).startswith("_add")]
    assert len(adds) == 3


@pytest.mark.slow
def test_worker_killed_mid_computation_is_retried(scheduler_cluster, problem):
    """SIGKILL one worker process while its partitions run: Dask reschedules its tasks (and recomputes
    the results it held) on the other worker and the nanny's replacement; the result is the same."""
    X, y, ref = problem
    client = scheduler_cluster
    Xd = da.from_array(X, chunks=(300, 3)).map_blocks(lambda b: (time.sleep(0.4), b)[1], dtype=np.float64)
    yd = da.from_array(y, chunks=300)
    undisturbed = fourier_statistics(FEATURE, Xd, yd, method="nufft", chunk_size=256, split_every=2)
    pids = client.run(os.getpid)
    result, failure = {}, {}

    def compute():
        try:
            result["stats"] = fourier_statistics(FEATURE, Xd, yd, method="nufft", chunk_size=256, split_every=2)
        except Exception as e:  # pragma: no cover - reported below
            failure["error"] = e

    thread = threading.Thread(target=compute)
    thread.start()
    victim = None
    for _ in range(200):  # wait until a worker runs one of the partitions
        busy = [w for w, keys in client.processing().items() if keys]
        if busy:
            victim = pids[busy[0]]
            break
        time.sleep(0.05)
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    assert thread.is_alive()  # killed mid-computation
    thread.join(timeout=120)
    assert not failure, failure
    with pytest.raises(ProcessLookupError):
        os.kill(victim, 0)
    assert victim not in client.run(os.getpid).values()  # the nanny started a new worker process
    assert_same(result["stats"], ref["nufft"])
    for field in FIELDS:  # the same tree, so the same floating-point sums
        np.testing.assert_array_equal(getattr(result["stats"], field), getattr(undisturbed, field))
