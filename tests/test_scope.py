"""Out-of-scope rows (contract scope rules) versus bad input, on a planted copy of the small source:
Chest ImaGenome categories the builders do not use are skipped and counted, everywhere alike (validator,
ingestion, quarantine check, contract check with its GX suite); unknown categories stay bad input."""

import duckdb
import pytest

from ehrxqa_pipeline.cli import main
from ehrxqa_pipeline.contracts import load_contract
from ehrxqa_pipeline.ingest import ingest_table
from ehrxqa_pipeline.quality import check_gx, check_quarantine, check_types_and_keys
from ehrxqa_pipeline.sources.readers import resolve
from ehrxqa_pipeline.sources.validate import validate_source
from tests.textfiles import edit, read_text

pytestmark = pytest.mark.slow  # Dagster runs of ingestion: not in `make test-fast`

SCOPE = "out_of_scope:builder_category"


def _plant(root, table: str, category: str) -> tuple[int, int]:
    """Append copies of the first 5% of the rows (at least one) with another categoryID; (rows, planted)."""
    path = resolve(root, table)
    lines = read_text(path).splitlines()
    header, rows = lines[0].split("\t"), lines[1:]
    at = header.index("categoryID")
    k = max(1, len(rows) // 20)
    planted = []
    for line in rows[:k]:
        fields = line.split("\t")
        fields[at] = category
        planted.append("\t".join(fields))
    edit(path, lambda text: text + "".join(f + "\n" for f in planted))
    return len(rows), k


@pytest.mark.parametrize("table", ["silver_relations", "gold_relations"])
def test_other_chest_imagenome_categories_are_out_of_scope(source_copy, small_source, tmp_path, capsys, table):
    root, _ = source_copy
    n, k = _plant(root, table, "texture")
    # The validator: exit 0, the count reported as a note.
    assert main(["validate-source", str(root)]) == 0
    assert f"{k:,} of {n + k:,} rows are out of scope ({SCOPE} {k:,})" in capsys.readouterr().out
    report = validate_source(root)
    assert report.stats["out_of_scope"][table] == {SCOPE: k} and report.stats["quarantine"][table] == {}
    rel = resolve(root, table).relative_to(root).as_posix()
    assert [p.severity for p in report.problems if p.file == rel] == ["note"]
    # Ingestion: kept apart in the rejected table, not quarantined; the checks pass.
    con = duckdb.connect()
    contract = load_contract(f"ingest/{table}")
    res = ingest_table(con, root, contract, tmp_path / "stage")
    assert (res.rows, res.rejected, res.reasons, res.out_of_scope) == (n, 0, {}, {SCOPE: k})
    assert res.source_rows == n + k
    assert con.execute(f"SELECT reason, count(*), min(categoryID), max(categoryID) FROM ingest.{table}_rejected "
                       "GROUP BY reason").fetchall() == [(SCOPE, k, "texture", "texture")]
    quarantine = check_quarantine(con, contract)
    assert quarantine.passed and quarantine.metadata["out_of_scope_rows"] == k
    assert quarantine.metadata["rejected_rows"] == 0
    assert check_types_and_keys(con, contract).passed and check_gx(con, contract).passed
    # The table the build goes on with is the one of the source without the planted rows.
    clean = duckdb.connect()
    ingest_table(clean, small_source[0], contract, tmp_path / "stage_clean")
    assert con.execute(f"SELECT * FROM ingest.{table}").fetchall() == \
        clean.execute(f"SELECT * FROM ingest.{table}").fetchall()


@pytest.mark.parametrize("table", ["silver_relations", "gold_relations"])
def test_unknown_categories_are_bad_input(source_copy, tmp_path, capsys, table):
    root, _ = source_copy
    n, k = _plant(root, table, "garbage")
    assert main(["validate-source", str(root)]) == 1
    report = validate_source(root)
    assert report.stats["quarantine"][table] == {"not_allowed:categoryID": k}
    error = next(p for p in report.errors if p.column == "categoryID")
    assert error.message == (f"{k:,} of {n + k:,} rows in scope ({k / (n + k):.2%}) would be quarantined "
                             f"(not_allowed:categoryID {k:,}); the contract allows 1.00%")
    con = duckdb.connect()
    contract = load_contract(f"ingest/{table}")
    res = ingest_table(con, root, contract, tmp_path / "stage")
    assert (res.rows, res.reasons, res.out_of_scope) == (n, {"not_allowed:categoryID": k}, {})
    assert not check_quarantine(con, contract).passed


def test_scope_is_checked_after_validity_and_on_the_ingested_table(source_copy, tmp_path):
    """A texture row that is also broken is bad input; a scope violation in the table fails the contract."""
    root, _ = source_copy
    path = resolve(root, "silver_relations")
    header = read_text(path).splitlines()[0].split("\t")
    row = dict(zip(header, read_text(path).splitlines()[1].split("\t")))
    edit(path, lambda text: text + "\t".join({**row, "categoryID": "texture", "relation": "7"}.get(c, "")
                                             for c in header) + "\n")
    con = duckdb.connect()
    contract = load_contract("ingest/silver_relations")
    res = ingest_table(con, root, contract, tmp_path)
    assert (res.reasons, res.out_of_scope) == ({"not_allowed:relation": 1}, {})
    con.execute("UPDATE ingest.silver_relations SET categoryID = 'texture' WHERE rowid < 3")
    outcome = check_types_and_keys(con, contract)
    assert not outcome.passed and outcome.metadata["rule_violations"] == {SCOPE: 3}


def test_the_great_expectations_checks_draw_no_progress_bars(tmp_path):
    """In a build, torch (the VQA steps) imports tqdm before the first contract check, and tqdm reads
    TQDM_DISABLE only then: the check turns Great Expectations' "Calculating Metrics" bars off itself. In a fresh
    interpreter that imported tqdm with the variable unset, as a build's process has."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import os
        os.environ.pop("TQDM_DISABLE", None)
        import tqdm, duckdb
        from ehrxqa_pipeline.contracts import load_contract
        from ehrxqa_pipeline.quality import check_gx
        contract = load_contract("ingest/d_labitems")
        con = duckdb.connect()
        con.execute("CREATE SCHEMA ingest")
        con.execute(f"CREATE TABLE ingest.d_labitems ({contract.duckdb_columns()})")
        print("expectations", check_gx(con, contract).metadata["expectations"])
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "expectations" in run.stdout, run.stderr[-2000:]
    assert "Calculating Metrics" not in run.stderr, run.stderr[-500:]
