"""Apply paraphrase pools to dataset records: each question gets one phrasing of its template's pool.

The phrasing is drawn uniformly from the pool side of the record's split (train -> train side, valid and
test -> valid/test side); a template with an empty pool side keeps its own wording (``para_type =
"original"``). Same records, pools and seed, same phrasings.

MIMIC-CXR-VQA (``choose_vqa_phrasings``): adds ``paraphrase`` (template text with ``${...}`` slots) and
``para_type`` to the sampled-question frame, one draw per question in frame order from the step generator
``rng.generator(seed, "paraphrase.apply.mimic_cxr_vqa")``; ``questions.mimic_cxr_vqa.records`` fills the slots.

EHRXQA (``choose_ehrxqa_phrasings``): adds ``paraphrase`` (the phrasing filled with the words the item was
sampled with, its stored ``fills``) and ``para_type`` to the stored items (``ehrxqa.questions``), one draw per
item in id order from ``rng.generator(seed, "paraphrase.apply.ehrxqa")``, a new generator for each split.
"""

from __future__ import annotations

import json

import polars as pl

from ehrxqa_pipeline.paraphrase.placeholders import leftovers
from ehrxqa_pipeline.paraphrase.pools import SPLIT_SIDE
from ehrxqa_pipeline.paraphrase.templates import EHRXQA, MIMIC_CXR_VQA
from ehrxqa_pipeline.questions.wording import fill
from ehrxqa_pipeline.rng import generator

ORIGINAL = "original"


class PhrasingError(ValueError):
    """A phrasing does not fit the words its item was sampled with; the message names the template."""


def _drawn(questions: pl.DataFrame, pools: pl.DataFrame, key: str, draws) -> pl.DataFrame:
    """``questions`` (with ``key`` and ``split``) plus the ``text`` and ``source`` of the phrasing that
    ``draws`` (one uniform number per row) picks from its pool side, sorted by text; null where that side is
    empty. Order kept."""
    p = (pools.select(key, "side", "text", "source").sort(key, "side", "text")
         .with_columns(_slot=pl.int_range(pl.len()).over(key, "side")))
    sizes = p.group_by(key, "side").len("_n")
    unknown = set(questions["split"].unique()) - set(SPLIT_SIDE)
    if unknown:
        raise ValueError(f"unknown split(s) {sorted(unknown)}; known: {tuple(SPLIT_SIDE)}")
    q = questions.with_columns(_side=pl.col("split").replace_strict(SPLIT_SIDE, return_dtype=pl.String),
                               _u=pl.Series(draws, dtype=pl.Float64))
    return (q.join(sizes, left_on=[key, "_side"], right_on=[key, "side"], how="left", maintain_order="left")
            .with_columns(_slot=(pl.col("_u") * pl.col("_n")).floor().cast(pl.Int64))
            .join(p, left_on=[key, "_side", "_slot"], right_on=[key, "side", "_slot"], how="left",
                  maintain_order="left")
            .drop("_side", "_u", "_n", "_slot"))


def _para_type() -> pl.Expr:
    return pl.when(pl.col("text").is_null()).then(pl.lit(ORIGINAL)).otherwise("source")


# ---- MIMIC-CXR-VQA -------------------------------------------------------------------------------------


def choose_vqa_phrasings(questions: pl.DataFrame, pools: pl.DataFrame, seed: int, start: int = 0,
                         total: int | None = None) -> pl.DataFrame:
    """``questions`` (split, template_key, ...) with ``paraphrase`` and ``para_type`` added, order kept.
    ``start``, ``total``: ``questions`` are rows ``start``.. of a frame of ``total`` rows (one side's of all
    sides' questions), and get the phrasings that frame's rows get."""
    from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import TEMPLATES

    total = questions.height if total is None else total
    if start < 0 or start + questions.height > total:
        raise ValueError(f"rows {start}..{start + questions.height} are not within a frame of {total} rows")
    draws = generator(seed, f"paraphrase.apply.{MIMIC_CXR_VQA}").random(total)[start:start + questions.height]
    q = _drawn(questions, pools.filter(pl.col("dataset") == MIMIC_CXR_VQA), "template_key", draws)
    original = pl.col("template_key").replace_strict({t.key: t.text for t in TEMPLATES}, return_dtype=pl.String)
    return q.with_columns(paraphrase=pl.coalesce("text", original), para_type=_para_type()).drop("text", "source")


# ---- EHRXQA -------------------------------------------------------------------------------------------


def phrase(text: str, fills: dict[str, str], template_id: str) -> str:
    """The phrasing ``text`` of ``template_id`` filled with an item's ``fills`` (placeholder name -> words)."""
    try:
        question = fill(text, fills)
    except KeyError as e:
        raise PhrasingError(f"{template_id}: the phrasing {text!r} has a placeholder its template does not "
                            f"have ({e.args[0]}); rebuild paraphrase/pools") from None
    # checked with neutral fills: database values may hold brackets ("egd [esophagogastroduodenoscopy]")
    if leftovers(fill(text, dict.fromkeys(fills, "x"))):
        raise PhrasingError(f"{template_id}: placeholder marks left in {question!r}; rebuild paraphrase/pools")
    return question


def choose_ehrxqa_phrasings(items: pl.DataFrame, pools: pl.DataFrame, seed: int) -> pl.DataFrame:
    """The stored EHRXQA items (split, id, template_index, question, fills, ...) sorted by split and id, with
    ``paraphrase`` (the drawn phrasing filled with the item's fills; ``question``, the filled template, where
    the template has no phrasing on that side, e.g. table templates) and ``para_type`` (``llm``,
    ``rule-based``, ``reviewer`` or ``original``)."""
    q = items.sort("split", "id").with_columns(_tid=pl.format(f"{EHRXQA}/{{}}", "template_index"))
    sizes = q.group_by("split", maintain_order=True).len()["len"]
    draws = pl.concat([pl.Series(generator(seed, f"paraphrase.apply.{EHRXQA}").random(n)) for n in sizes],
                      how="vertical") if q.height else []
    q = _drawn(q, pools.filter(pl.col("dataset") == EHRXQA).rename({"template_id": "_tid"}), "_tid", draws)
    phrased = [question if text is None else phrase(text, json.loads(fills), tid)
               for question, text, fills, tid in q.select("question", "text", "fills", "_tid").iter_rows()]
    return (q.with_columns(paraphrase=pl.Series(phrased, dtype=pl.String), para_type=_para_type())
            .drop("text", "source", "_tid"))


__all__ = ["ORIGINAL", "PhrasingError", "choose_ehrxqa_phrasings", "choose_vqa_phrasings", "phrase"]
