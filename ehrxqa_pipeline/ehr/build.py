"""Build one integrated database (silver or gold) in the warehouse.

``build_database(con, which, config, seed)`` reads the ingested MIMIC-IV tables, the CXR cohort, the
label sets' image lists (which images are labelled, not their labels) and splits of the same DuckDB
warehouse and writes

* ``ehr_<which>``: the 17 MIMIC-IV-derived tables + TB_CXR (the user-facing database, ``ddl.TABLES``);
* ``ehr_<which>_build``: the work tables (``_images``, ``_admissions``, ``_candidates``, ``_sampled``,
  ``_offsets``, ``_links``, ``_label_images``, prices) and every table's dropped rows with their reason
  (``<table>_rejected``).

``build_answer_sheet(con, which)`` then writes ``ehr_<which>_answers.tb_cxr_plus``, the answer sheet, kept
apart from the user-facing database: TB_CXR x the possible pairs with the labels of ``cxr_labels``. Two
steps, so that a label edit rebuilds the answer sheet and leaves the database as it is (issue 23).

Steps: image set and cohort rules (``cohort``), patient draw, per-patient offsets (``timeshift``), the
study -> admission link and which images are labelled (``tb_cxr``), the price list (``cost``), then every
table in parent-first order (``tables``, ``stage.materialize``). The tables are written to a staging schema
and copied into ``ehr_<which>`` in one transaction at the end (the answer sheet is written in place into
``ehr_<which>_answers`` in one transaction), so a failed build leaves the previous database and sheet intact.
Each random step has its own generator (``rng.generator(seed, "ehr_db.<which>.<step>")``): the same warehouse,
config and seed give identical table contents.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import duckdb

from ehrxqa_pipeline import filters
from ehrxqa_pipeline.cxr import ratios
from ehrxqa_pipeline.ehr import tables as T
from ehrxqa_pipeline.ehr.cohort import sample_patients, stage_candidates
from ehrxqa_pipeline.ehr.config import DbConfig, schemas
from ehrxqa_pipeline.ehr.cost import build_prices, cost_sql
from ehrxqa_pipeline.ehr.ddl import ANSWER_TABLE, BY_NAME, TABLES
from ehrxqa_pipeline.ehr.stage import materialize
from ehrxqa_pipeline.ehr.export import ExportResult, exported_answer_sheet
from ehrxqa_pipeline.ehr.tb_cxr import LABELS, LATER, stage_answer_labels, stage_label_images, stage_links, \
    tb_cxr_plus_sql, tb_cxr_sql
from ehrxqa_pipeline.ehr.timeshift import compute_offsets
from ehrxqa_pipeline.hashing import combine, file_digest
from ehrxqa_pipeline.warehouse import content_digest, transaction

BUILD_ORDER = ("patients", "admissions", "d_icd_diagnoses", "d_icd_procedures", "d_labitems", "d_items",
               "icustays", "transfers", "diagnoses_icd", "procedures_icd", "labevents", "prescriptions",
               "chartevents", "inputevents", "outputevents", "microbiologyevents", "cost", "tb_cxr")
assert sorted(BUILD_ORDER) == sorted(t.name for t in TABLES)


@dataclass
class DbResult:
    """What one build did: sizes, rows per table, dropped rows per table and reason, link and label counts."""

    which: str
    seed: int
    schema: str
    build_schema: str
    requested_patients: int
    patients: int
    current_patients: int
    current_patients_target: int  # round(current_ratio * patients)
    current_patients_drawn: int  # the target, clamped to the patients who can be current (see messages)
    admissions: int
    rows: dict[str, int]
    rejected: dict[str, dict[str, int]]  # table -> reason -> rows of the sampled patients dropped
    candidates: dict  # eligibility funnel over all candidate patients (before the draw)
    link: dict[str, int]
    labels: dict
    offsets: dict
    coverage: dict  # patients left without admissions / without TB_CXR rows after the time frame
    messages: list[str] = field(default_factory=list)

    @property
    def answers_schema(self) -> str:
        """Where ``build_answer_sheet`` puts this database's answer sheet."""
        return schemas(self.which)[1]

    def metadata(self) -> dict:
        """Flat values for Dagster asset metadata."""
        out = {k: v for k, v in asdict(self).items() if isinstance(v, (int, float, str)) or v is None}
        out.update({f"rows_{k}": v for k, v in self.rows.items()})
        out.update({f"rejected_{t}_{r}": n for t, reasons in self.rejected.items() for r, n in reasons.items()})
        out.update({f"link_{k}": v for k, v in self.link.items()})
        out.update({f"labels_{k}": v for k, v in self.labels.items()})
        out["messages"] = "; ".join(self.messages)
        return out


