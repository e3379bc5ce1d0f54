"""Data-sharded likelihoods (ppl_sparsegp.sharding, inference.launch) on the two forced host devices of
conftest.py and, in the slow test, on two processes of JAX's distributed runtime.

Each sharded computation is checked against the same computation on one device: the log density and its
gradient with respect to the unconstrained parameters agree to rtol 1e-10 in float64 (the only
difference is the order of the sum over the data, so rounding of a few ulps per term); NUTS and SVI from
the same key agree to rounding. That the M × N matrix Kuf is never gathered is read from the compiled
per-device program: no all-gather, and no array with a dimension of size N (only N/2).
"""
import json
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from numpyro.infer import MCMC, NUTS, SVI, TraceMeanField_ELBO
from numpyro.infer.util import initialize_model, potential_energy

from ppl_sparsegp import FourierFeatures, InducingPoints, Matern32, Poisson, SparseGP, spectral_gp
from ppl_sparsegp.sharding import data_mesh, find_data_mesh, initialize_distributed, map_rows, process_rows, shard_data

ROOT = Path(__file__).resolve().parents[1]
RTOL = 1e-10  # float64: the sharded sum differs from the serial one in summation order only

pytestmark = pytest.mark.skipif(jax.device_count() < 2, reason="needs the 2 forced host devices of conftest.py")


def poisson_data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 1.0, (n, 1))
    y = rng.poisson(np.exp(1.0 + np.sin(8.0 * X[:, 0]))).astype(float)
    return X, y


KERNEL = Matern32(variance=dist.LogNormal(0.0, 1.0), lengthscale=dist.LogNormal(-1.0, 1.0))
FEATURES = {"vff": lambda: FourierFeatures(-1.0, 2.0, 8),  # 15 features: D + BBᵀ, Woodbury solves
            "inducing-points": lambda: InducingPoints(jnp.linspace(0.0, 1.0, 12)[:, None])}  # dense Cholesky


def value_and_grad(model, z, *data):
    """Potential energy (−log density) and its gradient in the unconstrained space, jitted with the data
    as arguments (as MCMC(jit_model_args=True) does), and the compiled per-device program's text."""
    fn = jax.jit(jax.value_and_grad(lambda z, *d: potential_energy(model, d, {}, z)))
    compiled = fn.lower(z, *data).compile()
    value, grad = compiled(z, *data)
    return value, grad, compiled.as_text()


def point(**sites):
    """A point of the unconstrained space: the given scalars, and N(0, I) draws of the given sizes."""
    rng = np.random.default_rng(5)
    return {k: jnp.asarray(rng.normal(size=v)) if isinstance(v, int) else jnp.asarray(v) for k, v in sites.items()}


def assert_tree_close(a, b, rtol=RTOL):
    """Leaves agree to rtol relative to each leaf's largest entry (an entry near 0 carries the rounding
    of the large terms it is the difference of)."""
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * np.max(np.abs(y)), err_msg=k)


# --- placing the data ---------------------------------------------------------------------------------
def test_shard_data_splits_rows_into_contiguous_blocks():
    X, y = np.arange(12.0).reshape(6, 2), np.arange(6.0)
    mesh = data_mesh()
    Xs, ys = shard_data(X, y, mesh)
    assert Xs.sharding == NamedSharding(mesh, P("data", None)) and ys.sharding == NamedSharding(mesh, P("data"))
    for arr, full in ((Xs, X), (ys, y)):
        for shard in arr.addressable_shards:  # device s holds rows [3s, 3s + 3)
            s = list(mesh.devices.flat).index(shard.device)
            np.testing.assert_array_equal(np.asarray(shard.data), full[3 * s:3 * s + 3])
    assert shard_data(X, None, mesh)[1] is None
    assert process_rows(6) == slice(0, 6)  # one process loads every row
    assert find_data_mesh(Xs) is mesh and find_data_mesh(jnp.asarray(X)) is None


def test_shard_data_errors_name_the_argument_and_the_fix():
    X, y = np.zeros((7, 1)), np.zeros(7)
    with pytest.raises(ValueError, match=r"N = 7 rows of X do not split evenly over 2 devices; use X\[:6\]"):
        shard_data(X, y)
    with pytest.raises(ValueError, match="X has 6 rows but y has 7"):
        shard_data(X[:6], y)
    with pytest.raises(ValueError, match=r"mesh has axes \('batch',\), not 'data'"):
        shard_data(X[:6], y[:6], Mesh(np.array(jax.devices()), ("batch",)))
    with pytest.raises(TypeError, match="mesh must be a jax.sharding.Mesh"):
        shard_data(X[:6], y[:6], "data")
    with pytest.raises(ValueError, match="devices is empty"):
        data_mesh([])
    with pytest.raises(ValueError, match="n = 7 rows do not split evenly over 2 devices; use the first 6"):
        process_rows(7)


