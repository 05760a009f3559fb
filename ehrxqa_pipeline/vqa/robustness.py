"""Paraphrase robustness of text-reading VQA modules (the VQA-RAD measure, seed 002: the share of paraphrase
pairs of one question whose answers differ).

Grain: ``phrasings`` gives one row per (MIMIC-CXR-VQA test item, phrasing): each item is rendered in up to
``k`` phrasings drawn without replacement from its template's candidates -- the template's own wording
(``include_original``) plus the valid/test side of its ``paraphrase.pools`` -- filled with the item's
arguments. Draws come from ``rng.generator(seed, "vqa.robustness")`` over the candidate rows in (item,
phrasing text) order, so the same items, pools and seed give the same phrasings.

``paraphrase_robustness`` asks each module every (image, phrasing) pair and counts, per item with k_i
phrasings, the C(k_i, 2) unordered phrasing pairs and those whose answers differ (answers compared in canonical
form: yes/no, a sorted set of names, or an abstention, which equals only another abstention). Returns per
module {"items", "pairs", "changed", "share" (changed / pairs, None without pairs)}.

Which modules: only those that read the question text. Label-based modules (the reference model, the
oracle) invert the canonical wording to a template and read nothing else, so the measure says nothing about
them and they are refused. The honest language baseline is ``baselines.PriorQuestionText`` (keyed on the exact
normalised text); ``modules.OpenAIVisionModule`` is the image-reading one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import polars as pl

from ehrxqa_pipeline.paraphrase.pools import SPLIT_SIDE
from ehrxqa_pipeline.paraphrase.templates import MIMIC_CXR_VQA
from ehrxqa_pipeline.questions.neuralsql.oracle import LabelModule
from ehrxqa_pipeline.questions.neuralsql.vqa_modules import VqaModule, ask, reads_pixels
from ehrxqa_pipeline.questions.mimic_cxr_vqa.records import phrasing_expr
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import TEMPLATES
from ehrxqa_pipeline.rng import generator

STEP = "vqa.robustness"
_ABSTAIN = "\x01abstain"


def phrasings(test_questions: pl.DataFrame, pools: pl.DataFrame | None, k: int = 3, seed: int = 0,
              include_original: bool = True) -> pl.DataFrame:
    """One row per (item, phrasing): item (row of ``test_questions``), image_id, template_key, phrasing
    (template text with ${...} slots) and question (filled); sorted by item, phrasing."""
    if k < 2:
        raise ValueError("k must be >= 2: robustness compares pairs of phrasings")
    cands = []
    if include_original:
        cands.append(pl.DataFrame({"template_key": [t.key for t in TEMPLATES],
                                   "paraphrase": [t.text for t in TEMPLATES]}))
    if pools is not None and pools.height:
        side = SPLIT_SIDE["test"]
        cands.append(pools.filter((pl.col("dataset") == MIMIC_CXR_VQA) & (pl.col("side") == side))
                     .select("template_key", pl.col("text").alias("paraphrase")))
    if not cands:
        raise ValueError("no phrasings: pass pools or include_original=True")
    cand = pl.concat(cands).unique().sort("template_key", "paraphrase")
    items = test_questions.with_row_index("item").with_columns(pl.col("item").cast(pl.Int64))
    rows = items.join(cand, on="template_key", how="inner").sort("item", "paraphrase")
    u = generator(seed, STEP).random(rows.height)
    rows = (rows.with_columns(_u=pl.Series(u)).with_columns(_r=pl.col("_u").rank("ordinal").over("item"))
            .filter(pl.col("_r") <= k))
    parts = [rows.filter(pl.col("template_key") == t.key).with_columns(phrasing_expr(t)) for t in TEMPLATES]
    out = pl.concat([p for p in parts if p.height] or [rows.with_columns(question=pl.lit(None, pl.String))])
    return out.select("item", "image_id", "template_key", pl.col("paraphrase").alias("phrasing"),
                      "question").sort("item", "phrasing")


def answer_key(answer) -> str:
    """Canonical comparison key of a module answer."""
    if answer is None:
        return _ABSTAIN
    if isinstance(answer, bool):
        return "yes" if answer else "no"
    return "\x00".join(sorted(set(answer)))


def changed_pairs(frame: pl.DataFrame) -> dict:
    """``frame``: item, key (one row per asked phrasing) -> {"items", "pairs", "changed", "share"}."""
    per = frame.group_by("item", "key").len("c").group_by("item").agg(
        k=pl.col("c").sum(), same=(pl.col("c") * (pl.col("c") - 1) // 2).sum())
    per = per.with_columns(pairs=pl.col("k") * (pl.col("k") - 1) // 2)
    pairs, same = int(per["pairs"].sum() or 0), int(per["same"].sum() or 0)
    return {"items": int((per["k"] >= 2).sum()), "pairs": pairs, "changed": pairs - same,
            "share": None if pairs == 0 else (pairs - same) / pairs}


def paraphrase_robustness(modules: Mapping[str, VqaModule], phrased: pl.DataFrame, *,
                          images: pl.DataFrame | None = None, images_root: str | Path | None = None,
                          batch_size: int = 32) -> dict[str, dict]:
    """Per module name: the changed-answer share over the phrasing pairs of ``phrased`` (``phrasings`` output).
    ``images`` (image_id, subject_id, study_id[, image_path]) and ``images_root`` give modules their
    ImageRefs; without ``images`` they get None (fine for text-only modules)."""
    from ehrxqa_pipeline.vqa.modules import image_refs

    for name, m in modules.items():
        if isinstance(m, LabelModule):
            raise ValueError(f"module {name!r} answers from labels via the canonical wording; paraphrase "
                             "robustness is defined only for modules that read the question text")
    texts = phrased["question"].to_list()
    root = images_root if any(reads_pixels(m) for m in modules.values()) else None  # else no JPEG is looked for
    refs = (image_refs(phrased["image_id"].to_list(), images, root) if images is not None
            else [None] * len(texts))
    out = {}
    for name, module in modules.items():
        keys = []
        for i in range(0, len(texts), batch_size):
            keys.extend(answer_key(a) for a in ask(module, refs[i:i + batch_size], texts[i:i + batch_size]))
        out[name] = changed_pairs(phrased.select("item").with_columns(key=pl.Series(keys, dtype=pl.String)))
    return out