def _staged(name: str, ctx: T.Ctx) -> str:
    if name in ("d_icd_diagnoses", "d_icd_procedures"):
        return T.d_icd(ctx, name)
    if name == "cost":
        return cost_sql(ctx.schema, ctx.build)
    if name == "tb_cxr":
        return tb_cxr_sql(ctx)
    return T.BUILDERS[name](ctx)


def build_database(con: duckdb.DuckDBPyConnection, which: str, config: DbConfig | None = None,
                   seed: int = 0) -> DbResult:
    """Build ``ehr_<which>`` (see the module docstring)."""
    config = config or DbConfig()
    schema, _, build = schemas(which)
    stage = f"{schema}_next"
    for s in (build, stage):
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")

    cand = stage_candidates(con, which, config, build)
    sampling = sample_patients(con, which, config, seed, build)
    offsets = compute_offsets(con, which, config, seed, build)
    link = stage_links(con, build)
    labels = stage_label_images(con, which, build)
    build_prices(con, seed, build)
    for name in ("d_icd_diagnoses", "d_icd_procedures"):
        con.execute(f"CREATE OR REPLACE TABLE {build}._{name} AS {T.icd_dictionary(name)}")

    ctx = T.Ctx(stage, build, config)
    rows, rejected = {}, {}
    for name in BUILD_ORDER:
        rows[name], rejected[name] = materialize(con, BY_NAME[name], _staged(name, ctx), stage, build,
                                                 T.ORDER[name])

    # patients_rejected holds the candidates set aside before the draw (not_in_mimiciv, no_eligible_admission);
    # eligible patients the draw did not take are counted only
    rejected["patients"]["not_drawn"] = sampling.eligible - sampling.n_patients
    link["linked_admission_not_in_database"] = con.execute(f"""
        SELECT count(*) FROM {stage}.tb_cxr t JOIN {build}._links l USING (study_id)
        WHERE l.hadm_id IS NOT NULL AND t.hadm_id IS NULL""").fetchone()[0]
    link["tb_cxr_with_admission"] = con.execute(
        f"SELECT count(*) FROM {stage}.tb_cxr WHERE hadm_id IS NOT NULL").fetchone()[0]
    current = con.execute(f"SELECT count(DISTINCT subject_id) FROM {stage}.admissions "
                          f"WHERE dischtime IS NULL").fetchone()[0]
    coverage = dict(zip(("patients_without_admissions", "patients_without_tb_cxr"), con.execute(f"""
        SELECT count(*) FILTER (subject_id NOT IN (SELECT subject_id FROM {stage}.admissions)),
               count(*) FILTER (subject_id NOT IN (SELECT subject_id FROM {stage}.tb_cxr))
        FROM {stage}.patients""").fetchone()))

    _publish(con, [(stage, schema, BUILD_ORDER)])
    return DbResult(
        which=which, seed=seed, schema=schema, build_schema=build,
        requested_patients=sampling.requested, patients=rows["patients"], current_patients=int(current),
        current_patients_target=sampling.n_current_target, current_patients_drawn=sampling.n_current,
        admissions=rows["admissions"], rows=rows,
        rejected=rejected, candidates=cand, link=link, labels=labels,
        offsets=offsets, coverage=coverage, messages=list(sampling.messages))


@dataclass
class AnswerSheetResult:
    """What one answer-sheet build wrote: its schema, rows and label counts."""

    which: str
    schema: str  # ehr_<which>_answers: tb_cxr_plus
    database_schema: str  # ehr_<which>: the database whose TB_CXR it answers
    rows: int
    labels: dict  # pairs, and for gold the later studies' images and affirmed rows

    def metadata(self) -> dict:
        return {"rows_tb_cxr_plus": self.rows, **{f"labels_{k}": v for k, v in self.labels.items()}}


