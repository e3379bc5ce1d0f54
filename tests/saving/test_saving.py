"""Saved fits: save_fit → load_fit in a new process predicts bit for bit what the original predicted (SparseGP
with VFF and with inducing points, Gaussian and Poisson; CollapsedGP on data and on statistics; a MAP fit),
every kind of template survives the description, and files that cannot be loaded say why."""
import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.distributions import constraints

import ppl_sparsegp as psg
from ppl_sparsegp import saving
from ppl_sparsegp.approximations import map_lbfgs
from ppl_sparsegp.features import FourierFeatures, KroneckerFeatures
from ppl_sparsegp.features.fourier_statistics import fourier_statistics
from ppl_sparsegp.features.random_fourier import SpectralDensity
from ppl_sparsegp.groups import Negation, Rotation
from ppl_sparsegp.likelihoods import Poisson
from ppl_sparsegp.saving import encoding, files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RNG = np.random.default_rng(0)
X2 = RNG.uniform(-1, 1, (40, 2))
X1 = np.sort(RNG.uniform(0, 1, (40, 1)), axis=0)
Y = np.sin(6 * X1[:, 0]) + 0.1 * RNG.normal(size=40)
COUNTS = RNG.poisson(2.0, size=40).astype(float)
X_NEW = {"1d": np.linspace(-0.1, 1.1, 9)[:, None], "2d": RNG.uniform(-1.2, 1.2, (9, 2))}


def kernel():
    return psg.Matern52(variance=dist.LogNormal(0.0, 1.0), lengthscale=dist.LogNormal(-1.0, 0.5))


def fitted_like_params(gp):
    """Params as a fit would leave them, without fitting: every param of the guide (shapes from an
    abstract trace) at a value away from its initial one: locations N(0, 0.3²), point estimates in
    (0.5, 1.5), lower-triangular factors with positive diagonals, inducing inputs moved by 0.05."""
    def guide_params():
        with handlers.block():
            trace = handlers.trace(handlers.seed(gp.guide, rng_seed=0)).get_trace()
        return {n: s["value"] for n, s in trace.items() if s["type"] == "param"}

    rng = np.random.default_rng(1)
    out = {}
    for name, shape in jax.eval_shape(guide_params).items():
        size = shape.shape
        if name.endswith("_map"):
            value = rng.uniform(0.5, 1.5, size)
        elif name.endswith("scale_tril"):
            value = np.tril(0.1 * rng.normal(size=size), -1) + np.eye(size[-1]) * rng.uniform(0.5, 1.0, size[:-1])
        elif name.endswith("_scale"):
            value = rng.uniform(0.5, 1.0, size)
        elif name == "feature_Z":
            value = np.asarray(gp.feature.Z.init) + 0.05 * rng.normal(size=size)
        else:
            value = 0.3 * rng.normal(size=size)
        out[name] = jnp.asarray(value, dtype=shape.dtype)
    return out


