"""Published record format and the JSON writer."""

from __future__ import annotations

import json

import polars as pl
import pytest

from ehrxqa_pipeline.questions.mimic_cxr_vqa.records import RECORD_FIELDS, build_records, record_frame, write_split_json
from ehrxqa_pipeline.questions.mimic_cxr_vqa.sampling import SamplingConfig, sample_vqa
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import ARGUMENT_COLUMNS, TEMPLATES
from tests.questions import vqa_fixture


def _questions(rows):
    base = {c: None for c in ARGUMENT_COLUMNS}
    return pl.DataFrame([{"split": s, "template_index": i, "template_key": k, "image_id": img, **base, **args,
                          "answer": ans} for s, i, k, img, args, ans in rows],
                        schema={"split": pl.String, "template_index": pl.Int32, "template_key": pl.String,
                                "image_id": pl.String, **{c: pl.String for c in ARGUMENT_COLUMNS},
                                "answer": pl.List(pl.String)})


IMAGES = pl.DataFrame({"image_id": ["a", "b"], "subject_id": [10000032, 10000033], "study_id": [50414267, 51]},
                      schema={"image_id": pl.String, "subject_id": pl.Int64, "study_id": pl.Int64}).with_columns(
    image_path=pl.lit("p10/p10000032/s50414267/a.jpg"))
QUESTIONS = _questions([
    ("test", 29, "base_45", "a", {"object_1": "left lung", "object_2": "right lung", "attribute_1": "pneumonia"},
     ["no"]),
    ("test", 44, "gender_1", "b", {"gender": "F"}, ["yes"]),
    ("valid", 4, "base_4", "a", {"object_1": "left lung", "category_1": "disease", "category_2": "device"},
     ["yes"]),
])


def test_record_fields_and_values():
    recs = build_records(QUESTIONS, IMAGES)
    assert list(recs) == ["test", "valid"]
    first = recs["test"][0]
    assert tuple(first) == RECORD_FIELDS
    assert first == {
        "split": "test", "idx": 0, "subject_id": 10000032, "study_id": 50414267, "image_id": "a",
        "image_path": "p10/p10000032/s50414267/a.jpg",
        "question": "Are both the left lung and the right lung related to pneumonia?",
        "semantic_type": "verify", "content_type": "presence",
        "template": "Are both the ${object_1} and the ${object_2} related to ${attribute}?",
        "template_program": "program_29",
        "template_arguments": {"object": {"0": "left lung", "1": "right lung"}, "attribute": {"0": "pneumonia"},
                               "category": {}, "viewpos": {}, "gender": {}},
        "answer": ["no"]}
    assert recs["test"][1]["idx"] == 1 and recs["test"][1]["template_arguments"]["gender"] == {"0": "F"}
    assert recs["test"][1]["question"] == "Is this patient female?"
    valid = recs["valid"][0]
    assert valid["idx"] == 0 and valid["template_arguments"]["category"] == {"0": "disease", "1": "device"}
    assert valid["question"] == "Are there any diseases or devices in the left lung?"


def test_ids_are_json_integers_and_write_is_deterministic(tmp_path):
    recs = build_records(QUESTIONS, IMAGES)["test"]
    path = tmp_path / "out" / "test.json"
    write_split_json(recs, path)
    text = path.read_text()
    assert '"subject_id": 10000032,' in text and text.startswith('[\n  {\n    "split": "test",')
    assert json.loads(text) == recs
    write_split_json(recs, path)
    assert path.read_text() == text
    assert [p.name for p in path.parent.iterdir()] == ["test.json"]  # no temporary file left


def test_failed_write_keeps_previous_file(tmp_path):
    path = tmp_path / "test.json"
    write_split_json([{"a": 1}], path)
    with pytest.raises(TypeError):
        write_split_json([{"a": object()}], path)
    assert json.loads(path.read_text()) == [{"a": 1}]
    assert [p.name for p in tmp_path.iterdir()] == ["test.json"]


def test_unknown_image_or_template_rejected():
    with pytest.raises(ValueError, match="missing from images"):
        record_frame(QUESTIONS, IMAGES.filter(pl.col("image_id") == "a"))
    bad = QUESTIONS.with_columns(template_key=pl.lit("base_99"))
    with pytest.raises(ValueError, match="unknown template keys"):
        record_frame(bad, IMAGES)


