"""The own-model benchmark's JSON summary kept across runs (:mod:`inference.benchmarks.gaussian_own_model`):
a run rewrites ``results/gaussian_own_model.json`` keeping whatever of it the run does not recompute."""
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
    of ``ms_per_gradient_by_n``, ``ess_per_s_ratios`` and ``exact_profile`` of settings it does not show, and,
    with ``--table-only`` (no fit), the stored ``machine``. Keys keep the stored order."""
    if stored.get("settings") != summary["settings"]:  # other data: nothing of it applies
        return summary
    out = {**stored, **summary}
    if table_only and "machine" in stored:
        out["machine"] = stored["machine"]
    for key in ("ms_per_gradient_by_n", "ess_per_s_ratios", "exact_profile"):
        out[key] = {**stored.get(key, {}), **summary[key]}
    new = {(r["setting"], r["name"]) for r in summary["rows"]}
    groups = {}  # setting -> rows, in the stored order of the settings, new settings last
    for r in stored.get("rows", []) + summary["rows"]:
        groups.setdefault(r["setting"], [])
    for r in summary["rows"] + [r for r in stored.get("rows", []) if (r["setting"], r["name"]) not in new]:
        groups[r["setting"]].append(r)
    out["rows"] = [r for rows in groups.values() for r in rows]
    return out
