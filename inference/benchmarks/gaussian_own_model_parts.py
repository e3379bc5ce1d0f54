"""Parts of the own-model benchmark (:mod:`inference.benchmarks.gaussian_own_model`): its JSON summary kept
across runs (a run rewrites ``results/gaussian_own_model.json`` keeping whatever of it the run does not
recompute) and ``--pilot-times``, the pilot with issue 48's defaults against the pilot before it, timed in one
process."""
from __future__ import annotations


def stored_summary(path):
    """The JSON summary already at ``path`` ({} when there is none), whose keys a run keeps where it does
    not recompute them (:func:`keep_stored`)."""
    import json
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise SystemExit(f"{path}: not valid JSON ({e}); fix or move it (this run would rewrite it, keeping its "
                         "keys and the rows it does not recompute)") from e


def keep_stored(summary, stored, table_only):
    """``summary`` with every part of the ``stored`` summary (of the same ``settings``) that this run does not
    recompute: keys added by hand or by other runs, the rows (by setting and name) and the per-setting entries
    of ``ms_per_gradient_by_n``, ``ess_per_s_ratios``, ``exact_profile`` and ``pilot_seconds`` of settings it
    does not show, and,
    with ``--table-only`` (no fit), the stored ``machine``. Keys keep the stored order."""
    if stored.get("settings") != summary["settings"]:  # other data: nothing of it applies
        return summary
    out = {**stored, **summary}
    if table_only and "machine" in stored:
        out["machine"] = stored["machine"]
    for key in ("ms_per_gradient_by_n", "ess_per_s_ratios", "exact_profile", "pilot_seconds"):
        if key in stored or key in summary:
            out[key] = {**stored.get(key, {}), **summary.get(key, {})}
    new = {(r["setting"], r["name"]) for r in summary["rows"]}
    groups = {}  # setting -> rows, in the stored order of the settings, new settings last
    for r in stored.get("rows", []) + summary["rows"]:
        groups.setdefault(r["setting"], [])
    for r in summary["rows"] + [r for r in stored.get("rows", []) if (r["setting"], r["name"]) not in new]:
        groups[r["setting"]].append(r)
    out["rows"] = [r for rows in groups.values() for r in rows]
    return out


def pilot_times(settings, rounds=2):
    """``{setting: {...}}``: wall and CPU seconds of ``choose_features`` on the collapsed model from
    ``from_data``'s default rule, with issue 48's defaults ("new": the exact-GP pilot, data-range starts)
    and as before it ("old": ``exact_rows=None, data_starts=0``), alternating new, old, ``rounds`` times in
    one process (each call compiles its own objective; a later round may reuse JAX's caches), with the
    trend frequencies each chose and the ratios new / old of the first and of the last round."""
    from inference.benchmarks import gaussian_own_model as g, harness
    from ppl_sparsegp import choose_features

    out = {}
    for setting in settings:
        t, y, H = g.simulate(setting=setting)
        collapsed, coarse = g.models(t, H, setting)["collapsed VFF"], g.features(t, setting, "default")[0]
        rec = {"new": [], "old": [], "new_cpu": [], "old_cpu": []}
        for _ in range(rounds):
            for kind, options in (("new", {}), ("old", {"exact_rows": None, "data_starts": 0})):
                with harness.clock() as c:
                    chosen = choose_features(collapsed, t, y, coarse, **options)
                rec[kind].append(c.wall)
                rec[kind + "_cpu"].append(c.cpu)
                rec[kind + "_frequencies"] = chosen["trend"].num_frequencies
                rec[kind + "_modes_ell"] = [m["gps"]["trend"]["lengthscale"] for m in chosen.info["modes"]]
        rec.update(ratio_first=rec["new"][0] / rec["old"][0], ratio_last=rec["new"][-1] / rec["old"][-1],
                   ratio_first_cpu=rec["new_cpu"][0] / rec["old_cpu"][0])
        print(setting, {k: v for k, v in rec.items()}, flush=True)
        out[setting] = rec
    return out
