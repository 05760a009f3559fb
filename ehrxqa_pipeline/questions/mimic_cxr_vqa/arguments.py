"""Ontology-valid argument combinations per template, and candidate (image, arguments) rows drawn from them.

Valid combinations (``argument_space``), built from the (object, attribute, category) pair pool only:
- every (object_i, attribute_j) of a template is a pool pair;
- every object_i admits category_k (the pool has a pair of that object with an attribute of that category);
- an attribute offered with a category belongs to it (base_11, base_42);
- a template with objects but no attribute or category (the base_abn_* family) uses objects that admit an
  ABN4 attribute;
- the two values of a doubled slot differ (object_1 != object_2, ...);
- viewpos in {AP, PA}, gender in {F, M}.
The space is ordered (``a1, a2`` and ``a2, a1`` are both rows); it is sorted, so draws are reproducible.

Candidates for one template and a set of pool images come from two streams:
- random: one uniformly drawn valid combination per image;
- seeded: one combination anchored on the image's own positives -- a random positive (object, attribute,
  category) fills the ``_1`` slots; for conjunctive templates (both / common / and) a second positive of
  the same image that shares the column the question intersects on fills the ``_2`` slot; any slot still
  free is drawn uniformly among the valid combinations that agree with the bound ones. For the base_abn_*
  family only ABN4 positives seed. Without the seeded stream, rare answers ("yes" to "both A and B in X")
  would almost never be drawn and no balancing could make the answers even.
Then each doubled slot pair is swapped with probability 1/2 so that the anchored option is not always the
first one offered (no position bias in choose questions).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ehrxqa_pipeline.questions.mimic_cxr_vqa.programs import VqaLabels, positives_of
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import ABN4, GENDERS, TEMPLATES, VIEW_POSITIONS, VqaTemplate

# Conjunctive templates: slot filled by the second positive, and the positive column both must share.
SECOND_SEED = {"base_5": ("attribute_2", "object"), "base_abn_4": ("object_2", None),
               "base_26": ("object_2", "attribute"), "base_abn_6": ("object_2", "attribute"),
               "base_34": ("attribute_2", None), "base_45": ("object_2", "attribute"),
               "base_59": ("attribute_2", "object"), "base_64": ("object_2", "category")}
_FIRST = {"object_1": "object", "attribute_1": "attribute", "category_1": "category"}
_PAIRS = (("object_1", "object_2"), ("attribute_1", "attribute_2"), ("category_1", "category_2"))


def _kind(column: str) -> str:
    return column.rsplit("_", 1)[0]


def _space(t: VqaTemplate, pairs: pl.DataFrame) -> pl.DataFrame:
    cols = t.columns
    oc = pairs.select("object", "category").unique()
    frame = pl.DataFrame({"_": [0]})
    objects = pl.DataFrame({"v": sorted(set(pairs["object"]))})
    if not any(_kind(c) in ("attribute", "category") for c in cols):
        objects = pl.DataFrame({"v": sorted(set(pairs.filter(pl.col("category").is_in(list(ABN4)))["object"]))})
    domains = {"object": objects, "attribute": pl.DataFrame({"v": sorted(set(pairs["attribute"]))}),
               "category": pl.DataFrame({"v": sorted(set(pairs["category"]))}),
               "viewpos": pl.DataFrame({"v": list(VIEW_POSITIONS)}), "gender": pl.DataFrame({"v": list(GENDERS)})}
    for col in cols:
        kind = _kind(col) if col not in ("viewpos", "gender") else col
        frame = frame.join(domains[kind].rename({"v": col}), how="cross")
        if col.endswith("_2"):
            frame = frame.filter(pl.col(col) != pl.col(f"{kind}_1"))
        objs = [c for c in cols if _kind(c) == "object"]
        if kind == "attribute":
            for o in objs:
                frame = frame.join(pairs.select(o=pl.col("object"), a=pl.col("attribute")),
                                   left_on=[o, col], right_on=["o", "a"], how="semi")
        if kind == "category":
            for o in objs:
                frame = frame.join(oc.rename({"object": o, "category": col}), on=[o, col], how="semi")
            for a in (c for c in cols if _kind(c) == "attribute"):
                frame = frame.join(pairs.select(a=pl.col("attribute"), k=pl.col("category")).unique(),
                                   left_on=[a, col], right_on=["a", "k"], how="semi")
    return frame.select(cols).sort(list(cols)) if cols else frame.select()


def argument_spaces(pairs: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """Template key -> frame of every valid argument combination (one column per argument; a template
    without arguments gets a frame with no columns)."""
    pairs = pairs.select("object", "attribute", "category").unique()
    return {t.key: _space(t, pairs) for t in TEMPLATES}


def _pick_one(frame: pl.DataFrame, group: str, rng: np.random.Generator) -> pl.DataFrame:
    """One uniformly random row per ``group`` value (frame order must be deterministic)."""
    if frame.height == 0:
        return frame
    u = pl.Series("_u", rng.random(frame.height))
    return frame.with_columns(u).filter(pl.col("_u") == pl.col("_u").min().over(group)).drop("_u")


def _fill_free(bound: pl.DataFrame, space: pl.DataFrame, keys: list[str], free: list[str],
               rng: np.random.Generator) -> pl.DataFrame:
    """Draw the free argument columns uniformly among the space rows agreeing with the bound ``keys``."""
    if not free:
        return bound.join(space, on=keys, how="semi", maintain_order="left")
    ordered = space.sort(keys + free).with_row_index("_i")
    groups = ordered.group_by(keys, maintain_order=True).agg(_start=pl.col("_i").min(), _n=pl.len())
    b = bound.join(groups, on=keys, how="inner", maintain_order="left")
    u = rng.random(b.height)
    idx = b["_start"].to_numpy() + np.floor(u * b["_n"].to_numpy()).astype(np.int64)
    drawn = ordered.select(free)[idx]
    return pl.concat([b.drop("_start", "_n"), drawn], how="horizontal")


def _seeded(t: VqaTemplate, space: pl.DataFrame, labels: VqaLabels, pool: pl.Series,
            rng: np.random.Generator) -> pl.DataFrame:
    first = {c: p for c, p in _FIRST.items() if c in t.columns}
    if not first:
        return pl.DataFrame(schema={"_img": pl.UInt32, **{c: pl.String for c in t.columns}})
    pos = positives_of(labels, pool)
    if t.abnormality:
        pos = pos.filter(pl.col("category").is_in(list(ABN4)))
    anchors = space.select(list(first)).unique().rename(first)
    pos = pos.join(anchors, on=list(first.values()), how="semi", maintain_order="left")
    one = _pick_one(pos, "_img", rng)
    bound = one.select("_img", *[pl.col(p).alias(c) for c, p in first.items()])
    if t.key in SECOND_SEED:
        slot, shared = SECOND_SEED[t.key]
        differ = _kind(slot)
        on = ["_img"] + ([shared] if shared else [])
        pairs2 = (one.select(*on, _d1=pl.col(differ))
                  .join(pos.select(*on, _d2=pl.col(differ)), on=on, maintain_order="left_right")
                  .filter(pl.col("_d1") != pl.col("_d2")))
        second = _pick_one(pairs2, "_img", rng).select("_img", pl.col("_d2").alias(slot))
        bound = bound.join(second, on="_img", how="inner", maintain_order="left")
    keys = [c for c in t.columns if c in bound.columns]
    free = [c for c in t.columns if c not in bound.columns]
    return _fill_free(bound, space, keys, free, rng).select("_img", *t.columns)


def candidates(t: VqaTemplate, space: pl.DataFrame, labels: VqaLabels, pool: pl.Series,
               rng: np.random.Generator) -> pl.DataFrame:
    """Candidate rows (``_img``, ``_stream``, argument columns) for the pool images (``_img`` codes, in a
    deterministic order). At most one random and one seeded candidate per image."""
    pool = pool.cast(pl.UInt32).rename("_img")
    if not t.columns:
        return pl.DataFrame({"_img": pool, "_stream": pl.Series([0] * pool.len(), dtype=pl.UInt8)})
    if space.height == 0:
        return pl.DataFrame(schema={"_img": pl.UInt32, "_stream": pl.UInt8, **{c: pl.String for c in t.columns}})
    idx = rng.integers(0, space.height, pool.len())
    rand = pl.concat([pool.to_frame(), space[idx]], how="horizontal").with_columns(_stream=pl.lit(0, pl.UInt8))
    seed = _seeded(t, space, labels, pool, rng).with_columns(_stream=pl.lit(1, pl.UInt8))
    out = pl.concat([rand.select("_img", "_stream", *t.columns), seed.select("_img", "_stream", *t.columns)])
    for a, b in _PAIRS:
        if a in out.columns and b in out.columns:
            swap = pl.Series(rng.random(out.height) < 0.5)
            out = out.with_columns(pl.when(swap).then(pl.col(b)).otherwise(pl.col(a)).alias(a),
                                   pl.when(swap).then(pl.col(a)).otherwise(pl.col(b)).alias(b))
    return out
