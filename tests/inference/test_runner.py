"""The command-line runner on the solar model: outputs written and consistent; clear errors."""
import argparse
import json
import math

import numpy as np
import pytest

from inference.__main__ import main
from models import solar
from ppl_sparsegp import diagnostics

SITES = {"kernel_variance", "kernel_lengthscale", "likelihood_variance", "f_v"}


M = 20  # fewer inducing points than the default 50: keeps the fast suite fast


def check_outputs(out, method):
    for name in ("idata.nc", "summary.txt", "metrics.json", "fit.png"):
        assert (out / name).is_file(), name
    idata = diagnostics.load(out / "idata.nc")
    assert set(idata.posterior.data_vars) == SITES
    assert idata.posterior["f_v"].sizes["feature"] == M
    text = (out / "summary.txt").read_text()
    assert "r_hat" in text and "ess_bulk" in text
    # the summary's means are the posterior means of the saved file (3 decimals)
    rows = {line.split()[0]: line.split() for line in text.splitlines()[1:]}
    header = text.splitlines()[0].split()
    for site in ("kernel_variance", "kernel_lengthscale", "likelihood_variance"):
        mean = float(rows[site][1 + header.index("mean")])
        assert mean == pytest.approx(float(idata.posterior[site].mean()), abs=1e-3)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"] == "solar" and metrics["method"] == method and metrics["fit_time_s"] > 0
    assert metrics["num_train"] == 281 and metrics["num_test"] == 110  # 391 years, 110 held out
    assert math.isfinite(metrics["test_rmse"]) and math.isfinite(metrics["test_nlpd"])
    # the test RMSE (W/m²) is well below the sd of the held-out targets (≈0.6 W/m²)
    assert metrics["test_rmse"] < 0.6
    return idata, metrics


@pytest.mark.slow  # the SVI loop: test_fit_svi_in_blocks_is_adam_on_the_loss; the CLI end to end: pines NUTS
def test_fit_solar_svi(tmp_path):
    out = tmp_path / "svi"
    result = main(["fit", "solar", "--method", "svi", "--num-steps", "50", "--samples", "50", "--lr", "0.02",
                   "--num-features", str(M), "--out", str(out), "--no-progress"])
    idata, metrics = check_outputs(out, "svi")
    assert (out / "loss.png").is_file()
    np.testing.assert_array_equal(idata.svi["loss"].values, result["idata"].svi["loss"].values)
    assert idata.svi["loss"].size == 50 and metrics["final_loss"] == idata.svi["loss"].values[-1]
    # point estimates: every draw of a hyperparameter equals the optimised value
    np.testing.assert_array_equal(idata.posterior["kernel_variance"].values,
                                  idata.svi["kernel_variance_map"].values)


@pytest.mark.slow  # the NUTS path end to end is test_fit_pines_nuts_on_a_grid's; adequacy: test_diagnostics
def test_fit_solar_nuts(tmp_path):
    out = tmp_path / "nuts"
    main(["fit", "solar", "--method", "nuts", "--warmup", "20", "--samples", "20", "--chains", "1",
          "--max-tree-depth", "5", "--num-features", str(M), "--out", str(out), "--no-progress"])
    idata, metrics = check_outputs(out, "nuts")
    assert (out / "trace.png").is_file()
    assert idata.posterior.sizes["chain"] == 1 and idata.posterior.sizes["draw"] == 20
    assert metrics["num_divergences"] == int(idata.sample_stats["diverging"].sum())
    assert idata.log_likelihood["y"].shape == (1, 20, 281)
    # the adequacy check, printed and stored: recomputed from the saved draws it is the same
    stored = idata.adequacy
    assert stored["residual_fraction"].shape == (20,) and metrics["adequacy_ok"] == bool(stored.attrs["ok"])
    p = argparse.ArgumentParser()
    solar.add_arguments(p)
    spec = solar.build(p.parse_args(["--num-features", str(M)]))
    again = diagnostics.adequacy(spec.gp, idata, spec.X)
    np.testing.assert_allclose(stored["residual_fraction"].values, again["residual_fraction"], rtol=1e-10)
    assert 0 <= again["q95"] <= 1


def test_list(capsys):
    found = main(["list"])
    assert "solar" in found
    assert "solar" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["fit", "nope"], "unknown model 'nope'; available models: .*solar"),
    (["fit", "solar", "--method", "bogus"], "invalid choice: 'bogus'"),
    (["fit", "solar", "--method", "stein"], "does not support --method stein; supported: svi, nuts"),
    (["fit", "solar", "--num-steps", "0"], "argument --num-steps: must be a positive integer, got 0"),
    (["fit", "solar", "--num-features", "0"], "--num-features: must be a positive integer"),
])
def test_bad_inputs(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv + ["--no-progress"])
    assert e.value.code == 2
    import re
    assert re.search(message, capsys.readouterr().err)


