"""Pools applied to records: MIMIC-CXR-VQA question frames and EHRXQA record dicts."""

import json
import sqlite3

import polars as pl
import pytest

from ehrxqa_pipeline.paraphrase import rules
from ehrxqa_pipeline.paraphrase.apply import PhrasingError, choose_ehrxqa_phrasings, choose_vqa_phrasings
from ehrxqa_pipeline.paraphrase.placeholders import leftovers
from ehrxqa_pipeline.paraphrase.pools import POOL_SCHEMA
from ehrxqa_pipeline.paraphrase.split import split_pool
from ehrxqa_pipeline.paraphrase.templates import all_templates, ehrxqa_templates
from ehrxqa_pipeline.questions.mimic_cxr_vqa.records import build_records
from ehrxqa_pipeline.questions.mimic_cxr_vqa.sampling import sample_vqa
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import TEMPLATES
from ehrxqa_pipeline.questions.wording import PLACEHOLDER, fill, placeholder_name
from ehrxqa_pipeline.rng import generator
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
    # one side's rows (a slice of the release order) get the phrasings the whole frame's rows get
    for start, stop in ((0, 2), (2, questions.height), (1, 3)):
        part = choose_vqa_phrasings(questions[start:stop], pools, seed=5, start=start, total=questions.height)
        assert part.equals(phrased[start:stop]), (start, stop)
    assert not choose_vqa_phrasings(questions[2:], pools, seed=5)["paraphrase"].equals(phrased[2:]["paraphrase"])
    with pytest.raises(ValueError, match="not within a frame"):
        choose_vqa_phrasings(questions, pools, seed=5, start=1, total=questions.height)
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


def _stored(items, splits=("train", "valid", "test")) -> pl.DataFrame:
    """The ehrxqa.questions rows of FilledItems, dealt to the splits in turn."""
    from ehrxqa_pipeline.questions.ehrxqa.records import stored_frame
    from ehrxqa_pipeline.questions.ehrxqa.sampling import Sample, SampledItem

    split_of = {n: splits[n % len(splits)] for n in range(len(items))}
    ordered = sorted(range(len(items)), key=lambda n: splits.index(split_of[n]))
    return stored_frame(Sample([SampledItem.of(items[n], split_of[n], "silver", n) for n in ordered]))


@pytest.fixture(scope="module")
def ehrxqa_items(tmp_path_factory):
    from ehrxqa_pipeline.questions.ehrxqa import CATALOG, fill_items
    from tests.ehrxqa import build_db

    conn = sqlite3.connect(build_db(tmp_path_factory.mktemp("para") / "mimic_iv_cxr.db"))
    items = fill_items(conn, 0, templates=tuple(t for t in CATALOG if not t.scope.startswith("TABLE")))
    conn.close()
    return items


def test_every_ehrxqa_item_stores_the_words_of_each_placeholder(ehrxqa_items):
    assert len({i.template.index for i in ehrxqa_items}) == len(ehrxqa_templates())
    for item in ehrxqa_items:
        names = {placeholder_name(m) for m in PLACEHOLDER.finditer(item.template.text)}
        assert set(item.fills) == names and all(isinstance(w, str) for w in item.fills.values()), item.template.index
        assert fill(item.template.text, item.fills) == item.question


def test_ehrxqa_items_paraphrased(pools, ehrxqa_items):
    frame = _stored(ehrxqa_items)
    out = choose_ehrxqa_phrasings(frame, pools, seed=3)
    assert out.equals(choose_ehrxqa_phrasings(frame, pools, seed=3))
    assert not out["paraphrase"].equals(choose_ehrxqa_phrasings(frame, pools, seed=4)["paraphrase"])
    assert out.select("split", "id").equals(frame.sort("split", "id").select("split", "id"))
    by_side = {}
    for r in pools.sort("text").iter_rows(named=True):
        by_side.setdefault((r["template_id"], r["side"]), []).append(r["text"])
    # the draw, re-derived: a new generator per split, one number per item in id order, into the sorted side
    draws = {s: generator(3, "paraphrase.apply.ehrxqa").random(n)
             for s, n in frame.group_by("split").len().iter_rows()}
    item_of = {(s, i): ehrxqa_items[n] for n, (s, i) in enumerate(_stored_keys(ehrxqa_items))}
    changed = 0
    for row in out.iter_rows(named=True):
        item = item_of[(row["split"], row["id"])]
        phrasings = by_side.get((f"ehrxqa/{row['template_index']}", "train" if row["split"] == "train" else "test"))
        assert not leftovers(row["paraphrase"]) and row["paraphrase"] == row["paraphrase"].lower()
        if phrasings:
            u = draws[row["split"]][row["id"]]
            assert row["para_type"] == "rule-based"
            assert row["paraphrase"] == fill(phrasings[int(u * len(phrasings))], item.fills)
        else:
            assert row["para_type"] == "original" and row["paraphrase"] == row["question"]
        for v in item.record()["value"].values():
            assert str(v) in row["paraphrase"]
        changed += row["paraphrase"] != row["question"]
    assert changed > out.height * 0.8


