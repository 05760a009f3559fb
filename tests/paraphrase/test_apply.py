"""Pools applied to records: MIMIC-CXR-VQA question frames and EHRXQA record dicts."""

import sqlite3

import polars as pl
import pytest

from ehrxqa_pipeline.paraphrase import rules
from ehrxqa_pipeline.paraphrase.apply import AlignmentError, apply_paraphrases, choose_vqa_phrasings, slot_fills
from ehrxqa_pipeline.paraphrase.placeholders import leftovers
from ehrxqa_pipeline.paraphrase.pools import POOL_SCHEMA
from ehrxqa_pipeline.paraphrase.split import split_pool
from ehrxqa_pipeline.paraphrase.templates import all_templates, ehrxqa_templates
from ehrxqa_pipeline.questions.vqa_records import build_records
from ehrxqa_pipeline.questions.vqa_sampling import sample_vqa
from ehrxqa_pipeline.questions.vqa_templates import TEMPLATES
from tests.questions import vqa_fixture


def rule_pools(templates) -> pl.DataFrame:
    rows = [{"dataset": t.dataset, "template_id": t.template_id, "template_key": t.key, "text": text,
             "source": "rule-based", "cluster": c, "side": side}
            for t in templates for text, c, side in split_pool(rules.variants(t)[:12])]
    return pl.DataFrame(rows, schema=POOL_SCHEMA)


@pytest.fixture(scope="module")
def pools():
    return rule_pools(all_templates())


@pytest.fixture(scope="module")
def vqa_sample():
    pairs, positives, images = vqa_fixture()
    return sample_vqa(pairs, positives, images, seed=1).questions, images


def test_vqa_records_use_pool_phrasings(pools, vqa_sample):
    questions, images = vqa_sample
    phrased = choose_vqa_phrasings(questions, pools, seed=5)
    assert phrased.height == questions.height
    sides = {(r["template_key"], r["side"]) for r in pools.iter_rows(named=True)}
    for key, split, para_type in phrased.select("template_key", "split", "para_type").unique().iter_rows():
        has_pool = (key, "train" if split == "train" else "test") in sides
        assert para_type == ("rule-based" if has_pool else "original"), (key, split)
    assert phrased.equals(choose_vqa_phrasings(questions, pools, seed=5))  # deterministic
    assert not phrased["paraphrase"].equals(choose_vqa_phrasings(questions, pools, seed=6)["paraphrase"])
    records = build_records(phrased, images)
    side = {r["text"]: r["side"] for r in pools.iter_rows(named=True)}
    for split, rows in records.items():
        for r in rows:
            assert not leftovers(r["question"]), r
            if r["template"] in side:  # else: an empty pool side, the template's own wording
                assert side[r["template"]] == ("train" if split == "train" else "test")
            for vals in r["template_arguments"]["object"].values():
                assert vals in r["question"]


def test_vqa_phrasing_equal_to_template_gives_the_unparaphrased_question(vqa_sample):
    questions, images = vqa_sample
    original = {t.key: t.text for t in TEMPLATES}
    same = questions.with_columns(paraphrase=pl.col("template_key").replace_strict(original, return_dtype=pl.String))
    plain, phrased = build_records(questions, images), build_records(same, images)
    assert plain == phrased


def test_empty_pool_keeps_the_template(vqa_sample):
    questions, _ = vqa_sample
    phrased = choose_vqa_phrasings(questions, pl.DataFrame(schema=POOL_SCHEMA), seed=0)
    assert set(phrased["para_type"]) == {"original"}


@pytest.fixture(scope="module")
def ehrxqa_records(tmp_path_factory):
    from ehrxqa_pipeline.questions.ehrxqa import fill_items
    from tests.ehrxqa import build_db

    conn = sqlite3.connect(build_db(tmp_path_factory.mktemp("para") / "mimic_iv_cxr.db"))
    templates = tuple(t for t in __import__("ehrxqa_pipeline.questions.ehrxqa", fromlist=["CATALOG"]).CATALOG
                      if not t.scope.startswith("TABLE"))
    items = fill_items(conn, 0, templates=templates)
    conn.close()
    return [dict(i.record(), split=("train", "valid", "test")[n % 3]) for n, i in enumerate(items)]


def test_every_ehrxqa_template_aligns(ehrxqa_records):
    assert len({r["template_index"] for r in ehrxqa_records}) == len(ehrxqa_templates())
    for r in ehrxqa_records:
        fills = slot_fills(r)
        assert fills, r["q_tag"]


