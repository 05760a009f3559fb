"""Paraphrase pools: the usable candidates of each template, split between train and valid/test.

``build_pools`` takes the review state (machine-valid candidates with their human decision) and returns one
row per (template, phrasing) with its k-means cluster and side (``split.TRAIN`` / ``split.TEST``).
``pool_problems`` states the release guarantees: every phrasing keeps its template's placeholders, and no
phrasing of a template is on both sides.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from ehrxqa_pipeline.contracts import load_contract
from ehrxqa_pipeline.paraphrase.placeholders import placeholder_set, stray_marks
from ehrxqa_pipeline.paraphrase.review import usable
from ehrxqa_pipeline.paraphrase.split import TEST, TRAIN, split_pool
from ehrxqa_pipeline.paraphrase.templates import ParaTemplate

POOL_SCHEMA = load_contract("paraphrase.pools").polars_schema()
SIDES = (TRAIN, TEST)
SPLIT_SIDE = {"train": TRAIN, "valid": TEST, "test": TEST}  # dataset split -> pool side


def build_pools(templates: Sequence[ParaTemplate], state: pl.DataFrame, require_review: bool = False) -> pl.DataFrame:
    """``state``: review_state rows (template_id, text, source, decision)."""
    use = usable(state, require_review)
    by_template = {k[0]: g for k, g in use.group_by("template_id")} if use.height else {}
    rows = []
    for t in templates:
        part = by_template.get(t.template_id)
        if part is None:
            continue
        source = {}
        for text, src in part.sort("rank").select("text", "source").iter_rows():
            source.setdefault(text, src)  # the first generator of a text names its source
        for text, cluster, side in split_pool(list(source)):
            rows.append({"dataset": t.dataset, "template_id": t.template_id, "template_key": t.key, "text": text,
                         "source": source[text], "cluster": cluster, "side": side})
    return pl.DataFrame(rows, schema=POOL_SCHEMA).sort("template_id", "side", "text")


def pool_problems(templates: Sequence[ParaTemplate], pools: pl.DataFrame) -> dict[str, list[str]]:
    """{"placeholders": [...], "train_test_overlap": [...], "unknown_template": [...]} (empty lists: fine)."""
    by_id = {t.template_id: t for t in templates}
    bad_ph, unknown = [], []
    for tid, text in pools.select("template_id", "text").iter_rows():
        t = by_id.get(tid)
        if t is None:
            unknown.append(tid)
        elif placeholder_set(text) != t.placeholders or stray_marks(text):
            bad_ph.append(f"{tid}: {text}")
    sides = pools.group_by("template_id", "text").agg(pl.col("side").n_unique().alias("n"))
    overlap = sides.filter(pl.col("n") > 1).select(pl.format("{}: {}", "template_id", "text")).to_series().to_list()
    return {"placeholders": bad_ph, "train_test_overlap": sorted(overlap), "unknown_template": sorted(set(unknown))}


def pool_sizes(templates: Sequence[ParaTemplate], pools: pl.DataFrame) -> pl.DataFrame:
    """One row per template: dataset, template_id, train, test, total (zeros included)."""
    base = pl.DataFrame({"dataset": [t.dataset for t in templates], "template_id": [t.template_id for t in templates]})
    counts = pools.group_by("template_id").agg(train=(pl.col("side") == TRAIN).sum(),
                                               test=(pl.col("side") == TEST).sum())
    return (base.join(counts, on="template_id", how="left", maintain_order="left")
            .with_columns(pl.col("train", "test").fill_null(0).cast(pl.Int64))
            .with_columns(total=pl.col("train") + pl.col("test")))
