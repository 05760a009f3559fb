"""release/hf (``ehrxqa_pipeline.release.hf``) from a hand-made release: Hugging Face ``datasets`` loads the
parquet offline and every decoded record equals its JSON record, the card is what the spec asks, two writes give
the same bytes, a record that does not fit the schema is named, and the asset check's comparison finds a change."""

import json
import re
import shutil

import pyarrow.parquet as pq
import pytest
import yaml

from ehrxqa_pipeline.questions.ehrxqa.records import RECORD_FIELDS as EHRXQA_FIELDS
from ehrxqa_pipeline.questions.mimic_cxr_vqa.records import RECORD_FIELDS as VQA_FIELDS
from ehrxqa_pipeline.release import hf
from ehrxqa_pipeline.release.license_note import LICENSE_URL
from tests.release.helpers import SPLITS, offline_datasets

SOURCES = {"releases": {"mimiciv": "2.2", "mimic-cxr-jpg": "2.0.0", "chest-imagenome": "1.0.0"}, "synthetic": True}
CODE = {"package": "ehrxqa-pipeline", "version": "0.1.0", "sha256": "0123456789ab" + "0" * 52}


def _ehrxqa(split: str, i: int, **over) -> dict:
    rec = {"db_id": "mimic_iv_cxr", "split": split, "id": i, "question": f"question {i} é?", "template": f"t {i}",
           "query": f"select {i}", "value": {"patient_id": 10000032 + i} if i % 2 else {"drug_name": "senna"},
           "q_tag": "q {x}", "t_tag": ["abs-year-in", "", "", "", ""], "o_tag": {} if i % 2 else {
               "agg": {"nlq": "average", "sql": "avg", "type": "avg", "sql_pattern": "[agg]"}},
           "v_tag": {"object": ["left lung"], "category": [], "attribute": []}, "tag": "q {x} [agg:avg]",
           "para_type": "rule-based", "is_impossible": False, "answer": [1], "resolved_value": {}}
    return {**rec, **over}


def _vqa(split: str, i: int, **over) -> dict:
    rec = {"split": split, "idx": i, "subject_id": 14568024 + i, "study_id": 58065931, "image_id": f"179bfa55-{i}",
           "image_path": f"p14/p14568024/s58065931/179bfa55-{i}.jpg", "question": f"Is there x {i}?",
           "semantic_type": "verify", "content_type": "presence", "template": "Is there ${object}?",
           "template_program": "program_1", "template_arguments": {
               "object": {"0": "right lower lung zone"} if i % 2 else {}, "attribute": {}, "category": {"0": "x"},
               "viewpos": {}, "gender": {}}, "answer": ["no"] if i % 2 else ["left lung", "right lung"]}
    return {**rec, **over}


# Awkward values on purpose: answers mixing strings, integers and floats (5.0 stays a float), an empty answer, an
# unanswerable item (query null), keys varying by template, large ids, non-ASCII text; an empty split.
RECORDS = {
    "ehrxqa": {
        "train": [_ehrxqa("train", 0, answer=["a", 2, 5.0, 1e-07]), _ehrxqa("train", 1, answer=[]),
                  _ehrxqa("train", 2, query=None, is_impossible=True, answer=[], para_type="original"),
                  _ehrxqa("train", 3, resolved_value={"study_id1": 58065931, "study_id2": 50000001},
                          answer=[0.123456])],
        "valid": [_ehrxqa("valid", 0, answer=["2105-12-31 23:59:00"])],
        "test": [_ehrxqa("test", 0, answer=[13843089, 14462572], resolved_value={"study_id": 58065931}),
                 _ehrxqa("test", 1, answer=["ü ✓"])],
    },
    "mimic-cxr-vqa": {
        "train": [_vqa("train", i) for i in range(3)],
        "valid": [],
        "test": [_vqa("test", 0), _vqa("test", 1, answer=[])],
    },
}


def make_release(root, records=RECORDS):
    """``root``/release with the question files written as the release assets write them (indented JSON lists)."""
    release = root / "release"
    for folder, splits in records.items():
        (release / folder).mkdir(parents=True, exist_ok=True)
        for split, recs in splits.items():
            (release / folder / f"{split}.json").write_text(json.dumps(recs, indent=4, ensure_ascii=False) + "\n")
    return release


