"""The work kept between builds (questions/ehrxqa/memo.py): an edited table re-draws only the templates whose
draws read it (the answer sheet: the image templates that found a study), a damaged memo or a changed schema
everything; the check runs again only the templates whose
items, or the tables their queries name, changed; and the result is always the one a fresh run gives."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from ehrxqa_pipeline.ehr import ddl
from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX, records, sampling
from ehrxqa_pipeline.questions.ehrxqa.memo import CODE_FILES, SCHEMA, code_digest
from ehrxqa_pipeline.questions.ehrxqa.records import check_stored, stored_frame
from ehrxqa_pipeline.questions.ehrxqa.sampling import DatabaseFiles, SamplingCaps, sample_database

TABLE = tuple(range(12))  # table templates that keep 2 items each on the table-template database
IMAGE = (1001, 3000)  # image templates: an empty pool there (no study), drawn on the database with its sheet
CAPS = SamplingCaps(train_valid=8, test=2)


@pytest.fixture
def files(table_db_path, tmp_path) -> DatabaseFiles:
    """The table-template database without TB_CXR_PLUS, and an answer sheet file of its own."""
    database, sheet = tmp_path / "mimic_iv_cxr.db", tmp_path / "tb_cxr_plus.db"
    database.write_bytes(Path(table_db_path).read_bytes())
    with sqlite3.connect(database) as c:
        c.execute("DROP TABLE tb_cxr_plus")
    with sqlite3.connect(sheet) as c:
        c.execute(ddl.create_sql(ddl.ANSWER_TABLE, "sqlite"))
        for statement in ddl.index_sql(ddl.ANSWER_TABLE):
            c.execute(statement)
    return DatabaseFiles(database, sheet)


@pytest.fixture
def drawn(monkeypatch) -> list[list[int]]:
    """The template indices of each chunk sampled (in this process: workers=1)."""
    calls, real = [], sampling._sample_chunk

    def spy(files, database, seed, caps, indices):
        calls.append(list(indices))
        return real(files, database, seed, caps, indices)
    monkeypatch.setattr(sampling, "_sample_chunk", spy)
    return calls


def _sample(files, memo=None):
    return sample_database(files, "gold", 0, CAPS, templates=[BY_INDEX[i] for i in TABLE + IMAGE], memo=memo)


def _reads(memo: Path) -> dict[int, set[str]]:
    """Template index -> the tables the memo keeps its items under."""
    return {int(name.split("/")[1]): set(entry["value"]["reads"]) - {SCHEMA}
            for name, entry in json.loads(memo.read_text()).items()}


def test_a_template_is_drawn_again_only_when_a_table_its_draws_read_changes(files, drawn, tmp_path):
    memo = tmp_path / "cache" / "sample.json"
    first = _sample(files, memo)
    assert sorted(i for chunk in drawn for i in chunk) == sorted(TABLE + IMAGE)
    assert all(set(chunk) <= set(TABLE) or set(chunk) <= set(IMAGE) for chunk in drawn)  # never mixed
    assert stored_frame(first).height == 2 * len(TABLE)

    drawn.clear()
    again = _sample(files, memo)
    assert drawn == [] and stored_frame(again).equals(stored_frame(first)) and again.reports == first.reports

    reads = _reads(memo)
    readers = sorted(i for i, tables in reads.items() if "prescriptions" in tables)
    assert readers and set(readers) < set(TABLE)  # e.g. template 0 asks a drug's intake method
    with sqlite3.connect(files.database) as c:
        assert c.execute("UPDATE prescriptions SET drug = 'warfarin' WHERE drug = 'heparin'").rowcount
    drawn.clear()
    edited = _sample(files, memo)
    assert sorted(i for chunk in drawn for i in chunk) == readers
    assert stored_frame(edited).equals(stored_frame(_sample(files))) and edited.reports == _sample(files).reports
    assert not stored_frame(edited).equals(stored_frame(first))  # the edit changed items: those were drawn again

    # a label edit: the answer sheet changes, the database not. These image templates find no study in TB_CXR
    # (empty pool): they never read TB_CXR_PLUS, and nothing is drawn again.
    assert all("tb_cxr_plus" not in reads[i] and "tb_cxr" in reads[i] for i in IMAGE)
    with sqlite3.connect(files.answer_sheet) as c:
        c.execute("INSERT INTO tb_cxr_plus VALUES (0, 1, 11, 5, 'x', 'pa', '2104-01-12 00:00:00', 1, 'left lung', 1, "
                  "'pneumonia', 'disease', NULL, NULL)")
    drawn.clear()
    assert stored_frame(_sample(files, memo)).equals(stored_frame(edited)) and drawn == []


@pytest.fixture
def image_files(db_path, tmp_path) -> DatabaseFiles:
    """The hand-built database with images, its TB_CXR_PLUS in an answer sheet file of its own."""
    database, sheet = tmp_path / "mimic_iv_cxr.db", tmp_path / "tb_cxr_plus.db"
    database.write_bytes(Path(db_path).read_bytes())
    sheet.write_bytes(Path(db_path).read_bytes())
    with sqlite3.connect(database) as c:
        c.execute("DROP TABLE tb_cxr_plus")
    return DatabaseFiles(database, sheet)


def test_a_label_edit_draws_the_templates_that_read_the_answer_sheet_a_drug_edit_those_that_read_drugs(
        image_files, drawn, tmp_path):
    """Image templates, and image+table ones of diagnoses and of prescriptions (which read the events of both),
    on the hand-built database with images: each edit re-draws what read the edited table, and the result is
    the one a fresh run gives."""
    chosen = [BY_INDEX[i] for i in (1001, 2001, 3000, 5000, 5020)]
    memo = tmp_path / "sample.json"

    def sample(memo=None):
        return sample_database(image_files, "gold", 0, CAPS, templates=chosen, memo=memo)

    assert stored_frame(sample(memo)).height > 2 * len(chosen) - 3
    reads = _reads(memo)
    assert all({"tb_cxr", "tb_cxr_plus"} <= reads[t.index] for t in chosen)
    assert [i for i in sorted(reads) if "prescriptions" in reads[i]] == [5000, 5020]
    with sqlite3.connect(image_files.answer_sheet) as c:  # a label flip
        assert c.execute("UPDATE tb_cxr_plus SET relation = 1 - relation WHERE row_id = 3").rowcount

    def drawn_again() -> list[int]:
        drawn.clear()
        edited = sample(memo)
        again = sorted(i for chunk in drawn for i in chunk)
        assert stored_frame(edited).equals(stored_frame(sample()))
        return again

    assert drawn_again() == [t.index for t in chosen]
    with sqlite3.connect(image_files.database) as c:
        assert c.execute("UPDATE prescriptions SET drug = upper(drug)").rowcount
    assert drawn_again() == [5000, 5020]


def test_a_damaged_memo_or_a_changed_schema_draws_everything_again(files, drawn, tmp_path):
    memo = tmp_path / "sample.json"
    first = _sample(files, memo)
    memo.write_text(memo.read_text()[:100])  # cut short: an empty memo
    drawn.clear()
    assert stored_frame(_sample(files, memo)).equals(stored_frame(first))
    assert sorted(i for chunk in drawn for i in chunk) == sorted(TABLE + IMAGE)
    json.loads(memo.read_text())  # written whole again

    with sqlite3.connect(files.database) as c:  # an index: the order of rows a query returns unordered
        c.execute("CREATE INDEX prescriptions_drug ON prescriptions (drug)")
    drawn.clear()
    assert stored_frame(_sample(files, memo)).equals(stored_frame(first))
    assert sorted(i for chunk in drawn for i in chunk) == sorted(TABLE + IMAGE)


def test_a_table_chunk_cannot_read_the_answer_sheet(files):
    with pytest.raises(sqlite3.OperationalError, match="no such table: tb_cxr_plus"):
        files.open(answer_sheet=False).execute("SELECT count(*) FROM tb_cxr_plus")
    assert files.open().execute("SELECT count(*) FROM tb_cxr_plus").fetchone() == (0,)


@pytest.fixture
def checked(monkeypatch) -> list[tuple[int, bool]]:
    """(items, images) of each chunk checked."""
    calls, real = [], records._check_chunk

    def spy(files, rows, parse_store, images):
        calls.append((len(rows), images))
        return real(files, rows, parse_store, images)
    monkeypatch.setattr(records, "_check_chunk", spy)
    return calls


def test_the_check_runs_a_templates_items_again_only_when_they_or_the_tables_they_name_change(files, checked,
                                                                                             tmp_path):
    memo = tmp_path / "check.json"
    frame = stored_frame(_sample(files))
    assert check_stored(frame, {"gold": files}, memo=memo) == [] and checked == [(frame.height, False)]
    checked.clear()
    log = []
    assert check_stored(frame, {"gold": files}, memo=memo, log=log.append) == [] and checked == []
    assert log == [f"{frame.height} items of {len(TABLE)} templates of the gold database passed before on the same "
                   "tables"]

    row = frame.row(0, named=True)  # a stale answer is other items: its template's run, and it is found
    tampered = frame.with_columns(answer=pl.when(pl.col("id") == row["id"]).then(pl.lit("[12345]"))
                                  .otherwise(pl.col("answer")))
    of_template = frame.filter(pl.col("template_index") == row["template_index"]).height
    bad = check_stored(tampered, {"gold": files}, memo=memo)
    assert [m.question for m in bad] == [row["question"]] and checked == [(of_template, False)]
    checked.clear()
    assert len(check_stored(tampered, {"gold": files}, memo=memo)) == 1 and checked  # a failure is not kept

    with sqlite3.connect(files.database) as c:  # the same content in an edited file: nothing runs again
        c.execute("UPDATE patients SET gender = gender")
        c.execute("CREATE TABLE edited (x)")
    checked.clear()
    assert check_stored(frame, {"gold": files}, memo=memo) == [] and checked == []

    with sqlite3.connect(files.database) as c:  # patients edited: the templates that name it, and what changed
        c.execute("UPDATE patients SET gender = CASE gender WHEN 'm' THEN 'f' ELSE 'm' END")
    naming = frame.filter(pl.col("gold_sql").str.contains("(?i)\\bpatients\\b"))
    assert sorted(set(naming["template_index"])) == [6, 7]  # sex (answers flip) and date of birth (kept)
    checked.clear()
    bad = check_stored(frame, {"gold": files}, memo=memo)
    assert checked == [(naming.height, False)] and {m.index for m in bad} == {6} and len(bad) == 2


def test_a_table_item_that_asks_an_image_question_fails_the_check(files):
    frame = stored_frame(_sample(files))
    with sqlite3.connect(files.database) as c:  # a study for the question to ask about
        c.execute("INSERT INTO tb_cxr VALUES (0, 1, 11, 5, 'x', 'pa', '2104-01-12 00:00:00')")
    image = 'select func_vqa("is there any abnormality?", tb_cxr.study_id) from tb_cxr'
    wrong = frame.with_columns(neural_sql=pl.when(pl.col("id") == 0).then(pl.lit(image)).otherwise("neural_sql"))
    (bad,) = check_stored(wrong, {"gold": files})
    assert "NeuralSQL error" in str(bad.neural) and "no VQA module" in str(bad.neural)


@pytest.mark.parametrize("modules, extra", [
    (("ehrxqa_pipeline.questions.ehrxqa.sampling", "ehrxqa_pipeline.questions.ehrxqa.records"), ()),
    (("ehrxqa_pipeline.vqa.scoring",), ("vqa",)),  # the scores' table items (vqa.evaluate.table_scores)
])
def test_the_code_digest_covers_what_the_kept_work_imports(modules, extra):
    """Every module of the package that importing the memoised code loads is in ``CODE_FILES`` (with the
    caller's ``extra``), apart from the memo's own file plumbing (``atomic`` and the process check its clean-up
    uses, ``pids``), the stored rows' schema and formatting, and where the work runs (``workers``), which change
    no result."""
    script = (f"import sys, {', '.join(modules)}; "
              "print('\\n'.join(m.__file__ for n, m in sys.modules.items() if n.startswith('ehrxqa_pipeline')))")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    package = Path(sampling.__file__).resolve().parents[2]
    exempt = {"__init__.py", "atomic.py", "pids.py", "hashing.py", "markdown.py", "contracts", "workers.py"}
    outside = sorted({Path(f).resolve().relative_to(package).parts[0] for f in loaded}
                     - {*CODE_FILES, *extra} - exempt)
    assert outside == []
    assert (package / "__init__.py").read_text().strip() == ""
    assert len(code_digest(extra)) == 32 and (code_digest(extra) == code_digest()) == (not extra)


def test_a_process_keeps_its_connection_and_what_it_made_while_the_files_stay(files):
    made = []
    first = sampling.kept_open(files, answer_sheet=True)
    assert first.once("x", lambda conn: made.append(conn) or len(made)) == 1
    again = sampling.kept_open(files, answer_sheet=True)
    assert again is first and again.once("x", lambda conn: made.append(conn) or len(made)) == 1
    assert sampling.kept_open(files, answer_sheet=False) is not first  # the database alone: another connection

    with sqlite3.connect(files.answer_sheet) as c:  # edited: closed, opened again, made again
        c.execute("CREATE TABLE edited (x)")
    edited = sampling.kept_open(files, answer_sheet=True)
    assert edited is not first and edited.once("x", lambda conn: made.append(conn) or len(made)) == 2
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        first.conn.execute("SELECT 1")

    other = DatabaseFiles(files.answer_sheet, files.answer_sheet)  # a third: the oldest of the three is closed
    sampling.kept_open(other, answer_sheet=True)
    assert len(sampling._KEPT) == sampling.KEPT_OPEN and (files, False) not in sampling._KEPT
    files.answer_sheet.unlink()
    with pytest.raises(FileNotFoundError, match="EHRXQA answer sheet not found: .*tb_cxr_plus.db. Materialize"):
        sampling.kept_open(files, answer_sheet=True)


def test_an_image_templates_check_depends_on_what_the_oracle_reads_besides_the_tables_its_queries_name(files):
    """The oracle answers from the answer sheet and each patient's gender in ``patients`` (``ORACLE_TABLES``): an
    image template's kept check goes with a patients edit even where its queries name no such table."""
    from ehrxqa_pipeline.questions.ehrxqa.memo import ResultMemo

    rows = [{"template_index": t, "scope": scope, "question": "q", "gold_sql": sql, "neural_sql": sql, "answer": "[1]"}
            for t, scope, sql in ((1001, "IMAGE-SINGLE", "select func_vqa('is the patient male?', t.study_id) from "
                                                        "tb_cxr t"), (5, "TABLE-NONE", "select label from d_items"))]
    kept = ResultMemo(files.database.parent / "memo.json")

    def inputs():
        return {t: v[0] for t, v in records._templates(kept, "gold", files, rows, pl.DataFrame(rows)).items()}
    before = inputs()
    with sqlite3.connect(files.database) as c:
        c.execute("UPDATE patients SET gender = CASE gender WHEN 'm' THEN 'f' ELSE 'm' END")
    after = inputs()
    assert after[1001] != before[1001] and after[5] == before[5]


def test_the_tables_a_templates_queries_name_are_found_as_words_in_any_case():
    from ehrxqa_pipeline.questions.ehrxqa.memo import tables_named

    items = pl.DataFrame({"template_index": [1, 1, 2, 3],
                          "gold_sql": ["SELECT * FROM Admissions a JOIN d_labitems USING (itemid)", "SELECT 1",
                                       "SELECT count(*) FROM patientsx", "SELECT 'patients' FROM cost"],
                          "neural_sql": ["SELECT 1", "select valuenum from LABEVENTS", "SELECT 1", "SELECT 1"]})
    tables = ["admissions", "d_labitems", "labevents", "patients", "cost"]
    assert tables_named(items, tables) == {1: ["admissions", "d_labitems", "labevents"],
                                           3: ["cost", "patients"]}  # a name in a string counts: it only redoes more
    assert tables_named(items, []) == {} and tables_named(items.clear(), tables) == {}


def test_table_digests_are_read_again_only_when_the_file_changed(files, monkeypatch):
    from ehrxqa_pipeline import hashing
    from ehrxqa_pipeline.questions.ehrxqa import memo

    monkeypatch.setattr(hashing, "_DIGESTS", {})
    calls, real = [], memo._table_digests
    monkeypatch.setattr(memo, "_table_digests", lambda path: calls.append(path) or real(path))
    first = memo.table_digests(files.database)
    assert memo.table_digests(files.database) == first and len(calls) == 1
    with sqlite3.connect(files.database) as c:
        c.execute("UPDATE patients SET gender = 'x' WHERE rowid = 1")
    edited = memo.table_digests(files.database)
    assert len(calls) == 2 and {k for k in first if edited[k] != first[k]} == {"patients"}
