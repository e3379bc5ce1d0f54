"""inference/benchmarks/gpu.py: its summary logic (fast) and its ``--quick`` run on a CPU (slow).

The quick run is what shows the script works before a GPU is there: every part runs, in one process,
without jax-finufft (blocked here, as it is missing on the GPU machine), and its JSON holds finite figures
that agree with each other.
"""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from inference.benchmarks import gpu

ROOT = Path(__file__).resolve().parents[2]


def _parts():
    """A hand-made parts dict in the shape the runners return (only the fields headline reads)."""
    summary = {ds: {"SVGP-m": {"time_ratio": (1.0, 0.0), "ms_per_iter_wall": (2.0, 0.0)},
                    "SVGP-2m": {"time_ratio": (1.2, 0.0), "ms_per_iter_wall": (2.4, 0.0)},
                    "HVGP 8xm": {"time_ratio": (r, 0.0), "ms_per_iter_wall": (2.0 * r, 0.0)}}
               for ds, r in (("kin8nm", 1.4), ("power-plant", 1.6))}
    rows32 = [{"finite32": True, "ok_collapsed": True, "ok_sparse": True, "bound_err": 1e-5, "elbo_err": 2e-5,
               "cpu": {"ok_collapsed": True, "ok_sparse": True}},
              {"finite32": True, "ok_collapsed": False, "ok_sparse": True, "bound_err": 3e-3, "elbo_err": 1e-4,
               "cpu": {"ok_collapsed": True, "ok_sparse": True}},
              {"finite32": False, "ok_collapsed": False, "ok_sparse": False, "bound_err": math.inf,
               "elbo_err": math.inf, "cpu": None}]
    return {"hkd": {"summary": summary},
            "svgp": {"rows": [{"M": 1000, "library": {"ms_per_iter_wall": 2.0}, "gpytorch": {"ms_per_iter_wall": 3.0},
                               "gpytorch_over_library": 1.5},
                              {"M": 4000, "library": {"ms_per_iter_wall": 5.0}, "gpytorch": {"skipped": "no"},
                               "gpytorch_over_library": None}]},
            "pines": {"error": "RuntimeError: out of memory"},
            "float32": {"rows": rows32}}


def test_headline_takes_the_worst_data_set_and_counts_verdicts():
    h = gpu.headline(_parts())
    assert h["hkd"]["max_hvgp_8xm_ratio"] == 1.6 and h["hkd"]["hvgp_8xm_at_most_1_5"] is False
    assert h["hkd"]["ms_per_step"]["power-plant"]["HVGP 8xm"] == pytest.approx(3.2)
    assert h["svgp"]["1000"] == {"library_ms": 2.0, "gpytorch_ms": 3.0, "gpytorch_over_library": 1.5}
    assert h["svgp"]["4000"]["gpytorch_ms"] is None
    assert "pines" not in h and "airline" not in h  # a failed or missing part has no headline
    f = h["float32"]
    assert (f["rows"], f["collapsed_holds"], f["sparse_holds"]) == (3, 1, 2)
    assert (f["with_cpu_row"], f["same_verdict_as_cpu"]) == (2, 1)
    assert f["max_bound_err"] == 3e-3 and f["max_elbo_err"] == 1e-4  # over the finite rows only


def test_out_is_a_folder_or_a_store(tmp_path):
    assert gpu.out_paths(tmp_path, False) == (tmp_path / "gpu.jsonl", tmp_path / "gpu.json")
    assert gpu.out_paths(tmp_path / "x.jsonl", True) == (tmp_path / "x.jsonl", tmp_path / "x.json")
    assert gpu.out_paths(None, False)[1] == gpu.harness.RESULTS / "gpu.json"
    assert gpu.out_paths(None, True)[1].parent != gpu.harness.RESULTS  # --quick never writes over results/