def test_fit_pines_nuts_on_a_grid(tmp_path):
    """The README's main job at toy size: Grid inputs reach the model as a Grid (Kronecker paths),
    the saved groups hold the cell centres, and the pointwise log-likelihood is the model's y term."""
    from types import SimpleNamespace

    from numpyro import handlers

    from models import pines

    out = tmp_path / "pines"
    main(["fit", "pines", "--method", "nuts", "--warmup", "10", "--samples", "4", "--chains", "1",
          "--max-tree-depth", "4", "--num-frequencies", "3", "--grid", "8", "--out", str(out), "--no-progress"])
    for name in ("idata.nc", "summary.txt", "metrics.json", "fit.png"):
        assert (out / name).is_file(), name
    idata = diagnostics.load(out / "idata.nc")
    spec = pines.build(SimpleNamespace(num_frequencies=3, grid=8))
    np.testing.assert_allclose(idata.constant_data["X"].values, spec.X.points())
    np.testing.assert_array_equal(idata.observed_data["y"].values, spec.y)
    draw = {k: idata.posterior[k].values[0, 2] for k in idata.posterior.data_vars}
    trace = handlers.trace(handlers.substitute(spec.gp.model, draw)).get_trace(spec.X, spec.y)
    site = trace["y"]
    np.testing.assert_allclose(idata.log_likelihood["y"].values[0, 2],
                               site["fn"].log_prob(site["value"]), rtol=1e-10)
    assert "kernel_0_lengthscale" in (out / "summary.txt").read_text()


