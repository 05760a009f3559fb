import gzip
import shutil

from ehrxqa_pipeline.sources.schema import (CXR_FILES_DIR, IMAGENOME, MIMIC_CXR, SEMANTICS_ATTRIBUTES, TABLES,
                                            release_path)
from ehrxqa_pipeline.sources.validate import validate_source

from .conftest import IMAGES

ATTRIBUTES_FILE = release_path(IMAGENOME, SEMANTICS_ATTRIBUTES)
IMAGES_DIR = release_path(MIMIC_CXR, CXR_FILES_DIR)

PATIENTS = "mimiciv/2.2/hosp/patients.csv.gz"
META = "mimic-cxr-jpg/2.0.0/mimic-cxr-2.0.0-metadata.csv.gz"
SILVER_REL = "chest-imagenome/1.0.0/silver_dataset/scene_tabular/attribute_relations_tabular.txt"
GOLD_REL = "chest-imagenome/1.0.0/gold_dataset/gold_attributes_relations_500pts_500studies1st.txt"


def _only(report, severity):
    found = [p for p in report.problems if p.severity == severity]
    assert len(found) == 1, report.format()
    return found[0]


def test_clean_source_is_ok(source):
    report = validate_source(source.root)
    assert report.ok and report.problems == [], report.format()
    assert report.stats["rows"]["patients"] == 3 and report.stats["rows"]["silver_relations"] == 9
    assert report.stats["images_found"] == 4
    assert report.stats["overlaps"]["silver_relation_images"] == {"ids": 3, "unknown": 0}
    text = report.format()
    assert f"  ok                  3  {PATIENTS}" in text
    assert text.endswith("Result: OK (0 errors, 0 warnings)")


def test_clean_source_with_cache_dir(source, tmp_path):
    report = validate_source(source.root, cache_dir=tmp_path / "cache")
    assert report.ok and not report.problems


def test_missing_file(source):
    source.path("labevents").unlink()
    report = validate_source(source.root)
    p = _only(report, "error")
    assert p.file == "mimiciv/2.2/hosp/labevents.csv[.gz]"
    assert "expected mimiciv/2.2/hosp/labevents.csv or mimiciv/2.2/hosp/labevents.csv.gz" in p.message
    assert "MISSING" in report.format() and not report.ok


def test_missing_dataset_folder_is_one_error(source):
    shutil.rmtree(source.root / "chest-imagenome")
    report = validate_source(source.root)
    p = _only(report, "error")
    assert p.file == "chest-imagenome/1.0.0" and "7 source files expected" in p.message


def test_root_that_is_not_a_physionet_root(source, tmp_path):
    report = validate_source(source.root / "mimiciv")
    p = _only(report, "error")
    assert "does not look like a PhysioNet root" in p.message and str(source.root) in p.fix
    report = validate_source(tmp_path)  # the parent: the hint finds physionet/ below it
    assert str(source.root) in _only(report, "error").fix
    assert not validate_source(tmp_path / "nope").ok


def test_missing_required_column(source):
    source.write("cxr_metadata", header=[c for c in TABLES["cxr_metadata"].header if c != "StudyTime"])
    p = _only(validate_source(source.root), "error")
    assert (p.file, p.column) == (META, "StudyTime")
    assert p.message.startswith("required column 'StudyTime' is missing from the header")


def test_wrong_type_counts_and_first_row(source):
    rows = source.rows["patients"]
    rows[1]["anchor_age"] = "abc"
    rows[2]["anchor_age"] = "7x"
    source.write("patients", rows)
    report = validate_source(source.root)
    p = _only(report, "error")
    assert (p.file, p.column) == (PATIENTS, "anchor_age")
    assert p.message == "column 'anchor_age' has a value that is not an integer (row 2: 'abc'; 2 bad rows in all)"
    assert "re-download" in p.fix
    assert f"ERROR               3  {PATIENTS}" in report.format()


def test_wrong_types_in_several_columns(source):
    rows = source.rows["chartevents"]
    rows[0]["charttime"] = "yesterday"
    rows[2]["valuenum"] = "n/a"
    rows[2]["value"] = "free text is fine"
    source.write("chartevents", rows)
    errors = validate_source(source.root).errors
    assert [(p.column, p.message) for p in errors] == [
        ("charttime", "column 'charttime' has a value that is not a date-time (YYYY-MM-DD HH:MM:SS) "
                      "(row 1: 'yesterday')"),
        ("valuenum", "column 'valuenum' has a value that is not a number (row 3: 'n/a')"),
    ]