def test_map_rows_blocks_keys_and_output_axes():
    """Per block, fn sees its own rows and the key with its block index folded in; the outputs are the
    blocks' outputs in row order, on (1, 0) axes as asked; unsharded, fn is called as it is."""
    X = np.random.default_rng(1).normal(size=(8, 1))
    Xs, _ = shard_data(X, None)
    key = jax.random.PRNGKey(3)

    def fn(x, rng_key=None):
        noise = jax.random.normal(rng_key, x.shape[:1])
        return jnp.stack([x[:, 0], 2 * x[:, 0]]), x[:, 0] ** 2 + noise  # (2, rows) and (rows,)

    for call in (lambda X: map_rows(fn, X, rng_key=key, out_rows=(1, 0)), jax.jit(
            lambda X: map_rows(fn, X, rng_key=key, out_rows=(1, 0)))):
        a, b = call(Xs)
        blocks = [fn(X[4 * s:4 * s + 4], rng_key=jax.random.fold_in(key, s)) for s in range(2)]
        np.testing.assert_allclose(a, np.concatenate([blk[0] for blk in blocks], axis=1), rtol=1e-15)
        np.testing.assert_allclose(b, np.concatenate([blk[1] for blk in blocks]), rtol=1e-15)
    a, b = map_rows(fn, jnp.asarray(X), rng_key=key, out_rows=(1, 0))  # one device: exactly fn(X, key)
    np.testing.assert_array_equal(b, fn(jnp.asarray(X), rng_key=key)[1])
    with pytest.raises(ValueError, match="out_rows must hold non-negative ints"):
        map_rows(fn, Xs, rng_key=key, out_rows=-1)


# --- the likelihood where the data live -----------------------------------------------------------------
@pytest.mark.parametrize("family", sorted(FEATURES))
def test_sharded_log_density_and_gradient_match_one_device(family):
    """SparseGP (Poisson, whitened) on sharded X, y: same −log density and gradient as on one device; the
    compiled program gathers nothing and no per-device array has N = 998 rows (Kuf stays in blocks of
    N/2 = 499 columns)."""
    X, y = poisson_data(998)
    gp = SparseGP(FEATURES[family](), KERNEL, Poisson())
    z = point(f_v=15 if family == "vff" else 12,  # v: 2·8 − 1 for VFF (Matérn-3/2: a square root of Kuu)
              kernel_variance=0.3, kernel_lengthscale=-1.6)
    v1, g1, _ = value_and_grad(gp.model, z, jnp.asarray(X), jnp.asarray(y))
    v2, g2, hlo = value_and_grad(gp.model, z, *shard_data(X, y))
    np.testing.assert_allclose(v2, v1, rtol=RTOL)
    assert_tree_close(g2, g1)
    assert " all-gather(" not in hlo and "all-gather-start" not in hlo
    shapes = re.findall(r"f64\[([\d,]*)\]", hlo)
    assert not [s for s in shapes if "998" in s.split(",")], "an array of N rows was materialised"
    M = gp.feature.num_features
    assert any(sorted(s.split(",")) == sorted([str(M), "499"]) for s in shapes), "no (M, N/2) Kuf block"


def test_sharded_data_are_validated():
    """The model's data checks run on sharded arrays (NumPyro's first, eager run) and name the argument."""
    X, y = poisson_data(10)
    gp = SparseGP(FEATURES["vff"](), KERNEL, Poisson())
    bad_X = X.copy()
    bad_X[7, 0] = np.nan
    with pytest.raises(ValueError, match="X contains NaN or inf"):
        initialize_model(jax.random.PRNGKey(0), gp.model, model_args=shard_data(bad_X, y))
    bad_y = y.copy()
    bad_y[8] = -1.0
    with pytest.raises(ValueError, match=r"y: counts must be non-negative integers, got values \[-1.0\]"):
        initialize_model(jax.random.PRNGKey(0), gp.model, model_args=shard_data(X, bad_y))


def test_rows_in_other_processes_are_validated_block_by_block(monkeypatch):
    """Arrays no host can read whole (rows in other processes) are checked block by block where they
    live: here the two devices' blocks stand for two processes' rows."""
    from ppl_sparsegp.approximations import base

    monkeypatch.setattr(base, "is_distributed", lambda a: isinstance(a, jax.Array) and len(a.devices()) > 1)
    gp = SparseGP(FEATURES["vff"](), KERNEL, Poisson())
    X, y = poisson_data(10)
    Xs, ys = shard_data(X, y)
    assert gp._check_data(Xs, ys, gp.likelihood) == (Xs, ys)  # passed through, never gathered
    y[8] = 0.5  # in the second block
    with pytest.raises(ValueError, match=r"y: counts must be non-negative integers, got values \[0.5\]"):
        gp._check_data(Xs, shard_data(X, y)[1], gp.likelihood)
    X[1, 0] = np.inf
    with pytest.raises(ValueError, match="X contains NaN or inf"):
        gp._check_data(shard_data(X, None)[0], ys, gp.likelihood)
    with pytest.raises(ValueError, match="X and y must both be split over the processes"):
        gp._check_data(Xs, jnp.asarray(y), gp.likelihood)


