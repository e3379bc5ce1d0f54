"""The gradient of marginal_spectral_gp's NUTS potential against the same density written by hand.

``python -m inference.benchmarks.marginal_gradient [--quick] [--cpu 0|all] [--sizes 50 100 200 400]
[--ns 500 100000] [--rounds 5] [--repeats 50] [--forms numpy jnp_function jnp_array]``

The model is the own-model guide's: a linear mean (β ~ N(0, I), integrated out), a Matérn-5/2 trend GP on
VFF (box 10 years beyond a 40-year series) and a periodic GP on 8 harmonics, Gaussian noise; NUTS's four
hyperparameters (trend ℓ and σ², seasonal σ², noise). M' = 2·m + 1 + 17 + 2 columns for m trend
frequencies. The potentials, all through ``numpyro.infer.util.initialize_model``, differentiated by
``jax.value_and_grad`` and jitted:

* **library**: ``marginal_spectral_gp`` with the mean basis H built in NumPy outside the model (the
  statistics path: ΨᵀΨ, Ψᵀy, yᵀy computed once; per gradient the precision form of
  :mod:`ppl_sparsegp.linalg.woodbury`, Jacobi-scaled Cholesky with its own derivative rule);
* **jnp function** (``--forms jnp_function``): the same with ``mean_basis=`` a function of the inputs
  written with ``jax.numpy`` (what NumPyro users write), which the library evaluates at compile time;
* **jnp array** (``--forms jnp_array``): H computed with ``jax.numpy`` inside the model and passed as an
  array: a tracer under jit, so the data path, O(N M'²) per gradient (it warns; the habit issue 48
  measured); skipped for N > 10 000;
* **by hand**: the same statistics, S = P + ΨᵀΨ/σ² formed densely, ``jnp.linalg.cholesky``, one
  triangular solve, JAX's autodiff through both (what a user writes from the formula), log|P| from the
  operators as the library does.

Each (N, M') times both compiled gradients in interleaved rounds (the machine's drift hits both alike) and
reports the median ms per gradient of each and their ratio to by hand; the values of the potentials are
checked to agree. ``--cpu 0`` pins one core with one XLA thread (the harness), ``--cpu all`` uses every core the
process may use. Rows are keyed by the number of cores, so a one-core and a two-core run share the store;
writes ``results/marginal_gradient.json``. Target (issues 40 and 48): library ≤ 1.2 × by hand, with the
basis from NumPy or as a ``jnp`` function.
"""
from __future__ import annotations

import numpy as np

from inference.benchmarks import harness

SPAN = 40.0
SEASON_TERMS = 8


