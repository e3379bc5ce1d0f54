"""The benchmark harness (results store, Markdown table) and the predictive metrics, against hand-written
expectations and direct NumPy/SciPy formulas."""
import json

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from inference.benchmarks import harness
from ppl_sparsegp.diagnostics import categorical_nlpd, mixture_nlpd, nlpd, rmse


def test_store_resume_and_merge(tmp_path):
    path = tmp_path / "bench.jsonl"
    first = harness.Store(path, ["dataset", "split"], settings={"steps": 10})
    first.add({"dataset": "a", "split": 0, "rmse": 1.0})
    first.add({"dataset": "a", "split": 1, "rmse": 2.0})
    first.add({"dataset": "a", "split": 0, "rmse": 1.5})  # the same key again: the later row wins
    assert [json.loads(line)["settings"] for line in path.read_text().splitlines()] == [{"steps": 10}] * 3
    other = harness.Store(path, ["dataset", "split"], settings={"steps": 20})  # other settings: nothing stored
    assert other.rows == [] and not other.done("a", 0)

    fresh = harness.Store(path, ["dataset", "split"], settings={"steps": 10})  # without --resume: kept, not skipped
    assert [r["rmse"] for r in fresh.rows] == [1.5, 2.0] and not fresh.done("a", 0)
    resumed = harness.Store(path, ["dataset", "split"], settings={"steps": 10}, resume=True)
    assert resumed.done("a", 0) and resumed.done("a", 1) and not resumed.done("b", 0)
    assert resumed.get("a", 1) == {"dataset": "a", "split": 1, "rmse": 2.0}

    elsewhere = tmp_path / "other.jsonl"  # a store of a parallel process
    harness.Store(elsewhere, ["dataset", "split"],
                  settings={"steps": 10}).add({"dataset": "b", "split": 0, "rmse": 3.0})
    harness.Store(elsewhere, ["dataset", "split"],
                  settings={"steps": 10}).add({"dataset": "a", "split": 1, "rmse": 9.0})
    merged = harness.Store(path, ["dataset", "split"], settings={"steps": 10}, merge=[elsewhere])
    assert merged.done("b", 0)  # --merge implies --resume
    assert {(r["dataset"], r["split"]): r["rmse"] for r in merged.rows} == {("a", 0): 1.5, ("a", 1): 9.0,
                                                                           ("b", 0): 3.0}
    again = harness.Store(path, ["dataset", "split"], settings={"steps": 10})  # the merged rows were stored
    assert {(r["dataset"], r["split"]): r["rmse"] for r in again.rows} == {("a", 0): 1.5, ("a", 1): 9.0,
                                                                          ("b", 0): 3.0}
    written = again.write_json({"runs": again.rows})
    assert written == tmp_path / "bench.json" and len(json.loads(written.read_text())["runs"]) == 3


def test_table_from_column_spec():
    rows = [{"name": "VFF", "M": 31, "rmse": (0.12345, 0.01), "ms": 1.234}, {"name": "SVGP", "M": 8, "ms": None}]
    out = harness.table(rows, [("model", "name", ""), ("M", "M", "d"), ("RMSE", "rmse", harness.pm(3)),
                               ("µs", lambda r: None if r["ms"] is None else 1e3 * r["ms"], ".0f")])
    assert out == ("| model | M | RMSE | µs |\n"
                   "|---|---|---|---|\n"
                   "| VFF | 31 | 0.123 ± 0.010 | 1234 |\n"
                   "| SVGP | 8 | — | — |")
    assert harness.pm(2)((1.0, 0.0)) == "1.00" and harness.pm(2, always=True)((1.0, 0.0)) == "1.00 ± 0.00"


def test_parser_common_flags():
    args = harness.parser("demo", "Demo benchmark.\n\nMore.", cpu="last").parse_args(
        ["--quick", "--resume", "--out", "x.jsonl"])
    assert (args.quick, args.resume, str(args.out), args.cpu, args.benchmark) == (True, True, "x.jsonl", "last", "demo")


@pytest.fixture
def predictions():
    rng = np.random.default_rng(0)
    S, N = 3, 40
    return (rng.normal(size=N), rng.normal(size=(S, N)), rng.uniform(0.2, 2.0, (S, N)))


def test_gaussian_metrics_against_direct_formulas(predictions):
    y, means, variances = predictions
    m, v, s = means[0], variances[0], 2.5
    assert rmse(y, m) == pytest.approx(np.sqrt(np.mean((y - m) ** 2)), rel=1e-14)
    assert nlpd(y, m, v) == pytest.approx(-np.mean(stats.norm.logpdf(y, m, np.sqrt(v))), rel=1e-13)
    # on the original scale: y' = s·y + c, m' = s·m + c, v' = s²·v
    c = 7.0
    assert rmse(y, m, y_scale=s) == pytest.approx(rmse(s * y + c, s * m + c), rel=1e-13)
    assert nlpd(y, m, v, y_scale=s) == pytest.approx(nlpd(s * y + c, s * m + c, s**2 * v), rel=1e-13)


