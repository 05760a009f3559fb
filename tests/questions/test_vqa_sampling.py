"""Balanced sampling: answers re-derived independently, validity, balance, determinism."""

from __future__ import annotations

import polars as pl
import pytest

from ehrxqa_pipeline.questions.mimic_cxr_vqa.programs import answer_vocabulary
from ehrxqa_pipeline.questions.mimic_cxr_vqa.sampling import DEFAULT_TARGETS, SamplingConfig, paper_targets, sample_vqa
from ehrxqa_pipeline.questions.mimic_cxr_vqa.stats import answer_entropy
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import TEMPLATES, get_template
from tests.questions import CATEGORY, POSSIBLE, expected_answer, vqa_fixture

ABN = {"anatomicalfinding", "disease", "device", "tubesandlines"}
SEED = 11


@pytest.fixture(scope="module")
def inputs():
    return vqa_fixture(n_images=360, seed=5)


@pytest.fixture(scope="module")
def sample(inputs):
    return sample_vqa(*inputs, seed=SEED)


def _valid(key: str, a: dict) -> bool:
    """Independent statement of the argument validity rules."""
    t = get_template(key)
    objs = [a[c] for c in ("object_1", "object_2") if c in t.columns]
    atts = [a[c] for c in ("attribute_1", "attribute_2") if c in t.columns]
    cats = [a[c] for c in ("category_1", "category_2") if c in t.columns]
    ok = len(set(objs)) == len(objs) and len(set(atts)) == len(atts) and len(set(cats)) == len(cats)
    ok &= all(at in POSSIBLE[o] for o in objs for at in atts)
    ok &= all(any(CATEGORY[at] == c for at in POSSIBLE[o]) for o in objs for c in cats)
    ok &= all(CATEGORY[at] == c for at in atts for c in cats)
    if objs and not atts and not cats:
        ok &= all(any(CATEGORY[at] in ABN for at in POSSIBLE[o]) for o in objs)
    return ok and a.get("viewpos") in (None, "AP", "PA") and a.get("gender") in (None, "F", "M")


def test_every_answer_rederived_and_every_argument_valid(inputs, sample):
    pairs, positives, images = inputs
    pos: dict[str, set] = {}
    for i, o, at in positives.iter_rows():
        pos.setdefault(i, set()).add((o, at))
    imgs = {r["image_id"]: r for r in images.iter_rows(named=True)}
    q = sample.questions
    assert q.height > 3000 and set(q["template_key"]) == {t.key for t in TEMPLATES}
    for r in q.iter_rows(named=True):
        cols = get_template(r["template_key"]).columns
        args = {k: v for k, v in r.items() if k in cols}
        assert all(v is not None for v in args.values())
        assert all(r[k] is None for k in ("object_1", "object_2", "attribute_1", "attribute_2", "category_1",
                                          "category_2", "viewpos", "gender") if k not in cols)
        assert _valid(r["template_key"], args), r
        assert r["answer"] == expected_answer(r["template_key"], pos.get(r["image_id"], set()),
                                              imgs[r["image_id"]], args, CATEGORY), r


def test_answers_in_vocabulary_and_templates_once_per_image(inputs, sample):
    vocab = set(answer_vocabulary(inputs[0]))
    assert set(sample.questions["answer"].explode().drop_nulls()) <= vocab
    q = sample.questions
    assert q.select("template_key", "image_id").is_duplicated().sum() == 0
    # split of each question is its image's split
    split = dict(inputs[2].select("image_id", "split").iter_rows())
    assert all(split[i] == s for s, i in q.select("split", "image_id").iter_rows())


def test_size_only_with_ratio_and_targets_and_caps(inputs, sample):
    images = inputs[2]
    no_ratio = set(images.filter(pl.col("ctr").is_null())["image_id"])
    size = sample.questions.filter(pl.col("template_key").is_in(["ct_ratio_1", "mt_ratio_1"]))
    assert size.height and not set(size["image_id"]) & no_ratio
    plan = sample.plan
    assert (plan["selected"] <= plan["target"]).all() and (plan["selected"] <= plan["cap"]).all()
    assert plan.select((pl.col("selected") == pl.min_horizontal("target", "cap")).all()).item()  # big enough pool


def test_balance_beats_uniform_random_sampling(sample):
    rows = answer_entropy(sample, seed=SEED)
    assert len(rows) == 48 * 3
    for r in rows:
        assert r["entropy"] >= r["uniform_sample_entropy"] - 1e-9, r
    q = sample.questions.filter((pl.col("split") == "train") & (pl.col("template_key") == "base_2"))
    counts = q["answer"].list.first().value_counts()
    assert abs(counts["count"][0] - counts["count"][1]) <= 1  # water-filling: yes/no as even as possible


def test_custom_targets_and_image_counter(inputs):
    cfg = SamplingConfig(targets={"train": {"base_2": 10, "gender_2": 7}})
    s = sample_vqa(*inputs, seed=SEED, config=cfg)
    assert dict(s.questions.group_by("template_key").len().iter_rows()) == {"base_2": 10, "gender_2": 7}
    # the image counter spreads questions over images: with it, more distinct images are used
    targets = {"train": {t.key: 3 for t in TEMPLATES}}  # 144 questions, 120 train images
    spread = sample_vqa(*inputs, seed=SEED, config=SamplingConfig(targets=targets, counter_power=2.0))
    flat = sample_vqa(*inputs, seed=SEED, config=SamplingConfig(targets=targets, counter_power=0.0))
    assert spread.questions["image_id"].n_unique() > flat.questions["image_id"].n_unique()


def test_deterministic(inputs, sample):
    pairs, positives, images = inputs
    again = sample_vqa(pairs.reverse(), positives.sample(fraction=1.0, shuffle=True, seed=1), images.reverse(),
                       seed=SEED)
    assert again.questions.equals(sample.questions)
    assert again.pool.equals(sample.pool)
    other = sample_vqa(*inputs, seed=SEED + 1)
    assert not other.questions.equals(sample.questions)


def test_default_targets_reproduce_paper_size():
    assert DEFAULT_TARGETS == paper_targets()
    total = sum(sum(v.values()) for v in DEFAULT_TARGETS.values())
    assert abs(total - 377_391) < 48 * 3  # rounding per template only
    assert DEFAULT_TARGETS["train"]["ct_ratio_1"] == 8000 and DEFAULT_TARGETS["valid"]["viewpos_1"] == 664
    assert DEFAULT_TARGETS["test"]["base_2"] == 326


def test_bad_split_rejected(inputs):
    pairs, positives, images = inputs
    with pytest.raises(ValueError, match="unknown split"):
        sample_vqa(pairs, positives, images.with_columns(split=pl.lit("holdout")), seed=0)