def trend_frequencies(m_prime: int) -> int:
    """Trend frequencies m with 2m + 1 + (2·8 + 1) + 2 = M' (rounded down)."""
    return max(1, (m_prime - (2 * SEASON_TERMS + 1) - 2 - 1) // 2)


def series(n: int, seed: int = 1):
    """(t, y, H): a smooth trend, a yearly cycle and noise 0.1 on [0, 40] (only the cost is measured)."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0.0, SPAN, n))
    H = np.stack([np.ones(n), (t - SPAN / 2) / (SPAN / 2)], 1)
    return t, np.sin(t / 3.0) + 0.5 * np.sin(2 * np.pi * t) + 0.1 * rng.normal(size=n), H


def _hyper():
    import numpyro
    import numpyro.distributions as dist

    return (numpyro.sample("ell", dist.LogNormal(0.0, 0.5)), numpyro.sample("var", dist.LogNormal(0.0, 1.0)),
            numpyro.sample("svar", dist.LogNormal(0.0, 1.0)), numpyro.sample("noise", dist.HalfNormal(0.3)))


def models(t, y, H, m, forms=("numpy",)):
    """{potential's name: model without arguments}: the library's with the mean basis in each of ``forms``
    ("numpy", "jnp_function", "jnp_array") and "by_hand"."""
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.linalg import solve_triangular

    from ppl_sparsegp import FourierFeatures, Kuu, Matern52, Periodic, marginal_spectral_gp
    from ppl_sparsegp.covariances import kuf_basis

    trend, season = FourierFeatures(-10.0, SPAN + 10.0, m), FourierFeatures(0.0, 1.0, SEASON_TERMS)

    def linear(s):  # the mean basis as users write it, with jax.numpy
        return jnp.stack([jnp.ones_like(s), (s - SPAN / 2) / (SPAN / 2)], -1)

    def library(form):
        def model():
            ell, var, svar, noise = _hyper()
            basis = H if form == "numpy" else linear if form == "jnp_function" else linear(t)  # the last: a tracer
            marginal_spectral_gp("y", {"trend": (trend, Matern52(var, ell)),
                                       "season": (season, Periodic(svar, 1.0, 1.0))},
                                 t, y, noise, mean_basis=basis, mean_prior=dist.Normal(jnp.zeros(2), 1.0))
        return model

    T = jnp.asarray(t)[:, None]
    Psi_t = np.concatenate([np.asarray(kuf_basis(trend, Matern52(1.0, 1.0), T)[1]),
                            np.asarray(kuf_basis(season, Periodic(1.0, 1.0, 1.0), T)[1]), H.T], 0)
    A, Psi_y, yy, n = Psi_t @ Psi_t.T, Psi_t @ y, float(y @ y), len(y)

    def by_hand():
        ell, var, svar, noise = _hyper()
        s2 = noise**2
        blocks, logdet_P = [], 0.0
        for f, k in ((trend, Matern52(var, ell)), (season, Periodic(svar, 1.0, 1.0))):
            Kmm, s = Kuu(f, k), kuf_basis(f, k, T[:1])[0]
            K, logdet_P = Kmm.to_dense(), logdet_P + Kmm.logdet()
            if s is not None:
                K, logdet_P = K / (s[:, None] * s[None, :]), logdet_P - 2 * jnp.sum(jnp.log(jnp.abs(s)))
            blocks.append(K)
        S = jax.scipy.linalg.block_diag(*blocks, jnp.eye(2)) + A / s2
        L = jnp.linalg.cholesky(S)
        e = solve_triangular(L, Psi_y, lower=True)
        numpyro.factor("y", -0.5 * (n * jnp.log(2 * jnp.pi * s2) + 2 * jnp.sum(jnp.log(jnp.diagonal(L)))
                                    - logdet_P + yy / s2 - e @ e / s2**2))

    return {**{form: library(form) for form in forms}, "by_hand": by_hand}


FIELD = {"numpy": "library", "jnp_function": "jnp_function", "jnp_array": "jnp_array"}  # row field prefixes


def measure(n, m_prime, *, rounds, repeats, forms=("numpy",)):
    """One row: ms per gradient (median over rounds of the per-round median) of each potential, each
    library form's ratio to by hand, compile seconds apart, and the potentials' largest relative difference."""
    import warnings

    import jax
    from numpyro.infer.util import initialize_model

    t, y, H = series(n)
    m = trend_frequencies(m_prime)
    forms = [f for f in forms if f != "jnp_array" or n <= 10_000]  # the data path: O(N M'²) per gradient
    compiled, values = {}, {}
    for form, model in models(t, y, H, m, forms).items():
        name = FIELD.get(form, form)
        with warnings.catch_warnings():  # the jnp array's warning is the point of its row
            warnings.filterwarnings("ignore", "marginal_spectral_gp: each gradient")
            info = initialize_model(jax.random.PRNGKey(0), model)
            z = info.param_info.z
            fn, compile_s = harness.compile_timed(jax.value_and_grad(info.potential_fn), z)
        compiled[name] = (fn, z, compile_s)
        values[name] = float(fn(z)[0])
    ms = {name: [] for name in compiled}
    for _ in range(rounds):
        for name, (fn, z, _) in compiled.items():
            ms[name].append(1e3 * float(np.median(harness.call_times(fn, z, repeats=repeats))))
    hand = float(np.median(ms["by_hand"]))
    row = {"n": n, "m_prime": 2 * m + 1 + 2 * SEASON_TERMS + 1 + 2, "trend_frequencies": m,
           "by_hand_ms": hand, "by_hand_compile_s": compiled["by_hand"][2],
           "potential_rel_diff": max(abs(v - values["by_hand"]) for v in values.values()) / abs(values["by_hand"])}
    for name in compiled:
        if name != "by_hand":
            row.update({f"{name}_ms": float(np.median(ms[name])), f"{name}_compile_s": compiled[name][2]})
            row["ratio" if name == "library" else f"{name}_ratio"] = row[f"{name}_ms"] / hand
    return row


COLUMNS = [("cores", "cores", "d"), ("N", "n", "d"), ("M'", "m_prime", "d"), ("by hand ms", "by_hand_ms", ".3f"),
           ("library (NumPy H) ms", "library_ms", ".3f"), ("NumPy H / by hand", "ratio", ".2f"),
           ("jnp function ms", "jnp_function_ms", ".3f"), ("jnp function / by hand", "jnp_function_ratio", ".2f"),
           ("jnp array ms", "jnp_array_ms", ".3f"), ("jnp array / by hand", "jnp_array_ratio", ".2f"),
           ("compile s (by hand / NumPy H / jnp function)",
            lambda r: " / ".join("—" if r.get(k) is None else f"{r[k]:.1f}" for k in
                                 ("by_hand_compile_s", "library_compile_s", "jnp_function_compile_s")), "s"),
           ("potential rel. diff", "potential_rel_diff", ".1e")]


def main(argv=None):
    p = harness.parser("marginal_gradient", __doc__, cpu="0")
    p.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 200, 400], help="M' values")
    p.add_argument("--ns", type=int, nargs="+", default=[500, 100_000], help="N values")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--forms", nargs="+", default=["numpy", "jnp_function", "jnp_array"], choices=list(FIELD),
                   help="the library's mean-basis forms to time beside by hand (jnp_array only for N ≤ 10 000)")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.ns, args.rounds, args.repeats = [50, 100], [500], 2, 10
    machine = harness.setup(args, one_thread=args.cpu != "all")
    cores = len(machine["cores"]) if machine["pinned_core"] is None and machine["cores"] else 1
    store = harness.Store(args.out, ["cores", "n", "m_prime"],
                          settings={"rounds": args.rounds, "repeats": args.repeats})
    for n in args.ns:
        for size in args.sizes:
            print(f"cores {cores}, N = {n}, M' = {size} ...", flush=True)
            store.add({"cores": cores, **measure(n, size, rounds=args.rounds, repeats=args.repeats,
                                                 forms=args.forms)})
    rows = sorted(store.rows, key=lambda r: (r["cores"], r["n"], r["m_prime"]))
    print(harness.table(rows, COLUMNS))
    worst = max(r["ratio"] for r in rows if "ratio" in r)
    jnp_rows = [r["jnp_function_ratio"] for r in rows if "jnp_function_ratio" in r]
    worst_jnp = max(jnp_rows) if jnp_rows else None
    print(f"\nlargest library / by-hand ratio: {worst:.2f} with H from NumPy, "
          f"{'—' if worst_jnp is None else format(worst_jnp, '.2f')} with a jnp function (target ≤ 1.2)")
    store.write_json({"machine": machine, "rows": rows, "max_ratio": worst, "max_ratio_jnp_function": worst_jnp,
                      "target": 1.2})


if __name__ == "__main__":
    main()
