"""Statistics tables (paper B4-B6) and answer entropy."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from ehrxqa_pipeline.questions.mimic_cxr_vqa.records import build_records, record_frame
from ehrxqa_pipeline.questions.mimic_cxr_vqa.sampling import SamplingConfig, VqaSample, sample_vqa
from ehrxqa_pipeline.questions.mimic_cxr_vqa.stats import (
    answer_entropy, by_content_type, by_semantic_type, entropy_bits, frame_from_records, merge_split_tables, overall,
    render_markdown, split_tables)
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import TEMPLATES
from tests.questions import vqa_fixture

FRAME = pl.DataFrame({
    "split": ["train", "train", "train", "test"],
    "image_id": ["a", "a", "b", "c"],
    "question": ["Is there x?", "Is there x?", "List all y.", "Is there x?"],
    "content_type": ["presence", "presence", "attribute", "presence"],
    "semantic_type": ["verify", "verify", "query", "verify"],
    "answer": [["yes"], ["no"], ["p", "q"], ["yes"]],
})


def test_tables_by_hand():
    assert overall(FRAME) == {"images": {"train": 2, "test": 1}, "questions": {"train": 2, "test": 1},
                              "answers": {"train": 3, "test": 1}, "samples": {"train": 3, "test": 1}}
    ct = by_content_type(FRAME)
    assert ct["presence"]["train"] == {"n": 2, "pct": 200 / 3} and ct["size"]["test"] == {"n": 0, "pct": 0.0}
    assert list(ct) == ["presence", "anatomy", "attribute", "abnormality", "size", "plane", "gender"]
    st = by_semantic_type(FRAME)
    assert st["query"]["train"]["n"] == 1 and st["choose"]["train"]["n"] == 0
    md = render_markdown(split_tables(FRAME))
    assert "| Samples | 3 | 1 |" in md and "| presence | 2 (66.7%) | 1 (100.0%) |" in md


def test_the_tables_of_frames_of_other_splits_merge_into_those_of_all_their_rows():
    """The statistics asset computes each side's tables apart (silver: train and valid; gold: test)."""
    parts = [FRAME.filter(pl.col("split") == "test"), FRAME.filter(pl.col("split") == "train")]
    merged = merge_split_tables([split_tables(p) for p in parts])
    assert merged == split_tables(FRAME)
    assert list(merged["overall"]["samples"]) == ["train", "test"]  # split order, whatever the parts' order
    assert render_markdown(merged) == render_markdown(split_tables(FRAME))


def test_entropy_bits():
    assert entropy_bits(np.array([5, 5])) == 1.0
    assert entropy_bits(np.array([7, 0])) == 0.0 and entropy_bits(np.array([])) == 0.0
    assert math.isclose(entropy_bits(np.array([1, 1, 1, 1])), 2.0)


def test_answer_entropy_against_uniform_sampling():
    q = pl.DataFrame({"split": ["train"] * 4, "template_key": ["base_2"] * 4,
                      "answer": [["yes"], ["yes"], ["no"], ["no"]]})
    pool = pl.DataFrame({"split": ["train", "train"], "template_key": ["base_2", "base_2"], "answer_key": ["no", "yes"],
                         "n": [90, 10]})
    rows = answer_entropy(VqaSample(q, pool, pl.DataFrame(), pl.DataFrame()), seed=0, draws=50)
    (r,) = rows
    assert (r["n"], r["answers"], r["entropy"], r["pool_size"]) == (4, 2, 1.0, 100)
    assert r["uniform_sample_entropy"] < 0.6 and math.isclose(r["pool_entropy"], entropy_bits(np.array([90, 10])))
    assert answer_entropy(VqaSample(q, pool, pl.DataFrame(), pl.DataFrame()), seed=0, draws=50) == rows


def test_stats_from_a_sample_and_from_records_agree():
    pairs, positives, images = vqa_fixture(n_images=120, seed=3)
    s = sample_vqa(pairs, positives, images, seed=1,
                   config=SamplingConfig(targets={sp: {t.key: 8 for t in TEMPLATES} for sp in ("train", "valid")}))
    a = record_frame(s.questions, images)
    b = frame_from_records(build_records(s.questions, images))
    assert overall(a) == overall(b) and by_content_type(a) == by_content_type(b)
    assert overall(a)["samples"] == {"train": 48 * 8, "valid": 48 * 8}
    md = render_markdown(split_tables(a), answer_entropy(s, seed=1))
    assert "### Answer entropy per template (bits)" in md and "| train | 48 | mt_ratio_1 |" in md
