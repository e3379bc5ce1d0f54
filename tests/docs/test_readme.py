"""The README's code example runs as written, and does what its comments say."""
import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= 80


def test_readme_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 1, "the README has one Python example; this test runs it"
    namespace = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)  # noqa: S102 - our own README
    pred, info, values = namespace["pred"], namespace["info"], namespace["values"]
    # the prediction is the exact GP's posterior mean at the fitted hyperparameters (dense, independent),
    # which recovers sin(6x) at the two test inputs within its noise (sd 0.1, 200 points)
    x, y = namespace["x"], namespace["y"]
    ell, s2 = float(values["kernel_lengthscale"]), float(values["likelihood_variance"])
    k = lambda a, b: (1 + np.sqrt(3) * np.abs(a - b.T) / ell) * np.exp(-np.sqrt(3) * np.abs(a - b.T) / ell)  # noqa: E731
    xs = np.array([[0.25], [0.5]])
    exact = k(xs, x) @ np.linalg.solve(k(x, x) + s2 * np.eye(len(x)), y)
    np.testing.assert_allclose(np.asarray(pred["f_mean"]), exact, atol=0.01)
    np.testing.assert_allclose(np.asarray(pred["f_mean"]), np.sin([1.5, 3.0]), atol=0.1)
    assert 0.005 < float(namespace["values"]["likelihood_variance"]) < 0.02
    assert info["success"]
