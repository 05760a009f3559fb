"""release/statistics/tables.* and release/datasheet.md from a hand-made release folder."""

import json

import duckdb

from ehrxqa_pipeline.release import datasheet, license_note, manifest, tables
from tests.release.helpers import EHRXQA_MD, FUNNELS, REJECTED, VQA_MD, make_release, make_source

DEVIATIONS = ("# Deviations\n\nIntro.\n\n| # | Published behaviour | This pipeline | Where |\n|---|---|---|---|\n"
              "| 4 | Negated children propagate. | Only affirmed labels propagate. | cxr_labels |\n")


def _gathered(tmp_path) -> tuple[dict, str]:
    release = make_release(tmp_path)
    gathered = tables.gather(release, FUNNELS, REJECTED)
    return gathered, tables.render_markdown(gathered, VQA_MD, EHRXQA_MD)


def test_tables_copy_b4_to_b6_and_c9_and_count_the_release(tmp_path):
    t, md = _gathered(tmp_path)
    vqa, ehrxqa = t["mimic_cxr_vqa"], t["ehrxqa"]
    assert "### Overall (cf. paper Table B4)" in md and "B6 rows" in md and "entropy rows" not in md
    assert "(cf. paper Table C9)" in md and "C9 rows" in md and "per-template rows" not in md
    assert vqa["records"] == {"train": 3, "valid": 1, "test": 1} and vqa["overall"]["images"]["train"] == 4321
    assert vqa["per_template"] == [
        {"template": "program_1", "content_type": "presence", "semantic_type": "verify", "train": 2, "valid": 0,
         "test": 1},
        {"template": "program_2", "content_type": "anatomy", "semantic_type": "query", "train": 1, "valid": 1,
         "test": 0}]
    assert vqa["answers"]["train"] == {"left lung": 1, "no": 1, "right lung": 1, "yes": 1}
    assert vqa["answers"]["valid"] == {"(none)": 1}
    assert ehrxqa["answer_kinds"]["train"] == {"0/1": 2, "number": 1, "text": 1, "time": 1}
    assert ehrxqa["answer_kinds"]["test"] == {"list": 1, "number": 1} and ehrxqa["templates_below_cap"] == 1
    assert [f["cohort"] for f in t["funnels"]] == ["silver", "gold"]  # given order, not sorted
    assert "| frontal_view | 777 |" in md and "| cxr_cohort.silver_rejected | frontal_view | 457 |" in md
    paths = tables.write_tables(tmp_path / "release", t, md)
    assert json.loads(paths["json"].read_text()) == t and paths["md"].read_text() == md


def test_rejected_counts_cover_every_rejected_table_with_a_reason():
    con = duckdb.connect()
    con.execute("CREATE SCHEMA ingest; CREATE SCHEMA ehr")
    con.execute("CREATE TABLE ingest.patients_rejected AS SELECT * FROM (VALUES ('duplicate_key'), "
                "('duplicate_key'), ('unparsable:dod')) v(reason)")
    con.execute("CREATE TABLE ehr.tb_cxr_rejected (reason VARCHAR)")  # empty: left out
    con.execute("CREATE TABLE ehr.notes_rejected (why VARCHAR)")  # no reason column: not a quarantine table
    con.execute("CREATE TABLE ehr.patients AS SELECT 'x' AS reason")  # not a *_rejected table
    assert tables.rejected_counts(con) == [
        {"table": "ingest.patients_rejected", "reason": "duplicate_key", "rows": 2},
        {"table": "ingest.patients_rejected", "reason": "unparsable:dod", "rows": 1}]