def the_fits(names):
    """name -> (gp, params, which X_NEW): params shaped as SVI leaves them for the SVI cases, as a MAP fit
    leaves them for "collapsed-map" and found by L-BFGS for "collapsed-map-lbfgs" (the runner's --method map)."""
    out = {}
    if "sparse-vff-gaussian" in names:
        vff = psg.SparseGP(FourierFeatures(-0.5, 1.5, 6), kernel(), psg.Gaussian(dist.LogNormal(-2.0, 1.0)))
        out["sparse-vff-gaussian"] = (vff, fitted_like_params(vff), "1d")
    if "collapsed-map" in names:  # the model holds its training data (with_data): part of the fit
        collapsed = psg.CollapsedGP(psg.InducingPoints(X1[::8]), kernel())
        # a MAP fit's params as the runner's --method map stores them: {"<site>_map": NumPy array}
        values = {"kernel_variance": np.array(0.8), "kernel_lengthscale": np.array(0.15),
                  "likelihood_variance": np.array(0.012)}
        out["collapsed-map"] = (collapsed.with_data(X1, Y), {f"{k}_map": v for k, v in values.items()}, "1d")
    if "collapsed-map-lbfgs" in names:  # the same found by L-BFGS (map_lbfgs, as the runner does)
        collapsed = psg.CollapsedGP(psg.InducingPoints(X1[::8]), kernel())
        values, _ = map_lbfgs(collapsed.model, collapsed.hyperparameter_sites(), model_args=(X1, Y), num_steps=20)
        out["collapsed-map-lbfgs"] = (collapsed.with_data(X1, Y), {f"{k}_map": v for k, v in values.items()}, "1d")
    if "sparse-inducing-poisson" in names:
        ip = psg.SparseGP(psg.InducingPoints(psg.Param(X2[:6])), kernel(), Poisson(exposure=2.0),
                          mean=dist.Normal(0.0, 1.0), whiten=False, q_cov="diag")
        out["sparse-inducing-poisson"] = (ip, fitted_like_params(ip), "2d")
    if "sparse-harmonic" in names:
        harmonic = psg.SparseGP(psg.HarmonicFeatures(Rotation(4), psg.Param(X2[:3])), kernel(),
                                q_cov=psg.block_diagonal_covariance)
        out["sparse-harmonic"] = (harmonic, fitted_like_params(harmonic), "2d")
    if "collapsed-statistics" in names:  # on precomputed VFF statistics (the airline model): kept in the fit
        feature = FourierFeatures(-0.5, 1.5, 5)
        stats = psg.CollapsedGP(feature, kernel(), statistics=fourier_statistics(feature, X1, Y))
        out["collapsed-statistics"] = (stats, fitted_like_params(stats), "1d")
    if "spectrum" in names:
        ssgp = psg.SparseSpectrumGP(kernel(), num_frequencies=4, input_dim=2).with_data(X2, Y)
        out["spectrum"] = (ssgp, fitted_like_params(ssgp), "2d")
    return out


LOADER = textwrap.dedent("""
    import sys, numpy as np, jax
    jax.config.update("jax_enable_x64", True)
    from ppl_sparsegp.saving import load_fit
    folder, names = sys.argv[1], sys.argv[2:]
    X_new = np.load(f"{folder}/x_new.npz")
    out = {}
    for name in names:
        gp, params = load_fit(f"{folder}/{name}.npz")
        pred = jax.jit(lambda p, x: gp.predict(x, params=p))(params, X_new[name])
        out.update({f"{name}/{k}": np.asarray(v) for k, v in pred.items()})
    np.savez(f"{folder}/predictions.npz", **out)
""")


def save_and_predict_elsewhere(tmp_path, names):
    """Save each fit, predict with it here and, after load_fit, in a new Python process: both dicts."""
    cases = the_fits(names)
    expected = {}
    for name, (gp, params, which) in cases.items():
        saving.save_fit(tmp_path / f"{name}.npz", gp, params, metadata={"case": name})
        pred = jax.jit(lambda p, x, gp=gp: gp.predict(x, params=p))(params, X_NEW[which])
        expected.update({f"{name}/{k}": np.asarray(v) for k, v in pred.items()})
    np.savez(tmp_path / "x_new.npz", **{name: X_NEW[which] for name, (_, _, which) in cases.items()})
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
    run = subprocess.run([sys.executable, "-c", LOADER, str(tmp_path), *cases], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return expected, dict(np.load(tmp_path / "predictions.npz"))


def assert_bit_for_bit(expected, got):
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key].dtype == value.dtype == np.float64, key
        np.testing.assert_array_equal(got[key], value, err_msg=key)


def test_predict_after_load_in_a_new_process_is_bit_for_bit(tmp_path):
    """SparseGP (VFF, Gaussian; SVI params) in a new process (the other approximations: the slow test)."""
    expected, got = save_and_predict_elsewhere(tmp_path, ("sparse-vff-gaussian",))
    assert_bit_for_bit(expected, got)
    # not a trivial prediction: q(u)'s mean moves f away from the prior mean 0
    assert np.max(np.abs(expected["sparse-vff-gaussian/f_mean"])) > 0.1