def test_spectral_gp_in_a_user_model_on_sharded_data():
    """The primitive in a user's own model: same −log density and gradient on sharded data."""
    feature = FourierFeatures(-1.0, 2.0, 6)

    def model(x, y=None):
        ell = numpyro.sample("ell", dist.LogNormal(-1.0, 0.5))
        c = numpyro.sample("c", dist.Normal(0.0, 1.0))
        f = spectral_gp("f", feature, Matern32(lengthscale=ell), x)
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Poisson(jnp.exp(c + f)), obs=y)

    X, y = poisson_data(400)
    z = point(f_v=11, ell=-1.2, c=0.4)  # v: 2·6 − 1 features (Matérn-3/2: a square root of Kuu)
    v1, g1, _ = value_and_grad(model, z, jnp.asarray(X[:, 0]), jnp.asarray(y))
    v2, g2, _ = value_and_grad(model, z, *shard_data(X[:, 0], y))
    np.testing.assert_allclose(v2, v1, rtol=RTOL)
    assert_tree_close(g2, g1)


@pytest.mark.slow
def test_nuts_and_svi_on_sharded_data_match_one_device():
    """NUTS (jit_model_args=True: the data enter jit as arguments) and SVI (a jitted svi.update with the
    data) from the same keys: the sharded runs reproduce the one-device runs to rounding."""
    X, y = poisson_data(200)
    gp = SparseGP(FourierFeatures(-1.0, 2.0, 5), KERNEL, Poisson())
    one, sharded = (jnp.asarray(X), jnp.asarray(y)), shard_data(X, y)

    def nuts(data):
        mcmc = MCMC(NUTS(gp.model), num_warmup=10, num_samples=10, jit_model_args=True, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(2), *data)
        return mcmc.get_samples()

    # a NUTS trajectory amplifies rounding differences with every leapfrog step: 1e-8 after 20 iterations
    assert_tree_close(nuts(sharded), nuts(one), rtol=1e-8)

    def svi(data):
        opt = SVI(gp.model, gp.guide, numpyro.optim.Adam(0.05), TraceMeanField_ELBO())
        state = opt.init(jax.random.PRNGKey(4), *data)
        update, losses = jax.jit(opt.update), []
        for _ in range(5):
            state, loss = update(state, *data)
            losses.append(float(loss))
        return opt.get_params(state), np.array(losses)

    (p1, l1), (p2, l2) = svi(one), svi(sharded)
    np.testing.assert_allclose(l2, l1, rtol=RTOL)
    assert_tree_close(p2, p1)
    np.testing.assert_allclose(gp.elbo(p1, *sharded), gp.elbo(p1, *one), rtol=RTOL)  # the exact ELBO too


@pytest.mark.slow
def test_several_latent_gps_and_minibatches_on_sharded_data():
    """Three latent GPs (RobustMax: mean (N, 3) per block) and a minibatch of 50 rows drawn from the
    sharded data: the same −log density and gradient as on one device."""
    from numpyro import handlers

    from ppl_sparsegp import RobustMax

    X, y = poisson_data(200)
    labels = (np.arange(200) % 3).astype(float)
    gp3 = SparseGP(FEATURES["vff"](), KERNEL, RobustMax(3))
    z3 = point(f_v=3 * 15, kernel_variance=0.3, kernel_lengthscale=-1.6)
    v1, g1, _ = value_and_grad(gp3.model, z3, jnp.asarray(X), jnp.asarray(labels))
    v2, g2, hlo = value_and_grad(gp3.model, z3, *shard_data(X, labels))
    np.testing.assert_allclose(v2, v1, rtol=RTOL)
    assert_tree_close(g2, g1)
    assert " all-gather(" not in hlo

    gp = SparseGP(FEATURES["vff"](), KERNEL, Poisson())
    z = point(f_v=15, kernel_variance=0.3, kernel_lengthscale=-1.6)
    batch = jax.jit(jax.value_and_grad(lambda z, X, y, key: potential_energy(
        handlers.seed(gp.model, key), (X, y), {"batch_size": 50}, z)))
    key = jax.random.PRNGKey(6)
    (v1, g1), (v2, g2) = batch(z, jnp.asarray(X), jnp.asarray(y), key), batch(z, *shard_data(X, y), key)
    np.testing.assert_allclose(v2, v1, rtol=RTOL)
    assert_tree_close(g2, g1)