def build_answer_sheet(con: duckdb.DuckDBPyConnection, which: str, config: DbConfig | None = None
                       ) -> AnswerSheetResult:
    """Build ``ehr_<which>_answers.tb_cxr_plus`` for the database ``build_database`` left in ``ehr_<which>``
    (its TB_CXR and its workspace's image table) from the labels, the split's ratios and the silver boxes."""
    schema, answers, build = schemas(which)
    work = f"{answers}_next"  # the sheet's work tables (its labels, pairs, rejected rows): dropped when written
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {work}")
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {answers}")
    labels = stage_answer_labels(con, which, build, work)
    # written in place in one transaction, not staged and copied as the database's tables are (``_publish``): a
    # failure leaves the sheet as it was, and a label edit saves the copy (0.2 s of 617,000 rows at full scale)
    with transaction(con):
        rows, _ = materialize(con, ANSWER_TABLE, tb_cxr_plus_sql(T.Ctx(schema, build, config or DbConfig()), which,
                                                                 work), answers, work, T.ORDER["tb_cxr_plus"])
    con.execute(f"DROP SCHEMA IF EXISTS {work} CASCADE")
    return AnswerSheetResult(which=which, schema=answers, database_schema=schema, rows=rows, labels=labels)


def answer_sheet_reads(which: str) -> list[str]:
    """The warehouse tables ``build_answer_sheet`` reads, but the silver boxes: the database's TB_CXR, its
    workspace's images and sampled patients, the label set's labels and pairs (gold: also the later studies'), the
    split (tests/ehr/test_build.py builds the sheet with every other table of those schemas dropped). Their
    content, the boxes' (8.6 million rows at full scale: the caller says which version), the settings and
    ``ANSWER_SHEET_CODE`` decide the sheet: an EHR table edit leaves them as they were."""
    schema, _, build = schemas(which)
    later = [LATER, f"{LATER}_pairs", f"{LATER}_images"] if which == "gold" else []
    return [f"{schema}.tb_cxr", f"{build}._images", f"{build}._sampled", LABELS[which], f"{LABELS[which]}_pairs",
            *later, f"splits.{which}"]


# The code that builds an answer sheet: this package, the ratios and the filters it uses
ANSWER_SHEET_CODE = combine(*(file_digest(p) for p in sorted(
    [*Path(__file__).parent.glob("*.py"), Path(ratios.__file__), Path(filters.__file__)])))


def kept_answer_sheet(con: duckdb.DuckDBPyConnection, which: str, kept: Mapping, answers_dir: Path
                      ) -> tuple[AnswerSheetResult, ExportResult] | None:
    """The answer sheet a build left (``kept``: its ``rows``, ``labels`` and the ``table``'s content digest, as
    ``kept_record`` gave them) with its export, when the table and both files are still as that build left them;
    None otherwise (build it)."""
    schema, answers, _ = schemas(which)
    table = f"{answers}.{ANSWER_TABLE.name}"
    present = con.execute("SELECT count(*) FROM duckdb_tables() WHERE schema_name = ? AND table_name = ?",
                          [answers, ANSWER_TABLE.name]).fetchone()[0]
    if not present or content_digest(con, [table]) != kept.get("table"):
        return None
    export = exported_answer_sheet(answers_dir, kept["rows"])
    if export is None:
        return None
    return AnswerSheetResult(which, answers, schema, kept["rows"], dict(kept["labels"])), export


def kept_record(con: duckdb.DuckDBPyConnection, sheet: AnswerSheetResult) -> dict:
    """What ``kept_answer_sheet`` needs of a sheet just built and exported."""
    return {"rows": sheet.rows, "labels": sheet.labels,
            "table": content_digest(con, [f"{sheet.schema}.{ANSWER_TABLE.name}"])}


def _publish(con: duckdb.DuckDBPyConnection, moves: list[tuple[str, str, tuple[str, ...]]]) -> None:
    """Copy the staged tables into their final schemas in one transaction, then drop the staging schemas."""
    with transaction(con):
        for src, dst, names in moves:
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {dst}")
            for name in names:
                con.execute(f"CREATE OR REPLACE TABLE {dst}.{name} AS SELECT * FROM {src}.{name} ORDER BY row_id")
    for src, _, _ in moves:
        con.execute(f"DROP SCHEMA IF EXISTS {src} CASCADE")