def test_a_map_fit_holding_its_data_loads_as_it_was_saved(tmp_path):
    """CollapsedGP with MAP params (NumPy arrays) and the training data it conditions on: every attribute
    and param comes back equal, with its type and dtype; the metadata too."""
    gp, params, _ = the_fits(("collapsed-map",))["collapsed-map"]
    saving.save_fit(tmp_path / "map.npz", gp, params, metadata={"method": "map", "steps": 20})
    back, back_params = saving.load_fit(tmp_path / "map.npz")
    assert type(back) is psg.CollapsedGP and encoding.same(encoding.state(gp), encoding.state(back))
    np.testing.assert_array_equal(back.data[0], X1)
    assert encoding.same(params, back_params) and all(isinstance(v, np.ndarray) for v in back_params.values())
    meta = saving.load_metadata(tmp_path / "map.npz")
    assert meta["metadata"] == {"method": "map", "steps": 20} and meta["format_version"] == saving.FORMAT_VERSION
    assert meta["approximation"] == "ppl_sparsegp.CollapsedGP"


@pytest.mark.slow
def test_more_approximations_predict_bit_for_bit_in_a_new_process(tmp_path):
    """SparseGP with inducing points (Param Z), Poisson, a prior on the mean, centred, diagonal q; harmonic
    features with a block-diagonal q; CollapsedGP with MAP params (given, and found by L-BFGS) holding its
    data, and on precomputed VFF statistics; SparseSpectrumGP."""
    expected, got = save_and_predict_elsewhere(
        tmp_path, ("sparse-inducing-poisson", "sparse-harmonic", "collapsed-map", "collapsed-map-lbfgs",
                   "collapsed-statistics", "spectrum"))
    assert_bit_for_bit(expected, got)


def test_every_kind_of_template_survives_the_description():
    """Priors (expanded, to_event, multivariate), Params with constraints, nested and additive kernels,
    Kronecker and harmonic features (their groups), grids, spectral-density priors, numpy scalars;
    and the equality it checks with is not vacuous."""
    objects = [
        psg.Additive([psg.Matern32(1.0, dist.Gamma(2.0, 1.0)), psg.SquaredExponential(dist.HalfNormal(1.0), 0.3)]),
        psg.Product((psg.Matern32(psg.Param(2.0, constraints.interval(0.5, 3.0))),
                     psg.Periodic(1.0, 0.5, dist.Uniform(0.5, 2.0)))),
        psg.Matern12(lengthscale=psg.Param(jnp.ones(2), constraints.independent(constraints.positive, 1))),
        psg.SquaredExponential(lengthscale=dist.Normal(jnp.zeros(2), 1.0).expand([2]).to_event(1)),
        KroneckerFeatures([FourierFeatures(0, 1, 3)] * 2),
        psg.HermiteFeatures(5, input_scale=psg.Param(1.5, constraints.positive)),
        psg.TrigonometricFeatures(5, band=2.0, basis="fourier"),
        psg.RandomFourierFeatures(SpectralDensity(psg.Matern32(), 4, 2)),
        psg.HarmonicFeatures(Rotation(4) * Negation(np.array([0.0, 0.0, 1.0])),
                             RNG.normal(size=(2, 3))), psg.Grid([np.linspace(0, 1, 4)] * 2),
        psg.Softmax(3), psg.RobustMax(3, 1e-3), psg.StudentT(dist.Exponential(1.0), 0.1), psg.Bernoulli("probit"),
        np.float64(3.5), (1, [2.0, None], "s"),
    ]
    enc = encoding.Encoder()
    text = json.dumps([enc(o, f"object {i}") for i, o in enumerate(objects)])
    back = [encoding.Decoder(enc.arrays, "test", "test")(node, "o") for node in json.loads(text)]
    for original, rebuilt in zip(objects, back):
        assert type(rebuilt) is type(original)
        assert encoding.same(original, rebuilt), original
    # the comparison sees a changed value, a changed prior, a changed constraint and a changed dtype
    assert not encoding.same(psg.Matern52(1.0, 2.0), psg.Matern52(1.0, 2.5))
    assert not encoding.same(psg.Matern52(dist.LogNormal(0.0, 1.0)), psg.Matern52(dist.LogNormal(0.0, 2.0)))
    assert not encoding.same(psg.Param(1.0, constraints.positive), psg.Param(1.0, constraints.greater_than(-1.0)))
    assert not encoding.same(np.ones(2), np.ones(2, np.float32))