def test_ehrxqa_records_paraphrased(pools, ehrxqa_records):
    from ehrxqa_pipeline.paraphrase.apply import fill

    out = apply_paraphrases(ehrxqa_records, pools, seed=3)
    assert out == apply_paraphrases(ehrxqa_records, pools, seed=3)
    by_side = {}
    for r in pools.iter_rows(named=True):
        by_side.setdefault((r["template_id"], r["side"]), []).append(r["text"])
    changed = 0
    for rec, new in zip(ehrxqa_records, out):
        keys = list(new)
        assert keys.index("question") == keys.index("template") - 1 and keys.index("para_type") == keys.index("tag") + 1
        assert new["template"] == rec["template"]
        assert not leftovers(new["question"]) and new["question"] == new["question"].lower()
        for k, v in rec["value"].items():
            if "{" + k + "}" in rec["q_tag"] and isinstance(v, int):
                assert str(v) in new["question"]
        for obj in rec["v_tag"]["object"]:
            assert obj in new["question"]
        tid, fills = f"ehrxqa/{rec['template_index']}", slot_fills(rec)
        side = "train" if rec["split"] == "train" else "test"
        if by_side.get((tid, side)):
            assert new["para_type"] == "rule-based"
            assert new["question"] in {fill(p, fills) for p in by_side[(tid, side)]}
        else:
            assert new["para_type"] == "original" and new["question"] == rec["template"]
        changed += new["question"] != rec["template"]
    assert changed > len(out) * 0.8


def test_existing_question_and_para_type_fields_are_replaced_in_place(pools, ehrxqa_records):
    rec = dict(ehrxqa_records[0])
    release = {"db_id": rec["db_id"], "split": "test", "id": 0, "question": rec["template"],
               "template": rec["template"], "q_tag": rec["q_tag"], "value": rec["value"], "t_tag": rec["t_tag"],
               "o_tag": rec["o_tag"], "v_tag": rec["v_tag"], "tag": rec["tag"], "para_type": "none",
               "template_index": rec["template_index"]}
    (new,) = apply_paraphrases([release], pools, seed=0)
    assert list(new) == list(release) and new["para_type"] == "rule-based"


def test_record_without_pool_or_with_a_wrong_template(ehrxqa_records):
    rec = dict(ehrxqa_records[0])
    (kept,) = apply_paraphrases([rec], pl.DataFrame(schema=POOL_SCHEMA), seed=0)
    assert kept["question"] == rec["template"] and kept["para_type"] == "original"
    bad = dict(rec, template="something else entirely")
    with pytest.raises(AlignmentError, match="does not match"):
        slot_fills(bad)


def test_database_values_with_brackets_are_not_leftovers(pools):
    """Real procedure titles carry brackets ("esophagogastroduodenoscopy [egd] with closed biopsy")."""
    from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX, TimeFilter

    t = BY_INDEX[5010]  # procedure x attribute in an object, same period
    name = "esophagogastroduodenoscopy [egd] with closed biopsy"
    values = {"patient_id": 7, "procedure_name": name, "global1": TimeFilter("rel-hosp-last"),
              "object_1": "right apical zone", "attribute_1": "interstitial lung disease"}
    rec = {"template": t.question(values), "q_tag": t.text, "template_index": t.index, "split": "test",
           "value": {"patient_id": 7, "procedure_name": name}, "v_tag": {"object": ["right apical zone"],
                                                                         "attribute": ["interstitial lung disease"]}}
    (new,) = apply_paraphrases([rec], pools, seed=0)
    assert new["para_type"] == "rule-based" and name in new["question"]


def test_release_record_of_a_template_without_pool_keeps_its_wording(pools):
    """Release records carry no template_index: a table template is found by its q_tag and, having no pool,
    keeps the filled template; an unknown q_tag is still an error."""
    from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX

    rec = {"template": "what is the intake method of heparin?", "q_tag": BY_INDEX[0].text, "split": "test"}
    (kept,) = apply_paraphrases([rec], pools, seed=0)
    assert kept["question"] == rec["template"] and kept["para_type"] == "original"
    with pytest.raises(AlignmentError, match="unknown q_tag"):
        apply_paraphrases([dict(rec, q_tag="what is {nothing}?")], pools, seed=0)