def _stored_keys(items, splits=("train", "valid", "test")) -> list[tuple[str, int]]:
    """(split, id) of each item as ``_stored`` deals them."""
    seen = dict.fromkeys(splits, 0)
    keys = []
    for n in range(len(items)):
        s = splits[n % len(splits)]
        keys.append((s, seen[s]))
        seen[s] += 1
    return keys


def test_release_records_carry_the_phrasing_and_the_template(pools, ehrxqa_items):
    from ehrxqa_pipeline.questions.ehrxqa.records import RECORD_FIELDS, build_records

    records = build_records(choose_ehrxqa_phrasings(_stored(ehrxqa_items), pools, seed=0))
    rec = records["test"][0]
    assert tuple(rec) == RECORD_FIELDS and rec["para_type"] == "rule-based" and rec["question"] != rec["template"]
    plain = build_records(choose_ehrxqa_phrasings(_stored(ehrxqa_items), pl.DataFrame(schema=POOL_SCHEMA), seed=0))
    assert all(r["para_type"] == "original" and r["question"] == r["template"] for rs in plain.values() for r in rs)


def _one_item(template, values: dict, split: str = "test") -> pl.DataFrame:
    from ehrxqa_pipeline.questions.ehrxqa.catalog import slot_words

    return pl.DataFrame([{"split": split, "id": 0, "template_index": template.index, "question": template.question(values),
                          "fills": json.dumps(slot_words(template.text, values))}])


def test_database_values_with_brackets_are_not_leftovers(pools):
    """Real procedure titles carry brackets ("esophagogastroduodenoscopy [egd] with closed biopsy")."""
    from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX, TimeFilter

    t = BY_INDEX[5010]  # procedure x attribute in an object, same period
    name = "esophagogastroduodenoscopy [egd] with closed biopsy"
    values = {"patient_id": 7, "procedure_name": name, "global1": TimeFilter("rel-hosp-last"),
              "object_1": "right apical zone", "attribute_1": "interstitial lung disease"}
    (row,) = choose_ehrxqa_phrasings(_one_item(t, values), pools, seed=0).iter_rows(named=True)
    assert row["para_type"] == "rule-based" and name in row["paraphrase"] and row["paraphrase"] != row["question"]


def test_a_table_template_keeps_its_wording(pools):
    from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX

    t = BY_INDEX[0]
    (row,) = choose_ehrxqa_phrasings(_one_item(t, {"drug_name": "heparin"}), pools, seed=0).iter_rows(named=True)
    assert row["paraphrase"] == row["question"] == "what is the intake method of heparin?"
    assert row["para_type"] == "original"


@pytest.mark.parametrize("phrasing, error", [
    ("is {patient_id} seen in the ${object_2}?", r"ehrxqa/5010: .* placeholder its template does not have"),
    ("has_verb ${object} {patient_id}} [time_filter_global1] ${attribute} {procedure_name}?", "marks left"),
])
def test_a_phrasing_that_does_not_fit_the_item_is_an_error(phrasing, error):
    from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX, TimeFilter

    t = BY_INDEX[5010]
    values = {"patient_id": 7, "procedure_name": "x", "global1": TimeFilter("rel-hosp-last"), "object_1": "left lung",
              "attribute_1": "pneumonia"}
    pools = pl.DataFrame([{"dataset": "ehrxqa", "template_id": "ehrxqa/5010", "template_key": None, "text": phrasing,
                           "source": "llm", "cluster": 0, "side": "test"}], schema=POOL_SCHEMA)
    with pytest.raises(PhrasingError, match=error):
        choose_ehrxqa_phrasings(_one_item(t, values), pools, seed=0)
