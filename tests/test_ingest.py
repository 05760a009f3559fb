"""Ingestion: typed tables, exact quarantine reasons and counts, atomic replacement."""

import duckdb
import pytest

from ehrxqa_pipeline.contracts import load_contract
from ehrxqa_pipeline.ingest import ingest_table
from ehrxqa_pipeline.sources.errors import SourceError
from ehrxqa_pipeline.sources.readers import resolve
from tests.textfiles import edit, read_text


def _append_lines(path, lines):
    edit(path, lambda text: text + "".join(line + "\n" for line in lines))


def test_planted_admissions_quarantined_with_reason(small_source, tmp_path):
    root, manifest = small_source
    con = duckdb.connect()
    res = ingest_table(con, root, load_contract("ingest/admissions"), tmp_path)
    planted = manifest["planted"]["ehr"]["admissions_dischtime_before_admittime"]
    assert planted > 0
    assert res.reasons == {"dischtime_before_admittime": planted}
    assert res.rows + res.rejected == manifest["rows"]["admissions"]
    types = dict(res.columns)
    assert types["admittime"] == "TIMESTAMP" and types["hadm_id"] == "BIGINT"
    bad = con.execute("SELECT count(*) FROM ingest.admissions_rejected WHERE dischtime >= admittime").fetchone()
    assert bad == (0,)


def test_each_row_fault_gets_its_reason(source_copy, tmp_path):
    root, manifest = source_copy
    path = resolve(root, "patients")
    first = read_text(path).splitlines()[1]
    sid = first.split(",")[0]
    _append_lines(path, [
        first,                                     # duplicate subject_id
        "19999998,U,40,2150,2008 - 2010,",         # gender outside F/M
        "19999997,F,abc,2150,2008 - 2010,",        # anchor_age not an integer
        "19999996,F,40,2050,2008 - 2010,",         # anchor_year before the shifted range
        ",F,40,2150,2008 - 2010,",                 # no subject_id
    ])
    con = duckdb.connect()
    res = ingest_table(con, root, load_contract("ingest/patients"), tmp_path)
    assert res.reasons == {"duplicate_key": 1, "not_allowed:gender": 1, "unparsable:anchor_age": 1,
                           "out_of_range:anchor_year": 1, "null:subject_id": 1}
    assert res.rows == manifest["rows"]["patients"]
    rows = con.execute("SELECT source_row, reason, detail FROM ingest.patients_rejected ORDER BY source_row").fetchall()
    n = manifest["rows"]["patients"]
    assert [r[0] for r in rows] == [n + 1, n + 2, n + 3, n + 4, n + 5]
    assert rows[2][2] == "anchor_age='abc'"
    kept = con.execute(f"SELECT count(*) FROM ingest.patients WHERE subject_id = {sid}").fetchone()
    assert kept == (1,)  # the first occurrence stays


def test_failed_reingest_keeps_previous_table(source_copy, tmp_path):
    root, manifest = source_copy
    con = duckdb.connect()
    ingest_table(con, root, load_contract("ingest/d_labitems"), tmp_path)
    resolve(root, "d_labitems").unlink()
    with pytest.raises(SourceError, match="d_labitems"):
        ingest_table(con, root, load_contract("ingest/d_labitems"), tmp_path)
    assert con.execute("SELECT count(*) FROM ingest.d_labitems").fetchone() == (manifest["rows"]["d_labitems"],)


def test_zero_area_boxes_kept_negative_extent_quarantined(source_copy, tmp_path):
    root, manifest = source_copy
    path = resolve(root, "silver_bbox")
    fields = read_text(path).splitlines()[1].split("\t")

    def box(name, x1, y1, x2, y2):
        return "\t".join([f"ffff-0-0-0-0_{name}", str(x1), str(y1), str(x2), str(y2), str(x2 - x1), str(y2 - y1),
                          name, *fields[8:]])

    _append_lines(path, [box("trachea", 100, 50, 100, 90),     # width 0: kept
                         box("carina", 100, 80, 130, 80),      # height 0: kept
                         box("spine", 120, 40, 90, 200)])      # x2 < x1: quarantined
    con = duckdb.connect()
    res = ingest_table(con, root, load_contract("ingest/silver_bbox"), tmp_path)
    assert res.reasons == {"negative_extent": 1}
    assert res.rows == manifest["rows"]["silver_bbox"] + 2
    assert con.execute("SELECT object_id FROM ingest.silver_bbox_rejected").fetchall() == [("ffff-0-0-0-0_spine",)]


def test_zip_only_source_ingests_the_same_silver_tables(small_source, source_copy, tmp_path):
    """PhysioNet ships silver_dataset/scene_graph.zip, not scene_tabular/: with only the zip, ingestion (and
    validate-source) read the tables converted from it, identical to the post-processed ones, and the source
    is recorded as the zip."""
    import shutil

    from ehrxqa_pipeline.release.manifest import source_digests
    from ehrxqa_pipeline.sources.layout import SourceLayout
    from ehrxqa_pipeline.sources.validate import validate_source

    tabular_root, _ = small_source
    zip_root, _ = source_copy
    shutil.rmtree(zip_root / "chest-imagenome/1.0.0/silver_dataset/scene_tabular")
    layout = SourceLayout(zip_root, cache_dir=tmp_path / "cache")
    report = validate_source(layout)
    assert report.ok, report.format()
    shown = "chest-imagenome/1.0.0/silver_dataset/scene_graph.zip (as bbox_objects_tabular.txt)"
    assert report.files[shown]["rows"] == report.stats["rows"]["silver_bbox"] > 0
    for table in ("silver_bbox", "silver_relations"):
        tables = []
        for root in (tabular_root, layout):
            con = duckdb.connect()
            res = ingest_table(con, root, load_contract(f"ingest/{table}"), tmp_path)
            tables.append((res.rows, res.reasons, con.execute(f"SELECT * FROM ingest.{table}").pl(),
                           con.execute(f"SELECT * FROM ingest.{table}_rejected").pl()))
        assert tables[0][0] > 0 and tables[0][:2] == tables[1][:2]
        assert tables[0][2].equals(tables[1][2]) and tables[0][3].equals(tables[1][3])
        assert source_digests(layout)[table]["files"] == ["chest-imagenome/1.0.0/silver_dataset/scene_graph.zip"]
    (zip_root / "chest-imagenome/1.0.0/silver_dataset/scene_graph.zip").unlink()
    with pytest.raises(SourceError, match="or chest-imagenome/1.0.0/silver_dataset/scene_graph.zip that it is made"):
        resolve(zip_root, "silver_bbox")
