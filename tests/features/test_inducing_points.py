"""features/inducing_points: Kuu = k(Z, Z) + ε σ² I and Kuf = k(Z, X), against the kernel written out."""
import numpy as np
import pytest

import ppl_sparsegp as psg


def test_kuu_and_kuf_against_the_squared_exponential_formula():
    rng = np.random.default_rng(0)
    Z, X = rng.normal(size=(5, 2)), rng.normal(size=(7, 2))
    k = psg.SquaredExponential(1.7, 0.8)

    def se(A, B):
        return 1.7 * np.exp(-0.5 * ((A[:, None, :] - B[None]) ** 2).sum(-1) / 0.8**2)

    feature = psg.InducingPoints(Z, jitter=1e-6)
    np.testing.assert_allclose(psg.Kuu(feature, k).to_dense(), se(Z, Z) + 1e-6 * 1.7 * np.eye(5), rtol=1e-12)
    np.testing.assert_allclose(psg.Kuf(feature, k, X), se(Z, X), rtol=1e-12)
    assert feature.num_features == 5 and psg.InducingPoints(psg.Param(Z)).num_features == 5


def test_bad_inducing_inputs_are_refused():
    with pytest.raises(ValueError, match="rank 2"):
        psg.InducingPoints(np.zeros(3))
    with pytest.raises(ValueError, match="jitter"):
        psg.InducingPoints(np.zeros((3, 1)), jitter=-1.0)
    with pytest.raises(ValueError, match="input dimensions"):
        psg.Kuf(psg.InducingPoints(np.zeros((3, 2))), psg.SquaredExponential(1.0, np.ones(2)), np.zeros((4, 3)))


def test_float32_past_the_measured_limit_warns_naming_it():
    """float32 inducing points beyond M = 100 (where the float32 table measured the SVGP ELBO drifting) and
    Kronecker inducing points in float32 (bound above the exact LML) warn with Float32Warning naming the
    limit and the fix; at the limit, and in float64, nothing is said."""
    import warnings

    import jax

    from ppl_sparsegp.features.base import Float32Warning

    def f32(module):  # every leaf in float32 (constructors store float64 when x64 is on: README)
        return jax.tree.map(lambda a: np.asarray(a, np.float32), module)

    k32 = f32(psg.Matern32(1.0, 0.3))
    points = lambda m: psg.InducingPoints(np.linspace(0, 1, m)[:, None])  # noqa: E731
    with pytest.warns(Float32Warning, match=r"M = 101 > 100.*use float64"):
        psg.Kuu(f32(points(101)), k32)
    with pytest.warns(Float32Warning, match="KroneckerFeatures of InducingPoints in float32"):
        psg.Kuu(f32(psg.KroneckerFeatures([points(5)] * 2)), psg.Product([k32, k32]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", Float32Warning)
        psg.Kuu(f32(points(100)), k32)
        psg.Kuu(points(300), psg.Matern32(1.0, 0.3))


def test_float32_on_a_gpu_under_tf32_products_warns(monkeypatch):
    """On a GPU, JAX's default float32 matmul precision may use TF32 products: the GPU run measured 7 of
    13 float32 settings broken that way (results/gpu.json), all restored under "highest". Kuu, which every
    approximation calls, says so once per trace; under "highest", in float64 and on a CPU it says nothing."""
    import warnings

    import jax

    from ppl_sparsegp.features.base import Float32Warning

    f32 = lambda m: jax.tree.map(lambda a: np.asarray(a, np.float32), m)  # noqa: E731
    feature, kernel = f32(psg.InducingPoints(np.linspace(0, 1, 10)[:, None])), f32(psg.Matern32(1.0, 0.3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", Float32Warning)
        psg.Kuu(feature, kernel)  # a CPU: nothing
        monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
        with jax.default_matmul_precision("highest"):
            psg.Kuu(feature, kernel)
        psg.Kuu(psg.InducingPoints(np.linspace(0, 1, 10)[:, None]), psg.Matern32(1.0, 0.3))  # float64
    with pytest.warns(Float32Warning, match="TF32.*jax_default_matmul_precision', 'highest'"):
        psg.Kuu(feature, kernel)
    with pytest.warns(Float32Warning, match="TF32"):  # inside a trace too (jit, NUTS, SVI)
        jax.jit(lambda f: psg.Kuu(f, kernel).to_dense())(feature)
