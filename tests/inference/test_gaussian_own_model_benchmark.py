"""The own-model benchmark's long series (inference/benchmarks/gaussian_own_model.py, ``--n``; issue 40
item 6): the exact GP is refused beyond EXACT_MAX_N points, the long series is the stand-in (its noise
against the generator's σ), and the table's distances for a long series are to the reference row (the
collapsed model refined twice), computed by hand here, with the stored N = 500 rows kept beside them; a
run keeps every part of the stored JSON that it does not recompute."""
import json
import shutil

import numpy as np
import pytest

from inference.benchmarks import gaussian_own_model as g


def test_exact_gp_refused_beyond_exact_max_n(capsys):
    """--n above EXACT_MAX_N with the exact GP: a usage error naming --n and the reference row."""
    with pytest.raises(SystemExit):
        g.main(["--n", "5000", "--models", "exact", "--table-only"])
    err = capsys.readouterr().err
    assert "--n 5000" in err and "O(N³)" in err and g.REFERENCE in err


def test_long_series_is_the_stand_in():
    """Beyond EXACT_MAX_N every setting gets the stand-in: its residual from sin(t/3) + 0.5 sin(2πt) has
    sd 0.1 (tolerance: 4 standard errors of a sample sd, 0.1·4/√(2N)); N = 500 is the GP draw (not it)."""
    n = 20_000
    t, y, H = g.simulate(n, setting="bimodal")
    t2, y2, _ = g.stand_in(n)
    np.testing.assert_array_equal(y, y2)
    assert np.all(np.diff(t) >= 0) and 0 <= t[0] and t[-1] <= g.SPAN and H.shape == (n, 2)
    residual = y - np.sin(t / 3.0) - 0.5 * np.sin(2 * np.pi * t)
    assert abs(np.std(residual) - g.NOISE) < 4 * g.NOISE / np.sqrt(2 * n)
    assert g.simulate()[1].shape == (g.N,) and g.label("centre", g.N) == "centre"


def _row(setting, name, means, sds, **extra):
    post = {k: {"mean": m, "sd": s, "bulk_ess": 100.0, "rhat": 1.0} for k, m, s in zip(g.HYPER, means, sds)}
    return {"setting": setting, "name": name, "posterior": post, "min_bulk_ess_per_s": 1.0,
            "settings": {"n": g.N, "tolerance": g.TOLERANCE}, **extra}


def test_long_series_distances_to_the_reference(tmp_path):
    """--table-only over a store with an N = 500 setting and its N = 10⁵ rows: the long rows' distances
    are |mean − reference mean| / reference sd, the short rows' still to the exact GP; no row is lost."""
    big = g.label("centre", 100_000)
    rows = [_row("centre", "exact", (1.7, 0.5, 0.3, 0.1), (0.2, 0.1, 0.1, 0.004)),
            _row("centre", g.PILOT, (1.8, 0.5, 0.3, 0.1), (0.2, 0.1, 0.1, 0.004)),
            _row(big, g.REFERENCE, (12.0, 2.0, 0.08, 0.1), (2.0, 1.0, 0.04, 0.0002), n=100_000),
            _row(big, g.PILOT, (13.0, 2.5, 0.08, 0.1001), (2.0, 1.0, 0.04, 0.0002), n=100_000)]
    merged = tmp_path / "rows.jsonl"
    merged.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "store.jsonl"
    g.main(["--table-only", "--skip-gradients", "--settings", "centre", "--cpu", "all", "--out", str(out),
            "--merge", str(merged)])
    summary = {(r["setting"], r["name"]): r for r in json.loads(out.with_suffix(".json").read_text())["rows"]}
    assert set(summary) == {(r["setting"], r["name"]) for r in rows}
    np.testing.assert_allclose([summary[big, g.PILOT]["sd_distance"][k] for k in g.HYPER],
                               [0.5, 0.5, 0.0, 0.5], atol=1e-9)
    assert summary[big, g.REFERENCE]["max_sd_distance"] == 0.0
    assert summary["centre", g.PILOT]["sd_distance"]["trend_ell"] == pytest.approx(0.5)


