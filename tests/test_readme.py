"""The README's code example runs as written, and does what its comments say."""
import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= 80


def test_readme_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 1, "the README has one Python example; this test runs it"
    namespace = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)  # noqa: S102 - our own README
    pred, info = namespace["pred"], namespace["info"]
    # the fit recovers sin(6x) at the two test inputs (noise sd 0.1, 200 points) and the noise variance
    np.testing.assert_allclose(np.asarray(pred["f_mean"]), np.sin([1.5, 3.0]), atol=0.05)
    assert 0.005 < float(namespace["values"]["likelihood_variance"]) < 0.02
    assert info["success"]
