"""Image selection on a generated source: funnels equal the planted counts; faults get their reasons."""

import duckdb
import polars as pl
import pytest
from PIL import Image

from ehrxqa_pipeline.contracts import load_contract
from ehrxqa_pipeline.cxr import integrity, selection
from ehrxqa_pipeline.ingest import ingest_table


@pytest.fixture
def warehouse(small_source, tmp_path):
    root, manifest = small_source
    con = duckdb.connect()
    for table in ("cxr_metadata", "silver_bbox", "gold_relations"):
        ingest_table(con, root, load_contract(f"ingest/{table}"), tmp_path)
    selection.build_gold_studies(con)
    selection.build_image_rules(con)
    return con, manifest


def test_silver_funnel_equals_planted(warehouse):
    con, manifest = warehouse
    out = selection.build_cohorts(con, check_jpegs=False)
    planted = [n for _, n in manifest["planted"]["imagenome"]["funnel"]["silver"]]
    assert [n for _, n in out["funnels"]["silver"]] == planted
    assert out["silver_reasons"]["has_36_boxes"] == (manifest["planted"]["imagenome"]["images_30_35_boxes"]
                                                     + manifest["planted"]["imagenome"]["images_absent_from_bbox"])
    assert out["silver_reasons"]["box_width_within_3sd"] == manifest["planted"]["imagenome"]["width_outlier_images"]
    n = con.execute("SELECT count(*), count(DISTINCT study_id) FROM cxr_cohort.silver").fetchone()
    assert n[0] == n[1] == planted[-1]  # one image per study
    assert con.execute("SELECT max(study_order) FROM cxr_cohort.silver").fetchone()[0] <= 20


def test_zero_area_boxes_are_kept_and_their_images_stay(warehouse):
    con, manifest = warehouse
    planted = manifest["planted"]["imagenome"]
    assert con.execute("SELECT count(*) FROM ingest.silver_bbox_rejected").fetchone()[0] == 0
    flat = "SELECT split_part(object_id, '_', 1) FROM ingest.silver_bbox WHERE width = 0 OR height = 0"
    assert con.execute(f"SELECT count(*) FROM ({flat})").fetchone()[0] == planted["zero_area_boxes"] >= 2
    selection.build_cohorts(con, check_jpegs=False)
    kept = con.execute(f"SELECT count(*) FROM cxr_cohort.silver WHERE image_id IN ({flat})").fetchone()[0]
    assert kept == planted["zero_area_box_images"]  # before: each failed has_36_boxes (degenerate_box)


def test_zero_width_box_counts_and_meets_the_width_rule(warehouse):
    """A zero-width box is one of the 36 boxes (as published); its width 0 enters the statistics and is an
    outlier there, so the image leaves by the width rule, not the 36-box rule."""
    con, _ = warehouse
    before = selection.build_cohorts(con, check_jpegs=False)["silver_reasons"]
    image = con.execute("SELECT image_id FROM cxr_cohort.silver ORDER BY image_id LIMIT 1").fetchone()[0]
    con.execute("UPDATE ingest.silver_bbox SET x2 = x1, width = 0 WHERE object_id = ? || '_trachea'", [image])
    selection.build_image_rules(con)
    after = selection.build_cohorts(con, check_jpegs=False)["silver_reasons"]
    row = con.execute("SELECT n_boxes, has_36_boxes, silver_reason FROM cxr_cohort.image_rules WHERE dicom_id = ?",
                      [image]).fetchone()
    assert row == (36, True, "box_width_within_3sd")
    assert after == {**before, "box_width_within_3sd": before["box_width_within_3sd"] + 1}


def test_gold_cohort_and_first_study_rule(warehouse):
    con, manifest = warehouse
    out = selection.build_cohorts(con, check_jpegs=False)
    planted = manifest["planted"]["imagenome"]
    assert out["funnels"]["gold"][-1][1] == planted["funnel"]["gold"][-1][1]
    assert out["gold_checks"] == {"gold_patients": planted["gold_patients"],
                                  "gold_images_replacing_auto_pick": planted["gold_image_not_r2_pick"],
                                  "gold_patients_failing_first_study_rule": 0}
    gold_images = {r[0] for r in con.execute(
        "SELECT DISTINCT replace(image_id, '.dcm', '') FROM ingest.gold_relations").fetchall()}
    first = {r[0] for r in con.execute("SELECT image_id FROM cxr_cohort.gold WHERE study_order = 1").fetchall()}
    assert first == gold_images
    replaced = con.execute("SELECT count(*) FROM cxr_cohort.gold_rejected "
                           "WHERE reason = 'replaced_by_gold_image'").fetchone()[0]
    assert replaced == planted["gold_image_not_r2_pick"]


def test_gold_image_from_a_later_study_is_refused(warehouse):
    con, _ = warehouse
    # Point one gold patient's labels at the image of its second study.
    subject, second = con.execute("""
        SELECT subject_id, dicom_id FROM cxr_cohort.image_rules
        WHERE gold_reason IS NULL AND study_order = 2 ORDER BY subject_id LIMIT 1""").fetchone()
    con.execute("UPDATE ingest.gold_relations SET image_id = ? || '.dcm' WHERE patient_id = ?", [second, subject])
    selection.build_gold_studies(con)  # the gold file's patients and images, as cxr_cohort/gold_studies reads it
    out = selection.build_cohorts(con, check_jpegs=False)
    assert out["gold_checks"]["gold_patients_failing_first_study_rule"] == 1
    assert con.execute("SELECT reason FROM cxr_cohort.gold_rejected WHERE subject_id = ? AND study_order = 1",
                       [subject]).fetchone() == ("gold_image_not_first_study",)


