"""Build one integrated database (silver or gold) in the warehouse.

``build_database(con, which, config, seed)`` reads the ingested MIMIC-IV tables, the CXR cohort,
labels and splits of the same DuckDB warehouse and writes

* ``ehr_<which>``: the 17 MIMIC-IV-derived tables + TB_CXR (the user-facing database, ``ddl.TABLES``);
* ``ehr_<which>_answers.tb_cxr_plus``: the answer sheet, kept apart from the user-facing database;
* ``ehr_<which>_build``: the work tables (``_images``, ``_admissions``, ``_candidates``, ``_sampled``,
  ``_offsets``, ``_links``, labels, prices) and every table's dropped rows with their reason
  (``<table>_rejected``).

Steps: image set and cohort rules (``cohort``), patient draw, per-patient offsets (``timeshift``), the
study -> admission link and the answer-sheet labels (``tb_cxr``), the price list (``cost``), then every
table in parent-first order (``tables``, ``stage.materialize``). The tables are written to a staging schema
and copied into ``ehr_<which>`` / ``ehr_<which>_answers`` in one transaction at the end, so a failed build
leaves the previous database intact. Each random step has its own generator (``rng.generator(seed,
"ehr_db.<which>.<step>")``): the same warehouse, config and seed give identical table contents.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import duckdb

from ehrxqa_pipeline.ehr import tables as T
from ehrxqa_pipeline.ehr.cohort import sample_patients, stage_candidates
from ehrxqa_pipeline.ehr.config import DbConfig, schemas
from ehrxqa_pipeline.ehr.cost import build_prices, cost_sql
from ehrxqa_pipeline.ehr.ddl import ANSWER_TABLE, BY_NAME, TABLES
from ehrxqa_pipeline.ehr.stage import materialize
from ehrxqa_pipeline.ehr.tb_cxr import stage_labels, stage_links, tb_cxr_plus_sql, tb_cxr_sql
from ehrxqa_pipeline.ehr.timeshift import compute_offsets

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
    answers_schema: str
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

    def metadata(self) -> dict:
        """Flat values for Dagster asset metadata."""
        out = {k: v for k, v in asdict(self).items() if isinstance(v, (int, float, str)) or v is None}
        out.update({f"rows_{k}": v for k, v in self.rows.items()})
        out.update({f"rejected_{t}_{r}": n for t, reasons in self.rejected.items() for r, n in reasons.items()})
        out.update({f"link_{k}": v for k, v in self.link.items()})
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
    """Build ``ehr_<which>`` and ``ehr_<which>_answers`` (see the module docstring)."""
    config = config or DbConfig()
    schema, answers, build = schemas(which)
    stage, answers_stage = f"{schema}_next", f"{answers}_next"
    for s in (build, stage, answers_stage):
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")

    cand = stage_candidates(con, which, config, build)
    sampling = sample_patients(con, which, config, seed, build)
    offsets = compute_offsets(con, which, config, seed, build)
    link = stage_links(con, build)
    labels = stage_labels(con, which, build)
    build_prices(con, seed, build)
    for name in ("d_icd_diagnoses", "d_icd_procedures"):
        con.execute(f"CREATE OR REPLACE TABLE {build}._{name} AS {T.icd_dictionary(name)}")

    ctx = T.Ctx(stage, build, config)
    rows, rejected = {}, {}
    for name in BUILD_ORDER:
        rows[name], rejected[name] = materialize(con, BY_NAME[name], _staged(name, ctx), stage, build,
                                                 T.ORDER[name])
    rows["tb_cxr_plus"], _ = materialize(con, ANSWER_TABLE, tb_cxr_plus_sql(ctx, which), answers_stage, build,
                                         T.ORDER["tb_cxr_plus"])

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

    _publish(con, [(stage, schema, BUILD_ORDER), (answers_stage, answers, ("tb_cxr_plus",))])
    return DbResult(
        which=which, seed=seed, schema=schema, answers_schema=answers, build_schema=build,
        requested_patients=sampling.requested, patients=rows["patients"], current_patients=int(current),
        current_patients_target=sampling.n_current_target, current_patients_drawn=sampling.n_current,
        admissions=rows["admissions"], rows=rows,
        rejected=rejected, candidates=cand, link=link, labels=labels,
        offsets=offsets, coverage=coverage, messages=list(sampling.messages))


def _publish(con: duckdb.DuckDBPyConnection, moves: list[tuple[str, str, tuple[str, ...]]]) -> None:
    """Copy the staged tables into their final schemas in one transaction, then drop the staging schemas."""
    con.execute("BEGIN TRANSACTION")
    try:
        for src, dst, names in moves:
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {dst}")
            for name in names:
                con.execute(f"CREATE OR REPLACE TABLE {dst}.{name} AS SELECT * FROM {src}.{name} ORDER BY row_id")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    for src, _, _ in moves:
        con.execute(f"DROP SCHEMA IF EXISTS {src} CASCADE")
