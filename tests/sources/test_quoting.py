"""Quotes in Chest ImaGenome's TSVs: read every case the published pandas reader reads, with the same values
in the required columns, and validate-source and ingestion agree (both accept, both report the reading)."""

import io

import duckdb
import pytest

from ehrxqa_pipeline.contracts import load_contract
from ehrxqa_pipeline.ingest import ingest_table
from ehrxqa_pipeline.sources.files import quoting
from ehrxqa_pipeline.sources.readers import read_table, scan_raw
from ehrxqa_pipeline.sources.schema import TABLES
from ehrxqa_pipeline.sources.validate import validate_source

from .conftest import encode_table

SILVER_REL = "chest-imagenome/1.0.0/silver_dataset/scene_tabular/attribute_relations_tabular.txt"
REQUIRED = list(TABLES["silver_relations"].required)
# An extra column before the required ones ends, as a real file may carry (e.g. the report sentence).
HEADER = ["study_id", "image_id", "row_id", "sent_loc", "phrase", "bbox", "relation", "label_name", "categoryID",
          "context"]


def _file(source, phrases: list[str], contexts: list[str] | None = None) -> bytes:
    """The tiny source's silver relations with raw text written into ``phrase`` / ``context`` as given."""
    rows = source.rows["silver_relations"]
    lines = encode_table("silver_relations", rows, HEADER).decode().splitlines()
    out = [lines[0]]
    for i, line in enumerate(lines[1:]):
        fields = line.split("\t")
        fields[HEADER.index("phrase")] = phrases[i % len(phrases)]
        if contexts:
            fields[-1] = contexts[i % len(contexts)]
        out.append("\t".join(fields))
    return ("\n".join(out) + "\n").encode()


def _pandas(data: bytes):
    import pandas as pd  # here, not at collection: only these tests need it (0.4-0.7 s of a worker's start)

    return pd.read_csv(io.BytesIO(data), sep="\t")  # the published reader


CASES = {
    # A quote that opens a field but does not enclose it: pandas drops the quotes ("clear lungs").
    "quote_at_field_start": (['"clear" lungs', "no effusion"], ['"yes" per report', "no"], True),
    # Quotes inside a field: literal for both readers.
    "quote_mid_field": (['the "clear" lungs', "no effusion"], ['was "no"', "yes"], False),
    # What pandas' to_csv writes: doubled inner quotes, and a quoted tab.
    "pandas_quoted": (['"the ""clear"" lungs"', '"left\tbase"'], ['"yes"', "no"], False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_case_reads_like_pandas_and_validates_and_ingests(source, tmp_path, case):
    phrases, contexts, literal = CASES[case]
    data = _file(source, phrases, contexts)
    source.write("silver_relations", raw=data)
    n = len(source.rows["silver_relations"])
    assert quoting(source.root, "silver_relations").literal is literal
    ours = read_table(source.root, "silver_relations")
    theirs = _pandas(data)
    assert ours.height == len(theirs) == n
    for column in REQUIRED:
        assert ours[column].to_list() == theirs[column].to_list(), column
    if case == "pandas_quoted":  # standard quoting: the text values are pandas' too
        assert ours["context"].to_list() == theirs["context"].to_list()
        raw = scan_raw(source.root, "silver_relations").collect()
        assert raw["phrase"].to_list()[:2] == ['the "clear" lungs', "left\tbase"]
    report = validate_source(source.root)
    assert report.ok, report.format()
    notes = [p for p in report.warnings if p.file == SILVER_REL]
    assert report.stats["rows"]["silver_relations"] == n
    res = ingest_table(duckdb.connect(), source.root, load_contract("ingest/silver_relations"), tmp_path)
    assert (res.rows, res.rejected) == (n, 0)
    if literal:
        assert [p.message for p in notes] == [
            "a field of column 'phrase' starts with a quote that does not enclose it, so quotes are read as "
            "ordinary characters in this file (the published pandas reader accepts such fields too, dropping "
            f"their quotes); {n} rows read"]
        assert res.quoting == quoting(source.root, "silver_relations").reason
        assert ours["context"].to_list()[0] == '"yes" per report'  # kept as written (pandas: 'yes per report')
    else:
        assert notes == [] and res.quoting is None


def test_a_file_needing_both_readings_fails_naming_file_and_reason(source):
    source.write("silver_relations", raw=_file(source, ['"clear" lungs', '"left\tbase"']))
    report = validate_source(source.root)
    error = next(p for p in report.errors if p.file == SILVER_REL)
    assert error.message.startswith("cannot be read as TSV (")
    assert "quotes are read as ordinary characters" in error.message and "fails too" in error.message


def test_the_decision_follows_the_file_version(source):
    source.write("silver_relations", raw=_file(source, ['"clear" lungs']))
    assert quoting(source.root, "silver_relations").literal
    source.write("silver_relations", raw=_file(source, ['"clear, quoted lungs"']))  # another size
    assert not quoting(source.root, "silver_relations").literal