def test_truncated_gzip(source):
    data = source.path("chartevents").read_bytes()
    source.path("chartevents").write_bytes(data[: len(data) // 2])
    p = _only(validate_source(source.root), "error")
    assert p.file == "mimiciv/2.2/icu/chartevents.csv.gz"
    assert p.message.startswith("truncated or corrupt gzip") and "re-download" in p.fix


def test_malformed_rows(source):
    source.write("d_items", raw=b"itemid,label,abbreviation,linksto\n1,a,b,c\n2,a,b,c,d\n")
    p = _only(validate_source(source.root), "error")
    assert p.file == "mimiciv/2.2/icu/d_items.csv.gz" and p.message.startswith("cannot be read as CSV")


def test_duplicate_keys_warn(source):
    rows = source.rows["icustays"]
    rows.append(dict(rows[0]))
    rows.append(dict(rows[0]))
    source.write("icustays", rows)
    report = validate_source(source.root)
    p = _only(report, "warning")
    assert (p.file, p.column) == ("mimiciv/2.2/icu/icustays.csv.gz", "stay_id")
    assert p.message == "2 rows repeat the key (stay_id) of an earlier row (1 key affected)"
    assert report.stats["duplicate_keys"] == {"icustays": 2}
    # Ingestion quarantines the repeats (duplicate_key): 2 of 5 rows is past the contract's limit.
    assert report.stats["quarantine"]["icustays"] == {"duplicate_key": 2}
    assert _only(report, "error").message == ("2 of 5 rows (40.00%) would be quarantined "
                                              "(duplicate_key 2); the contract allows 1.00%")


def test_empty_keys_are_not_duplicates(source):
    rows = source.rows["labevents"]
    for r in rows:
        r["labevent_id"] = ""
    source.write("labevents", rows)
    assert validate_source(source.root).problems == []


def test_both_plain_and_gz(source):
    source.write("patients")
    (source.root / "mimiciv/2.2/hosp/patients.csv").write_bytes(gzip.decompress(source.path("patients").read_bytes()))
    report = validate_source(source.root)
    p = _only(report, "warning")
    assert p.file == "mimiciv/2.2/hosp/patients.csv" and "the plain file is read" in p.message


def test_unknown_silver_image_ids_are_an_error(source):
    rows = source.rows["silver_relations"]
    rows.append(dict(rows[0], image_id="ffffffff-00000000-00000000-00000000-00000000.dcm"))
    source.write("silver_relations", rows)
    p = _only(validate_source(source.root), "error")
    assert (p.file, p.column) == (SILVER_REL, "image_id")
    assert p.message == (f"1 of 4 image ids (without .dcm) (25.0%) in column 'image_id' are not in {META}")


def test_few_unknown_ids_only_warn(source):
    # 200 more known images, so a single unknown one is below the 1% error threshold
    extra = [dict(source.rows["cxr_metadata"][0], dicom_id=f"e{i:07d}-0-0-0-0", study_id=51000000 + i)
             for i in range(200)]
    source.write("cxr_metadata", source.rows["cxr_metadata"] + extra)
    bbox = source.rows["silver_bbox"]
    bbox += [dict(bbox[0], object_id=f"{m['dicom_id']}_right lung") for m in extra]
    bbox.append(dict(bbox[0], object_id="unknown0-1-2-3-4_right lung"))
    source.write("silver_bbox", bbox)
    shutil.rmtree(source.root / IMAGES_DIR)
    report = validate_source(source.root)
    assert report.ok
    msgs = {p.column: p.message for p in report.warnings}
    assert msgs["object_id"] == ("1 of 204 image ids (object_id before '_') (0.5%) in column 'object_id' "
                                 f"are not in {META}")
    assert msgs[None] == "no images; image-dependent steps will fail"


def test_gold_patient_and_image_ids(source):
    rows = source.rows["gold_relations"]
    rows.append(dict(rows[0], patient_id=19999999, image_id="ffff-1-2-3-4.dcm"))
    source.write("gold_relations", rows)
    report = validate_source(source.root)
    by = {(p.severity, p.column, p.message.split(" in column")[0]) for p in report.problems if p.file == GOLD_REL}
    assert by == {("error", "image_id", "1 of 2 image ids (without .dcm) (50.0%)"),
                  ("error", "patient_id", "1 of 2 gold patients (50.0%)"),
                  ("warning", "image_id", "1 of 2 image ids (without .dcm) (50.0%)"),  # vs silver
                  # vs MIMIC-IV patients: the contract's foreign key, within its limit
                  ("warning", "patient_id", "1 of 3 rows (33.33%; 1 distinct patient_id value)")}
    assert any(SILVER_REL in p.message for p in report.warnings)


def test_cxr_subjects_versus_patients(source):
    # the contract's foreign key cxr_metadata.subject_id -> patients: rows of the metadata, limit 50 %
    source.write("patients", source.rows["patients"][:2])
    report = validate_source(source.root)
    p = _only(report, "warning")
    assert (p.file, p.column) == (META, "subject_id")
    assert p.message == (f"1 of 4 rows (25.00%; 1 distinct subject_id value) in column 'subject_id' point at no "
                         f"row of {PATIENTS}, within the contract's 50.00% (data_contracts/ingest.cxr_metadata.yaml)")
    assert report.stats["foreign_keys"]["cxr_metadata.subject_id->patients"] == {
        "rows": 4, "orphans": 1, "orphan_keys": 1, "orphan_fraction": 0.25, "max_orphan_fraction": 0.5}
    source.write("patients", [dict(r, subject_id=r["subject_id"] + 5_000_000) for r in source.rows["patients"]])
    report = validate_source(source.root)
    # the build's foreign-key checks of the MIMIC-IV tables fail as well, and validate-source says so
    assert {(p.file, p.column) for p in report.errors} == {
        (META, "subject_id"), (GOLD_REL, "patient_id"), ("mimiciv/2.2/hosp/admissions.csv.gz", "subject_id"),
        ("mimiciv/2.2/hosp/transfers.csv.gz", "subject_id")}
    p = next(p for p in report.errors if p.file == META)
    assert p.message == (f"4 of 4 rows (100.00%; 3 distinct subject_id values) in column 'subject_id' point at no "
                         f"row of {PATIENTS}; the contract allows 50.00% (data_contracts/ingest.cxr_metadata.yaml)")


def test_missing_image_files_warn(source):
    d, s, st, *_ = IMAGES[1]
    (source.root / IMAGES_DIR / f"p{str(s)[:2]}/p{s}/s{st}/{d}.jpg").unlink()
    report = validate_source(source.root)
    p = _only(report, "warning")
    assert p.file == IMAGES_DIR and p.message == "1 of 4 metadata images have no JPEG under files/"
    assert report.ok and report.stats["images_found"] == 3


def test_bad_semantics_line(source):
    (source.root / ATTRIBUTES_FILE).write_text("disease|yes|pneumonia\nnot a triple\n")
    report = validate_source(source.root)
    p = _only(report, "error")
    assert p.file == ATTRIBUTES_FILE and p.message.endswith("(line 2: 'not a triple')")


def test_format_groups_problems(source):
    source.path("d_items").unlink()
    shutil.rmtree(source.root / IMAGES_DIR)
    text = validate_source(source.root).format()
    assert text.index("Errors (1):") < text.index("Warnings (1):")
    assert "  - mimiciv/2.2/icu/d_items.csv[.gz]: file not found" in text
    assert "    fix: " in text
    assert text.endswith("Result: FAILED (1 error, 1 warning)")


def test_foreign_keys_within_mimiciv_are_judged_as_the_build_judges_them(source):
    """validate-source applies every contract foreign key, not only those between datasets: a lab item
    missing from d_labitems fails the build's foreign_keys check (limit 0 %), and validate-source too."""
    source.write("d_labitems", source.rows["d_labitems"][1:])
    report = validate_source(source.root)
    (p,) = report.errors
    assert (p.file, p.column) == ("mimiciv/2.2/hosp/labevents.csv.gz", "itemid")
    assert p.message.startswith("1 of 3 rows (33.33%; 1 distinct itemid value) in column 'itemid' point at no row "
                                "of mimiciv/2.2/hosp/d_labitems.csv.gz; the contract allows 0.00%")
    assert report.stats["foreign_keys"]["labevents.itemid->d_labitems"]["orphans"] == 1