def test_datasheet_answers_appendix_a_with_the_given_counts(tmp_path):
    t, _ = _gathered(tmp_path)
    source = make_source(tmp_path, seed=9)
    sources = manifest.source_section(source, manifest.source_digests(source))
    code = {"package": "ehrxqa-pipeline", "version": "0.1.0", "sha256": "ab" * 32, "files": 3, "dirs": ["assets"]}
    config = {"ehrxqa_sampling": {"train_valid": 4, "test": 2}, "paraphraser": {"llm": False, "model": None}}
    md = datasheet.render_datasheet(t, sources, code, 42, config, DEVIATIONS)
    for heading in ("A.1 Motivation", "A.2 Composition", "A.3 Collection process", "A.4 Preprocessing",
                    "A.5 Uses", "A.6 Distribution", "A.7 Maintenance"):
        assert f"## {heading}" in md
    assert "EHRXQA: 5 train, 1 valid, 2 test (8 in all)" in md  # records of the release files
    assert "MIMIC-CXR-VQA: 3 train, 1 valid, 1 test (5 in all) over 4,321 train" in md
    assert "5 image, 3 table" in md  # C9 rows summed per modality
    assert "4 train+valid and 2 test" in md and "seed 42" in md
    assert "| not_gold_patient | 555 |" in md and "| first_study_rule | 41 |" in md  # both funnels
    assert "| ingest.admissions_rejected | duplicate_key | 3 |" in md
    assert "MIMIC-IV 2.2" in md and "Chest ImaGenome 1.0.0" in md and "MIMIC-CXR-JPG 2.0.0" in md
    assert "synthetic source" in md and "seed 9" in md and sources["digest"] in md
    assert "| 4 | Negated children propagate. | Only affirmed labels propagate. | cxr_labels |" in md
    assert "Intro." not in md and str(tmp_path) not in md
    real = datasheet.render_datasheet(t, {**sources, "synthetic": False, "generator": None}, code, 42, config)
    assert "synthetic source" not in real and "docs/deviations.md" in real


def test_license_note_names_the_inherited_physionet_terms(tmp_path):
    source = make_source(tmp_path)
    sources = manifest.source_section(source, manifest.source_digests(source))
    code = {"package": "ehrxqa-pipeline", "version": "0.1.0"}
    note = license_note.render_license(sources, code)
    assert "PhysioNet Credentialed Health Data License 1.5.0" in note
    assert "PhysioNet Credentialed Health Data Use Agreement 1.5.0" in note
    for key, version in (("mimiciv", "2.2"), ("mimic-cxr-jpg", "2.0.0"), ("chest-imagenome", "1.0.0")):
        assert f"https://physionet.org/content/{key}/view-license/{version}/" in note
        assert f"https://physionet.org/content/{key}/view-dua/{version}/" in note
    assert "dataset hubs" in note and "only through PhysioNet" in note
    assert "ehrxqa-pipeline 0.1.0) is licensed separately" in note
    assert "synthetic source" in note and str(tmp_path) not in note
    # the releases read are named (an opted-in later release), and a real source has no synthetic caveat
    later = {**sources, "synthetic": False, "generator": None, "releases": {**sources["releases"], "mimiciv": "3.1"}}
    real = license_note.render_license(later, code)
    assert "MIMIC-IV 3.1: https://physionet.org/content/mimiciv/3.1/" in real and "synthetic" not in real
    assert license_note.render_license(sources, code) == note  # no time, nothing machine-specific
    t, _ = _gathered(tmp_path)
    md = datasheet.render_datasheet(t, sources, {**code, "sha256": "ab" * 32, "files": 3, "dirs": ["assets"]}, 1, {})
    distribution = md.split("## A.6 Distribution", 1)[1].split("## A.7", 1)[0]
    assert license_note.LICENSE in distribution and "`LICENSE.txt`" in distribution
    assert "`SHA256SUMS.txt`" in md


def test_gather_reads_only_the_record_files_that_changed(tmp_path, monkeypatch):
    """``tables.gather`` with a memo: a second gather reads no record file; after the test files change, only
    those two are read again; every result equals a gather without a memo."""
    rel, memo = make_release(tmp_path), tmp_path / "cache" / "tables.json"
    first = tables.gather(rel, FUNNELS, REJECTED, memo=memo)
    assert first == tables.gather(rel, FUNNELS, REJECTED)
    read, real = [], tables.file_counts
    monkeypatch.setattr(tables, "file_counts", lambda path, dataset: read.append(path) or real(path, dataset))
    assert tables.gather(rel, FUNNELS, REJECTED, memo=memo) == first and read == []
    for dataset in ("mimic-cxr-vqa", "ehrxqa"):
        path = rel / dataset / "test.json"
        records = json.loads(path.read_text())
        path.write_text(json.dumps(records + records))
    again = tables.gather(rel, FUNNELS, REJECTED, memo=memo)
    assert sorted(p.relative_to(rel).as_posix() for p in read) == ["ehrxqa/test.json", "mimic-cxr-vqa/test.json"]
    assert again != first and again == tables.gather(rel, FUNNELS, REJECTED)
    assert again["ehrxqa"]["records"]["test"] == 2 * first["ehrxqa"]["records"]["test"]
