r"""float32 against float64 for every feature family and approximation: where float32 stops holding.

For each family and setting (number of features M, lengthscale ℓ, Matérn order ν) the same problem is
evaluated twice, once with every floating leaf (feature, kernel, data, noise, variational parameters)
rounded to float32 and once in float64 (``jax_enable_x64`` stays on: the library's dtypes follow its
inputs, so float32 inputs give a float32 computation; the ``dtype32`` column says whether every output
came back float32), and the float32 result is compared with the float64 one:

* **CollapsedGP**: the collapsed (Titsias) bound (``collapsed_elbo``) and the predictive mean and
  variance of ``CollapsedGP(...).with_data(X, y).predict``;
* **SparseGP**: the exact SVGP ELBO (``SparseGP.elbo``, whitened, full q) and its predictive mean and
  variance, at the optimal q(v) (computed in float64 by ``optimal_whitened_q`` and rounded), so that the
  ELBO equals the collapsed bound;
* **spectral_gp**: the log joint density (NumPyro ``log_density``) of ``f = spectral_gp("f", ...)`` with
  ``y ~ N(f, σ²)``, at the float64 posterior mean of v: the potential energy NUTS evaluates.

Errors: ``|float32 − float64| / |float64|`` for the scalars (bound, ELBO, log density); for the
predictions the largest error over 200 test inputs relative to the prior scale, ``max|Δm|/σ_f`` and
``max|Δv|/σ_f²``. A row **holds** when every float32 value is finite, the scalar errors are ≤ 1e-3 and the
predictive errors ≤ 1e-2 (per approximation: ``ok_collapsed``, ``ok_sparse``, ``ok_spectral``).

The jittered families (inducing points, harmonic) add :math:`\epsilon\sigma_f^2 I` to Kuu with
ε = 1e-10 in float64 but 1e-5 in float32: the float64 reference uses float32's ε, so that the errors
above are float32 rounding alone, and ``jitter_shift`` = :math:`|\mathcal L_{64}(\epsilon=10^{-5}) -
\mathcal L_{64}(\epsilon=10^{-10})| / |\mathcal L_{64}(\epsilon=10^{-10})|` is what the larger jitter
itself costs the collapsed bound (it lowers it; large when Kuu's condition number exceeds ~1/ε). When a
float32 evaluation raises (a refusal, e.g. a Cholesky failure of a concrete Kuu) the message is stored
(``refusal``); when it is silently wrong, the eager evaluation is tried as well, to see whether eager
validation would have refused.

Data (fixed seeds): N = 1000 (``--quick``: 300) noisy observations, σ² = ``--noise`` (default 1e-2, the
float32 regime of ``tests/approximations/test_collapsed.py``) and σ_f² = 1: x ~ U(0, 1), y = sin(12 x) + noise for the
1-D families on an interval (inducing points, VFF on the box [−0.5, 1.5], random Fourier features);
x ~ N(0, 1), y = sin(2 x) + noise for Hermite and trigonometric VOF; x ~ N(0, I₂),
y = cos x₁ + x₂ + noise for the harmonic features; x ~ U(0, 1)², y = sin 6x₁ + x₂² + noise for
Kronecker VFF; x ~ U(−1, 1)^D, y = sin(2x₁)x₂ + x_D + noise for spherical harmonic features on S² (D = 2,
``spherical-d3``) and S⁴ (D = 4, ``spherical-d5``), with ChordalMatern(3/2) (chordal ℓ = 0.3, 1) and
ArcCosine(1), M being the maximum degree there.

The summary table gives, per family and setting, the largest M at which each approximation holds (of the
M swept, all of them tried), the first M at which it fails, the errors there, and what the failure looks
like: under ``jit`` (as SVI and NUTS run) and when the same float32 evaluation runs eagerly, where the
library validates concrete values (e.g. a failed Cholesky of a concrete Kuu raises). For VFF it also gives
the dynamic range of Kuu's diagonal, :math:`d_{max}/d_{min} = s(0)/s(\omega_{M-1}) =
(1 + (\omega_{M-1}/\lambda)^2)^{\nu+1/2}` with :math:`\lambda = \sqrt{2\nu}/\ell`: far beyond 1/ε₃₂
float32 still holds, since the diagonal + low-rank Kuu keeps the diagonal exactly (float32 breaks only
where :math:`d_{max} = (b-a)/(2 s(\omega_{M-1}))` overflows, at M in the tens of thousands and more).

``python -m inference.benchmarks.float32 [--quick] [--noise 1e-2]``; writes results/float32.json.
"""
from __future__ import annotations

