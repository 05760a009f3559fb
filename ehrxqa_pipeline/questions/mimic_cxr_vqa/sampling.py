"""Balanced sampling of MIMIC-CXR-VQA (image, template, arguments, answer) rows, one split at a time.

The paper (Appendix B.2.2, "dataset balancing") names three rules and publishes no code; this module is
our definition of them.

1. Answers -- maximise each template's answer entropy. For every template we draw a candidate pool (see
   ``mimic_cxr_vqa.arguments``: a uniformly random valid argument combination and one anchored on the image's own
   positives, per pool image), answer every candidate with its program, and group candidates into answer
   buckets (the exact answer list). Each image keeps one candidate, chosen with probability inversely
   proportional to its bucket's size (exponential race: Exp(1) x bucket size, smallest wins), so rare
   answers survive. Selection is then round-robin over buckets (each round takes the next candidate of
   every non-empty bucket, buckets in a random order within the round) until the template's target is
   reached; this is water-filling -- a bucket gets min(its size, L) with one common level L -- which is
   the most even (maximum-entropy) allocation the pool allows.
2. Questions per image -- a template is used at most once per image (one candidate per image, above).
   A per-split image counter (questions already given to the image) favours rarely used images: the
   pool is the ``ceil(oversample x target)`` images with the smallest exponential race keys
   Exp(1) / w, w = (1 + count) ** -counter_power (weighted sampling without replacement), and within a
   bucket candidates are taken in the same key order. Templates without arguments (their answer depends
   on the image only) use every eligible image as the pool, so they can balance fully.
3. Questions per template -- a fixed target per (split, template); never more than
   ``max_image_fraction`` of the eligible images (but at least one), so a small split still leaves room
   to balance.
   Eligible images: all, except ct_ratio_1 / mt_ratio_1 need a non-null ratio, viewpos_* a view of AP
   or PA, gender_* a gender of F or M.

Default targets (``DEFAULT_TARGETS``) reproduce the paper's size: Table B5 gives questions per content
type and split, which we divide evenly among that content type's templates (e.g. train presence 109,455
/ 14 templates = 7,818 per template); the total is the paper's 377,391. On a small (demo) source the
image cap binds first and the build takes seconds.

Determinism: templates run in their fixed order; each (split, template) draws from
``rng.generator(seed, "vqa_sampling.<split>.<template key>")`` and every frame is in a defined order before
a draw, so the same inputs and seed give identical rows, whatever the input row order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from ehrxqa_pipeline.names import DATASET_SPLITS
from ehrxqa_pipeline.questions.mimic_cxr_vqa.arguments import argument_spaces, candidates
from ehrxqa_pipeline.questions.mimic_cxr_vqa.programs import VqaLabels, answers, prepare_labels
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import ARGUMENT_COLUMNS, GENDERS, TEMPLATES, VIEW_POSITIONS, VqaTemplate
from ehrxqa_pipeline.rng import generator

SPLITS = DATASET_SPLITS
# EHRXQA paper, Table B5 (seed 000) / B6 (seed 001): questions per content type and split.
PAPER_CONTENT_TYPE_COUNTS = {
    "train": {"presence": 109455, "anatomy": 37952, "attribute": 49948, "abnormality": 60692, "size": 16000,
              "plane": 7992, "gender": 7992},
    "valid": {"presence": 26153, "anatomy": 10210, "attribute": 13111, "abnormality": 16109, "size": 4000,
              "plane": 1992, "gender": 1992},
    "test": {"presence": 4566, "anatomy": 1963, "attribute": 2578, "abnormality": 3199, "size": 705,
             "plane": 386, "gender": 396},
}
ANSWER_SEP = "|"  # joins an answer list into its bucket key (no object/attribute name contains it)


def paper_targets() -> dict[str, dict[str, int]]:
    """Per (split, template key) targets: the paper's content-type count / templates of that type."""
    per_type = {ct: sum(t.content_type == ct for t in TEMPLATES) for ct in {t.content_type for t in TEMPLATES}}
    return {split: {t.key: round(counts[t.content_type] / per_type[t.content_type]) for t in TEMPLATES}
            for split, counts in PAPER_CONTENT_TYPE_COUNTS.items()}