@pytest.fixture(scope="module")
def built_release(tmp_path_factory):
    folder = make_release(tmp_path_factory.mktemp("hf"))
    hf.write_export(folder, SOURCES, CODE)
    return folder


@pytest.fixture
def release(built_release, tmp_path):
    """A copy of the module's exported release for each test to change."""
    return shutil.copytree(built_release, tmp_path / "release")


def test_the_schemas_name_every_record_field():
    assert tuple(hf.EHRXQA.schema.names) == EHRXQA_FIELDS
    assert tuple(hf.MIMIC_CXR_VQA.schema.names) == VQA_FIELDS
    with pytest.raises(RuntimeError, match=r"give every record field a kind"):
        hf._fields(("a", "b"), {"a": hf.STRING}, "x")


@pytest.mark.parametrize("folder", ["ehrxqa", "mimic-cxr-vqa"])
def test_datasets_loads_the_export_and_every_record_decodes_to_the_json_record(release, folder, tmp_path,
                                                                               monkeypatch):
    datasets = offline_datasets(tmp_path, monkeypatch)
    ds = datasets.load_dataset(str(release / hf.OUT_DIR / folder))
    # an empty split (MIMIC-CXR-VQA valid here) is left out of the card's configs: datasets cannot load one
    assert {s: ds[s].num_rows for s in ds} == {s: len(RECORDS[folder][s]) for s in SPLITS if RECORDS[folder][s]}
    assert list(ds) == [s for s in SPLITS if RECORDS[folder][s]] and len(ds) == (2 if folder == "mimic-cxr-vqa" else 3)
    schema = pq.read_schema(release / hf.OUT_DIR / folder / "train.parquet")
    for split in SPLITS:  # one schema for the three splits, and the card's features are the parquet's
        assert pq.read_schema(release / hf.OUT_DIR / folder / f"{split}.parquet") == schema
    for split in ds:
        assert ds[split].features == datasets.Features.from_arrow_schema(schema)
    assert pq.read_table(release / hf.OUT_DIR / "mimic-cxr-vqa" / "valid.parquet").num_rows == 0
    columns = hf.EXPORTS[folder].json_columns
    for split in ds:
        want = json.loads((release / folder / f"{split}.json").read_text())
        got = [{k: json.loads(v) if k in columns else v for k, v in row.items()} for row in ds[split]]
        assert json.dumps(got) == json.dumps(want)  # values, key order and types (1 vs 1.0 vs "1")


@pytest.mark.parametrize("folder", ["ehrxqa", "mimic-cxr-vqa"])
def test_the_cards_loading_snippet_gives_the_first_test_record(release, folder, tmp_path, monkeypatch):
    offline_datasets(tmp_path, monkeypatch)
    card = (release / hf.OUT_DIR / folder / hf.CARD_FILE).read_text()
    snippet = re.search(r"## Loading\n\n```python\n(.*?)```", card, re.S).group(1)
    monkeypatch.chdir(release)  # the snippet's paths are relative to the release folder
    namespace: dict = {}
    exec(snippet, namespace)
    first = json.loads((release / folder / "test.json").read_text())[0]
    assert json.dumps(namespace["test"][0]) == json.dumps(first)


def test_the_card_front_matter(release):
    card = (release / hf.OUT_DIR / "ehrxqa" / hf.CARD_FILE).read_text()
    front = yaml.safe_load(card.split("---\n")[1])
    assert (front["license"], front["license_name"], front["license_link"]) == ("other", hf.LICENSE_NAME,
                                                                                LICENSE_URL)
    assert front["annotations_creators"] == ["machine-generated"] and front["language"] == ["en"]
    assert front["source_datasets"] == ["MIMIC-IV 2.2", "MIMIC-CXR-JPG 2.0.0", "Chest ImaGenome 1.0.0"]
    assert "table-question-answering" in front["task_categories"] and front["size_categories"] == ["n<1K"]
    files = front["configs"][0]["data_files"]
    assert [f["split"] for f in files] == list(SPLITS)
    assert all((release / hf.OUT_DIR / "ehrxqa" / f["path"]).is_file() for f in files)
    assert "| test | `test.parquet` | 2 |" in card and "never push it to the Hugging Face Hub" in card
    assert "synthetic source" in card and "`0.1.0+0123456789ab`" in card
    vqa_card = (release / hf.OUT_DIR / "mimic-cxr-vqa" / hf.CARD_FILE).read_text()
    vqa = yaml.safe_load(vqa_card.split("---\n")[1])
    assert vqa["task_categories"] == ["visual-question-answering"]
    assert [f["split"] for f in vqa["configs"][0]["data_files"]] == ["train", "test"]  # valid has no record
    assert "| valid | `valid.parquet` | 0 (not in `configs`" in vqa_card