import math
import time

from inference.benchmarks import harness

ERR_SCALAR, ERR_PREDICT = 1e-3, 1e-2
VFF_BOX = (-0.5, 1.5)

# family -> list of (setting label, dict of constructor arguments, list of M)
FULL = {
    "vff": [(f"nu={nu} ell={ell}", {"nu": nu, "ell": ell}, [4, 8, 16, 32, 64, 128, 256, 512, 1024])
            for nu in (0.5, 1.5, 2.5) for ell in (0.05, 0.2, 1.0, 10.0)],
    "kronecker-vff": [(f"nu=1.5 ell={ell}", {"nu": 1.5, "ell": ell}, [3, 5, 9, 17]) for ell in (0.2, 1.0)],
    "inducing-points": [(f"ell={ell}", {"ell": ell}, [10, 30, 100, 300, 1000]) for ell in (0.05, 0.2, 1.0, 5.0)],
    "hermite": [(f"ell={ell}", {"ell": ell}, [10, 20, 40, 80, 160]) for ell in (0.3, 1.0)],
    "trigonometric": [(f"ell={ell}", {"ell": ell}, [11, 21, 41, 81, 161]) for ell in (0.3, 1.0)],
    "harmonic-negation": [(f"ell={ell}", {"ell": ell, "group": "negation"}, [10, 30, 100, 300])
                          for ell in (0.5, 2.0, 5.0)],
    "harmonic-rotation": [(f"ell={ell}", {"ell": ell, "group": "rotation"}, [10, 30, 100])
                          for ell in (0.5, 2.0, 5.0)],
    "periodic-vff": [(f"ell={ell}", {"ell": ell}, [5, 10, 20, 40, 80]) for ell in (0.5, 1.0, 2.0)],
    "random-fourier": [(f"ell={ell}", {"ell": ell}, [25, 100, 400, 1600]) for ell in (0.05, 0.2, 1.0, 5.0)],
    # spherical harmonic features: M is the maximum degree (features: every degree up to it)
    "spherical-d3": [(f"chordal ell={ell}", {"ell": ell, "kernel": "chordal"}, [2, 4, 8, 16, 24])
                     for ell in (0.3, 1.0)] + [("arccos1", {"ell": 1.0, "kernel": "arccos1"}, [2, 4, 8, 16, 24])],
    "spherical-d5": [(f"chordal ell={ell}", {"ell": ell, "kernel": "chordal"}, [2, 4, 6, 8])
                     for ell in (0.3, 1.0)] + [("arccos1", {"ell": 1.0, "kernel": "arccos1"}, [2, 4, 6, 8])],
}
QUICK = {
    "vff": [("nu=1.5 ell=0.2", {"nu": 1.5, "ell": 0.2}, [8, 64])],
    "inducing-points": [("ell=1.0", {"ell": 1.0}, [10, 100])],
    "hermite": [("ell=1.0", {"ell": 1.0}, [20])],
    "harmonic-negation": [("ell=2.0", {"ell": 2.0, "group": "negation"}, [10])],
    "random-fourier": [("ell=0.2", {"ell": 0.2}, [50])],
    "spherical-d3": [("chordal ell=1.0", {"ell": 1.0, "kernel": "chordal"}, [4])],
}


# the data of each case: (n, rng) -> (X, f at X, X_test) (module docstring); drawn in this order
def _interval(n, rng):
    import numpy as np

    X, Xs = np.sort(rng.uniform(0, 1, n))[:, None], np.linspace(0, 1, 200)[:, None]
    return X, np.sin(12 * X[:, 0]), Xs


def _normal1(n, rng):
    import numpy as np

    X, Xs = rng.normal(size=(n, 1)), np.linspace(-2.5, 2.5, 200)[:, None]
    return X, np.sin(2 * X[:, 0]), Xs


def _normal2(n, rng):
    import numpy as np

    X, Xs = rng.normal(size=(n, 2)), rng.normal(size=(200, 2))
    return X, np.cos(X[:, 0]) + X[:, 1], Xs


