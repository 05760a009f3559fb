import gzip
import pickle
from datetime import date, datetime

import polars as pl
import pytest

from ehrxqa_pipeline.sources import files
from ehrxqa_pipeline.sources.errors import SourceError
from ehrxqa_pipeline.sources.readers import cxr_study_datetime, read_header, read_table, resolve, scan_raw, scan_table
from ehrxqa_pipeline.sources.schema import TABLES

PATIENTS_GZ = "mimiciv/2.2/hosp/patients.csv.gz"


def _error(fn, *args, **kwargs) -> SourceError:
    with pytest.raises(SourceError) as info:
        fn(*args, **kwargs)
    return info.value


def test_resolve_prefers_plain_file_over_gz(source):
    assert resolve(source.root, "patients") == source.root / PATIENTS_GZ
    plain = source.root / "mimiciv/2.2/hosp/patients.csv"
    plain.write_bytes(gzip.decompress((source.root / PATIENTS_GZ).read_bytes()))
    assert resolve(source.root, "patients") == plain


def test_resolve_missing_file_names_both_candidates(source):
    source.path("patients").unlink()
    err = _error(resolve, source.root, "patients")
    assert err.file == "mimiciv/2.2/hosp/patients.csv[.gz]"
    assert "expected mimiciv/2.2/hosp/patients.csv or mimiciv/2.2/hosp/patients.csv.gz" in str(err)
    assert err.fix.startswith("download the file from PhysioNet")


def test_resolve_does_not_accept_gz_where_the_release_has_none(source):
    path = source.path("silver_bbox")
    gz = path.with_name(path.name + ".gz")
    gz.write_bytes(gzip.compress(path.read_bytes()))
    path.unlink()
    err = _error(resolve, source.root, "silver_bbox")
    assert "(expected chest-imagenome/1.0.0/silver_dataset/scene_tabular/bbox_objects_tabular.txt, or " in str(err)


def test_unknown_table_is_a_programming_error(source):
    with pytest.raises(ValueError, match="unknown source table 'nope'"):
        resolve(source.root, "nope")


def test_header_missing_required_column(source):
    header = [c for c in TABLES["patients"].header if c != "anchor_age"]
    source.write("patients", header=header)
    err = _error(read_header, source.root, "patients")
    assert err.file == PATIENTS_GZ
    assert err.column == "anchor_age"
    assert str(err).startswith(f"{PATIENTS_GZ}: required column 'anchor_age' is missing from the header "
                               "(the header has: subject_id, gender, anchor_year, anchor_year_group, dod). Fix: ")
    # scans fail eagerly, before anything is collected
    assert _error(scan_table, source.root, "patients").column == "anchor_age"


def test_header_several_missing_columns_and_separator_hint(source):
    source.write("silver_bbox", raw=b"object_id,x1,y1\na_b,1,2\n")
    err = _error(read_header, source.root, "silver_bbox")
    assert "required columns 'object_id', 'x1', 'y1', 'x2'" in str(err)
    assert "the separator looks wrong (expected a tab)" in err.fix


def test_extra_and_missing_optional_columns_are_fine(source):
    header = [c for c in TABLES["patients"].header if c != "anchor_year_group"] + ["extra_col"]
    source.write("patients", header=header)
    df = read_table(source.root, "patients")
    assert df.columns == ["subject_id", "gender", "anchor_age", "anchor_year", "dod"]


def test_typed_scan_schema_row_numbers_and_nulls(source):
    df = scan_table(source.root, "patients").collect()
    assert df.schema == pl.Schema({"subject_id": pl.Int64, "gender": pl.String, "anchor_age": pl.Int64,
                                   "anchor_year": pl.Int64, "anchor_year_group": pl.String, "dod": pl.Date,
                                   "_row": pl.Int64, "_parse_error": pl.String})
    assert df["_row"].to_list() == [1, 2, 3]
    assert df["dod"].to_list() == [None, date(2151, 3, 4), None]  # empty string -> null, not an error
    assert df["_parse_error"].null_count() == 3
    adm = read_table(source.root, "admissions")
    assert adm.schema["admittime"] == pl.Datetime("us") and adm["deathtime"][0] is None


def test_scan_raw_is_all_strings(source):
    lf = scan_raw(source.root, "cxr_metadata")
    assert set(lf.collect_schema().dtypes()) == {pl.String}
    assert lf.collect()["StudyTime"].to_list()[2] == "80102.5"


