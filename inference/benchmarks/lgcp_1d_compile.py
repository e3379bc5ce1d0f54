"""Why VFF compiles slower than HSGP in 1-D: the compile time of the potential's value and gradient for
the models of :mod:`inference.benchmarks.lgcp_1d`, and for VFF written by hand in its leanest form.

``python -m inference.benchmarks.lgcp_1d_compile [--quick] [--basis 31 61] [--rounds 4] [--cpu N]``

On the 200-bin series a NUTS fit is mostly compiling, and NumPyro compiles the model's value and
gradient into every chain's sampling loop, so this program's compile time decides the 1-D comparison.
Rows, at each basis count m = 2M − 1 (``jax.jit(value_and_grad(potential)).lower(z).compile()``, median
over ``--rounds`` interleaved rounds; XLA fusions counted in the compiled program):

* **HSGP**: ``numpyro.contrib.hsgp``'s ``hsgp_matern`` (``lgcp_1d.hsgp_model``);
* **VFF**: ``spectral_gp`` with ``FourierFeatures`` (``lgcp_1d.vff_model``), as the library writes it;
* **VFF, (2, M) layout**: the same prior written by hand for Matérn-3/2, every vector laid out as a
  cosine row and a sine row (one padding slot), the spectral terms in closed form, so that the rank-two
  correction of Kuu, :math:`W = D^{-1/2}(I + GG^\\top)^{-1/2}v`, is one block reduction; checked against
  the library's f before it is timed;
* **VFF, (2, M) layout, no correction**: :math:`W = D^{-1/2}v`, a *different prior* (Kuu's diagonal
  alone), timed only to show what the correction costs.

Writes ``inference/benchmarks/results/lgcp_1d_compile.json``.
"""
from __future__ import annotations

import math

from inference.benchmarks import harness, lgcp_1d


def layout_model(feature, x, correction=True):
    """The whitened VFF Cox process of ``lgcp_1d.vff_model`` (Matérn-3/2) at the data x, in the (2, M) block
    layout: row 0 the M cosine features, row 1 the M − 1 sine features and a padding slot (weight 0)."""
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    import numpyro.distributions as dist

    M = feature.num_frequencies
    w = np.asarray(feature.omegas())
    half = 0.5 * (feature.upper - feature.lower)
    omega = np.stack([w, np.append(w[1:], 0.0)])                    # each slot's frequency
    cfac = np.ones((2, M))
    cfac[0, 0] = 2.0                                                # d_0 = (b − a)/s(0): twice the others
    kappa = 2.0 / np.sqrt(half * cfac)
    kappa[1, -1] = 0.0                                              # the padding slot carries nothing
    sin_omega = np.stack([np.zeros(M), np.append(w[1:], 0.0)])
    cos = np.stack([np.ones(M), np.zeros(M)])
    phi = np.asarray(feature.basis(jnp.asarray(x)))  # Kuf inside the box: a constant of the program
    Kuf = np.zeros((2, M, phi.shape[1]))
    Kuf[0], Kuf[1, :-1] = phi[:M], phi[M:]

    def model(x, y):
        ell, var, c = lgcp_1d._priors()
        # Matérn-3/2: s(ω) = 4σ²λ³/(λ² + ω²)², so D^{-1/2} = σ λ^{3/2} q and G = D^{-1/2}B = λ^{1/2} q (λ 1_cos + ω_sin)
        # with q = κ/(λ² + ω²): G does not depend on σ
        lam = math.sqrt(3.0) / ell
        q = kappa / (lam * lam + omega * omega)
        root_lam = jnp.sqrt(lam)
        g = root_lam * q * (lam * cos + sin_omega)
        v = numpyro.sample("f_v", dist.Normal(0.0, 1.0).expand([2 * M - 1]).to_event(1))
        v = jnp.pad(v, (0, 1)).reshape(2, M)
        if correction:  # (I + ggᵀ)^{-1/2} v = v − g (gᵀv)/(ρ(1 + ρ)) per block, ρ² = 1 + ‖g‖²
            s = jnp.sum(jnp.stack([g * g, g * v]), axis=-1)
            rho = jnp.sqrt(1.0 + s[0])
            v = v - g * (s[1] / (rho * (1.0 + rho)))[:, None]
        W = jnp.sqrt(var) * lam * root_lam * q * v
        f = numpyro.deterministic("f", W.reshape(-1) @ Kuf.reshape(2 * M, -1))
        numpyro.sample("y", dist.Poisson(jnp.exp(f + c)), obs=y)

    return model