def test_records_of_a_sample():
    pairs, positives, images = vqa_fixture(n_images=90, seed=2)
    s = sample_vqa(pairs, positives, images, seed=4,
                   config=SamplingConfig(targets={sp: {t.key: 5 for t in TEMPLATES} for sp in ("train", "test")}))
    recs = build_records(s.questions, images)
    assert sum(len(v) for v in recs.values()) == s.questions.height
    for split, rows in recs.items():
        assert [r["idx"] for r in rows] == list(range(len(rows)))
        assert all(r["split"] == split and "${" not in r["question"] for r in rows)
        assert all(isinstance(r["subject_id"], int) and isinstance(r["study_id"], int) for r in rows)


def test_write_splits_rewrites_only_the_split_whose_records_changed(tmp_path, monkeypatch):
    """``write_splits`` with a memo: a second call writes nothing; a changed test answer rewrites test.json only,
    a file altered since is written again, and the files equal ``write_split_json`` of ``build_records``. An
    empty split gets an empty file; a leftover placeholder is reported per split."""
    from ehrxqa_pipeline.questions.mimic_cxr_vqa import records

    out, memo, splits = tmp_path / "out", tmp_path / "cache" / "memo.json", ("train", "valid", "test")
    first = records.write_splits(QUESTIONS, IMAGES, out, splits, memo=memo)
    assert {s: f["records"] for s, f in first.items()} == {"train": 0, "valid": 1, "test": 2}
    assert first["test"]["types"]["answer"] == "list" and first["train"]["types"] == {}
    written, real = [], records.write_split_json
    monkeypatch.setattr(records, "write_split_json", lambda recs, path: written.append(path.name) or real(recs, path))
    assert records.write_splits(QUESTIONS, IMAGES, out, splits, memo=memo) == first and written == []
    edited = QUESTIONS.with_columns(answer=pl.when(pl.col("template_key") == "gender_1").then(pl.lit(["no"]))
                                    .otherwise(pl.col("answer")))
    (out / "valid.json").write_text("[]\n")
    records.write_splits(edited, IMAGES, out, splits, memo=memo)
    assert sorted(written) == ["test.json", "valid.json"]
    fresh = build_records(edited, IMAGES)
    for split in splits:
        real(fresh.get(split, []), tmp_path / "fresh.json")
        assert (out / f"{split}.json").read_bytes() == (tmp_path / "fresh.json").read_bytes(), split
    texts = {t.key: t.text for t in TEMPLATES}
    phrased = QUESTIONS.with_columns(paraphrase=pl.col("template_key").replace_strict(texts, return_dtype=pl.String)
                                     .str.replace("this patient", "this ${patient}", literal=True))
    unfilled = records.write_splits(phrased, IMAGES, tmp_path / "x", splits)
    assert unfilled["test"]["placeholder_problems"] == ["test/1: Is this ${patient} female?"]
    assert unfilled["valid"]["placeholder_problems"] == []


def test_write_side_reads_a_side_only_when_its_inputs_or_files_changed(tmp_path):
    """``write_side``: the side's questions are loaded only when its inputs digest is not the one its files were
    written from or a file was altered since; the facts are ``write_splits``'s, with its para_type counts."""
    from ehrxqa_pipeline.questions.mimic_cxr_vqa import records

    out, memo, loads = tmp_path / "out", tmp_path / "cache" / "memo.json", []
    phrased = QUESTIONS.with_columns(para_type=pl.Series(["llm", "original", "llm"]))

    def load():
        loads.append(1)
        return phrased, IMAGES

    first = records.write_side(load, "inputs-1", out, ("valid", "test"), memo)
    assert len(loads) == 1 and first == records.write_splits(phrased, IMAGES, tmp_path / "x", ("valid", "test"))
    assert first["test"]["para_types"] == {"llm": 1, "original": 1} and first["valid"]["para_types"] == {"llm": 1}
    assert records.write_side(load, "inputs-1", out, ("valid", "test"), memo) == first and len(loads) == 1
    assert records.write_side(load, "inputs-2", out, ("valid", "test"), memo) == first and len(loads) == 2
    (out / "test.json").write_text("[]\n")  # altered since: read and written again
    assert records.write_side(load, "inputs-2", out, ("valid", "test"), memo) == first and len(loads) == 3
    assert (out / "test.json").read_bytes() == (tmp_path / "x" / "test.json").read_bytes()


def test_merged_types_of_the_splits_are_the_field_types_of_all_their_records():
    """The release asset's column schema comes from the per-split types its memo keeps (``merged_types``)."""
    from ehrxqa_pipeline.questions.mimic_cxr_vqa.records import field_types, merged_types

    parts = [[{"a": None, "b": 1}], [], [{"a": "x", "c": None}, {"c": [1], "b": None}]]
    assert merged_types(field_types(p) for p in parts) == field_types([r for p in parts for r in p]) == {
        "a": "str", "b": "int", "c": "list"}
