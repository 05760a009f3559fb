"""EHRXQA: the template catalog, sampled (question, NeuralSQL, answer) triples with the blocking
gold-SQL-vs-NeuralSQL check, statistics (paper Table C9) and the release files."""

import hashlib
import json
import os
from dataclasses import asdict

import dagster as dg
import polars as pl
from pydantic import Field

from assets.automation import (DUCKDB_POOL, DUCKDB_TAGS, ON_CHANGE, RELEASE_ON_CHANGE, WITH_ITS_ASSET,
                               with_its_asset_only)
from assets.metadata import records_metadata, table_metadata, written
from assets.ehr_db import ANSWER_KEYS, DB_KEYS, answer_sheet_dir, database_dir
from assets.paraphrase import POOLS_KEY
from ehrxqa_pipeline import atomic, names
from ehrxqa_pipeline.contracts import load_contract
from ehrxqa_pipeline.paraphrase import choose_ehrxqa_phrasings
from ehrxqa_pipeline.questions.ehrxqa import CATALOG, stats
from ehrxqa_pipeline.questions.ehrxqa.records import (ORACLE_RUNS, STORED_SCHEMA, build_records, catalog_rows,
                                                      check_stored, stored_frame, write_json, write_release)
from ehrxqa_pipeline.questions.ehrxqa.resolved import check_resolved
from ehrxqa_pipeline.questions.ehrxqa.sampling import (DATABASES, SPLITS, DatabaseFiles, SamplingCaps,
                                                       sample_database)
from ehrxqa_pipeline.questions.ehrxqa.unanswerable import UNANSWERABLE_BY_INDEX
from ehrxqa_pipeline.questions.neuralsql.parse_store import ParseStore
from ehrxqa_pipeline.questions.neuralsql.shapes import shape_counts
from ehrxqa_pipeline.warehouse import replace_tables
from resources import PipelineConfig, Warehouse

CATALOG_KEY = dg.AssetKey([names.EHRXQA, "catalog"])
QUESTION_KEYS = {which: dg.AssetKey([names.EHRXQA, which]) for which in DATABASES}
STATS_KEY = dg.AssetKey([names.EHRXQA, "statistics"])
# the release files of each database's splits: release/ehrxqa/silver (train, valid), release/ehrxqa/gold (test)
RELEASE_KEYS = {which: dg.AssetKey([names.RELEASE, names.EHRXQA, which]) for which in DATABASES}
SCHEMA = names.EHRXQA
COMMON = dict(automation_condition=ON_CHANGE, pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS, owners=["team:ehrxqa"])
# What writes release files (the statistics, the record files) waits, as every release asset does, until nothing
# upstream is out of date; `build --changed` then runs it in the round of the items it reads (cli.build:
# release_tail), not in a round of its own after them.
RELEASE_COMMON = {**COMMON, "automation_condition": RELEASE_ON_CHANGE}
REPORT_SCHEMA = load_contract("ehrxqa.sampling_report").polars_schema()
SHOW_MISMATCHES = 5
MAX_AUTO_WORKERS = 4  # sampling and the check are CPU-bound Python + SQLite: one process per core
ITEMS_PER_WORKER = 2000
_DEFAULT = SamplingCaps()


class EhrxqaSamplingConfig(dg.Config):
    """Per-template caps (paper section 4.1.4: 80 train+valid from silver split 7:1, 10 test from gold)."""

    train_valid_cap: int = Field(default=_DEFAULT.train_valid, description="distinct questions per template "
                                 "from the silver database (train + valid)")
    test_cap: int = Field(default=_DEFAULT.test, description="distinct questions per template from the gold database")
    train_parts: int = Field(default=_DEFAULT.train_parts, description="train share of train:valid")
    valid_parts: int = Field(default=_DEFAULT.valid_parts, description="valid share of train:valid")
    patience: int = Field(default=_DEFAULT.patience, description="consecutive draws without a new question "
                          "after which a template counts as exhausted")
    max_draws_per_item: int = Field(default=_DEFAULT.max_draws_per_item, description="at most cap x this "
                                    "draws per template")
    unanswerable: int = Field(default=_DEFAULT.unanswerable, description="EHRSQL-style unanswerable items "
                              "(is_impossible = true, query null, answer []) per database, so users can train "
                              "abstention; 0 (default) leaves them out as the paper does")
    workers: int = Field(default=0, description="processes for sampling (0: one per CPU core, at most "
                         f"{MAX_AUTO_WORKERS}); the sample does not depend on it")

    def caps(self) -> SamplingCaps:
        return SamplingCaps(self.train_valid_cap, self.test_cap, self.train_parts, self.valid_parts, self.patience,
                            self.max_draws_per_item, self.unanswerable)