def test_mixture_and_categorical_nlpd_against_direct_formulas(predictions):
    y, means, variances = predictions
    logp = stats.norm.logpdf(y, means, np.sqrt(variances))  # (S, N)
    S, N = logp.shape
    assert mixture_nlpd(y, means, variances) == pytest.approx(-np.mean(logsumexp(logp, 0) - np.log(S)), rel=1e-13)
    assert mixture_nlpd(y, means, variances, joint=True) == pytest.approx(
        -(logsumexp(logp.sum(1)) - np.log(S)), rel=1e-13)
    assert mixture_nlpd(y, means, variances, y_scale=2.0) == pytest.approx(
        mixture_nlpd(y, means, variances) + np.log(2.0), rel=1e-13)
    assert mixture_nlpd(y, means[0], variances[0]) == pytest.approx(nlpd(y, means[0], variances[0]), rel=1e-13)
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    assert categorical_nlpd([0, 1], probs) == pytest.approx(-(np.log(0.7) + np.log(0.1)) / 2, rel=1e-14)
    for bad in ([0, -1], [0, 3], [0.0, 1.0], [0]):  # a negative label would index from the last class
        with pytest.raises(ValueError, match="class labels|one row per label"):
            categorical_nlpd(bad, probs)


def test_lgcp_1d_distances_to_the_exact_or_to_hsgp():
    """|mean − reference mean| / reference sd per hyperparameter, and the intensity curve's largest
    standardised gap, by hand; without the exact GP the reference is the group's HSGP row."""
    from inference.benchmarks import lgcp_1d

    def row(name, means, sds, lam_mean, lam_sd):
        post = {k: {"mean": m, "sd": s} for k, m, s in zip(lgcp_1d.HYPER, means, sds)}
        return {"name": name, "posterior": post, "intensity_mean": lam_mean, "intensity_sd": lam_sd}

    exact = row("exact", [0.06, 1.0, 1.5], [0.02, 0.5, 0.4], [2.0, 4.0], [0.5, 1.0])
    hsgp = row("HSGP m=31", [0.07, 0.9, 1.5], [0.02, 0.4, 0.4], [2.5, 4.0], [0.25, 2.0])
    vff = row("VFF M=16", [0.065, 1.2, 1.3], [0.02, 0.5, 0.4], [2.0, 5.0], [0.5, 1.0])

    with_exact = lgcp_1d.with_distances([hsgp, vff], exact)
    assert with_exact[1]["sd_distance"] == pytest.approx({"ell": 0.25, "var": 0.4, "c": 0.5})
    assert with_exact[1]["max_sd_distance"] == pytest.approx(0.5)
    assert with_exact[0]["intensity_max_sd_distance"] == pytest.approx(1.0)  # (2.5 − 2) / 0.5

    without = lgcp_1d.with_distances([hsgp, vff])
    assert "sd_distance" not in without[0]
    assert without[1]["sd_distance"] == pytest.approx({"ell": 0.25, "var": 0.75, "c": 0.5})
    assert without[1]["intensity_max_sd_distance"] == pytest.approx(2.0)  # (2.5 − 2) / 0.25


@pytest.mark.parametrize("M", [2, 9])
def test_lgcp_1d_compile_layout_model_is_the_library_prior(M):
    """The hand-written (2, M) layout of ``lgcp_1d_compile`` (closed-form Matérn-3/2 spectral terms, the
    symmetric root's correction as one block reduction) gives the library's ``spectral_gp`` f to rounding
    (an independent check of both); without the correction (Kuu's diagonal alone, another prior) it does not."""
    import jax.numpy as jnp
    import numpy as np

    from inference.benchmarks import lgcp_1d, lgcp_1d_compile
    from ppl_sparsegp import FourierFeatures

    x, y = (jnp.asarray(a) for a in lgcp_1d.simulate(40))
    feature = FourierFeatures(-0.3, 1.2, M)
    assert lgcp_1d_compile.check_layout(feature, x, y, tol=1e-12) < 1e-12
    values = {"ell": 0.1, "var": 0.7, "c": 0.0, "f_v": np.linspace(-1.0, 1.0, feature.num_features)}
    no_correction = lgcp_1d_compile.f_at(lgcp_1d_compile.layout_model(feature, x, correction=False), x, y, values)
    library = lgcp_1d_compile.f_at(lambda x, y: lgcp_1d.vff_model(x, y, feature), x, y, values)
    assert np.max(np.abs(no_correction - library)) > 1e-3