def test_uci_stand_in_has_the_stored_sizes(tmp_path):
    """Without the UCI files (the GPU machine) each set is a stand-in of hkd_uci.json's N and D."""
    stored = json.loads((ROOT / "inference/benchmarks/results/hkd_uci.json").read_text())
    sizes = {r["dataset"]: (r["N"], r["D"]) for r in stored["runs"]}
    assert {ds: s[0::2] for ds, s in gpu.UCI_SIZES.items()} == sizes
    (X, y, X_test, y_test, scaler), source = gpu.uci_data("kin8nm", data_dir=tmp_path)
    assert source.startswith("synthetic stand-in")
    n, n_test, D = gpu.UCI_SIZES["kin8nm"]
    assert X.shape == (n, D) and X_test.shape == (n_test, D) and y_test.shape == (n_test,)
    assert abs(X.mean()) < 0.05 and abs(y.std() - 1) < 1e-9  # standardised as models.uci_hkd.load does
    assert 0.2 < y.std() * scaler["y_sd"] / y_test.std() < 5


def _finite(*xs):
    return all(isinstance(x, (int, float)) and math.isfinite(x) for x in xs)


@pytest.mark.slow
def test_quick_run_writes_sane_consistent_figures(tmp_path):
    code = ("import sys, runpy; sys.modules['jax_finufft'] = None; "  # as on the GPU machine
            f"sys.argv = ['gpu', '--quick', '--out', {str(tmp_path)!r}]; "
            "runpy.run_module('inference.benchmarks.gpu', run_name='__main__')")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=900)
    result = json.loads((tmp_path / "gpu.json").read_text())
    assert result["quick"] is True and result["errors"] == {}
    assert result["device"] and result["jax"] and result["numpyro"] and result["backend"]
    parts = result["parts"]
    assert set(parts) == set(gpu.PARTS)
    assert sum(result["part_seconds"].values()) <= result["total_s"] + 1e-6

    hkd = parts["hkd"]
    assert [r["method"] for r in hkd["rows"]] == list(gpu.QUICK["hkd_methods"])
    for r in hkd["rows"]:
        assert _finite(r["ms_per_iter_wall"], r["compile_s"], r["rmse"], r["nlpd"], r["subsample_ms"])
        assert 0 < r["ms_per_iter_wall"] < 1e3 * r["compile_s"]  # a step is cheaper than its compilation
    ratios = result["headline"]["hkd"]["time_ratio_vs_svgp_m"]["kin8nm"]
    ms = {r["method"]: r["ms_per_iter_wall"] for r in hkd["rows"]}
    assert ratios["SVGP-m"] == 1.0 and ratios["HVGP 8xm"] == pytest.approx(ms["HVGP 8xm"] / ms["SVGP-m"])
    assert hkd["targets"][0]["max_time_ratio_vs_svgp_m"] == pytest.approx(ratios["HVGP 8xm"])

    svgp = parts["svgp"]
    assert [r["M"] for r in svgp["rows"]] == list(gpu.QUICK["svgp_M"])
    assert svgp["N"] == gpu.UCI_SIZES[svgp["dataset"]][0]
    for r in svgp["rows"]:
        assert _finite(r["library"]["ms_per_iter_wall"], r["library"]["compile_s"], r["library"]["final_loss"])
        theirs = r["gpytorch"]
        if "skipped" in theirs:  # GPyTorch is not a test dependency
            assert r["gpytorch_over_library"] is None
        else:
            assert _finite(theirs["ms_per_iter_wall"], theirs["first_step_s"], theirs["final_loss_per_datum"])
            assert r["gpytorch_over_library"] == pytest.approx(
                theirs["ms_per_iter_wall"] / r["library"]["ms_per_iter_wall"])

    rows = {r["dtype"]: r for r in parts["pines"]["rows"]}
    assert set(rows) == {"float32", "float64"}
    for dtype, r in rows.items():
        assert r["data_dtype"] == dtype  # float32 really ran with x64 off
        assert _finite(r["sampling_s"], r["compile_s"], r["min_bulk_ess"], r["ms_per_gradient"], r["max_distance"])
        assert 0 < r["sampling_s"] <= r["wall_s"] and r["compile_s"] >= 0
        assert r["min_bulk_ess_per_sampling_s"] == pytest.approx(r["min_bulk_ess"] / r["sampling_s"])
        assert r["draws_per_chain"] == gpu.QUICK["pines_samples"] and r["chains"] == gpu.QUICK["pines_chains"]
        assert len(r["distance"]) == 4 and r["max_distance"] < 5  # few draws, 8 frequencies: near, not close

    air = parts["airline"]
    assert air["n_train"] == gpu.QUICK["airline_n"]
    assert _finite(air["stats_dense_s"], air["optimise_s"], air["test_mse"], air["noise_variance"])
    assert air["oracle_mse"] * 0.98 < air["test_mse"] < 1.0  # learned most of the signal (oracle ≈ 0.76)
    assert air["fit_s"] == pytest.approx(air["stats_dense_s"] + air["optimise_s"])
    cpu = air["cpu_reference"]  # vff_scaling.json has a 10⁴ row
    assert air["speedup_stats_dense"] == pytest.approx(cpu["stats_dense_s"] / air["stats_dense_s"])

    f32 = parts["float32"]["rows"]
    assert {(r["family"], r["M"]) for r in f32} == {(f, M) for f, Ms in gpu.QUICK_FLOAT32.items() for M in Ms}
    for r in f32:
        assert r["finite32"] and _finite(r["bound_err"], r["elbo_err"]) and r["dtype32"]
        assert ("highest" in r) == (not (r["ok_collapsed"] and r["ok_sparse"]))
    vff = next(r for r in f32 if r["family"] == "vff")
    assert vff["ok_collapsed"] and vff["ok_sparse"] and vff["bound_err"] < 1e-3  # the README table's threshold