def rewrite(path, edit):
    """Rewrite the JSON header of a fit file with ``edit(header)`` (the arrays unchanged)."""
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    header = json.loads(str(arrays.pop(files.HEADER)[()]))
    edit(header)
    with open(path, "wb") as f:
        np.savez(f, **{files.HEADER: np.array(json.dumps(header))}, **arrays)
    return path


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    gp = psg.SparseGP(FourierFeatures(-0.5, 1.5, 4), kernel(), psg.Gaussian(dist.LogNormal(-2.0, 1.0)))
    path = tmp_path_factory.mktemp("fit") / "fit.npz"
    saving.save_fit(path, gp, fitted_like_params(gp))
    return path


@pytest.mark.parametrize("edit, message", [
    (lambda h: h.update(format_version=2),
     r"has fit format version 2, newer than this ppl_sparsegp .* can read \(up to 1;.*upgrade"),
    (lambda h: h.update(format_version="1"), r"format_version is '1', not a positive integer"),
    (lambda h: h.pop("params"), r"the header lacks 'params'"),
    (lambda h: h.update(format="something.else"), r"not a fit file written by save_fit"),
    (lambda h: h["model"]["args"]["kernel"].update({"__module__": "ppl_sparsegp.kernels.Matern77"}),
     r"model.kernel: class 'ppl_sparsegp.kernels.Matern77' does not exist in this installation"),
    (lambda h: h["model"]["args"]["kernel"]["fields"].pop("lengthscale"),
     r"model.kernel: Matern52 now has the fields \['variance', 'lengthscale'\]; the file lacks \['lengthscale'\]"),
    (lambda h: h["model"]["args"]["kernel"]["fields"]["variance"].update({"__object__": "os.system"}),
     r"model.kernel.variance: refusing to instantiate 'os.system': a fit may only hold classes of ppl_sparsegp"),
    (lambda h: h["model"]["args"]["kernel"]["fields"]["variance"].update({"__object__": "numpyro.infer.SVI"}),
     r"refusing to instantiate 'numpyro.infer.SVI'"),
    (lambda h: h["model"]["args"]["kernel"]["fields"]["variance"].update(
        {"__object__": "ppl_sparsegp.saving.save_fit"}), r"'ppl_sparsegp.saving.save_fit' is not a class"),
    (lambda h: h["params"].pop("f_v_loc"), r"the params do not match the approximation's guide: .*missing 'f_v_loc'"),
    (lambda h: h["model"]["args"].update(residual="bogus"),
     r"model: SparseGP\(...\) refused the saved arguments \(SparseGP.residual must be one of"),
])
def test_incompatible_files_raise_clearly(saved, tmp_path, edit, message):
    path = tmp_path / "edited.npz"
    path.write_bytes(saved.read_bytes())
    with pytest.raises(saving.FitFileError, match=message):
        saving.load_fit(rewrite(path, edit))


