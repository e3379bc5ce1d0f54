"""One-pass VFF statistics against one-shot dense statistics, the collapsed bound and the conditional.

References are independent computations: ``sufficient_statistics`` of the dense Kuf (from the
registered Kuf, not the module's own basis), ``collapsed_elbo`` on the raw data, and ``conditional``.
"""
import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro.infer.util import log_density

import ppl_sparsegp as psg
from ppl_sparsegp.covariances import SufficientStatistics
from ppl_sparsegp.features import AdditiveFeatures, FourierFeatures
from ppl_sparsegp.features.fourier_statistics import fourier_conditional, fourier_statistics
from ppl_sparsegp.likelihoods import Gaussian

N = 1500
# three dimensions with different boxes and frequency counts: the off-diagonal blocks are rectangular
FEATURE = AdditiveFeatures([FourierFeatures(-2.0, 3.0, 6), FourierFeatures(-1.0, 2.0, 4),
                            FourierFeatures(-0.5, 1.5, 7)])
KERNEL = psg.Additive([psg.Matern32(0.7, 0.3), psg.Matern12(0.4, 0.5), psg.Matern52(0.3, 0.2)])
FEATURE_1D = FourierFeatures(-1.0, 2.0, 9)
KERNEL_1D = psg.Matern32(1.1, 0.25)
NOISE = 0.1


def data(n=N, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 1.0, (n, 3))
    X[:5] = [[-2.0, -1.0, -0.5], [3.0, 2.0, 1.5], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [2.5, 1.9, -0.4]]
    y = np.sin(4 * X[:, 0]) + X[:, 1] ** 2 + 0.2 * rng.normal(size=n) + 3.0  # non-zero mean
    return X, y


@jax.jit
def _reference(X, y):
    return SufficientStatistics.from_kuf(psg.Kuf(FEATURE, KERNEL, X), y)


@jax.jit
def _reference_1d(X, y):
    return SufficientStatistics.from_kuf(psg.Kuf(FEATURE_1D, KERNEL_1D, X), y)


def reference(X, y):
    """One-shot statistics of the dense Kuf (the registered Kuf, jitted once)."""
    fn = _reference if np.shape(X)[1] == 3 else _reference_1d
    return fn(jnp.asarray(X), jnp.asarray(y))


def rel_err(a, b):
    """Max-norm error relative to the largest entry of the reference."""
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(np.asarray(b))))


@pytest.fixture(scope="module")
def dense_stats():
    X, y = data()
    return fourier_statistics(FEATURE, X, y, chunk_size=256, method="dense")  # 3 groups, last padded


def test_chunked_dense_equals_one_shot(dense_stats):
    X, y = data()
    ref = reference(X, y)
    # rounding only: sums of 1500 terms of size ≤ 1 in another order, relative 1e-13 is ~500 ulps
    for field in ("A", "c", "f1", "yy", "ysum", "n"):
        assert rel_err(getattr(dense_stats, field), getattr(ref, field)) < 1e-13, field
    np.testing.assert_allclose(dense_stats.A, dense_stats.A.T, rtol=0, atol=0)


def test_sharded_over_two_devices_equals_single_device(dense_stats):
    assert len(jax.devices()) == 2  # tests/conftest.py forces two host devices
    X, y = data()
    one = fourier_statistics(FEATURE, X, y, chunk_size=256, method="dense", devices=jax.devices()[:1])
    for field in ("A", "c", "f1", "yy", "ysum", "n"):  # same sums in another grouping
        assert rel_err(getattr(dense_stats, field), getattr(one, field)) < 1e-14, field
    assert dense_stats.root is None and one.root is None


def test_nufft_on_several_cpu_devices_runs_on_one():
    """FINUFFT's FFTW planning is not thread-safe and XLA runs host devices in threads of one process, so
    the nufft method runs on one CPU device; dense keeps every device. The statistics are those of one
    device asked for explicitly, to rounding (the same sums, grouped in other chunks)."""
    from ppl_sparsegp.features.fourier_streaming import device_mesh, nufft_mesh

    both = device_mesh(jax.devices())
    assert nufft_mesh(both, "nufft").devices.size == 1 and nufft_mesh(both, "dense") is both
    X, y = data()
    two = fourier_statistics(FEATURE, X, y, chunk_size=256, method="nufft")
    one = fourier_statistics(FEATURE, X, y, chunk_size=256, method="nufft", devices=jax.devices()[:1])
    for field in ("A", "c", "f1", "yy", "ysum", "n"):
        assert rel_err(getattr(two, field), getattr(one, field)) < 1e-13, field