def _square(n, rng):
    import numpy as np

    X, Xs = rng.uniform(0, 1, (n, 2)), rng.uniform(0, 1, (200, 2))
    return X, np.sin(6 * X[:, 0]) + X[:, 1] ** 2, Xs


def _cube(D):
    """x ~ U(−1, 1)^D (spherical features on S^D: d = D + 1), inputs that interact."""
    import numpy as np

    def draw(n, rng):
        X, Xs = rng.uniform(-1, 1, (n, D)), rng.uniform(-1, 1, (200, D))
        return X, np.sin(2 * X[:, 0]) * X[:, 1] + X[:, -1], Xs

    return draw


# the (feature, kernel) of each case: (psg, M, opts, X) -> (feature, kernel); M per dimension for
# Kronecker, per sub-kernel for harmonic, frequencies for VFF and random Fourier features, the maximum
# degree for spherical harmonics
def _matern(psg, nu):
    return {0.5: psg.Matern12, 1.5: psg.Matern32, 2.5: psg.Matern52}[nu]


def _vff(psg, M, opts, X):
    return psg.FourierFeatures(*VFF_BOX, M), _matern(psg, opts["nu"])(1.0, opts["ell"])


def _kronecker_vff(psg, M, opts, X):
    k = _matern(psg, opts["nu"])
    return (psg.KroneckerFeatures([psg.FourierFeatures(*VFF_BOX, M)] * 2),
            psg.Product([k(1.0, opts["ell"]), k(1.0, opts["ell"])]))


def _inducing_points(psg, M, opts, X):
    import numpy as np

    return psg.InducingPoints(np.linspace(0, 1, M)[:, None]), psg.Matern52(1.0, opts["ell"])


def _hermite(psg, M, opts, X):
    return psg.HermiteFeatures(M, input_scale=1.0), psg.SquaredExponential(1.0, opts["ell"])


def _trigonometric(psg, M, opts, X):
    import numpy as np

    from ppl_sparsegp.features.trigonometric import quadrature_nodes

    band = 4.0 / opts["ell"]  # four spectral standard deviations of the SE kernel
    nodes = max(512, quadrature_nodes(band, float(np.max(np.abs(X))) + 2.5, M))
    return psg.TrigonometricFeatures(M, band=band, num_quadrature=nodes), psg.SquaredExponential(1.0, opts["ell"])


def _harmonic(psg, M, opts, X):
    import numpy as np

    from ppl_sparsegp.groups import Negation, Rotation

    Z = np.random.default_rng(7).normal(size=(M, 2))
    group = Negation() if opts["group"] == "negation" else Rotation(4)
    return psg.HarmonicFeatures(group, Z), psg.SquaredExponential(1.0, opts["ell"])


def _periodic_vff(psg, M, opts, X):
    return psg.FourierFeatures(0.0, 1.0, M), psg.Periodic(1.0, opts["ell"], 1.0)


def _spherical(psg, M, opts, X):
    kernel = (psg.ChordalMatern(1.5, 1.0, 1.0, 1.0, opts["ell"]) if opts["kernel"] == "chordal"
              else psg.ArcCosine(1, 1.0, 1.0, 1.0))
    return psg.SphericalHarmonicFeatures(X.shape[1], M, kernel=kernel), kernel


def _random_fourier(psg, M, opts, X):
    import numpy as np

    W = np.random.default_rng(8).normal(size=(M, 1))
    return psg.RandomFourierFeatures(W), psg.SquaredExponential(1.0, opts["ell"])


#: case -> (its data, its feature and kernel): one entry per case of FULL (no branch on the names)
CASES = {"vff": (_interval, _vff), "kronecker-vff": (_square, _kronecker_vff),
         "inducing-points": (_interval, _inducing_points), "hermite": (_normal1, _hermite),
         "trigonometric": (_normal1, _trigonometric), "harmonic-negation": (_normal2, _harmonic),
         "harmonic-rotation": (_normal2, _harmonic), "periodic-vff": (_interval, _periodic_vff),
         "random-fourier": (_interval, _random_fourier), "spherical-d3": (_cube(2), _spherical),
         "spherical-d5": (_cube(4), _spherical)}


def data(family, n, rng):
    """(X, y, X_test) for a case (module docstring)."""
    X, f, Xs = CASES[family][0](n, rng)
    return X, f - f.mean() + 0.1 * rng.normal(size=n), Xs


