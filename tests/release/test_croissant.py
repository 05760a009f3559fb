"""release/croissant.json over a small hand-made release folder: the document, its offline validation by
mlcroissant, and planted defects the validation must report."""

import hashlib
import json
import shutil
import socket

import pytest

from ehrxqa_pipeline.questions.ehrxqa.records import RECORD_FIELDS as EHRXQA_RECORD_FIELDS
from ehrxqa_pipeline.questions.mimic_cxr_vqa.records import RECORD_FIELDS as VQA_RECORD_FIELDS
from ehrxqa_pipeline.release import croissant, hf, tables
from tests.release.helpers import FUNNELS, REJECTED, SPLITS, make_release

CODE = {"package": "ehrxqa-pipeline", "version": "0.1.0", "sha256": "ab" * 32, "files": 3, "dirs": ["assets"]}
SOURCES = {"releases": {"mimiciv": "3.1", "mimic-cxr-jpg": "2.1.0", "chest-imagenome": "1.0.0"}, "synthetic": True,
           "generator": {"seed": 3}, "digest": "cd" * 32}
CONFIG = {"paraphraser": {"datasets": {"ehrxqa": {"templates": {"llm": 2, "offline": 1, "original": 4}}},
                          "model": "m1"}}
VOCABULARY = ["abdomen", "left lung", "no", "right lung", "yes"]
# JSON type of a value -> the Croissant dataType its field must have (objects: sc:Text, JSON text in parquet)
TYPES = {str: "sc:Text", int: "sc:Integer", bool: "sc:Boolean", dict: "sc:Text", type(None): "sc:Text"}


def _ehrxqa_record(split: str, i: int, answer: list) -> dict:
    two_images = i % 2 == 1
    return {"db_id": "mimic_iv_cxr", "split": split, "id": i, "question": f"question {i}?",
            "template": f"question {i}?", "query": None if i == 2 else "select 1", "value": {"patient_id": 10 + i},
            "q_tag": "what is {patient_id}?", "t_tag": ["", "", "", "", ""],
            "o_tag": {"comparison": {"nlq": "greater", "sql": ">", "type": "greater", "sql_pattern": "[comparison]"}},
            "v_tag": {"object": [], "category": [], "attribute": [], **({"comparison": ["resolved"]} if two_images
                                                                         else {})},
            "tag": "what is {patient_id}?", "para_type": "original", "is_impossible": i == 2, "answer": answer,
            "resolved_value": {"study_id1": 5, "study_id2": 6} if two_images else {}}


def _vqa_record(split: str, i: int, answer: list) -> dict:
    return {"split": split, "idx": i, "subject_id": 100 + i, "study_id": 500 + i, "image_id": f"dicom-{i}",
            "image_path": f"p10/p{100 + i}/s{500 + i}/dicom-{i}.jpg", "question": "Is there anything?",
            "semantic_type": "verify", "content_type": "presence", "template": "Is there ${object}?",
            "template_program": "program_1",
            "template_arguments": {"object": {"0": "left lung"}, "attribute": {}, "category": {}, "viewpos": {},
                                   "gender": {}}, "answer": answer}


def _dump(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2) + "\n")


def make_full_release(root):
    """make_release's folder with records in the full released formats and every file croissant.json lists."""
    rel = make_release(root)
    answers = {"train": [[1], [0], ["senna", 3.5]], "valid": [[]], "test": [["yes"], [12]]}
    for split in SPLITS:
        _dump(rel / "ehrxqa" / f"{split}.json", [_ehrxqa_record(split, i, a) for i, a in enumerate(answers[split])])
        _dump(rel / "mimic-cxr-vqa" / f"{split}.json",
              [_vqa_record(split, i, [str(x) for x in a]) for i, a in enumerate(answers[split])])
    _dump(rel / "ehrxqa" / "template_catalog.json", {"0": {"question_template": "what is {patient_id}?"}})
    _dump(rel / "mimic-cxr-vqa" / "answer_vocabulary.json", VOCABULARY)
    for db in ("silver", "gold"):
        (rel / "ehrxqa" / "databases" / db).mkdir(parents=True)
        (rel / "ehrxqa" / "databases" / db / "mimic_iv_cxr.db").write_bytes(f"SQLite {db}".encode())
        _dump(rel / "ehrxqa" / "databases" / db / "tables.json", [{"db_id": "mimic_iv_cxr"}])
        (rel / "ehrxqa" / "databases" / db / "mimic_iv_cxr.duckdb").write_bytes(b"not reproducible")
    (rel / "datasheet.md").write_text("# Datasheet\n")
    (rel / "LICENSE.txt").write_text("license\n")
    tables.write_tables(rel, tables.gather(rel, FUNNELS, REJECTED), "tables\n")
    hf.write_export(rel, SOURCES, CODE)  # the parquet copies the record sets read
    return rel


