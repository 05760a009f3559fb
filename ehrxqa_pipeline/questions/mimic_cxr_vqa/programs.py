"""Answer programs of the 48 MIMIC-CXR-VQA templates, evaluated in batch over a sparse label table.

Grain of the input: ``candidates`` has one row per (image, argument combination) to answer; the label
table is sparse (``positives`` lists affirmed (image, object, attribute) rows; every other pair of the
ontology pool is a negative). Each program is a few joins / group-bys / list set operations over all
candidate rows at once; no per-row Python.

Semantics (reference-builders.md 4.3, "pos" = an affirmed label of the image):
- verify -> ["yes"] / ["no"]; choose -> the sorted subset of the two offered options that holds (possibly
  empty or both); query -> the sorted list of matching names (possibly empty).
- abnormality = a positive whose category is in ABN4 (technicalassessment is not abnormal).
- ``${category}`` of base_11 / base_42 is implied by the offered attributes; the program ignores it.
- view: ["ap"] / ["pa"]. gender: gender_1 verifies ``M``/``F``; gender_2 ("male or female?") and gender_3
  answer ["female"] / ["male"] -- the words the question offers. The published scripts answer f/m here
  (section 8 item 12); f and m stay in the vocabulary for compatibility with the published ans2idx.
- size: ct_ratio_1 is ctr > 1/2, mt_ratio_1 is mtr > 1/3; asking them of an image without a ratio is an
  error (the sampler never does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from ehrxqa_pipeline import filters
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import ABN4, CATEGORIES, GENDER_TEXT, VqaTemplate, get_template

ANSWER_WORDS = ("yes", "no", "ap", "pa", "f", "m", "female", "male")
_ABN = "ABN"  # marker: match the ABN4 categories instead of category columns
_LIST = pl.List(pl.String)
_SORT = pl.element().sort()  # list.eval(sort): polars 2.1's list.sort is ~50x slower on strings


@dataclass(frozen=True)
class VqaLabels:
    """Validated inputs, sorted, with an integer image code ``_img`` (row of ``images``) for fast joins."""

    pairs: pl.DataFrame  # object, attribute, category
    positives: pl.DataFrame  # _img, image_id, object, attribute, category; sorted by (_img, object, attribute)
    images: pl.DataFrame  # _img, image_id, subject_id, study_id, split, view_position, gender, image_path, ctr, mtr
    rejected_positives: pl.DataFrame  # image_id, object, attribute, reason


# A positive label joined to its image (_img) and its pool pair (category).
POSITIVE_RULES = (
    filters.Rule("image not in images", pl.col("_img").is_null(), "only images of the splits are asked about"),
    filters.Rule("(object, attribute) not in the pair pool", pl.col("category").is_null(),
                 "a pair outside the pool is never asked about"),
)


def prepare_labels(pairs: pl.DataFrame, positives: pl.DataFrame, images: pl.DataFrame) -> VqaLabels:
    """Check the three inputs and index them. Positives outside the pair pool or of unknown images are set
    aside in ``rejected_positives`` with a reason; an attribute with two categories is an error."""
    pairs = pairs.select("object", "attribute", "category").unique().sort("object", "attribute")
    bad = pairs.filter(~pl.col("category").is_in(CATEGORIES))
    if bad.height:
        raise ValueError(f"pairs: unknown categories {sorted(set(bad['category']))}; allowed {CATEGORIES}")
    multi = pairs.group_by("attribute").agg(pl.col("category").n_unique()).filter(pl.col("category") > 1)
    if multi.height:
        raise ValueError(f"pairs: attributes with more than one category: {sorted(multi['attribute'])}")
    images = images.sort("image_id")
    if images["image_id"].n_unique() != images.height:
        raise ValueError("images: image_id is not unique")
    images = images.with_row_index("_img")
    pos = (positives.select("image_id", "object", "attribute").unique()
           .join(images.select("image_id", "_img"), on="image_id", how="left")
           .join(pairs, on=["object", "attribute"], how="left"))
    out = filters.apply(pos, POSITIVE_RULES)
    kept = out.kept.select("_img", "image_id", "object", "attribute", "category").sort("_img", "object", "attribute")
    rejected = out.rejected.select("image_id", "object", "attribute", "reason").sort("image_id", "object", "attribute")
    return VqaLabels(pairs, kept, images, rejected)


def positives_of(labels: VqaLabels, images: pl.Series) -> pl.DataFrame:
    """The positives of some images (``_img`` codes), in label order (a mask gather, not a hash join)."""
    mask = np.zeros(labels.images.height, dtype=bool)
    mask[images.to_numpy()] = True
    return labels.positives.filter(pl.Series(mask[labels.positives["_img"].to_numpy()]))


def answer_vocabulary(pairs: pl.DataFrame) -> list[str]:
    """Every possible answer: the pool's objects and attributes plus ANSWER_WORDS, sorted."""
    names = set(pairs["object"]) | set(pairs["attribute"]) | set(ANSWER_WORDS)
    return sorted(names)