def problem(family, M, opts, X):
    """(feature, kernel) of a case at M features (per dimension for Kronecker, per sub-kernel for
    harmonic, frequencies for VFF and random Fourier features, the maximum degree for spherical)."""
    import ppl_sparsegp as psg

    return CASES[family][1](psg, M, opts, X)


def cast(tree, dtype):
    """Every floating leaf of a pytree (arrays and Python floats: the periodic kernel keeps its numbers as
    given) in ``dtype``; static fields untouched. With x64 on, a leaf left in float64 (or a Python float
    meeting an integer array) would promote the whole computation to float64."""
    import jax
    import jax.numpy as jnp

    return jax.tree.map(lambda a: jnp.asarray(a, dtype) if isinstance(a, float) or (
        hasattr(a, "dtype") and jnp.issubdtype(a.dtype, jnp.floating)) else a, tree)


def quantities(feature, kernel, noise):
    """The function (X, y, X_test, m_v, L_v) -> dict of every quantity compared (feature, kernel and noise
    closed over: a Periodic kernel's period must be concrete)."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer.util import log_density

    import ppl_sparsegp as psg

    def fn(X, y, Xs, m_v, L_v):
        lik = psg.Gaussian(noise)
        out = {"bound": psg.collapsed_elbo(feature, kernel, X, y, noise)}
        pred = psg.CollapsedGP(feature, kernel, lik).with_data(X, y).predict(Xs, params={})
        out["cgp_mean"], out["cgp_var"] = pred["f_mean"], pred["f_var"]
        gp = psg.SparseGP(feature, kernel, lik, whiten=True, q_cov="full")
        params = {"f_v_loc": m_v, "f_v_scale_tril": L_v}
        out["elbo"] = gp.elbo(params, X, y)
        pred = gp.predict(Xs, params=params)
        out["sgp_mean"], out["sgp_var"] = pred["f_mean"], pred["f_var"]

        def model(X, y):
            f = psg.spectral_gp("f", feature, kernel, X)
            numpyro.sample("y", dist.Normal(f, jnp.sqrt(noise)), obs=y)

        out["log_density"] = log_density(model, (X, y), {}, {"f_v": m_v})[0]
        return out

    return fn


def optimal_q(feature, kernel, X, y, noise):
    """The float64 optimal whitened q(v) = N(m_v, L_v L_vᵀ) (the collapsed bound's)."""
    import jax
    import jax.numpy as jnp

    import ppl_sparsegp as psg
    from ppl_sparsegp.approximations.collapsed import optimal_whitened_q

    @jax.jit
    def fn(X, y):
        stats = psg.SufficientStatistics.from_kuf(psg.Kuf(feature, kernel, X), y, keep_root=True)
        m, S = optimal_whitened_q(psg.Kuu(feature, kernel), stats, noise)
        return m, jnp.linalg.cholesky(S.to_dense())

    return fn(X, y)


def run_one(family, label, opts, M, args):
    import jax
    import jax.numpy as jnp
    import numpy as np

    import ppl_sparsegp as psg

    rng = np.random.default_rng(args.seed)
    X, y, Xs = data(family, args.n, rng)
    feature, kernel = problem(family, M, opts, X)
    noise = args.noise
    row = {"family": family, "setting": label, "M": M, "num_features": feature.num_features, **opts}
    if family == "vff":
        lam, w = math.sqrt(2 * opts["nu"]) / opts["ell"], 2 * math.pi * (M - 1) / (VFF_BOX[1] - VFF_BOX[0])
        row["kuu_range"] = (1 + (w / lam) ** 2) ** (opts["nu"] + 0.5)
    t0 = time.perf_counter()
    matched = feature
    if hasattr(feature, "relative_jitter") and feature.jitter is None:
        # the float64 reference with float32's default jitter, so that the errors are float32 rounding;
        # what float32's larger jitter itself changes is measured apart (jitter_shift)
        matched = feature.replace(jitter=feature.relative_jitter(np.float32))
        b_default = float(jax.jit(psg.collapsed_elbo)(feature, kernel, X, y, noise))
        b_matched = float(jax.jit(psg.collapsed_elbo)(matched, kernel, X, y, noise))
        row["jitter_shift"] = abs(b_matched - b_default) / abs(b_default)
    m_v, L_v = optimal_q(matched, kernel, jnp.asarray(X), jnp.asarray(y), noise)
    fn64 = jax.jit(quantities(matched, kernel, noise))
    ref = jax.tree.map(np.asarray, fn64(jnp.asarray(X), jnp.asarray(y), jnp.asarray(Xs), m_v, L_v))
    f32, k32 = cast(feature, jnp.float32), cast(kernel, jnp.float32)
    args32 = [jnp.asarray(a, jnp.float32) for a in (X, y, Xs, m_v, L_v)]
    try:
        low = jax.tree.map(np.asarray, jax.jit(quantities(f32, k32, np.float32(noise)))(*args32))
        row["refusal"] = None
    except Exception as e:  # a refusal at trace time (checks on concrete values)
        row.update(refusal=f"{type(e).__name__}: {e}", finite32=False, dtype32=None)
        row["seconds"] = time.perf_counter() - t0
        return _verdict(row)
    row["finite64"] = bool(all(np.all(np.isfinite(v)) for v in ref.values()))
    row["finite32"] = bool(all(np.all(np.isfinite(v)) for v in low.values()))
    row["dtype32"] = bool(all(v.dtype == np.float32 for v in low.values()))
    for key in ("bound", "elbo", "log_density"):
        row[f"{key}64"] = float(ref[key])
        row[f"{key}_err"] = _rel(low[key], ref[key])
    for key in ("cgp", "sgp"):
        row[f"{key}_mean_err"] = _max_abs(low[f"{key}_mean"], ref[f"{key}_mean"])  # σ_f = 1
        row[f"{key}_var_err"] = _max_abs(low[f"{key}_var"], ref[f"{key}_var"])
    row = _verdict(row)
    if not (row["ok_collapsed"] and row["ok_sparse"] and row["ok_spectral"]):
        # silently wrong under jit: would the eager path (validation of concrete values) refuse?
        try:
            jax.block_until_ready(quantities(f32, k32, np.float32(noise))(*args32))
            row["eager_refusal"] = None
        except Exception as e:
            row["eager_refusal"] = f"{type(e).__name__}: {e}"
    row["seconds"] = time.perf_counter() - t0
    return row


def _rel(a, b):
    a, b = float(a), float(b)
    return abs(a - b) / abs(b) if math.isfinite(a) else math.inf


def _max_abs(a, b):
    import numpy as np

    d = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    return float(np.max(d)) if np.all(np.isfinite(d)) else math.inf


def _verdict(row):
    def ok(*keys):
        return bool(row.get("finite32")) and all(row.get(k, math.inf) <= lim for k, lim in keys)

    row["ok_collapsed"] = ok(("bound_err", ERR_SCALAR), ("cgp_mean_err", ERR_PREDICT), ("cgp_var_err", ERR_PREDICT))
    row["ok_sparse"] = ok(("elbo_err", ERR_SCALAR), ("sgp_mean_err", ERR_PREDICT), ("sgp_var_err", ERR_PREDICT))
    row["ok_spectral"] = ok(("log_density_err", ERR_SCALAR))
    return row


APPROXIMATIONS = {"collapsed": ("ok_collapsed", ("bound_err", "cgp_mean_err", "cgp_var_err")),
                  "sparse": ("ok_sparse", ("elbo_err", "sgp_mean_err", "sgp_var_err")),
                  "spectral_gp": ("ok_spectral", ("log_density_err",))}


def summarise(rows):
    """One row per (family, setting): per approximation the largest M that holds (``None``: none does) and
    the largest error among the M that hold; the first M at which any approximation fails, its errors and
    what the failure looks like (under jit, eagerly)."""
    out = []
    groups = {}
    for r in rows:
        groups.setdefault((r["family"], r["setting"]), []).append(r)
    for (family, setting), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["M"])
        row = {"family": family, "setting": setting, "M_swept": [r["M"] for r in rs]}
        for approx, (flag, keys) in APPROXIMATIONS.items():
            holds = [r for r in rs if r[flag]]
            row[f"{approx}_holds_up_to"] = holds[-1]["M"] if holds else None
            row[f"{approx}_max_err"] = max((max(r.get(k, 0.0) for k in keys) for r in holds), default=None)
            row[f"{approx}_non_monotone"] = bool(holds and any(not r[flag] for r in rs if r["M"] < holds[-1]["M"]))
        fails = [r for r in rs if not (r["ok_collapsed"] and r["ok_sparse"] and r["ok_spectral"])]
        first = fails[0] if fails else None
        row["first_failure_M"] = first["M"] if first else None
        row["err_at_failure"] = (max(first.get(k, math.inf) for _, keys in APPROXIMATIONS.values() for k in keys)
                                 if first else None)
        row["under_jit"] = _failure_kind(first) if first else None
        row["eager"] = (first.get("refusal") or first.get("eager_refusal") or "no error") if first else None
        row["kuu_range_max"] = max((r["kuu_range"] for r in rs if "kuu_range" in r), default=None)
        row["jitter_shift_max"] = max((r["jitter_shift"] for r in rs if "jitter_shift" in r), default=None)
        out.append(row)
    return out