def _build(rel):
    gathered = json.loads((rel / tables.OUT_DIR / "tables.json").read_text())
    return croissant.build_croissant(rel, tables=gathered, sources=SOURCES, code=CODE, seed=7, config=CONFIG)


@pytest.fixture(scope="module")
def built_release(tmp_path_factory):
    rel = make_full_release(tmp_path_factory.mktemp("croissant"))
    croissant.write_croissant(_build(rel), rel)
    return rel


@pytest.fixture
def release(built_release, tmp_path):
    """A copy of the module's release folder for each test to change (building one takes about 0.5 s)."""
    return shutil.copytree(built_release, tmp_path / "release")


@pytest.fixture
def offline(monkeypatch):
    """No network: any connection attempt fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def _doc(rel):
    return json.loads((rel / croissant.CROISSANT_FILE).read_text())


def _errors(problems):
    return [p for p in problems if p.startswith("error:")]


def test_distribution_lists_every_file_with_its_real_sha256(release):
    doc = _doc(release)
    files = {f["contentUrl"]: f for f in doc["distribution"]}
    assert set(files) == {rel for rel, _, _ in croissant.DISTRIBUTION}
    assert {f"{d}/{s}.json" for d in ("ehrxqa", "mimic-cxr-vqa") for s in SPLITS} <= set(files)
    assert {f"hf/{d}/{s}.parquet" for d in ("ehrxqa", "mimic-cxr-vqa") for s in SPLITS} <= set(files)
    for rel, f in files.items():
        data = (release / rel).read_bytes()
        assert f["sha256"] == hashlib.sha256(data).hexdigest(), rel
        assert f["contentSize"] == f"{len(data)} B"
        assert not rel.startswith("/")
    assert not any(rel.endswith(".duckdb") for rel in files)  # bytes not reproducible: named in the description
    assert "mimic_iv_cxr.duckdb" in doc["description"]


def test_record_sets_have_a_typed_field_per_record_key(release):
    sets = {r["@id"]: r for r in _doc(release)["recordSet"]}
    for folder, (prefix, _, _, _) in croissant.DATASETS.items():
        expected_keys = EHRXQA_RECORD_FIELDS if folder == "ehrxqa" else VQA_RECORD_FIELDS
        for split in SPLITS:
            records = json.loads((release / folder / f"{split}.json").read_text())
            fields = {f["name"]: f for f in sets[f"{prefix}_{split}"]["field"]}
            assert tuple(fields) == expected_keys
            for record in records:
                assert tuple(record) == tuple(fields)
                for name, value in record.items():
                    f = fields[name]
                    assert f["source"] == {"fileObject": {"@id": f"hf/{folder}/{split}.parquet"},
                                           "extract": {"column": name}}
                    mixed = isinstance(value, list) and not all(isinstance(v, str) for v in value)
                    if isinstance(value, list) and name != "answer" or folder == "mimic-cxr-vqa" and name == "answer":
                        assert f.get("isArray") is True and f["dataType"] == "sc:Text", name  # strings
                    else:
                        assert "isArray" not in f, name
                        assert f["dataType"] == ("sc:Text" if isinstance(value, list) else TYPES[type(value)]), name
                    if isinstance(value, dict) or mixed:
                        assert "here JSON text" in f["description"], name
            assert fields["split"]["references"] == {"field": {"@id": "splits/name"}}


def test_splits_follow_the_croissant_split_record_set(release):
    splits = next(r for r in _doc(release)["recordSet"] if r["@id"] == "splits")
    assert splits["dataType"] == "cr:Split"
    assert splits["data"] == [{"splits/name": "train", "splits/url": "cr:TrainingSplit"},
                              {"splits/name": "valid", "splits/url": "cr:ValidationSplit"},
                              {"splits/name": "test", "splits/url": "cr:TestSplit"}]


def test_rai_fields_come_from_the_datasheet_and_the_license(release):
    from ehrxqa_pipeline.release import datasheet, license_note

    doc = _doc(release)
    rai = {k: v for k, v in doc.items() if k.startswith("rai:")}
    for key in ("rai:dataCollection", "rai:dataCollectionType", "rai:dataPreprocessingProtocol",
                "rai:dataAnnotationProtocol", "rai:dataAnnotationPlatform", "rai:dataLimitations", "rai:dataBiases",
                "rai:dataUseCases", "rai:personalSensitiveInformation", "rai:dataSocialImpact",
                "rai:dataReleaseMaintenancePlan"):
        assert rai.get(key), key
        assert all(isinstance(v, str) and v.strip() for v in (rai[key] if isinstance(rai[key], list) else [rai[key]]))
    assert datasheet.ACQUISITION in rai["rai:dataCollection"]
    assert any("machine-generated" in a.lower() for a in rai["rai:dataAnnotationPlatform"])
    assert any("paraphrase review" in a and "2 templates by an OpenAI-compatible LLM (model m1)" in a
               for a in rai["rai:dataAnnotationProtocol"])
    assert datasheet.TASKS in " ".join(rai["rai:dataUseCases"])
    assert any("dataset hubs" in u for u in rai["rai:dataUseCases"])  # the uses the license forbids
    assert datasheet.CONFIDENTIAL in rai["rai:personalSensitiveInformation"]
    assert any("synthetic source" in x for x in rai["rai:dataLimitations"])
    assert any("all_images 1,234" in p for p in rai["rai:dataPreprocessingProtocol"])  # the funnel's counts
    assert doc["license"] == license_note.LICENSE_URL
    assert "hubs" in doc["conditionsOfAccess"]
    assert doc["version"] == "0.1.0+abababababab"


def test_mlcroissant_validates_it_offline_with_no_error(release, offline, capsys, monkeypatch):
    import logging

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # as in `ehrxqa build` (pytest gives the root logger its own)
    problems = croissant.validate(release)
    assert _errors(problems) == []
    # the one warning: no datePublished, which a release file must not hold (no time)
    assert all("datePublished" in p for p in problems), problems
    # in the check's result, not printed; and the root logger got no handler, through which every library's
    # debug records (Dagster's automation evaluation: hundreds of lines a build) would print
    assert "datePublished" not in capsys.readouterr().err
    assert root.handlers == []


def test_mlcroissant_reads_records_from_the_local_files(release, offline):
    import mlcroissant as mlc

    dataset = mlc.Dataset(jsonld=release / croissant.CROISSANT_FILE)
    vocabulary = [r[f"{croissant.VOCABULARY_ID}/answer"].decode() for r in dataset.records(croissant.VOCABULARY_ID)]
    assert vocabulary == VOCABULARY
    assert [r["splits/name"] for r in dataset.records("splits")] == list(SPLITS)
    # every record of every split, as the JSON file holds it (JSON text parsed back; empty splits: no records)
    for folder, (prefix, _, _, _) in croissant.DATASETS.items():
        for split in SPLITS:
            want = json.loads((release / folder / f"{split}.json").read_text())
            got = list(dataset.records(f"{prefix}_{split}")) if want else []
            assert len(got) == len(want), (folder, split)
            for g, w in zip(got, want):
                for name, value in w.items():
                    x = g[f"{prefix}_{split}/{name}"]
                    x = [v.decode() for v in x] if isinstance(x, list) else x.decode() if isinstance(x, bytes) else x
                    if isinstance(value, dict) or name == "answer" and folder == "ehrxqa":
                        x = json.loads(x)
                    assert x == value, (folder, split, name)


def test_two_builds_of_the_same_folder_give_the_same_bytes(release, tmp_path):
    first = (release / croissant.CROISSANT_FILE).read_bytes()
    croissant.write_croissant(_build(release), release)  # croissant.json itself is not listed, so no loop
    assert (release / croissant.CROISSANT_FILE).read_bytes() == first
    text = first.decode()
    assert str(tmp_path) not in text and "/tmp" not in text


def test_a_missing_file_is_named_when_building(tmp_path):
    rel = make_full_release(tmp_path)
    (rel / "mimic-cxr-vqa" / "answer_vocabulary.json").unlink()
    with pytest.raises(FileNotFoundError, match="mimic-cxr-vqa/answer_vocabulary.json is missing"):
        _build(rel)


def _plant(rel, change):
    doc = _doc(rel)
    change(doc)
    (rel / croissant.CROISSANT_FILE).write_text(croissant.dumps(doc))
    return _errors(croissant.validate(rel))


def _field(doc, record_set, name):
    rs = next(r for r in doc["recordSet"] if r["@id"] == record_set)
    return next(f for f in rs["field"] if f["name"] == name)


def test_a_field_with_a_wrong_data_type_is_an_error(release, offline):
    errors = _plant(release, lambda d: _field(d, "ehrxqa_test", "question").update(dataType="sc:Nonsense"))
    assert any("ehrxqa_test" in e and "question" in e and "dataType" in e for e in errors), errors


def test_a_missing_sha256_is_an_error(release, offline):
    errors = _plant(release, lambda d: d["distribution"][0].pop("sha256"))
    assert any("sha256" in e for e in errors), errors


def test_a_changed_file_is_an_error(release, offline):
    path = release / "ehrxqa" / "test.json"
    path.write_text(path.read_text().replace("question 0?", "question 9?"))
    assert _errors(croissant.validate(release)) == [
        f"error: {croissant.CROISSANT_FILE}: the sha256 of ehrxqa/test.json differs from the file's: the file "
        "changed after croissant.json was written; rematerialize release/croissant"]


def test_a_distribution_entry_for_a_missing_file_is_an_error(release, offline):
    (release / "ehrxqa" / "valid.json").unlink()
    errors = croissant.validate(release)
    assert any("ehrxqa/valid.json, missing from the release folder" in e for e in errors), errors


def test_a_field_reading_a_file_not_in_the_distribution_is_an_error(release, offline):
    errors = _plant(release, lambda d: _field(d, "mimic_cxr_vqa_valid", "idx")["source"].update(
        fileObject={"@id": "mimic-cxr-vqa/nowhere.json"}))
    assert errors, "a source pointing at no FileObject must be reported"


@pytest.mark.parametrize("change", ["reversed", "one_short"])
def test_a_parquet_file_read_otherwise_than_its_json_is_an_error(release, offline, change, monkeypatch):
    """The reader check: a test split's parquet file (its sha256 in croissant.json kept true) whose records come
    in another order (the first one read through mlcroissant differs), or one short (past the one record read:
    the count is the parquet file's)."""
    import pyarrow.parquet as pq

    from ehrxqa_pipeline.hashing import sha256_file

    monkeypatch.setattr(croissant, "READ_RECORDS", 1)
    rel = croissant.parquet_file("ehrxqa", "test")
    table = pq.read_table(release / rel)
    assert table.num_rows > 1
    table = table[::-1] if change == "reversed" else table.slice(0, table.num_rows - 1)
    pq.write_table(table, release / rel)
    doc = _doc(release)
    next(f for f in doc["distribution"] if f.get("contentUrl") == rel)["sha256"] = sha256_file(release / rel)
    (release / croissant.CROISSANT_FILE).write_text(croissant.dumps(doc))
    n = json.loads((release / "ehrxqa" / "test.json").read_text())
    assert _errors(croissant.validate(release)) == [
        f"error: ehrxqa_test: {rel} holds {table.num_rows} records, ehrxqa/test.json {len(n)}, or mlcroissant read "
        "its first 1 in another order or with other id values: "
        "rematerialize release/hf, then release/croissant"]


def test_no_croissant_file_is_an_error(tmp_path):
    assert _errors(croissant.validate(tmp_path)) == [
        f"error: {croissant.CROISSANT_FILE} is missing from {tmp_path.name}/: materialize release/croissant"]
