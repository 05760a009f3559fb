"""Paraphrase statistics: paraphrases per template (paper: 16.5 MIMIC-CXR-VQA, 10.4 EHRXQA image and
image+table templates), rejections per reason, review decisions."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from ehrxqa_pipeline.paraphrase.pools import pool_sizes
from ehrxqa_pipeline.paraphrase.templates import DATASETS, ParaTemplate
from ehrxqa_pipeline.paraphrase.validate import REASONS

PAPER_MEAN = {"mimic_cxr_vqa": 16.5, "ehrxqa": 10.4}


def statistics(templates: Sequence[ParaTemplate], candidates: pl.DataFrame, validated: pl.DataFrame,
               state: pl.DataFrame, pools: pl.DataFrame) -> dict:
    dataset_of = pl.DataFrame({"template_id": [t.template_id for t in templates],
                               "dataset": [t.dataset for t in templates]})
    sizes = pool_sizes(templates, pools)
    out = {}
    for ds in DATASETS:
        s = sizes.filter(pl.col("dataset") == ds)
        if not s.height:
            continue
        v = validated.join(dataset_of, on="template_id").filter(pl.col("dataset") == ds)
        st = state.join(dataset_of, on="template_id").filter(pl.col("dataset") == ds)
        c = candidates.join(dataset_of, on="template_id").filter(pl.col("dataset") == ds)
        reasons = dict(v.filter(~pl.col("valid")).group_by("reason").len().iter_rows())
        out[ds] = {
            "templates": s.height,
            "candidates": c.height,
            "candidates_by_source": dict(sorted(c.group_by("source").len().iter_rows())),
            "machine_valid": int(v["valid"].sum()) if v.height else 0,
            "rejected_by_reason": {r: int(reasons.get(r, 0)) for r in REASONS},
            "review": {d: int(st.filter(pl.col("decision") == d).height) for d in ("accepted", "rejected", "pending")},
            "paraphrases_per_template": {
                "mean": round(float(s["total"].mean()), 2), "min": int(s["total"].min()),
                "max": int(s["total"].max()), "paper_mean": PAPER_MEAN[ds],
                "train_mean": round(float(s["train"].mean()), 2), "test_mean": round(float(s["test"].mean()), 2)},
            "templates_without_paraphrases": s.filter(pl.col("total") == 0)["template_id"].to_list(),
            "templates_without_test_phrasings": s.filter(pl.col("test") == 0)["template_id"].to_list(),
        }
    return out


def render_markdown(stats: dict) -> str:
    lines = ["# Paraphrase pools", "",
             "| dataset | templates | candidates | machine-valid | accepted | rejected (review) | pending | "
             "paraphrases / template (paper) | train / valid-test per template |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for ds, s in stats.items():
        p = s["paraphrases_per_template"]
        lines.append(f"| {ds} | {s['templates']} | {s['candidates']} | {s['machine_valid']} | "
                     f"{s['review']['accepted']} | {s['review']['rejected']} | {s['review']['pending']} | "
                     f"{p['mean']} ({p['paper_mean']}) | {p['train_mean']} / {p['test_mean']} |")
    lines += ["", "## Machine rejections per reason", "", "| reason | " + " | ".join(stats) + " |",
              "|---|" + "---:|" * len(stats)]
    for r in REASONS:
        lines.append(f"| {r} | " + " | ".join(str(s["rejected_by_reason"][r]) for s in stats.values()) + " |")
    return "\n".join(lines) + "\n"