def test_float32_rows_are_settings_of_the_stored_table():
    """Each device row is one setting of float32.FULL at M it swept, so the CPU row to compare exists."""
    from inference.benchmarks import float32

    stored = json.loads((ROOT / "inference/benchmarks/results/float32.json").read_text())
    keys = {(r["family"], r["setting"], r["M"]) for r in stored["rows"]}
    for family, (setting, Ms) in gpu.FLOAT32_ROWS.items():
        swept = [entry[2] for entry in float32.FULL[family] if entry[0] == setting]
        assert len(swept) == 1 and set(Ms) <= set(swept[0])
        assert all((family, setting, M) in keys for M in Ms)
    assert set(gpu.FLOAT32_ROWS) == set(float32.FULL)  # every family of the README table


def test_a_failed_part_keeps_its_finished_runs_and_a_merged_rerun_redoes_only_it(tmp_path, monkeypatch):
    """The plan for a GPU run stopped or broken half-way: the JSON keeps what finished, and a rerun with
    ``--merge`` of the first store runs only the failed part."""
    calls = []

    def good(sizes, args, progress):
        calls.append("hkd")
        return {"rows": [1]}

    def broken(sizes, args, progress):
        calls.append("pines")
        progress({"rows": [{"dtype": "float32"}]})
        if len(calls) < 3:
            raise RuntimeError("out of memory")
        return {"rows": [{"dtype": "float32"}, {"dtype": "float64"}]}

    monkeypatch.setattr(gpu, "RUNNERS", {"hkd": good, "pines": broken})
    monkeypatch.setattr(gpu, "headline", lambda parts: {})
    monkeypatch.setattr(gpu, "_torch_versions", lambda: None)  # importing torch alone takes seconds
    first = gpu.main(["--quick", "--parts", "hkd,pines", "--out", str(tmp_path / "a")])
    assert first["errors"] == {"pines": "RuntimeError: out of memory"}
    assert first["parts"]["pines"]["rows"] == [{"dtype": "float32"}]  # the finished run survives the failure
    assert json.loads((tmp_path / "a" / "gpu.json").read_text())["errors"] == first["errors"]
    second = gpu.main(["--quick", "--parts", "hkd,pines", "--out", str(tmp_path / "b"),
                       "--merge", str(tmp_path / "a" / "gpu.jsonl")])
    assert calls == ["hkd", "pines", "pines"] and second["errors"] == {}
    assert second["parts"]["hkd"]["rows"] == [1] and len(second["parts"]["pines"]["rows"]) == 2