@pytest.mark.parametrize("n, label", [(0, "n<1K"), (999, "n<1K"), (1_000, "1K<n<10K"), (99_999, "10K<n<100K"),
                                      (100_000, "100K<n<1M"), (10 ** 9, "n>1B")])
def test_size_category(n, label):
    assert hf.size_category(n) == label


def test_two_writes_give_identical_bytes_wherever_the_folder_is(tmp_path):
    first, second = make_release(tmp_path / "a"), make_release(tmp_path / "elsewhere" / "b")
    for folder in (first, second):
        hf.write_export(folder, SOURCES, CODE)
    hf.write_export(first, SOURCES, CODE)  # and again in place

    def files(folder):
        out = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted((folder / hf.OUT_DIR).rglob("*"))
               if p.is_file()}
        return out

    assert files(first) == files(second)
    assert len(files(first)) == 2 * (len(SPLITS) + 1) and not any(n.startswith(".") for n in files(first))
    for text in (v.decode() for k, v in files(first).items() if k.endswith(".md")):
        assert str(tmp_path) not in text



def test_a_split_whose_json_file_is_unchanged_is_not_converted_again(tmp_path, monkeypatch):
    """With a memo, a second export converts only the split whose JSON file changed, and a split whose parquet
    file was altered or removed; the bytes equal a fresh export's. A damaged memo converts everything."""
    release, memo = make_release(tmp_path / "r"), tmp_path / "cache" / "hf.json"
    first = hf.write_export(release, SOURCES, CODE, memo=memo)
    read, real = [], hf.read_records
    monkeypatch.setattr(hf, "read_records", lambda path, *args: read.append(path) or real(path, *args))
    assert hf.write_export(release, SOURCES, CODE, memo=memo) == first and read == []
    edited = json.loads((release / "ehrxqa" / "test.json").read_text())
    edited[0]["question"] += " (edited)"
    (release / "ehrxqa" / "test.json").write_text(json.dumps(edited))
    (release / hf.OUT_DIR / "mimic-cxr-vqa" / "train.parquet").write_bytes(b"not what was written")
    (release / hf.OUT_DIR / "mimic-cxr-vqa" / "valid.parquet").unlink()
    again = hf.write_export(release, SOURCES, CODE, memo=memo)
    assert sorted(p.relative_to(release).as_posix() for p in read) == [
        "ehrxqa/test.json", "mimic-cxr-vqa/train.json", "mimic-cxr-vqa/valid.json"]
    assert again["ehrxqa"]["test"]["compared"]["differing"] == 0
    fresh = make_release(tmp_path / "fresh")
    (fresh / "ehrxqa" / "test.json").write_text(json.dumps(edited))
    hf.write_export(fresh, SOURCES, CODE)
    assert all((release / hf.OUT_DIR / d / f"{s}.parquet").read_bytes() == (fresh / hf.OUT_DIR / d / f"{s}.parquet"
               ).read_bytes() for d in hf.EXPORTS for s in SPLITS)
    memo.write_text("{damaged")
    read.clear()
    hf.write_export(release, SOURCES, CODE, memo=memo)
    assert len(read) == len(hf.EXPORTS) * len(SPLITS)