def test_bad_value_is_quarantined_by_scan_and_fatal_for_read(source):
    rows = source.rows["patients"]
    rows[1]["anchor_age"] = "abc"
    rows[2]["dod"] = "03/04/2151"
    source.write("patients", rows)
    df = scan_table(source.root, "patients").collect(engine="streaming")
    assert df["_parse_error"].to_list() == [None, "anchor_age='abc'", "dod='03/04/2151'"]
    assert df["anchor_age"].to_list() == [52, None, 80]
    err = _error(read_table, source.root, "patients")
    assert (err.file, err.column, err.row, err.value, err.count) == (PATIENTS_GZ, "anchor_age", 2, "abc", 2)
    assert str(err).startswith(f"{PATIENTS_GZ}: column 'anchor_age' has a value that is not an integer "
                               "(row 2: 'abc'; 2 bad rows in all). Fix: ")


def test_read_table_columns_subset(source):
    rows = source.rows["patients"]
    rows[1]["anchor_age"] = "abc"
    source.write("patients", rows)
    df = read_table(source.root, "patients", columns=["subject_id", "gender"])
    assert df.columns == ["subject_id", "gender"] and df.height == 3
    source.write("patients", header=[c for c in TABLES["patients"].header if c != "anchor_year_group"])
    err = _error(read_table, source.root, "patients", columns=["subject_id", "anchor_year_group"])
    assert "column 'anchor_year_group' is not in the file" in str(err)


def test_datetime_formats(source):
    rows = source.rows["icustays"]
    rows[0]["intime"] = "2150-01-01 10:00:00.250"
    rows[1]["intime"] = "2150-01-02"
    rows[2]["intime"] = "2150-01-03 10:00"
    source.write("icustays", rows)
    df = scan_table(source.root, "icustays").collect()
    assert df["intime"].to_list() == [datetime(2150, 1, 1, 10, 0, 0, 250000), datetime(2150, 1, 2), None]
    assert df["_parse_error"][2] == "intime='2150-01-03 10:00'"
    err = _error(read_table, source.root, "icustays")
    assert "column 'intime' has a value that is not a date-time (YYYY-MM-DD HH:MM:SS) (row 3:" in str(err)


@pytest.mark.parametrize("name", ["patients", "cxr_metadata", "labevents", "inputevents"])
def test_plain_and_gz_read_identically(source, name):
    from_gz = read_table(source.root, name)
    source.write(name, gz=False)
    assert resolve(source.root, name).suffix == ".csv"
    assert read_table(source.root, name).equals(from_gz)


def test_truncated_gzip(source):
    data = source.path("labevents").read_bytes()
    big = gzip.compress(gzip.decompress(data) * 200, mtime=0)
    source.path("labevents").write_bytes(big[: len(big) - 20])
    err = _error(scan_raw, source.root, "labevents")
    assert err.file == "mimiciv/2.2/hosp/labevents.csv.gz"
    assert str(err).startswith("mimiciv/2.2/hosp/labevents.csv.gz: truncated or corrupt gzip (")
    assert "re-download" in err.fix


def test_not_a_gzip_at_all(source):
    source.path("d_items").write_bytes(b"itemid,label\n1,x\n")
    err = _error(read_table, source.root, "d_items")
    assert "truncated or corrupt gzip" in str(err) and err.file == "mimiciv/2.2/icu/d_items.csv.gz"


def test_gzip_verified_once_per_file_version(source, monkeypatch):
    calls = []
    real = files.verify_gzip
    monkeypatch.setattr(files, "verify_gzip", lambda *a, **k: (calls.append(a[0]), real(*a, **k)))
    scan_raw(source.root, "d_labitems")
    scan_raw(source.root, "d_labitems")
    assert len(calls) == 1
    rows = source.rows["d_labitems"][:2]
    source.write("d_labitems", rows)  # new size -> verified again
    scan_raw(source.root, "d_labitems")
    assert len(calls) == 2


def test_large_gzip_is_decompressed_once_into_cache(source, tmp_path, monkeypatch):
    monkeypatch.setattr(files, "LARGE_GZIP_BYTES", 0)
    cache = tmp_path / "cache"
    expected = read_table(source.root, "chartevents")
    assert read_table(source.root, "chartevents", cache_dir=cache).equals(expected)
    copies = [p for p in cache.iterdir()]
    assert len(copies) == 1 and copies[0].name.endswith("-chartevents.csv")
    first_mtime = copies[0].stat().st_mtime_ns
    scan_table(source.root, "chartevents", cache).collect()
    assert copies[0].stat().st_mtime_ns == first_mtime  # reused, not rewritten
    source.write("chartevents", source.rows["chartevents"][:1])
    assert read_table(source.root, "chartevents", cache_dir=cache).height == 1
    assert len(list(cache.iterdir())) == 1  # the stale copy is gone