def test_jpeg_integrity_statuses(tmp_path):
    files = tmp_path / "files"
    (files / "p10").mkdir(parents=True)
    Image.new("L", (40, 30), 128).save(files / "p10" / "good.jpg", quality=90)
    Image.new("L", (40, 30), 128).save(files / "p10" / "small.jpg", quality=90)
    data = (files / "p10" / "good.jpg").read_bytes()
    (files / "p10" / "broken.jpg").write_bytes(data[: len(data) // 2])
    images = pl.DataFrame({"dicom_id": ["good", "small", "broken", "gone"],
                           "relpath": [f"p10/{n}.jpg" for n in ("good", "small", "broken", "gone")],
                           "n_rows": [30, 31, 30, 30], "n_columns": [40, 40, 40, 40]})
    out = integrity.check_images(files, images, "p10")
    assert out["status"].to_list() == ["ok", "size_mismatch", "undecodable_jpeg", "missing_jpeg"]
    assert out["detail"][1] == "jpeg 30x40, metadata 31x40"


def test_build_image_list_is_every_jpeg_the_build_reads(warehouse, tmp_path):
    """The download list is written before any JPEG is read and names exactly the integrity candidates of
    the ten top folders, each with its PhysioNet URL."""
    from ehrxqa_pipeline.cxr import downloads

    con, _ = warehouse
    listed = downloads.build_images(con)
    candidates = pl.concat([con.execute(integrity.candidates_sql(), [str(n)]).pl() for n in range(10, 20)])
    assert sorted(listed["dicom_id"]) == sorted(candidates["dicom_id"]) and listed.height > 0
    assert listed["relpath"].is_sorted() and listed["relpath"].is_unique().all()
    frontal = con.execute("SELECT count(*) FROM cxr_cohort.image_rules WHERE frontal_view AND one_image_per_study "
                          "AND max_20_studies").fetchone()[0]
    gold_elsewhere = con.execute("""
        SELECT count(DISTINCT replace(g.image_id, '.dcm', '')) FROM ingest.gold_relations g
        JOIN cxr_cohort.image_rules r ON r.dicom_id = replace(g.image_id, '.dcm', '')
        WHERE NOT (r.frontal_view AND r.one_image_per_study AND r.max_20_studies)""").fetchone()[0]
    assert listed.height == frontal + gold_elsewhere
    csv, urls = downloads.write_list(listed, tmp_path, downloads.BUILD_LIST, "2.0.0")
    assert pl.read_csv(csv, schema_overrides={"dicom_id": pl.String}).equals(listed)
    lines = urls.read_text().splitlines()
    assert lines[0] == f"https://physionet.org/files/mimic-cxr-jpg/2.0.0/files/{listed['relpath'][0]}"
    assert len(lines) == listed.height
    readme = downloads.write_readme(tmp_path, "2.0.0").read_text()
    assert f"| `build` | {listed.height:,} |" in readme and "-i build_urls.txt" in readme


def test_a_sides_lists_are_written_again_only_when_what_they_are_made_from_changed(tmp_path):
    """``write_side_lists`` reads and writes a side's lists once per inputs: the same inputs with the files as
    written read nothing; other inputs, another MIMIC-CXR-JPG version or a list edited since are written again,
    from the tables as they are then."""
    import duckdb

    from ehrxqa_pipeline.cxr import downloads
    from ehrxqa_pipeline.release.memo import OutputMemo

    con = duckdb.connect()
    con.execute("CREATE SCHEMA splits; CREATE SCHEMA cxr_cohort")
    con.execute("""CREATE TABLE splits.silver AS SELECT * FROM (VALUES ('b', 10000001, 50000001, 'train'),
                   ('a', 10000002, 50000002, 'train'), ('c', 11000003, 50000003, 'valid'))
                   t(image_id, subject_id, study_id, split)""")
    con.execute("CREATE TABLE splits.gold AS SELECT 'g1' AS image_id, 12000004 AS subject_id, 50000004 AS study_id, "
                "'test' AS split")
    con.execute("CREATE TABLE cxr_cohort.gold AS SELECT * EXCLUDE (split) FROM splits.gold UNION ALL "
                "SELECT 'g2', 12000004, 50000005")
    memo_path, folder, loads = tmp_path / "image_lists.json", tmp_path / "images", []

    def write(side: str, inputs: str, version: str = "2.0.0") -> dict[str, int]:
        def load():
            loads.append(side)
            return downloads.split_images(con, side)
        memo = OutputMemo(memo_path)
        out = downloads.write_side_lists(load, inputs, folder, side, version, memo)
        memo.save()
        return out

    assert write("silver", "v1") == {"train": 2, "valid": 1} and write("gold", "v1") == {"test": 2}
    assert (folder / "train.csv").read_text().splitlines()[1:] == [
        "b,10000001,50000001,p10/p10000001/s50000001/b.jpg", "a,10000002,50000002,p10/p10000002/s50000002/a.jpg"]
    assert (folder / "test_urls.txt").read_text().splitlines()[1].endswith("/files/p12/p12000004/s50000005/g2.jpg")
    assert write("silver", "v1") == {"train": 2, "valid": 1} and write("gold", "v1") == {"test": 2}
    assert loads == ["silver", "gold"]  # nothing read again
    con.execute("DELETE FROM splits.silver WHERE image_id = 'a'")
    assert write("silver", "v2") == {"train": 1, "valid": 1} and loads[-1] == "silver"
    assert (folder / "train.csv").read_text().count("\n") == 2
    write("silver", "v2", version="2.1.0")
    assert loads.count("silver") == 3 and "/mimic-cxr-jpg/2.1.0/" in (folder / "valid_urls.txt").read_text()
    (folder / "test.csv").write_text("edited\n")
    assert write("gold", "v1") == {"test": 2} and loads[-1] == "gold" and "g2" in (folder / "test.csv").read_text()