def _failure_kind(row):
    """What a float32 failure looks like under jit: a refusal (its message), NaN/inf, or finite but wrong."""
    if row.get("refusal"):
        return row["refusal"]
    return "NaN/inf, silent" if not row.get("finite32") else "finite but off, silent"


def _e(v):
    return "—" if v is None else ("inf" if v == math.inf else f"{v:.1e}")


ROW_COLUMNS = [("family", "family", ""), ("setting", "setting", ""), ("M", "M", "d"),
               ("features", "num_features", "d"), ("bound", "bound_err", _e), ("cgp mean", "cgp_mean_err", _e),
               ("cgp var", "cgp_var_err", _e), ("ELBO", "elbo_err", _e), ("sgp mean", "sgp_mean_err", _e),
               ("sgp var", "sgp_var_err", _e), ("log dens.", "log_density_err", _e),
               ("jitter shift", "jitter_shift", _e),
               ("f32 dtype", lambda r: r.get("dtype32"), str), ("s", "seconds", ".1f")]
def _upto(approx):
    return lambda r: (("—" if r[f"{approx}_holds_up_to"] is None else str(r[f"{approx}_holds_up_to"]))
                      + ("*" if r[f"{approx}_non_monotone"] else "")
                      + ("" if r[f"{approx}_max_err"] is None else f" ({r[f'{approx}_max_err']:.0e})"))