class _Eval:
    """Join helpers over the candidate rows (``_row`` 0..n-1, ``_img``) and their images' positives."""

    def __init__(self, cand: pl.DataFrame, labels: VqaLabels):
        self.c = cand
        self.pos = positives_of(labels, cand["_img"])
        self.labels = labels

    def _join(self, obj: str | None, attr: str | None, cats) -> pl.DataFrame:
        left_on = ["_img"] + [c for c in (obj, attr) if c]
        right_on = ["_img"] + (["object"] if obj else []) + (["attribute"] if attr else [])
        extra = list(cats) if isinstance(cats, tuple) else []
        j = self.c.select("_row", *left_on, *extra).join(self.pos, left_on=left_on, right_on=right_on)
        if cats == _ABN:
            return j.filter(pl.col("category").is_in(list(ABN4)))
        if cats:
            return j.filter(pl.any_horizontal(*[pl.col("category") == pl.col(c) for c in cats]))
        return j

    def has(self, obj: str | None = None, attr: str | None = None, cats=None) -> pl.Series:
        rows = self._join(obj, attr, cats)["_row"].unique()
        return self.c["_row"].is_in(rows)

    def names(self, out: str, obj: str | None = None, attr: str | None = None, cats=None) -> pl.Series:
        g = self._join(obj, attr, cats).group_by("_row").agg(pl.col(out).unique().alias("_v"))
        v = self.c.select("_row").join(g, on="_row", how="left", maintain_order="left")["_v"]
        return v.fill_null(pl.lit([], dtype=_LIST)) if v.null_count() else v

    def image(self, column: str) -> pl.Series:
        return self.c.select("_img").join(self.labels.images.select("_img", column), on="_img", how="left",
                                          maintain_order="left")[column]


def _frame(**cols: pl.Series) -> pl.DataFrame:
    return pl.DataFrame({k: v.rename(k) for k, v in cols.items()})


def _verify(flag: pl.Series) -> pl.Series:
    return _frame(f=flag).select(pl.concat_list(pl.when("f").then(pl.lit("yes")).otherwise(pl.lit("no")))).to_series()


def _choose(c: pl.DataFrame, first: pl.Series, second: pl.Series, col1: str, col2: str) -> pl.Series:
    f = c.select(col1, col2).with_columns(_a=first, _b=second)
    return f.select(pl.concat_list(pl.when("_a").then(pl.col(col1)), pl.when("_b").then(pl.col(col2)))
                    .list.drop_nulls().list.eval(_SORT)).to_series()


def _setop(a: pl.Series, b: pl.Series, op: str) -> pl.Series:
    f = _frame(a=a, b=b)
    e = {"or": pl.col("a").list.set_union("b"), "and": pl.col("a").list.set_intersection("b"),
         "minus": pl.col("a").list.set_difference("b")}[op]
    return f.select(e.list.eval(_SORT)).to_series()


def _sorted(s: pl.Series) -> pl.Series:
    return _frame(v=s).select(pl.col("v").list.eval(_SORT)).to_series()


def _lower_list(s: pl.Series) -> pl.Series:
    return _frame(v=s).select(pl.concat_list(pl.col("v").str.to_lowercase())).to_series()


def _ratio(e: _Eval, column: str, threshold: float) -> pl.Series:
    r = e.image(column)
    if r.is_null().any() or r.is_nan().any():
        raise ValueError(f"{column} is missing for some candidate images; size templates need it")
    return _verify(r > threshold)