# --- several processes -----------------------------------------------------------------------------------
def test_initialize_distributed_reads_the_launcher_environment(monkeypatch):
    """One process, no launcher or cluster variables: nothing to join; a malformed variable names itself."""
    for k in ("PPL_SPARSEGP_NUM_PROCESSES", "PPL_SPARSEGP_PROCESS_ID", "SLURM_NTASKS",
              "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        monkeypatch.delenv(k, raising=False)
    assert initialize_distributed() is False
    monkeypatch.setenv("PPL_SPARSEGP_NUM_PROCESSES", "two")
    with pytest.raises(ValueError, match="PPL_SPARSEGP_NUM_PROCESSES='two' must be an integer"):
        initialize_distributed()
    monkeypatch.setenv("PPL_SPARSEGP_NUM_PROCESSES", "2")
    monkeypatch.setenv("PPL_SPARSEGP_PROCESS_ID", "2")
    with pytest.raises(ValueError, match=r"process_id must be in 0..1, got 2"):
        initialize_distributed()


def launch(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "inference.launch", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("args, message", [
    (["--processes", "2", "inference.benchmarks.harness"], "put the program after '--'"),
    (["--processes", "0", "--", "inference.benchmarks.harness"],
     "argument --processes: must be a positive integer, got 0"),
    (["--processes", "two", "--", "x"], "argument --processes: must be a positive integer, got 'two'"),
    (["--processes", "2", "--"], "no program after '--'"),
    (["--processes", "2", "--", "inference.no_such_module"], "module 'inference.no_such_module' not found"),
    (["--processes", "2", "--", "no/such/script.py"], "script 'no/such/script.py' not found"),
])
def test_launcher_user_errors_are_one_line_and_status_2(args, message):
    r = launch(*args)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("launch: error: ") and message in r.stderr


def test_launcher_environment_and_failure_propagation(tmp_path):
    """Each process gets the coordinator, the process count and its id (and its device count); when one
    fails, the launcher stops the others and exits with the failing process's status."""
    script = tmp_path / "prog.py"
    script.write_text(
        "import os, sys, time, pathlib\n"
        "i = os.environ['PPL_SPARSEGP_PROCESS_ID']\n"
        "keys = ('JAX_COORDINATOR_ADDRESS', 'PPL_SPARSEGP_NUM_PROCESSES', 'PPL_SPARSEGP_PROCESS_ID', 'XLA_FLAGS')\n"
        "pathlib.Path(sys.argv[1], i).write_text('\\n'.join(os.environ[k] for k in keys))\n"
        "if sys.argv[2] == 'fail' and i == '1':\n    sys.exit(3)\n"
        "time.sleep(0 if sys.argv[2] == 'ok' else 60)\n")
    r = launch("--processes", "2", "--devices-per-process", "3", "--", str(script), str(tmp_path), "ok")
    assert r.returncode == 0, r.stderr
    env = [(tmp_path / str(i)).read_text().split("\n") for i in range(2)]
    assert env[0][0] == env[1][0] and re.fullmatch(r"127\.0\.0\.1:\d+", env[0][0])
    assert [e[1:3] for e in env] == [["2", "0"], ["2", "1"]]
    assert all(e[3].split().count("--xla_force_host_platform_device_count=3") == 1 for e in env)
    r = launch("--processes", "2", "--", str(script), str(tmp_path), "fail")
    assert r.returncode == 3 and "launch: process 1 exited with status 3; stopped the others" in r.stderr


@pytest.mark.slow
def test_two_processes_match_one_process(tmp_path):
    """The same sharded model over 2 processes of JAX's distributed runtime (started by the launcher, each
    holding only its own rows, gloo collectives): −log density and gradient as in one process, no
    all-gather in the compiled program."""
    from inference.benchmarks.scale_out_sharded import problem

    n, M = 2000, 10
    out = tmp_path / "check.json"
    r = launch("--processes", "2", "--devices-per-process", "1", "--timeout", "600", "--",
               "inference.benchmarks.scale_out_sharded", "--worker",
               "--check", "--mode", "sharded", "--n", str(n), "--M", str(M), "--result", str(out), timeout=660)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["processes"] == 2 and got["devices"] == 2 and got["all_gathers"] == 0
    X, y, gp = problem(n, M)
    data = (jnp.asarray(X), jnp.asarray(y))
    z = initialize_model(jax.random.PRNGKey(0), gp.model, model_args=data).param_info.z
    v, g, _ = value_and_grad(gp.model, z, *data)
    np.testing.assert_allclose(got["value"], v, rtol=RTOL)
    assert_tree_close({k: np.asarray(x) for k, x in got["grad"].items()}, g)