def test_a_static_field_added_since_the_file_was_written_takes_its_default(tmp_path):
    """A fit written before SphericalHarmonicFeatures had ``vanishing`` (its header without the field) loads
    with the class's default (``_static_defaults``: None, the degrees as saved, refined() reading the parity
    from them) and predicts bit for bit as the approximation it was saved from; a field the class gives no
    default is still refused, naming it."""
    gp = psg.SparseGP(psg.SphericalHarmonicFeatures(2, 4, kernel=psg.ArcCosine(1)), psg.ArcCosine(1),
                      psg.Gaussian(0.01))
    saved, params = tmp_path / "fit.npz", fitted_like_params(gp)
    saving.save_fit(saved, gp, params)

    def without(field):
        path = tmp_path / f"without_{field}.npz"
        path.write_bytes(saved.read_bytes())
        return rewrite(path, lambda h: h["model"]["args"]["feature"]["fields"].pop(field))

    back, loaded = saving.load_fit(without("vanishing"))
    assert back.feature.vanishing is None and back.feature.degrees == gp.feature.degrees == (0, 1, 2, 4)
    assert back.feature.refined().degrees == (0, 1, 2, 4, 6, 8)  # the parity read from the saved degrees
    a, b = gp.predict(X2, params=params), back.predict(X2, params=loaded)
    for k in a:
        np.testing.assert_array_equal(np.asarray(b[k]), np.asarray(a[k]))
    with pytest.raises(saving.FitFileError, match=r"the file lacks \['degrees'\]"):
        saving.load_fit(without("degrees"))


def test_a_field_renamed_since_the_file_was_written_loads_under_its_new_name(tmp_path):
    """Files written before the boxes were ``lower``/``upper`` (FourierFeatures' ``a, b``; a spherical
    feature's ``data_box`` pair) load with the same boxes and predict bit for bit (``_renamed_fields``)."""
    def old_names(fields):
        if "lower" in fields and "upper" in fields:
            lo, hi = fields.pop("lower"), fields.pop("upper")
            fields.update({"a": lo, "b": hi} if "num_frequencies" in fields else {"data_box": {"__tuple__": [lo, hi]}})
        return fields

    sph = psg.SphericalHarmonicFeatures.from_data(np.asarray(X2), psg.ArcCosine(1), max_features=20)
    for feature in (psg.FourierFeatures(-1.0, 2.0, 5), sph):
        gp = psg.SparseGP(feature, psg.ArcCosine(1) if feature is sph else psg.Matern32(1.0, 0.5), psg.Gaussian(0.01))
        saved, params = tmp_path / "fit.npz", fitted_like_params(gp)
        saving.save_fit(saved, gp, params)
        back, loaded = saving.load_fit(rewrite(saved, lambda h: old_names(h["model"]["args"]["feature"]["fields"])))
        assert (back.feature.lower, back.feature.upper) == (feature.lower, feature.upper)
        x = X2 if feature is sph else jnp.linspace(-0.5, 1.5, 7)[:, None]
        a, b = gp.predict(x, params=params), back.predict(x, params=loaded)
        for k in a:
            np.testing.assert_array_equal(np.asarray(b[k]), np.asarray(a[k]))