def test_table_only_keeps_every_stored_key(tmp_path, capsys):
    """--table-only on a copy of the stored results (JSON lines and JSON) with a key added by hand: the JSON
    it writes is the stored one plus that key (its notes, rows, gradient costs, ratios and machine), for every
    setting and for one setting alone (the others' rows and ratios kept); the table it prints is the stored
    rows' table (the JSON the code before this change wrote, with the table it printed)."""
    stored = json.loads((g.harness.RESULTS / "gaussian_own_model.json").read_text())
    store = tmp_path / "gaussian_own_model.jsonl"
    shutil.copy(g.harness.RESULTS / "gaussian_own_model.jsonl", store)
    expected = {**stored, "by_hand": {"note": "added by hand", "values": [1, 2.5]}}
    for settings in (["tail", "centre", "deep tail", "bimodal"], ["tail"]):
        store.with_suffix(".json").write_text(json.dumps(expected))
        capsys.readouterr()
        g.main(["--table-only", "--skip-gradients", "--cpu", "all", "--out", str(store), "--settings", *settings])
        assert json.loads(store.with_suffix(".json").read_text()) == expected
        rows = [r for r in stored["rows"] if r["setting"].split(",")[0] in settings]
        large = [("ms/gradient", "ms_per_gradient", ".2f")] if any("ms_per_gradient" in r for r in rows) else []
        large += g.MODE_COLUMNS if any("mode_ok" in r for r in rows) else []
        printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
        assert "\n".join(printed) == g.harness.table(rows, g.COLUMNS + large)


def test_a_run_of_some_settings_keeps_the_others():
    """keep_stored: a run that recomputed the tail setting's rows and gradient costs replaces those, keeps
    the other settings' rows (in their stored order), ratios and costs and the hand-added keys, and the
    stored machine only under --table-only; a store of other settings (other data) keeps nothing."""
    settings = {"n": g.N, "tolerance": g.TOLERANCE}
    old = {"machine": "old", "settings": settings, "note": "by hand",
           "rows": [{"setting": "tail", "name": "exact", "v": 1}, {"setting": "tail", "name": "HSGP", "v": 2},
                    {"setting": "centre", "name": "exact", "v": 3}],
           "exact_profile": {"bimodal": {"ell": [1.0]}}, "ms_per_gradient_by_n": {"tail": {"500": 1.0},
                                                                                 "centre": {"500": 2.0}},
           "ess_per_s_ratios": {"tail": {"a over b": 1.0}, "centre": {"a over b": 2.0}}}
    new = {"machine": "new", "settings": settings, "rows": [{"setting": "tail", "name": "exact", "v": 10}],
           "exact_profile": {}, "ms_per_gradient_by_n": {"tail": {"500": 0.5}},
           "ess_per_s_ratios": {"tail": {}}}
    out = g.keep_stored(new, old, table_only=False)
    assert out == {"machine": "new", "settings": settings, "note": "by hand",
                   "rows": [{"setting": "tail", "name": "exact", "v": 10}, {"setting": "tail", "name": "HSGP", "v": 2},
                            {"setting": "centre", "name": "exact", "v": 3}],
                   "exact_profile": {"bimodal": {"ell": [1.0]}},
                   "ms_per_gradient_by_n": {"tail": {"500": 0.5}, "centre": {"500": 2.0}},
                   "ess_per_s_ratios": {"tail": {}, "centre": {"a over b": 2.0}}}
    assert list(out) == list(old)  # the stored order of the keys
    assert g.keep_stored(new, old, table_only=True)["machine"] == "old"
    assert g.keep_stored(new, {**old, "settings": {"n": 100, "tolerance": 0.1}}, table_only=False) == new