DEFAULT_TARGETS: dict[str, dict[str, int]] = paper_targets()


@dataclass(frozen=True)
class SamplingConfig:
    """Balancing knobs; see the module docstring."""

    targets: Mapping[str, Mapping[str, int]] = field(default_factory=paper_targets)  # split -> key -> count
    max_image_fraction: float = 0.7  # cap: target <= this share of the eligible images
    oversample: float = 4.0  # pool images per target question (templates with arguments)
    counter_power: float = 2.0  # image weight (1 + questions so far) ** -counter_power


@dataclass(frozen=True)
class VqaSample:
    """Sampled questions plus the diagnostics the statistics need."""

    questions: pl.DataFrame  # split, template_index, template_key, image_id, <ARGUMENT_COLUMNS>, answer
    pool: pl.DataFrame  # split, template_key, answer_key, n: answers of the whole candidate pool
    plan: pl.DataFrame  # split, template_key, target, eligible, cap, candidates, selected
    rejected_positives: pl.DataFrame  # positives that could not be used, with the reason


_QSCHEMA = {"split": pl.String, "template_index": pl.Int32, "template_key": pl.String, "_img": pl.UInt32,
            **{c: pl.String for c in ARGUMENT_COLUMNS}, "answer": pl.List(pl.String)}


def _eligible(t: VqaTemplate, imgs: pl.DataFrame) -> np.ndarray:
    if t.key == "ct_ratio_1" or t.key == "mt_ratio_1":
        col = "ctr" if t.key == "ct_ratio_1" else "mtr"
        e = pl.col(col).is_not_null() & pl.col(col).is_not_nan()
    elif t.content_type == "plane":
        e = pl.col("view_position").is_in(list(VIEW_POSITIONS))
    elif t.content_type == "gender":
        e = pl.col("gender").is_in(list(GENDERS))
    else:
        return np.ones(imgs.height, dtype=bool)
    return imgs.select(e.fill_null(False)).to_series().to_numpy()


def _select(cand: pl.DataFrame, key: pl.DataFrame, n: int, rng: np.random.Generator) -> pl.DataFrame:
    """One candidate per image (rare buckets favoured), then round-robin over answer buckets."""
    cand = cand.with_row_index("_r").with_columns(
        _p=pl.Series(rng.standard_exponential(cand.height)) * pl.len().over("_bucket"))
    cand = cand.sort("_img", "_p", "_r").unique("_img", keep="first", maintain_order=True).drop("_p", "_r")
    cand = cand.join(key, on="_img", how="left").sort("_bucket", "_key", "_img")
    buckets = cand.select("_bucket").unique(maintain_order=True)
    buckets = buckets.with_columns(_bu=pl.Series(rng.random(buckets.height)))
    cand = cand.with_columns(_rank=pl.int_range(pl.len()).over("_bucket")).join(buckets, on="_bucket")
    return cand.sort("_rank", "_bu").head(n)