def test_files_that_are_not_fits(tmp_path):
    with pytest.raises(FileNotFoundError, match="no fit file at"):
        saving.load_fit(tmp_path / "missing.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(saving.FitFileError, match="not a NumPy .npz archive"):
        saving.load_fit(tmp_path / "text.npz")
    np.savez(tmp_path / "plain.npz", a=np.ones(2))
    with pytest.raises(saving.FitFileError, match="has no 'fit.json' header"):
        saving.load_fit(tmp_path / "plain.npz")


def test_save_refuses_what_it_cannot_describe(tmp_path):
    gp = psg.SparseGP(FourierFeatures(-0.5, 1.5, 4), kernel())
    params = fitted_like_params(gp)

    def my_family(name, dim, Kmm, whiten):
        return psg.full_covariance(name, dim, Kmm, whiten)

    custom = psg.SparseGP(FourierFeatures(-0.5, 1.5, 4), kernel(), q_cov=my_family)
    with pytest.raises(saving.FitFileError, match="q_cov is a user-defined callable .*my_family.*'auto', 'full'"):
        saving.save_fit(tmp_path / "a.npz", custom, params)
    with pytest.raises(ValueError, match="save_fit: params is missing 'f_v_scale_tril'"):
        saving.save_fit(tmp_path / "b.npz", gp, {k: v for k, v in params.items() if k != "f_v_scale_tril"})
    with pytest.raises(TypeError, match="metadata must be JSON-serialisable"):
        saving.save_fit(tmp_path / "c.npz", gp, params, metadata={"when": object()})
    with pytest.raises(TypeError, match="gp must be an approximation"):
        saving.save_fit(tmp_path / "d.npz", gp.model, params)
    assert not any(tmp_path.iterdir())  # nothing half-written


@pytest.mark.slow
def test_a_float64_fit_loaded_without_x64_warns(saved):
    """JAX rounds 64-bit arrays to 32 bits when jax_enable_x64 is off: load_fit says so and how to fix it."""
    code = ("import warnings, sys; warnings.filterwarnings('error', message='.*jax_enable_x64 is off')\n"
            "from ppl_sparsegp.saving import load_fit\n"
            "try:\n    load_fit(sys.argv[1])\nexcept UserWarning as w:\n    print(w)\n")
    run = subprocess.run([sys.executable, "-c", code, str(saved)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu", "JAX_ENABLE_X64": "0"})
    assert run.returncode == 0, run.stderr
    assert "holds 64-bit arrays but jax_enable_x64 is off" in run.stdout
    assert "jax.config.update('jax_enable_x64', True) before load_fit" in run.stdout


# --- an own model's fit (issue 41): its draws and what prediction needs -----------------------------
def _own_model(x, y, feature, kernel, noise, x_new=None):
    psg.marginal_spectral_gp("y", {"g": (feature, kernel)}, x, y, noise, X_new=x_new)


def test_own_model_fit_saves_reloads_and_predicts_the_same_numbers(tmp_path):
    """A marginal_spectral_gp model fitted by NUTS (tiny run): save_fit(path, model, samples, model_args=...)
    then load_fit gives (model_args, samples) whose Predictive draws equal the saved fit's bit for bit
    (same key): every array keeps its dtype and value, every template its priors."""
    from numpyro.infer import MCMC, NUTS, Predictive

    x = np.linspace(0.0, 1.0, 25)
    y = np.sin(6 * x) + 0.1 * np.random.default_rng(0).normal(size=25)
    args = {"x": x, "y": jnp.asarray(y), "feature": FourierFeatures(-0.5, 1.5, 12),
            "kernel": psg.Matern32(1.0, dist.LogNormal(np.log(0.3), 0.3)), "noise": dist.HalfNormal(0.5)}
    mcmc = MCMC(NUTS(_own_model), num_warmup=15, num_samples=10, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), **args)
    samples = mcmc.get_samples()
    saving.save_fit(tmp_path / "own.npz", _own_model, samples, model_args=args, metadata={"note": "own"})
    back_args, back_samples = saving.load_fit(tmp_path / "own.npz")
    assert set(back_args) == set(args) and set(back_samples) == set(samples)
    for k in samples:
        assert back_samples[k].dtype == samples[k].dtype and np.array_equal(back_samples[k], samples[k])
    x_new = np.linspace(0.0, 1.0, 7)
    key = jax.random.PRNGKey(3)
    before = Predictive(_own_model, samples)(key, **args, x_new=x_new)
    after = Predictive(_own_model, back_samples)(key, **back_args, x_new=x_new)
    for site in ("g_new", "y_new"):
        assert np.array_equal(np.asarray(before[site]), np.asarray(after[site])), site
    meta = saving.load_metadata(tmp_path / "own.npz")
    assert meta["model_function"].endswith("test_saving._own_model") and meta["metadata"] == {"note": "own"}
