"""The scores leaderboard: one row per VQA module, as Markdown (release notes, asset metadata) and as
``EHRXQA_HOME/release/scores.json``.

Grain: ``scores`` maps module name -> {metric name -> value}; ``module_scores`` builds that flat dict from
the outputs of ``scoring.score_mimic_cxr_vqa``, ``scoring.verify_auroc``, ``scoring.score_ehrxqa`` and one
module's entry of ``robustness.paraphrase_robustness``. Metric names (fractions, not percentages):

- ``mimic_cxr_vqa/accuracy``, ``mimic_cxr_vqa/micro_f1``, ``mimic_cxr_vqa/accuracy/<content type>``,
  ``mimic_cxr_vqa/n``, ``mimic_cxr_vqa/abstentions``;
- ``auroc_rel/mean``, ``auroc_rel/pairs`` (relative AUROC, E.1.3);
- ``ehrxqa/accuracy``, ``ehrxqa/accuracy/<modality>/<patient scope>``, ``ehrxqa/n``, ``ehrxqa/abstentions``,
  ``ehrxqa/errors``;
- ``robustness/share``, ``robustness/pairs`` (share of phrasing pairs whose answer changed).

JSON: sorted keys, floats rounded to 4 places, NaN as null, so the same scores give the same bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from ehrxqa_pipeline.markdown import table
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import CONTENT_TYPES

MODALITIES = ("image", "table", "image+table")
PATIENT_SCOPES = ("none", "single", "group")
# (metric, column header) in leaderboard order; a column is shown when some module has the metric
COLUMNS = (("mimic_cxr_vqa/accuracy", "Acc"), ("mimic_cxr_vqa/micro_f1", "F1 (micro)"),
           *((f"mimic_cxr_vqa/accuracy/{c}", f"Acc {c}") for c in CONTENT_TYPES),
           ("auroc_rel/mean", "AUROC_rel"), ("ehrxqa/accuracy", "EHRXQA Acc_EX"),
           *((f"ehrxqa/accuracy/{m}/{s}", f"Acc_EX {m} {s}") for m in MODALITIES for s in PATIENT_SCOPES),
           ("robustness/share", "Paraphrase changed"))


def module_scores(mimic: Mapping | None = None, auroc: Mapping | None = None, ehrxqa: Mapping | None = None,
                  robustness: Mapping | None = None) -> dict[str, float | int | None]:
    """One module's flat metrics from the scoring outputs it has (any may be None)."""
    out: dict[str, float | int | None] = {}
    if mimic:
        out.update({"mimic_cxr_vqa/accuracy": mimic["accuracy"], "mimic_cxr_vqa/micro_f1": mimic["micro_f1"],
                    "mimic_cxr_vqa/n": mimic["n"], "mimic_cxr_vqa/abstentions": mimic.get("abstentions", 0)})
        for c, block in mimic.get("by_content_type", {}).items():
            out[f"mimic_cxr_vqa/accuracy/{c}"] = block["accuracy"]
    if auroc and auroc.get("relative"):
        out.update({"auroc_rel/mean": auroc["relative"]["mean"], "auroc_rel/pairs": auroc["relative"]["n_pairs"]})
    if ehrxqa:
        out.update({"ehrxqa/accuracy": ehrxqa["accuracy"], "ehrxqa/n": ehrxqa["n"],
                    "ehrxqa/abstentions": ehrxqa["abstentions"], "ehrxqa/errors": ehrxqa["errors"]})
        for key, block in ehrxqa.get("by_modality_scope", {}).items():
            out[f"ehrxqa/accuracy/{key}"] = block["accuracy"]
    if robustness:
        out.update({"robustness/share": robustness["share"], "robustness/pairs": robustness["pairs"]})
    return out


def _clean(value):
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else round(value, 4)
    if isinstance(value, int):
        return value
    if hasattr(value, "item"):  # numpy scalar
        return _clean(value.item())
    raise TypeError(f"score values must be numbers or None, got {type(value).__name__} {value!r}")


def _cell(value) -> str:
    v = _clean(value)
    if v is None:
        return "–"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def leaderboard_markdown(scores: Mapping[str, Mapping[str, float | int | None]]) -> str:
    """A Markdown table: one row per module (in the given order), the COLUMNS some module has, then any
    other metric names in sorted order; "–" where a module lacks a metric."""
    present = {m for s in scores.values() for m in s}
    known = [(m, h) for m, h in COLUMNS if m in present]
    extra = sorted(present - {m for m, _ in COLUMNS} - {"mimic_cxr_vqa/n", "mimic_cxr_vqa/abstentions", "ehrxqa/n",
                                                        "ehrxqa/abstentions", "ehrxqa/errors", "auroc_rel/pairs",
                                                        "robustness/pairs"})
    cols = known + [(m, m) for m in extra]
    rows = [[name, *(_cell(s.get(m)) for m, _ in cols)] for name, s in scores.items()]
    return table(["module", *(h for _, h in cols)], rows)


def scores_json(scores: Mapping[str, Mapping[str, float | int | None]]) -> str:
    """``{"module": {"metric": value}}`` with sorted keys and floats rounded to 4 places, newline-terminated."""
    clean = {name: {m: _clean(v) for m, v in s.items()} for name, s in scores.items()}
    return json.dumps(clean, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