def user_error(argv, capsys):
    """The one stderr line of a run that must stop with exit status 2 (no traceback)."""
    with pytest.raises(SystemExit) as e:
        main(argv + ["--no-progress"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(("python -m inference: error: ",
                                                    "python -m inference fit: error: ")), err
    return lines[0]


def test_missing_files_and_folders_are_one_line_errors(tmp_path, capsys):
    """Issue 17 item 6: a missing --csv, data folder or an --out under a file printed a traceback."""
    line = user_error(["fit", "airline", "--csv", str(tmp_path / "flights.csv")], capsys)
    assert "No such file or directory" in line and "flights.csv" in line
    line = user_error(["fit", "uci_vof", "--data-dir", str(tmp_path / "nowhere")], capsys)
    assert "UCI data set 'yacht' not found under" in line and "set --data-dir" in line
    (tmp_path / "a_file").write_text("")  # raised inside fit, after the model is built
    line = user_error(["fit", "solar", "--num-steps", "1", "--num-features", "5",
                       "--out", str(tmp_path / "a_file" / "run")], capsys)
    assert "Not a directory" in line


@pytest.mark.parametrize("flag, value", [("--num-features", "0"), ("--num-features", "-3"),
                                         ("--batch-size", "0")])
def test_non_positive_counts_are_errors_not_defaults(flag, value, capsys, tmp_path):
    """Issue 17 item 5: `--num-features 0` silently ran with the default 15 (`x or 15`). Checked before
    any data is read, so a missing data folder does not hide it."""
    line = user_error(["fit", "uci_vof", flag, value, "--data-dir", str(tmp_path)], capsys)
    assert line.endswith(f"{flag}: must be a positive integer, got {value}")  # refused by argparse


def test_bugs_keep_their_traceback(monkeypatch):
    """Only user errors are shortened: any other exception propagates unchanged."""
    from models import solar

    def broken(args):
        raise KeyError("a bug")

    monkeypatch.setattr(solar, "build", broken)
    with pytest.raises(KeyError, match="a bug"):
        main(["fit", "solar", "--no-progress"])


def test_host_devices_follow_the_chains_the_fit_will_run():
    """The chains are known before the model is built (JAX's device count is fixed at start-up): the
    --chains flag, else the model module's DEFAULTS["nuts"]["chains"] (pines: 4, so its chains run in
    parallel), else the runner's default."""
    from types import SimpleNamespace

    from inference.runner import DEFAULTS, _planned_chains
    from models import pines, solar

    assert _planned_chains(SimpleNamespace(chains=3), pines) == 3
    assert _planned_chains(SimpleNamespace(chains=None), pines) == pines.DEFAULTS["nuts"]["chains"] == 4
    assert not hasattr(solar, "DEFAULTS")
    assert _planned_chains(SimpleNamespace(chains=None), solar) == DEFAULTS["nuts"]["chains"]


# --- the SVI loop: compiled blocks, bounded memory, a clear stop at the first non-finite step -------------
def _toy_model():
    """Loss −(p + 10⁻³√(2.5 − p) − q²) under SGD(1): p grows by ≈1 per step, so the loss at step 4 (at
    p₃ ≈ 2.9986) is NaN and its gradient makes p NaN; q stays finite."""
    import jax.numpy as jnp
    import numpyro

    p = numpyro.param("p", 0.0)
    q = numpyro.param("q", 0.5)
    numpyro.factor("f", p + 1e-3 * jnp.sqrt(2.5 - p) - q**2)


def _no_guide(*args, **kwargs):
    pass


def test_fit_svi_stops_at_the_first_non_finite_step_and_names_the_params(capsys):
    import jax
    from numpyro import optim

    from ppl_sparsegp.engines import NonFiniteLossError, fit_svi

    with pytest.raises(NonFiniteLossError) as raised:
        fit_svi(_toy_model, num_steps=50, rng_key=jax.random.PRNGKey(0), optim=optim.SGD(1.0), guide=_no_guide,
                block_size=3, progress=True)
    e = raised.value
    # the same steps by hand: SGD on the loss −(p + 10⁻³√(2.5 − p) − q²)
    p, q, losses = 0.0, 0.5, []
    for _ in range(3):
        losses.append(-(p + 1e-3 * math.sqrt(2.5 - p) - q**2))
        p, q = p + (1 - 0.5e-3 / math.sqrt(2.5 - p)), q - 2 * q
    assert e.step == 4 and e.names == ["p"] and math.isnan(e.loss)  # the second block (steps 4-6)
    np.testing.assert_allclose(e.losses, losses, rtol=1e-12)  # the steps before it
    np.testing.assert_allclose([e.params["p"], e.params["q"]], [p, q], rtol=1e-12)  # the last finite params
    assert str(e) == ("SVI stopped at step 4 of 50: the loss is nan and after it these params are not finite: p; "
                      f"the last finite loss was {losses[-1]:.6g} at step 3. Lower the learning rate (--lr), or "
                      "check the data, the priors and the initial values for values that overflow")
    # NumPyro's progress bar: the first block's losses were reported
    assert f"init loss: {losses[0]:.4f}, avg. loss [1-3]: {np.mean(losses):.4f}" in capsys.readouterr().err


def test_fit_svi_in_blocks_is_adam_on_the_loss():
    """Seven Adam steps in blocks of three (the last one partial) on −Σ log N(y | m, s), s = exp(t): the
    losses and params of the same steps by hand (NumPyro's Adam: b₁ = 0.9, b₂ = 0.999, ε = 10⁻⁸)."""
    import jax
    import jax.numpy as jnp
    import numpyro
    from numpyro import optim
    from numpyro.infer import Trace_ELBO

    from ppl_sparsegp.engines import fit_svi

    def model(y):
        m = numpyro.param("m", 0.3)
        s = numpyro.param("s", 1.0, constraint=numpyro.distributions.constraints.positive)
        numpyro.sample("y", numpyro.distributions.Normal(m, s), obs=y)

    y = np.array([1.0, 2.0, 4.0])
    ours, seconds = fit_svi(model, jnp.asarray(y), num_steps=7, rng_key=jax.random.PRNGKey(1), optim=optim.Adam(0.1),
                            elbo=Trace_ELBO(), guide=_no_guide, block_size=3)
    x, mom, vel, losses = np.array([0.3, 0.0]), np.zeros(2), np.zeros(2), []  # (m, t = log s)
    for i in range(7):
        m, s = x[0], math.exp(x[1])
        r = y - m
        losses.append(np.sum(0.5 * np.log(2 * np.pi * s**2) + r**2 / (2 * s**2)))
        g = np.array([-np.sum(r) / s**2, np.sum(1 - r**2 / s**2)])  # d loss / d(m, t)
        mom, vel = 0.9 * mom + 0.1 * g, 0.999 * vel + 0.001 * g**2
        x = x - 0.1 * (mom / (1 - 0.9 ** (i + 1))) / (np.sqrt(vel / (1 - 0.999 ** (i + 1))) + 1e-8)
    np.testing.assert_allclose(ours.losses, losses, rtol=1e-12)
    np.testing.assert_allclose([ours.params["m"], ours.params["s"]], [x[0], math.exp(x[1])], rtol=1e-12)
    assert ours.losses.shape == (7,) and seconds > 0
    with pytest.raises(ValueError, match="block_size must be None or a positive integer, got 0"):
        fit_svi(model, y, num_steps=7, rng_key=jax.random.PRNGKey(1), guide=_no_guide, block_size=0)


@pytest.mark.slow
def test_runner_writes_a_fit_that_predicts_and_stops_on_a_non_finite_loss(tmp_path, capsys):
    """fit.npz next to idata.nc (SVI on the sparse and the collapsed solar model): load_fit predicts
    exactly what the InferenceData predicts; a learning rate that overflows stops with one line."""
    import re
    from types import SimpleNamespace

    from ppl_sparsegp.saving import load_fit, load_metadata

    for collapsed in (False, True):
        out = tmp_path / f"svi-{collapsed}"
        argv = ["fit", "solar", "--method", "svi", "--num-steps", "30", "--samples", "20", "--num-features", str(M),
                "--out", str(out), "--no-progress"] + (["--collapsed"] if collapsed else [])
        result = main(argv)
        gp, params = load_fit(out / "fit.npz")
        spec = solar.build(SimpleNamespace(num_features=M, collapsed=collapsed))
        ours = gp.predict(spec.X_test, params=params)
        ref = diagnostics.predict(spec.gp, result["idata"], spec.X_test)
        for key in ("f_mean", "f_var", "y_mean", "y_var"):
            np.testing.assert_allclose(ours[key], ref[key], rtol=1e-12, atol=1e-14)
        meta = load_metadata(out / "fit.npz")["metadata"]
        assert meta["model"] == "solar" and meta["num_steps"] == 30
        assert meta["final_loss"] == result["metrics"]["final_loss"]
    capsys.readouterr()  # the fits' own output
    line = user_error(["fit", "solar", "--method", "svi", "--num-steps", "30", "--lr", "1e30", "--num-features", "5",
                       "--out", str(tmp_path / "nan")], capsys)
    assert re.search(r"SVI stopped at step \d+ of 30: the loss is .* not finite: .*Lower the learning rate", line)


def test_svi_default_is_natural_gradients_with_adam_one_flag_away():
    """--method svi steps q(u) by natural gradients where the q family has natural parameters (Adam on the
    rest), Adam elsewhere; on a Gaussian SparseGP with fixed hyperparameters one fit_svi step reaches the
    collapsed bound (the loss is minus the bound)."""
    import jax

    from inference.runner import fit_svi, svi_optimizer
    from ppl_sparsegp import CollapsedGP, SparseGP
    from ppl_sparsegp.approximations.collapsed import collapsed_elbo
    from ppl_sparsegp.features import InducingPoints
    from ppl_sparsegp.kernels import SquaredExponential
    from ppl_sparsegp.likelihoods import Gaussian

    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (30, 1))
    y = np.sin(X[:, 0]) + 0.2 * rng.standard_normal(30)
    kernel, feature = SquaredExponential(variance=1.0, lengthscale=0.7), InducingPoints(np.linspace(-3, 3, 6)[:, None])
    gp = SparseGP(feature, kernel, Gaussian(variance=0.04))
    optim, elbo, name = svi_optimizer(gp, "natgrad", 0.01)
    assert name == "natgrad" and float(optim.gamma(0)) == 1.0 and optim.line_search
    result, _ = fit_svi(gp, X, y, num_steps=1, rng_key=jax.random.PRNGKey(0), optim=optim, elbo=elbo)
    bound = float(collapsed_elbo(feature, kernel, X, y, 0.04))
    assert float(result.losses[-1]) == pytest.approx(-bound, rel=1e-10)
    assert svi_optimizer(gp, "adam")[2] == "adam"
    assert svi_optimizer(CollapsedGP(feature, kernel, Gaussian(variance=0.04)))[2] == "adam"
    assert svi_optimizer(SparseGP(feature, kernel, Gaussian(variance=0.04), residual="marginal"))[2] == "adam"
    assert float(svi_optimizer(gp, model_kwargs={"batch_size": 10})[0].gamma(0)) == pytest.approx(1e-4)


@pytest.mark.parametrize("argv, conflict", [
    (["--optimizer", "adam"], "--optimizer adam runs no natural gradients: drop --gamma"),
    (["--collapsed"], "CollapsedGP has no natural-gradient step .* SVI runs Adam: drop --gamma"),
])
def test_gamma_where_adam_runs_is_refused(argv, conflict, capsys, tmp_path):
    """--gamma is never silently ignored: with --optimizer adam, or a model whose q has no natural-gradient
    step (the collapsed solar model: Adam on the hyperparameters), one line naming the conflict."""
    line = user_error(["fit", "solar", "--method", "svi", "--num-steps", "3", "--gamma", "0.5", "--num-features", "5",
                       "--out", str(tmp_path / "out")] + argv, capsys)
    import re
    assert re.search(conflict, line), line


def test_a_diverging_fit_exits_non_zero_with_the_cause_and_the_fix(tmp_path, capsys):
    """The bundled vof_regression example (mean-field q) with --gamma 1, taken as given: the natural-gradient
    step overshoots (a Jacobi iteration on a coupled posterior) and the loss grows by orders of magnitude,
    finite; the runner stops with one line naming the step, γ and the fix (its default line-searches)."""
    line = user_error(["fit", "vof_regression", "--method", "svi", "--num-steps", "40", "--gamma", "1",
                       "--out", str(tmp_path / "out")], capsys)
    assert "SVI diverged at step" in line and "natural-gradient step size γ" in line and "drop --gamma" in line
    assert not (tmp_path / "out" / "idata.nc").exists()
