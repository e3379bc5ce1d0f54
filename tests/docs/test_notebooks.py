"""Every notebook (jupytext percent-format .py) runs top to bottom at reduced size (QUICK=1)."""
import runpy
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.py"))
# own_model runs NUTS on two user models: 22 s even at QUICK size (32 s before VFF's Kuf became a
# program constant; most of it compilation, ~200-300 small XLA compilations per new model in NumPyro's
# eager initialisation), so it runs with the slow tests; so do hkd
# (14 s) and srf (11 s), whose families test_harmonic.py and test_random_fourier.py / test_stein.py
# check against dense computations in the fast suite (which has to stay under 6 minutes on 2 cores)
# spherical: 25 s CPU at QUICK size (most of it compiling the SVI step with the map's scales and bias free),
# its family checked against independent computations in tests/features/test_spherical.py's fast tests
SLOW = {"own_model", "hkd", "srf", "spherical"}


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.stem in SLOW else p
                                  for p in NOTEBOOKS], ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    monkeypatch.setenv("QUICK", "1")
    monkeypatch.setenv("NOTEBOOK_OUT", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(path), run_name="__main__")
    assert any(tmp_path.glob("*.png")), "a notebook should save at least one figure"