def sample_split(labels: VqaLabels, spaces: Mapping[str, pl.DataFrame], split: str, *, seed: int,
                 config: SamplingConfig) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(questions, pool, plan) of one split; see the module docstring for the algorithm."""
    imgs = labels.images.filter(pl.col("split") == split)  # sorted by image_id, so by _img
    codes = imgs["_img"].to_numpy()
    counter = np.zeros(labels.images.height, dtype=np.int64)
    targets = config.targets.get(split, {})
    out, pools, plan = [], [], []
    for t in TEMPLATES:
        elig = codes[_eligible(t, imgs)]
        # at least one question per template whenever an image is eligible (tiny splits stay non-empty)
        cap = max(min(1, len(elig)), math.floor(config.max_image_fraction * len(elig)))
        n = min(int(targets.get(t.key, 0)), cap)
        row = {"split": split, "template_key": t.key, "target": int(targets.get(t.key, 0)),
               "eligible": len(elig), "cap": cap, "candidates": 0, "selected": 0}
        if n <= 0 or (t.columns and spaces[t.key].height == 0):
            plan.append(row)
            continue
        rng = generator(seed, f"vqa_sampling.{split}.{t.key}")
        race = rng.standard_exponential(len(elig)) * (1.0 + counter[elig]) ** config.counter_power
        m = len(elig) if not t.columns else min(len(elig), math.ceil(config.oversample * n))
        order = np.argsort(race, kind="stable")[:m]  # ties have probability zero; stable anyway
        pool = pl.Series("_img", elig[order], dtype=pl.UInt32)
        key = pl.DataFrame({"_img": pool, "_key": race[order]})
        cand = candidates(t, spaces[t.key], labels, pool, rng)
        cand = cand.with_columns(answers(t, cand, labels))
        cand = cand.with_columns(_bucket=pl.col("answer").list.join(ANSWER_SEP))
        pools.append(cand.group_by("_bucket").len().sort("_bucket")
                     .select(pl.lit(split).alias("split"), pl.lit(t.key).alias("template_key"),
                             pl.col("_bucket").alias("answer_key"), pl.col("len").cast(pl.Int64).alias("n")))
        chosen = _select(cand, key, n, rng)
        np.add.at(counter, chosen["_img"].to_numpy(), 1)
        out.append(chosen.select(pl.lit(split).alias("split"), pl.lit(t.index, pl.Int32).alias("template_index"),
                                 pl.lit(t.key).alias("template_key"), "_img",
                                 *[pl.col(c) if c in t.columns else pl.lit(None, pl.String).alias(c)
                                   for c in ARGUMENT_COLUMNS], "answer"))
        plan.append({**row, "candidates": cand.height, "selected": chosen.height})
    q = pl.concat(out) if out else pl.DataFrame(schema=_QSCHEMA)
    p = pl.concat(pools) if pools else pl.DataFrame(schema={"split": pl.String, "template_key": pl.String,
                                                            "answer_key": pl.String, "n": pl.Int64})
    return q, p, pl.DataFrame(plan)


def sample_vqa(pairs: pl.DataFrame, positives: pl.DataFrame, images: pl.DataFrame, *, seed: int,
               config: SamplingConfig | None = None) -> VqaSample:
    """Sample every split present in ``images`` (train, valid, test). Questions are ordered by split,
    template index, image_id."""
    config = config or SamplingConfig()
    unknown = set(images["split"].unique()) - set(SPLITS)
    if unknown:
        raise ValueError(f"images: unknown split values {sorted(map(str, unknown))}; expected {SPLITS}")
    labels = prepare_labels(pairs, positives, images)
    spaces = argument_spaces(labels.pairs)
    parts = [sample_split(labels, spaces, s, seed=seed, config=config) for s in SPLITS
             if s in set(images["split"])]
    q = pl.concat([x[0] for x in parts]) if parts else pl.DataFrame(schema=_QSCHEMA)
    q = (q.join(labels.images.select("_img", "image_id"), on="_img", how="left")
         .with_columns(_s=pl.col("split").replace_strict({s: i for i, s in enumerate(SPLITS)}, return_dtype=pl.Int8))
         .sort("_s", "template_index", "image_id")
         .select("split", "template_index", "template_key", "image_id", *ARGUMENT_COLUMNS, "answer"))
    pool = pl.concat([x[1] for x in parts]) if parts else pl.DataFrame()
    plan = pl.concat([x[2] for x in parts]) if parts else pl.DataFrame()
    return VqaSample(q, pool, plan, labels.rejected_positives)
