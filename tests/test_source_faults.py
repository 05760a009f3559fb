"""Readers on a generated source with one planted fault each: a SourceError naming file, column and fix."""

import pytest

from ehrxqa_pipeline.sources.errors import SourceError
from ehrxqa_pipeline.sources.readers import read_table, resolve, scan_table
from tests.textfiles import edit


def _missing_column(text):  # drops patients.dod
    return "".join(",".join(line.split(",")[:-1]) + "\n" for line in text.splitlines())


def _wrong_type(text):  # every anchor_age becomes text
    lines = text.splitlines()
    out = [lines[0]] + [",".join(f[:2] + ["old"] + f[3:]) for f in (line.split(",") for line in lines[1:])]
    return "\n".join(out) + "\n"


def test_missing_file(source_copy):
    root, _ = source_copy
    resolve(root, "labevents").unlink()
    with pytest.raises(SourceError) as e:
        scan_table(root, "labevents")
    assert "mimiciv/2.2/hosp/labevents.csv" in str(e.value) and e.value.fix


def test_missing_column(source_copy):
    root, _ = source_copy
    edit(resolve(root, "patients"), _missing_column)
    with pytest.raises(SourceError) as e:
        scan_table(root, "patients")
    assert e.value.file.startswith("mimiciv/2.2/hosp/patients.csv") and "dod" in str(e.value)


def test_wrong_type(source_copy):
    root, manifest = source_copy
    edit(resolve(root, "patients"), _wrong_type)
    with pytest.raises(SourceError) as e:
        read_table(root, "patients")
    assert e.value.column == "anchor_age" and e.value.value == "old"
    assert e.value.count == manifest["rows"]["patients"]
    assert "patients.csv" in str(e.value) and "Fix:" in str(e.value)


def test_truncated_gzip(source_copy):
    root, _ = source_copy
    path = resolve(root, "admissions")
    assert path.suffix == ".gz"
    path.write_bytes(path.read_bytes()[:-200])
    with pytest.raises(SourceError) as e:
        scan_table(root, "admissions")
    assert "admissions.csv.gz" in str(e.value) and "gzip" in str(e.value)