_O1, _O2, _A1, _A2, _C1, _C2 = "object_1", "object_2", "attribute_1", "attribute_2", "category_1", "category_2"
_Program = Callable[[_Eval], pl.Series]
_PROGRAMS: dict[str, _Program] = {
    "base_1": lambda e: _verify(e.has(_O1, cats=(_C1,))),
    "base_2": lambda e: _verify(e.has(_O1, _A1)),
    "base_abn_1": lambda e: _verify(e.has(_O1, cats=_ABN)),
    "base_4": lambda e: _verify(e.has(_O1, cats=(_C1, _C2))),
    "base_5": lambda e: _verify(e.has(_O1, _A1) & e.has(_O1, _A2)),
    "base_6": lambda e: _verify(e.has(_O1, _A1) | e.has(_O1, _A2)),
    "base_9": lambda e: _sorted(e.names("attribute", _O1, cats=(_C1,))),
    "base_abn_2": lambda e: _sorted(e.names("attribute", _O1, cats=_ABN)),
    "base_10": lambda e: _sorted(e.names("attribute", _O1, cats=(_C1, _C2))),
    "base_11": lambda e: _choose(e.c, e.has(_O1, _A1), e.has(_O1, _A2), _A1, _A2),
    "base_abn_3": lambda e: _verify(e.has(_O1, cats=_ABN) | e.has(_O2, cats=_ABN)),
    "base_abn_4": lambda e: _verify(e.has(_O1, cats=_ABN) & e.has(_O2, cats=_ABN)),
    "base_25": lambda e: _setop(e.names("attribute", _O1, cats=(_C1,)), e.names("attribute", _O2, cats=(_C1,)), "or"),
    "base_26": lambda e: _setop(e.names("attribute", _O1, cats=(_C1,)), e.names("attribute", _O2, cats=(_C1,)), "and"),
    "base_27": lambda e: _setop(e.names("attribute", _O1, cats=(_C1,)), e.names("attribute", _O2, cats=(_C1,)),
                                "minus"),
    "base_abn_5": lambda e: _setop(e.names("attribute", _O1, cats=_ABN), e.names("attribute", _O2, cats=_ABN), "or"),
    "base_abn_6": lambda e: _setop(e.names("attribute", _O1, cats=_ABN), e.names("attribute", _O2, cats=_ABN), "and"),
    "base_abn_7": lambda e: _setop(e.names("attribute", _O1, cats=_ABN), e.names("attribute", _O2, cats=_ABN),
                                   "minus"),
    "base_30": lambda e: _verify(e.has(cats=(_C1,))),
    "base_abn_8": lambda e: _verify(e.has(cats=_ABN)),
    "base_32": lambda e: _verify(e.has(cats=(_C1, _C2))),
    "base_33": lambda e: _verify(e.has(attr=_A1)),
    "base_34": lambda e: _verify(e.has(attr=_A1) & e.has(attr=_A2)),
    "base_35": lambda e: _verify(e.has(attr=_A1) | e.has(attr=_A2)),
    "base_40": lambda e: _sorted(e.names("attribute", cats=(_C1,))),
    "base_41": lambda e: _sorted(e.names("attribute", cats=(_C1, _C2))),
    "base_abn_9": lambda e: _sorted(e.names("attribute", cats=_ABN)),
    "base_42": lambda e: _choose(e.c, e.has(attr=_A1), e.has(attr=_A2), _A1, _A2),
    "base_45": lambda e: _verify(e.has(_O1, _A1) & e.has(_O2, _A1)),
    "base_46": lambda e: _verify(e.has(_O1, _A1) | e.has(_O2, _A1)),
    "base_49": lambda e: _sorted(e.names("object", attr=_A1)),
    "base_50": lambda e: _choose(e.c, e.has(_O1, _A1), e.has(_O2, _A1), _O1, _O2),
    "base_abn_10": lambda e: _choose(e.c, e.has(_O1, cats=_ABN), e.has(_O2, cats=_ABN), _O1, _O2),
    "base_58": lambda e: _setop(e.names("object", attr=_A1), e.names("object", attr=_A2), "or"),
    "base_59": lambda e: _setop(e.names("object", attr=_A1), e.names("object", attr=_A2), "and"),
    "base_60": lambda e: _setop(e.names("object", attr=_A1), e.names("object", attr=_A2), "minus"),
    "base_64": lambda e: _verify(e.has(_O1, cats=(_C1,)) & e.has(_O2, cats=(_C1,))),
    "base_65": lambda e: _verify(e.has(_O1, cats=(_C1,)) | e.has(_O2, cats=(_C1,))),
    "base_66": lambda e: _sorted(e.names("object", cats=(_C1,))),
    "base_73": lambda e: _sorted(e.names("object", cats=(_C1, _C2))),
    "viewpos_1": lambda e: _verify(e.image("view_position") == e.c["viewpos"]),
    "viewpos_2": lambda e: _lower_list(e.image("view_position")),
    "viewpos_3": lambda e: _lower_list(e.image("view_position")),
    "gender_1": lambda e: _verify(e.image("gender") == e.c["gender"]),
    "gender_2": lambda e: _lower_list(e.image("gender").replace_strict(GENDER_TEXT, return_dtype=pl.String)),
    "gender_3": lambda e: _lower_list(e.image("gender").replace_strict(GENDER_TEXT, return_dtype=pl.String)),
    "ct_ratio_1": lambda e: _ratio(e, "ctr", 1 / 2),
    "mt_ratio_1": lambda e: _ratio(e, "mtr", 1 / 3),
}


def answers(template: VqaTemplate | str, candidates: pl.DataFrame, labels: VqaLabels) -> pl.Series:
    """The answer (list[str]) of every candidate row, in row order.

    ``candidates`` needs ``image_id`` or the integer code ``_img`` plus the template's argument columns
    (``VqaTemplate.columns``: object_1, attribute_2, ...).
    """
    t = get_template(template)
    missing = [c for c in t.columns if c not in candidates.columns]
    if missing:
        raise ValueError(f"{t.key}: candidate frame lacks argument columns {missing}")
    c = candidates
    if "_img" not in c.columns:
        c = c.join(labels.images.select("image_id", "_img"), on="image_id", how="left", maintain_order="left")
        if c["_img"].null_count():
            raise ValueError(f"{t.key}: candidates name images that are not in images")
    c = c.select("_img", *t.columns).with_row_index("_row")
    if c.height == 0:
        return pl.Series("answer", [], dtype=_LIST)
    return _PROGRAMS[t.key](_Eval(c, labels)).rename("answer")


def with_answers(template: VqaTemplate | str, candidates: pl.DataFrame, labels: VqaLabels) -> pl.DataFrame:
    """``candidates`` plus its ``answer`` column."""
    return candidates.with_columns(answers(template, candidates, labels))