def sampling_run_config(**fields) -> dict:
    """Run config that sets ``EhrxqaSamplingConfig`` fields of ehrxqa/silver and ehrxqa/gold, e.g. small caps
    for tests: ``build(settings, run_config=sampling_run_config(train_valid_cap=4, test_cap=1))``."""
    return {"ops": {key.to_python_identifier(): {"config": fields} for key in QUESTION_KEYS.values()}}


def _databases(settings) -> dict[str, DatabaseFiles]:
    """The exported silver and gold databases, each with its answer sheet."""
    return {which: DatabaseFiles(database_dir(settings, which) / "mimic_iv_cxr.db",
                                 answer_sheet_dir(settings, which) / "tb_cxr_plus.db") for which in DATABASES}


def _workers(requested: int, items: int) -> int:
    """``requested``, or (0) one process per core, at most MAX_AUTO_WORKERS and one per ITEMS_PER_WORKER
    items: starting a process costs about a second, so small samples run in this process."""
    if requested > 0:
        return requested
    return max(1, min(os.cpu_count() or 1, MAX_AUTO_WORKERS, items // ITEMS_PER_WORKER))


def _write_tables(warehouse: Warehouse, tables: dict[str, pl.DataFrame]) -> None:
    with warehouse.connect() as con:
        replace_tables(con, SCHEMA, tables)


def _stored(warehouse: Warehouse, table: str) -> dict:
    with warehouse.connect() as con:
        return table_metadata(con, f"{SCHEMA}.{table}")


def _questions(warehouse: Warehouse, columns: str = "*", databases=DATABASES) -> pl.DataFrame:
    """The stored items of ``databases`` (silver: train and valid, gold: test), in release order."""
    with warehouse.connect() as con:
        return pl.concat([con.execute(f"SELECT {columns} FROM {SCHEMA}.{which} ORDER BY split, id").pl()
                          for which in databases])


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dg.asset(key=CATALOG_KEY, group_name=names.EHRXQA, code_version="1", kinds={"duckdb", "json"},
          description="Grain: one row per EHRXQA question template (index, question_template = q_tag, "
                      "vqa_template, scope, modality, patient scope). Source: the template catalog in code "
                      "(ehrxqa_pipeline.questions.ehrxqa). Table ehrxqa.catalog; file EHRXQA_HOME/release/ehrxqa/"
                      "template_catalog.json (the published template_idx_to_template_info.json fields plus scope "
                      "and modality). Data version = content hash, so only a catalog change re-samples.", **COMMON)
def catalog(pipeline_config: PipelineConfig, warehouse: Warehouse) -> dg.MaterializeResult:
    rows = catalog_rows()
    text = json.dumps(rows, indent=4, ensure_ascii=False)
    frame = pl.DataFrame([{"template_index": int(k), **v} for k, v in rows.items()],
                         schema=load_contract("ehrxqa.catalog").polars_schema())
    _write_tables(warehouse, {"catalog": frame})
    path = pipeline_config.settings().release_dir / "ehrxqa" / "template_catalog.json"
    write_json(rows, path)
    per_scope = dict(frame.group_by("scope").len().sort("scope").iter_rows())
    per_modality = dict(frame.group_by("modality").len().sort("modality").iter_rows())
    return dg.MaterializeResult(data_version=dg.DataVersion(_digest(text)), metadata={
        **_stored(warehouse, "catalog"), "templates_per_scope": dg.MetadataValue.json(per_scope),
        "templates_per_modality": dg.MetadataValue.json(per_modality), "path": dg.MetadataValue.path(str(path))})


SPLIT_WORDS = {"silver": "train and valid", "gold": "test"}


def _questions_asset(which: str) -> dg.AssetsDefinition:
    key = QUESTION_KEYS[which]
    cap = "up to 80 distinct questions split 7:1 into train/valid" if which == "silver" else \
        "up to 10 distinct questions for test"

    @dg.asset(key=key, group_name=names.EHRXQA, code_version="4", kinds={"duckdb", "sqlite"},
              deps=[DB_KEYS[which], ANSWER_KEYS[which], CATALOG_KEY],
              description=f"Grain: one row per sampled EHRXQA item of the {SPLIT_WORDS[which]} split"
                          f"{'s' if which == 'silver' else ''} (split, id, template, question, gold SQL, NeuralSQL, "
                          f"answer, record fields), from the {which} database: per template {cap} (run config "
                          "changes the caps); a draw is kept only if its gold SQL over TB_CXR_PLUS gives a valid "
                          "answer. Every template and database draws from its own generators, so one side is "
                          "sampled without the other. Per-template outcome (draws, kept, why fewer): "
                          f"ehrxqa.{which}_sampling_report; the caps it ran with: ehrxqa.{which}_sampling_config. "
                          f"Source: ehr_db/{which} (the exported SQLite file), ehr_db/{which}_answers (its answer sheet), "
                          "ehrxqa/catalog.",
              **COMMON)
    def _asset(context: dg.AssetExecutionContext, config: EhrxqaSamplingConfig, pipeline_config: PipelineConfig,
               warehouse: Warehouse) -> dg.MaterializeResult:
        settings = pipeline_config.settings()
        caps = config.caps()
        workers = _workers(config.workers, len(CATALOG) * caps.cap(which))
        context.log.info(f"sampling {len(CATALOG)} templates (cap {caps.cap(which)}) from the {which} database in "
                         f"{workers} process(es)")
        sample = sample_database(_databases(settings)[which], which, settings.seed, caps, workers=workers,
                                 progress=context.log.info, memo=settings.cache_dir / f"ehrxqa_{which}_sample.json")
        frame = stored_frame(sample)
        reports = pl.DataFrame([r.row() for r in sample.reports], schema=REPORT_SCHEMA)
        settings_used = pl.DataFrame({"setting": list(asdict(caps)), "value": list(asdict(caps).values())},
                                     schema=load_contract("ehrxqa.sampling_config").polars_schema())
        _write_tables(warehouse, {which: frame, f"{which}_sampling_report": reports,
                                  f"{which}_sampling_config": settings_used})
        none = [f"{i} {db}: {why}" for i, db, why in
                reports.filter(pl.col("kept") == 0).select("template_index", "database", "reason").iter_rows()]
        per_split = {s: frame.filter(pl.col("split") == s).height for s in names.SIDE_SPLITS[which]}
        per_scope = {f"{scope}/{split}": n for scope, split, n in
                     frame.group_by("scope", "split").len().sort("scope", "split").iter_rows()}
        content = frame.write_csv() + reports.write_csv() + settings_used.write_csv()
        return dg.MaterializeResult(data_version=dg.DataVersion(_digest(content)), metadata={
            **_stored(warehouse, which), "questions_per_split": dg.MetadataValue.json(per_split),
            "questions_per_scope_split": dg.MetadataValue.json(per_scope),
            "caps": dg.MetadataValue.json(asdict(caps)), "draws": int(reports["draws"].sum()),
            "templates_below_cap": reports.filter(pl.col("kept") < pl.col("cap")).height,
            "templates_without_items": dg.MetadataValue.json(none)})

    return _asset


def _consistency_check(which: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=QUESTION_KEYS[which], name="neuralsql_consistency", blocking=True, pool=DUCKDB_POOL,
                    op_tags=DUCKDB_TAGS, automation_condition=WITH_ITS_ASSET,
                    description="Every stored item's NeuralSQL, executed with the oracle VQA module on the database "
                                "it was drawn from, gives its gold SQL answer, and both equal the stored answer.")
    def _check(context: dg.AssetCheckExecutionContext, pipeline_config: PipelineConfig,
               warehouse: Warehouse) -> dg.AssetCheckResult:
        frame = _questions(warehouse, databases=(which,))
        settings = pipeline_config.settings()
        mismatches = check_stored(frame, _databases(settings), workers=_workers(0, frame.height),
                                  log=context.log.info, parse_store=settings.neuralsql_parse_store,
                                  memo=settings.cache_dir / f"ehrxqa_{which}_check.json",
                                  # the gold items' oracle runs, which the scores' oracle then reads
                                  oracle_runs=settings.cache_dir / ORACLE_RUNS if which == "gold" else None)
        shown = [{"template": m.index, "question": m.question, "gold": repr(m.gold), "neural": repr(m.neural),
                  "stored": repr(m.stored)} for m in mismatches[:SHOW_MISMATCHES]]
        return dg.AssetCheckResult(
            passed=not mismatches, severity=dg.AssetCheckSeverity.ERROR,
            description=f"{len(mismatches)} of {frame.height} items disagree (gold SQL / NeuralSQL with the oracle "
                        "/ stored answer)",
            metadata={"items_checked": frame.height, "mismatches": len(mismatches),
                      "first_mismatches": dg.MetadataValue.json(shown)})

    return _check


QUESTION_ASSETS = [_questions_asset(which) for which in DATABASES]
CONSISTENCY_CHECKS = [_consistency_check(which) for which in DATABASES]


@dg.asset(key=STATS_KEY, group_name=names.EHRXQA, code_version="1", deps=[*QUESTION_KEYS.values()], kinds={"duckdb"},
          description="Grain: one row per (modality, patient scope) with counts per split (cf. paper Table C9), "
                      "and one row per template with its counts and sampling outcome (draws, why fewer than the "
                      "cap). Source: ehrxqa.{silver,gold} and their sampling reports. Files: "
                      "EHRXQA_HOME/release/ehrxqa/"
                      "statistics.{md,json}.", **RELEASE_COMMON)
def statistics(pipeline_config: PipelineConfig, warehouse: Warehouse) -> dg.MaterializeResult:
    everything = _questions(warehouse, "split, id, template_index, scope")
    impossible = everything["template_index"].is_in(list(UNANSWERABLE_BY_INDEX))
    frame = everything.filter(~impossible)  # Table C9 counts the answerable items, as the paper's does
    unanswerable = {s: everything.filter(impossible & (pl.col("split") == s)).height for s in SPLITS}
    with warehouse.connect() as con:
        reports = pl.concat([con.execute(f"SELECT * FROM {SCHEMA}.{which}_sampling_report ORDER BY template_index").pl()
                             for which in sorted(DATABASES)])  # by database (gold, silver), then template
    c9 = stats.c9_counts(frame)
    per = stats.per_template(frame, reports.to_dicts())
    tables = stats.render_markdown(c9, per)
    md = tables
    if any(unanswerable.values()):
        md += ("\n\nUnanswerable items (opt-in; not in Table C9): "
               + ", ".join(f"{s} {n:,}" for s, n in unanswerable.items()) + "\n")
    out = pipeline_config.settings().release_dir / "ehrxqa"
    atomic.write_text(out / "statistics.md", md)
    write_json({"c9": c9, "per_template": per, "unanswerable": unanswerable}, out / "statistics.json", indent=2)
    # the per-template table as markdown, not JSON: the instance reads every asset's latest materialization on
    # each automation evaluation and freshness pass, and a JSON value is unpacked object by object (this one, a
    # row per template, was half of that read on the demo: 36.7 of 75.5 ms); statistics.json holds it as data
    c9_md, heading, per_md = tables.partition("\n\n### Per template")
    per_md = heading.lstrip() + per_md
    return dg.MaterializeResult(metadata={
        **records_metadata(c9), "statistics": dg.MetadataValue.md(c9_md), "c9": dg.MetadataValue.json(c9),
        "per_template": dg.MetadataValue.md(per_md), "unanswerable_per_split": dg.MetadataValue.json(unanswerable),
        "templates_below_cap": sum(1 for r in per if r["silver_reason"] or r["gold_reason"]),
        **written(out / "statistics.md", out / "statistics.json")})


def _release_asset(which: str) -> dg.AssetsDefinition:
    """release/ehrxqa/<which>: the release files of one database's splits (silver: train and valid, gold: test),
    so an edit on one side rewrites and re-checks that side's files only (issue 23)."""
    splits = names.SIDE_SPLITS[which]
    files = ",".join(splits)

    @dg.asset(key=RELEASE_KEYS[which], group_name=names.RELEASE, code_version="5",
              deps=[QUESTION_KEYS[which], POOLS_KEY], kinds={"json"},
              description="Grain: one JSON record per EHRXQA item in the published format (db_id, split, id, question, "
                          "template, query, value, q_tag, t_tag, o_tag, v_tag, tag, para_type, is_impossible, answer) "
                          "plus resolved_value (the studies the query resolves; value = the database values written "
                          f"in the question), one file per split: EHRXQA_HOME/release/ehrxqa/{{{files}}}.json (indent "
                          "4). question = a phrasing of the template's pool side (train / valid+test) filled with the "
                          f"words the item was sampled with (ehrxqa.{which}.fills); templates without a pool keep "
                          f"the filled template. Source: ehrxqa.{which}, paraphrase.pools.", **RELEASE_COMMON)
    def _asset(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig,
               warehouse: Warehouse) -> dg.MaterializeResult:
        frame = _questions(warehouse, databases=(which,))
        seed = pipeline_config.settings().seed
        with warehouse.connect() as con:
            pools = con.execute(f"SELECT * FROM {names.PARAPHRASE}.pools").pl()
        # phrasings are drawn per split (paraphrase.apply), so one side's records are those of both sides together
        built = build_records(choose_ehrxqa_phrasings(frame.select(list(STORED_SCHEMA)), pools, seed))
        records = {s: built[s] for s in splits}
        phrased = {}
        for recs in records.values():
            for r in recs:
                phrased[r["para_type"]] = phrased.get(r["para_type"], 0) + 1
        out = pipeline_config.settings().release_dir / "ehrxqa"
        context.log.info(f"writing {sum(map(len, records.values()))} records to {out}/{{{files}}}.json")
        paths = write_release(records, out)
        return dg.MaterializeResult(metadata={
            **records_metadata([r for s in splits for r in records[s]]), "path": dg.MetadataValue.path(str(out)),
            "records_per_split": dg.MetadataValue.json({s: len(records[s]) for s in splits}),
            "questions_per_para_type": dg.MetadataValue.json(dict(sorted(phrased.items()))),
            "files": dg.MetadataValue.json({s: str(p) for s, p in paths.items()})})

    return _asset


def _released(settings, which: str) -> dict[str, list[dict]]:
    out = settings.release_dir / "ehrxqa"
    return {s: json.loads((out / f"{s}.json").read_text()) for s in names.SIDE_SPLITS[which]}


def _resolved_check(which: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=RELEASE_KEYS[which], name="resolved_studies", blocking=True, pool=DUCKDB_POOL,
                    op_tags=DUCKDB_TAGS, additional_deps=[QUESTION_KEYS[which]],
                    automation_condition=with_its_asset_only(RELEASE_KEYS[which]),
                    description="Every released record of a 1-image or 2-image template names the studies its "
                                "released query resolves on the released SQLite database of its side (train/valid: "
                                "silver, test: gold): resolved_value (study_id, or study_id1 / study_id2) and the "
                                "study ids written in value equal what the derived tables t1 / t2 return; every "
                                "other record has resolved_value {}.")
    def _check(pipeline_config: PipelineConfig, warehouse: Warehouse) -> dg.AssetCheckResult:
        settings = pipeline_config.settings()
        records = _released(settings, which)
        template_of = {(s, i): (t, scope) for s, i, t, scope in
                       _questions(warehouse, "split, id, template_index, scope", (which,)).iter_rows()}
        differences, checked = check_resolved(records, template_of,
                                              {which: database_dir(settings, which) / "mimic_iv_cxr.db"})
        total = sum(len(r) for r in records.values())
        return dg.AssetCheckResult(
            passed=not differences, severity=dg.AssetCheckSeverity.ERROR,
            description=f"{len(differences)} differences over {checked} records with study references "
                        f"({total} records)",
            metadata={"records": total, "records_with_studies": checked, "differences": len(differences),
                      "first_differences": dg.MetadataValue.json([d.row() for d in differences[:SHOW_MISMATCHES]])})

    return _check


def _shapes_check(which: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=RELEASE_KEYS[which], name="neuralsql_shapes", blocking=True,
                    automation_condition=WITH_ITS_ASSET,
                    description="Every released query that reaches an image does so in one of the published "
                                "NeuralSQL shapes P1-P4 (ehrxqa_pipeline/questions/neuralsql/shapes.py), the ways the "
                                "authors' published executor runs func_vqa; any other shape fails the release.")
    def _check(pipeline_config: PipelineConfig) -> dg.AssetCheckResult:
        settings = pipeline_config.settings()
        counts, refused = shape_counts(_released(settings, which), ParseStore(settings.neuralsql_parse_store))
        return dg.AssetCheckResult(
            passed=not refused, severity=dg.AssetCheckSeverity.ERROR,
            description=f"{len(refused)} queries outside the published shapes; per shape: {counts}",
            metadata={"per_shape": dg.MetadataValue.json(counts), "refused": len(refused),
                      "first_refused": dg.MetadataValue.json(refused[:SHOW_MISMATCHES])})

    return _check


RELEASE_ASSETS = [_release_asset(which) for which in DATABASES]
RELEASE_CHECKS = [check(which) for which in DATABASES for check in (_resolved_check, _shapes_check)]