def f_at(model, x, y, values):
    """The model's deterministic site f with its sample sites set to ``values``."""
    import numpy as np
    from numpyro import handlers

    tr = handlers.trace(handlers.substitute(handlers.seed(model, 0), values)).get_trace(x, y)
    return np.asarray(tr["f"]["value"])


def check_layout(feature, x, y, tol=1e-8):
    """The layout model's f equals the library's at one set of values (else SystemExit)."""
    import numpy as np

    values = {"ell": 0.07, "var": 1.3, "c": 1.0,
              "f_v": np.random.default_rng(0).standard_normal(feature.num_features)}
    mine = f_at(layout_model(feature, x), x, y, values)
    lib = f_at(lambda x, y: lgcp_1d.vff_model(x, y, feature), x, y, values)
    err = float(np.max(np.abs(mine - lib)) / np.max(np.abs(lib)))
    if not err < tol:
        raise SystemExit(f"lgcp_1d_compile: the (2, M) layout model differs from the library's f by {err:.2e}")
    return err


def compile_once(model, args):
    """(seconds, XLA fusions) of compiling the jitted value and gradient of the model's potential."""
    import jax
    from numpyro.infer.util import initialize_model

    info = initialize_model(jax.random.PRNGKey(0), model, model_args=args)
    compiled, seconds = harness.compile_timed(jax.value_and_grad(info.potential_fn), info.param_info.z)
    return seconds, compiled.as_text().count("fusion(")


def main(argv=None):
    p = harness.parser("lgcp_1d_compile", __doc__)
    p.add_argument("--basis", type=int, nargs="*", default=None, help="basis functions (odd; default 31 61)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 4; --quick 2)")
    args = p.parse_args(argv)
    machine = harness.setup(args)
    import jax.numpy as jnp
    import numpy as np

    from ppl_sparsegp import FourierFeatures

    basis = args.basis or ([31] if args.quick else [31, 61])
    rounds = args.rounds or (2 if args.quick else 4)
    if any(n < 3 or n % 2 == 0 for n in basis):
        raise SystemExit(f"lgcp_1d_compile: --basis needs odd counts of at least 3 (2M − 1), got {basis}")
    x, y = lgcp_1d.simulate(200)
    x, y = jnp.asarray(x), jnp.asarray(y)
    L, box = lgcp_1d.bases(x)
    store = harness.Store(args.out, ["name", "basis"], settings={"rounds": rounds, "box": [box.lower, box.upper]},
                          resume=args.resume, merge=args.merge)
    for n in basis:
        feature = FourierFeatures(box.lower, box.upper, (n + 1) // 2)
        err = check_layout(feature, x, y)
        # HSGP, VFF as lgcp_1d fits them
        models = {name: model for name, model in lgcp_1d._models(x, y, n, L, box).items()
                  if not name.startswith("VFF square")}
        models.update({"VFF, (2, M) layout": layout_model(feature, x),
                       "VFF, (2, M) layout, no correction (another prior)": layout_model(feature, x, correction=False)})
        runs = {name: [] for name in models}
        for _ in range(rounds):  # interleaved: the machine's drift hits every model alike
            for name, model in models.items():
                runs[name].append(compile_once(model, (x, y)))
        for name, rs in runs.items():
            times = [t for t, _ in rs]
            store.add({"name": name, "basis": n, "compile_s": float(np.median(times)),
                       "compile_s_range": [min(times), max(times)], "fusions": rs[-1][1],
                       "layout_max_rel_error": err})
        print(f"basis {n}: layout model = library f to {err:.1e} (relative)", flush=True)
    out = sorted((r for r in store.rows if r["basis"] in basis), key=lambda r: r["basis"])
    hsgp = {r["basis"]: r["compile_s"] for r in out if r["name"].startswith("HSGP")}
    print(harness.table(out, [("model", "name", ""), ("basis", "basis", "d"),
                              ("compile s (median)", "compile_s", ".3f"),
                              ("range", lambda r: f"{r['compile_s_range'][0]:.3f}–{r['compile_s_range'][1]:.3f}", ""),
                              ("/ HSGP", lambda r: r["compile_s"] / hsgp[r["basis"]], ".2f"),
                              ("XLA fusions", "fusions", "d")]))
    store.write_json({"rows": out, "rounds": rounds, **machine})


if __name__ == "__main__":
    main()