class Chunked:
    """A minimal chunked array (like dask): slicing returns a lazy block that np.asarray materialises."""

    def __init__(self, array, block=100):
        self.array, self.block, self.shape = array, block, array.shape
        self.reads = 0

    def __getitem__(self, index):
        outer = self

        class Lazy:
            def __array__(self, dtype=None, copy=None):
                outer.reads += 1
                blocks = [outer.array[i:i + outer.block] for i in range(0, len(outer.array), outer.block)]
                return np.concatenate(blocks)[index].astype(dtype or np.float64)

        return Lazy()


def test_memmap_and_chunked_inputs(tmp_path, dense_stats):
    X, y = data()
    Xm = np.memmap(tmp_path / "X.f64", dtype=np.float64, mode="w+", shape=X.shape)
    ym = np.memmap(tmp_path / "y.f64", dtype=np.float64, mode="w+", shape=y.shape)
    Xm[:], ym[:] = X, y
    Xm.flush(), ym.flush()
    Xr = np.memmap(tmp_path / "X.f64", dtype=np.float64, mode="r", shape=X.shape)
    yr = np.memmap(tmp_path / "y.f64", dtype=np.float64, mode="r", shape=y.shape)
    from_file = fourier_statistics(FEATURE, Xr, yr, chunk_size=256, method="dense")
    Xc, yc = Chunked(X), Chunked(y)
    chunked = fourier_statistics(FEATURE, Xc, yc, chunk_size=256, method="dense")
    assert Xc.reads == 3  # one read per group of 2 devices × 256 rows
    for a, b, c in zip(from_file, chunked, dense_stats):
        np.testing.assert_array_equal(a, c)  # same blocks, same arithmetic
        np.testing.assert_array_equal(b, c)


def test_nufft_equals_dense_additive_and_1d(dense_stats):
    X, y = data()
    fast = fourier_statistics(FEATURE, X, y, chunk_size=256, method="nufft", eps=1e-12)
    # documented: max-norm relative error < 1e-9 at eps = 1e-12 (measured 1e-14 here, 1e-12 on
    # 8-input airline-like data: about eps)
    for field in ("A", "c", "f1"):
        assert rel_err(getattr(fast, field), getattr(dense_stats, field)) < 1e-9, field
    # every block separately, the 2-D off-diagonal ones included
    sizes = np.cumsum([0] + [f.num_features for f in FEATURE.features])
    for d in range(3):
        for e in range(3):
            blk = (slice(sizes[d], sizes[d + 1]), slice(sizes[e], sizes[e + 1]))
            assert rel_err(fast.A[blk], dense_stats.A[blk]) < 1e-9, (d, e)
    # the tolerance is honoured at a coarse setting too: error ≈ eps relative to N
    coarse = fourier_statistics(FEATURE, X, y, method="nufft", eps=1e-6)
    err = rel_err(coarse.A, dense_stats.A)
    assert 1e-12 < err < 1e-5

    x1 = X[:, 0] / 3.0
    ref = reference(x1[:, None], y)
    fast1 = fourier_statistics(FEATURE_1D, x1, y, chunk_size=300, method="nufft")  # (N,) input for 1-D
    dense1 = fourier_statistics(FEATURE_1D, x1[:, None], y, chunk_size=300, method="dense")
    for field in ("A", "c", "f1", "yy", "ysum", "n"):
        assert rel_err(getattr(fast1, field), getattr(ref, field)) < 1e-9, field
        assert rel_err(getattr(dense1, field), getattr(ref, field)) < 1e-13, field