SUMMARY_COLUMNS = [("family", "family", ""), ("setting", "setting", ""),
                   ("M swept", lambda r: f"{r['M_swept'][0]}–{r['M_swept'][-1]}", str),
                   ("collapsed holds to M (max err)", _upto("collapsed"), str),
                   ("SparseGP", _upto("sparse"), str), ("spectral_gp", _upto("spectral_gp"), str),
                   ("first failure M", "first_failure_M", "d"), ("err there", "err_at_failure", _e),
                   ("under jit", "under_jit", str), ("eagerly", "eager", str),
                   ("Kuu range", "kuu_range_max", _e), ("jitter shift", "jitter_shift_max", _e)]


def main(argv=None):
    p = harness.parser("float32", __doc__, cpu="last")
    p.add_argument("--noise", type=float, default=1e-2, help="noise variance σ² (σ_f² = 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--families", default=None, help="comma-separated subset of the families")
    args = p.parse_args(argv)
    machine = harness.setup(args, one_thread=True)
    import jax

    args.n = 300 if args.quick else 1000
    sweep = QUICK if args.quick else FULL
    if args.families:
        sweep = {k: v for k, v in sweep.items() if k in args.families.split(",")}
    store = harness.Store(args.out, ["family", "setting", "M"], resume=args.resume, merge=args.merge,
                          settings={"noise": args.noise, "seed": args.seed, "n": args.n})
    for family, settings in sweep.items():
        for label, opts, Ms in settings:
            for M in Ms:
                if store.done(family, label, M):
                    continue
                row = store.add(run_one(family, label, opts, M, args))
                print(harness.table([row], ROW_COLUMNS).splitlines()[-1], flush=True)
    rows = sorted(store.rows, key=lambda r: (r["family"], r["setting"], r["M"]))
    summary = summarise(rows)
    print()
    print(harness.table(rows, ROW_COLUMNS))
    print()
    print(harness.table(summary, SUMMARY_COLUMNS))
    store.write_json({"rows": rows, "summary": summary, "noise": args.noise, "n": args.n,
                      "thresholds": {"scalar": ERR_SCALAR, "predict": ERR_PREDICT},
                      "jax": jax.__version__, **machine})
    return summary


if __name__ == "__main__":
    main()