@pytest.mark.parametrize("folder, change, message", [
    ("mimic-cxr-vqa", {"answer": ["yes", 1]}, "answer: ARRAY with a UBIGINT element, not list of strings"),
    ("mimic-cxr-vqa", {"idx": "1"}, "idx: VARCHAR, not integer"),
    ("mimic-cxr-vqa", {"subject_id": 2 ** 63}, "subject_id: UBIGINT above the int64 range, not integer"),
    ("mimic-cxr-vqa", {"template_arguments": None}, "template_arguments: NULL, not object, stored as JSON text"),
    ("ehrxqa", {"extra": 1}, "extra: not a field of the schema"),
    ("ehrxqa", {"answer": {"a": 1}}, "answer: OBJECT, not array, stored as JSON text"),
    ("ehrxqa", {"is_impossible": "no"}, "is_impossible: VARCHAR, not boolean"),
    ("ehrxqa", {"db_id": None}, "db_id: NULL, not string"),
])
def test_a_record_that_does_not_fit_is_named_with_its_file_position_and_field(tmp_path, folder, change, message):
    records = json.loads(json.dumps(RECORDS))
    records[folder]["test"][1].update(change)
    release = make_release(tmp_path, records)
    with pytest.raises(hf.RecordError) as e:
        hf.write_export(release, SOURCES, CODE)
    text = str(e.value)
    assert f"{release / folder / 'test.json'}: 1 of 2 records" in text and "record 1 (0-based)" in text
    assert message in text and "ehrxqa_pipeline/release/hf.py" in text
    assert not (release / hf.OUT_DIR / folder / "test.parquet").exists()


def test_a_missing_field_and_a_record_that_is_no_object_are_named(tmp_path):
    records = json.loads(json.dumps(RECORDS))
    del records["ehrxqa"]["train"][2]["query"]
    release = make_release(tmp_path, records)
    with pytest.raises(hf.RecordError, match=r"train.json: 1 of 4 records .* record 2 \(0-based\): query: missing"):
        hf.read_records(release / "ehrxqa" / "train.json", hf.EHRXQA)
    (release / "ehrxqa" / "valid.json").write_text('[["not", "a record"]]')
    with pytest.raises(hf.RecordError, match=r"record 0 \(0-based\): the record: ARRAY, not an object"):
        hf.read_records(release / "ehrxqa" / "valid.json", hf.EHRXQA)
    (release / "ehrxqa" / "valid.json").write_text('{"not": "a list"}')
    with pytest.raises(hf.RecordError, match=r"valid.json: not a JSON list of ehrxqa records"):
        hf.read_records(release / "ehrxqa" / "valid.json", hf.EHRXQA)


def test_compare_finds_a_changed_record_and_a_missing_one(release):
    assert all(hf.compare(release, e, s)["differing"] == 0 for e in hf.EXPORTS.values() for s in SPLITS)
    records = json.loads((release / "ehrxqa" / "train.json").read_text())
    records[1]["answer"] = [1.0]  # [] -> [1.0] (and 1 vs 1.0 is a difference too, below)
    (release / "ehrxqa" / "train.json").write_text(json.dumps(records, indent=4))
    assert hf.compare(release, hf.EHRXQA, "train") == {"json_records": 4, "parquet_rows": 4, "differing": 1,
                                                        "first": [1]}
    records[1]["answer"], records[0]["answer"] = [], ["a", 2.0, 5.0, 1e-07]
    (release / "ehrxqa" / "train.json").write_text(json.dumps(records, indent=4))
    assert hf.compare(release, hf.EHRXQA, "train")["first"] == [0]
    (release / "mimic-cxr-vqa" / "test.json").write_text(json.dumps(RECORDS["mimic-cxr-vqa"]["test"][:1]))
    assert hf.compare(release, hf.MIMIC_CXR_VQA, "test") == {"json_records": 1, "parquet_rows": 2, "differing": 1,
                                                             "first": []}


def test_a_failed_write_keeps_the_previous_export(release):
    before = (release / hf.OUT_DIR / "ehrxqa" / "test.parquet").read_bytes()
    (release / "ehrxqa" / "test.json").write_text('[{"db_id": 1}]')
    with pytest.raises(hf.RecordError):
        hf.write_export(release, SOURCES, CODE)
    assert (release / hf.OUT_DIR / "ehrxqa" / "test.parquet").read_bytes() == before
    assert not [p for p in (release / hf.OUT_DIR).rglob(".*")]  # no temporary file left