def test_collapsed_elbo_from_statistics_equals_raw_data(dense_stats):
    """Fixed means 0 and 2.5, and a sampled mean: the bound from statistics equals the raw-data one."""
    X, y = data()
    sampled = psg.CollapsedGP(FEATURE, psg.Additive([psg.Matern32(dist.LogNormal(0, 1), 0.3),
                                                     psg.Matern12(0.4, 0.5), psg.Matern52(0.3, 0.2)]),
                              Gaussian(dist.LogNormal(-2, 1)), mean=dist.Normal(0, 3))
    values = {"kernel_0_variance": 0.7, "likelihood_variance": NOISE, "mean": 2.9}

    @jax.jit
    def check(X, y, stats):
        out = []
        for mean in (0.0, 2.5):
            gp = psg.CollapsedGP(FEATURE, KERNEL, Gaussian(NOISE), mean=mean)
            out.append(psg.collapsed_elbo(FEATURE, KERNEL, X, y - mean, NOISE))
            out.append(log_density(gp.model, (X, y), {}, {})[0])
            out.append(log_density(gp.model, (), {"statistics": stats}, {})[0])
        out.append(log_density(sampled.model, (X, y), {}, values)[0])
        out.append(log_density(sampled.model, (), {"statistics": stats}, values)[0])
        return jnp.stack(out)

    v = np.asarray(check(jnp.asarray(X), jnp.asarray(y), dense_stats))
    # all are O(N) sums of the same terms; agreement to 1e-10 relative of values ~ -1e3
    np.testing.assert_allclose(v[1:3], v[0], rtol=1e-10)
    np.testing.assert_allclose(v[4:6], v[3], rtol=1e-10)
    np.testing.assert_allclose(v[7], v[6], rtol=1e-10)
    assert abs(v[0] - v[3]) > 1.0  # the mean matters


def test_prediction_with_statistics_and_streaming_conditional(dense_stats):
    """Predictions from stored statistics equal those from the data; the streaming conditional (inside
    the box) equals the generic conditional, dense and NUFFT."""
    X, y = data()
    kernel = psg.Additive([psg.Matern32(dist.LogNormal(0, 1), 0.3), psg.Matern12(0.4, 0.5),
                           psg.Matern52(0.3, 0.2)])
    lik = Gaussian(dist.LogNormal(-2, 1))
    gp = psg.CollapsedGP(FEATURE, kernel, lik, mean=dist.Normal(0, 3))
    stored = psg.CollapsedGP(FEATURE, kernel, lik, mean=dist.Normal(0, 3), statistics=dense_stats)
    values = {"kernel_0_variance": 0.8, "likelihood_variance": 0.07, "mean": 2.9}
    params = {k + "_map": jnp.asarray(v) for k, v in values.items()}
    Xs = np.random.default_rng(3).uniform(0.0, 1.0, (40, 3))

    @jax.jit
    def predictions(Xs, X, y):
        p_data = gp.with_data(X, y).predict(Xs, params=params)
        p_stats = stored.predict(Xs, params=params)
        m_v, S_v = stored.optimal_q(values)
        return p_data, p_stats, m_v, S_v.to_dense()

    p_data, p_stats, m_v, S_v = predictions(jnp.asarray(Xs), jnp.asarray(X), jnp.asarray(y))
    for k in ("f_mean", "f_var", "y_var"):
        np.testing.assert_allclose(p_stats[k], p_data[k], rtol=1e-9, atol=1e-12)
    kern = gp.components_from(values)[0]
    from ppl_sparsegp.linalg import Dense
    for method, tol in (("dense", 1e-11), ("nufft", 1e-9)):
        m, v = fourier_conditional(FEATURE, kern, Xs, m_v, Dense(S_v), whiten=True, method=method,
                                   chunk_size=16)
        np.testing.assert_allclose(m + 2.9, p_data["f_mean"], atol=tol * np.max(np.abs(p_data["f_mean"])))
        np.testing.assert_allclose(v, p_data["f_var"], atol=tol * np.max(p_data["f_var"]))


def test_errors(dense_stats):
    X, y = data(50)
    X[7, 1] = 2.2  # outside [-1, 2] of dimension 1
    with pytest.raises(ValueError, match=r"X\[:, 1\] \(dimension 1\) has the value 2.2 outside the box"):
        fourier_statistics(FEATURE, X, y)
    X[7, 1] = 0.5
    with pytest.raises(ValueError, match=r"shape \(N, 3\)"):
        fourier_statistics(FEATURE, X[:, :2], y)
    with pytest.raises(ValueError, match="50 rows but y has 49"):
        fourier_statistics(FEATURE, X, y[:49])
    with pytest.raises(ValueError, match="method must be one of"):
        fourier_statistics(FEATURE, X, y, method="fft")
    with pytest.raises(ValueError, match="FourierFeatures"):
        fourier_statistics(psg.InducingPoints(X[:3]), X, y)
    no_f1 = dense_stats._replace(f1=None)
    with pytest.raises(ValueError, match="cannot be centred"):
        log_density(psg.CollapsedGP(FEATURE, KERNEL, Gaussian(NOISE), mean=1.0).model, (),
                    {"statistics": no_f1}, {})