def test_truncated_large_gzip_leaves_no_cache_file(source, tmp_path, monkeypatch):
    monkeypatch.setattr(files, "LARGE_GZIP_BYTES", 0)
    data = source.path("outputevents").read_bytes()
    source.path("outputevents").write_bytes(data[:-12])
    cache = tmp_path / "cache"
    assert "truncated or corrupt gzip" in str(_error(scan_raw, source.root, "outputevents", cache))
    assert list(cache.iterdir()) == []


def test_scan_table_streams_to_parquet(source, tmp_path):
    out = tmp_path / "t.parquet"
    scan_table(source.root, "silver_relations").sink_parquet(out)
    df = pl.read_parquet(out)
    assert df.height == 9 and df.schema["relation"] == pl.Int64 and df.schema["sent_loc"] == pl.Float64


def test_malformed_csv_is_a_source_error(source):
    source.write("d_labitems", raw=b"itemid,label,fluid,category\n1,a,b,c\n2,a,b,c,d,e\n")
    err = _error(read_table, source.root, "d_labitems")
    assert str(err).startswith("mimiciv/2.2/hosp/d_labitems.csv.gz: cannot be read as CSV (")


def test_empty_file(source):
    source.write("d_labitems", raw=b"")
    assert "file is empty (no header line)" in str(_error(read_header, source.root, "d_labitems"))


def test_source_error_pickles():
    err = SourceError("a.csv", "column 'x' has a value that is not an integer", column="x", row=3, value="q",
                      count=4, fix="do it")
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) == ("a.csv: column 'x' has a value that is not an integer "
                                     "(row 3: 'q'; 4 bad rows in all). Fix: do it")


@pytest.mark.parametrize("study_date, study_time, expected", [
    (21500101, 1234.5, datetime(2150, 1, 1, 0, 12, 34, 500000)),
    (21500101, 123456.789, datetime(2150, 1, 1, 12, 34, 56, 789000)),
    (21500101, 0.0, datetime(2150, 1, 1)),
    (21500101, 80102.5, datetime(2150, 1, 1, 8, 1, 2, 500000)),
    (21500101, 235959.999, datetime(2150, 1, 1, 23, 59, 59, 999000)),
    (21500101, 59.9994, datetime(2150, 1, 1, 0, 0, 59, 999000)),  # rounded to ms
    (21500101, 59.9996, None),  # rounds to second 60, which the builders' parse rejects too
    (21521231, 5.25, datetime(2152, 12, 31, 0, 0, 5, 250000)),
    (21500229, 100000.0, None),  # 2150 is no leap year
    (21501301, 100000.0, None),
    (21500101, 240000.0, None),
    (21500101, 126000.0, None),  # minute 60
    (21500101, -1.0, None),
    (None, 100000.0, None),
    (21500101, None, None),
])
def test_cxr_study_datetime(study_date, study_time, expected):
    df = pl.DataFrame({"StudyDate": [study_date], "StudyTime": [study_time]},
                      schema={"StudyDate": pl.Int64, "StudyTime": pl.Float64})
    out = df.select(cxr_study_datetime())
    assert out.dtypes == [pl.Datetime("us")]
    assert out.item() == expected


def test_cxr_study_datetime_on_the_metadata(source):
    df = read_table(source.root, "cxr_metadata").select(
        cxr_study_datetime(pl.col("StudyDate"), "StudyTime").alias("t"))
    assert df["t"].to_list()[2:] == [datetime(2150, 2, 3, 8, 1, 2, 500000), datetime(2150, 3, 5, 0, 12, 34, 500000)]


def test_invalid_utf8_does_not_abort_a_scan(source):
    raw = (b"itemid,label,fluid,category\n1,caf\xe9,Blood,Chemistry\n2,ok,Urine,\n")
    source.write("d_labitems", raw=raw)
    df = read_table(source.root, "d_labitems")
    assert df["label"].to_list() == ["caf\ufffd", "ok"] and df["category"][1] is None


def test_columns_follow_file_order(source):
    header = ["dod", "anchor_age", "gender", "subject_id", "anchor_year"]
    source.write("patients", header=header)
    df = read_table(source.root, "patients")
    assert df.columns == header
    assert df["subject_id"].to_list() == [10000032, 10000033, 11000011]
