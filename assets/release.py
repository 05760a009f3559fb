"""Release: the statistics gathered in one place, plots, the datasheet, the Croissant description and the
manifest of every file under EHRXQA_HOME/release (the datasets and databases themselves are written by their own
groups' assets)."""

import hashlib
import json
from collections.abc import Callable

import dagster as dg

from assets import ehrxqa, mimic_cxr_vqa, paraphrase, vqa_scoring
from assets.automation import DUCKDB_POOL, DUCKDB_TAGS, RELEASE_ON_CHANGE
from assets.cxr_cohort import DOWNLOADS_KEY
from assets.cxr_cohort import GOLD_KEY as GOLD_COHORT_KEY
from assets.cxr_cohort import SILVER_KEY as SILVER_COHORT_KEY
from assets.cxr_labels import GOLD_LATER_KEY, LABEL_KEYS, ONTOLOGY_KEY
from assets.ehr_db import DB_KEYS
from assets.ingest import CONTRACTS, ingest_key
from assets.metadata import content_digest, written
from assets.paraphrase import CANDIDATES_KEY as PARAPHRASE_CANDIDATES_KEY
from assets.paraphrase import POOLS_KEY as PARAPHRASE_POOLS_KEY
from assets.paraphrase import REVIEW_KEY as PARAPHRASE_REVIEW_KEY
from assets.paraphrase import STATS_KEY as PARAPHRASE_STATS_KEY
from assets.splits import SPLIT_KEYS
from assets.paraphrase import VALIDATED_KEY
from assets.sources import HASH_CACHE, SOURCE_KEYS, SOURCE_VERSION_FIELD
from ehrxqa_pipeline import markdown, names
from ehrxqa_pipeline.hashing import HashCache
from ehrxqa_pipeline.atomic import write_text
from ehrxqa_pipeline.cxr import downloads
from ehrxqa_pipeline.release import (changelog, croissant, datasheet, hf, license_note, manifest, plots, readme,
                                     tables)
from ehrxqa_pipeline.release.memo import OutputMemo
from ehrxqa_pipeline.sources.schema import MIMIC_CXR
from ehrxqa_pipeline.vqa.predictions import pretrained_backbone
from resources import PipelineConfig, Warehouse

STATISTICS_KEY = dg.AssetKey([names.RELEASE, "statistics"])
PLOTS_KEY = dg.AssetKey([names.RELEASE, "plots"])
DATASHEET_KEY = dg.AssetKey([names.RELEASE, "datasheet"])
MANIFEST_KEY = dg.AssetKey([names.RELEASE, "manifest"])
IMAGES_KEY = dg.AssetKey([names.RELEASE, "images"])
CROISSANT_KEY = dg.AssetKey([names.RELEASE, "croissant"])
HF_KEY = dg.AssetKey([names.RELEASE, hf.OUT_DIR])
DATASHEET_FILE = "datasheet.md"
COMMON = dict(group_name=names.RELEASE, automation_condition=RELEASE_ON_CHANGE, owners=["team:ehrxqa"])

# Every asset that writes a file under EHRXQA_HOME/release: the manifest runs after all of them (and hashes
# whatever is there). An asset that starts writing there belongs in this list (e.g. vqa_scoring/scores).
RELEASE_INPUTS: list[dg.AssetKey] = [
    mimic_cxr_vqa.RELEASE_KEY, mimic_cxr_vqa.STATS_KEY, *ehrxqa.RELEASE_KEYS.values(), ehrxqa.STATS_KEY,
    ehrxqa.CATALOG_KEY, DB_KEYS["silver"], DB_KEYS["gold"], PARAPHRASE_STATS_KEY, STATISTICS_KEY, PLOTS_KEY,
    DATASHEET_KEY, vqa_scoring.SCORES_KEY, DOWNLOADS_KEY, IMAGES_KEY, HF_KEY, CROISSANT_KEY,
]


# Every asset that writes a *_rejected table (and the cohort funnels): release/statistics reads them all.
QUARANTINES: list[dg.AssetKey] = [
    *(ingest_key(c.table) for c in CONTRACTS), SILVER_COHORT_KEY, GOLD_COHORT_KEY, *LABEL_KEYS.values(), GOLD_LATER_KEY,
    *SPLIT_KEYS.values(), DB_KEYS["silver"], DB_KEYS["gold"], VALIDATED_KEY]


def _tables(settings) -> dict:
    path = settings.release_dir / tables.OUT_DIR / "tables.json"
    if not path.exists():
        raise dg.Failure(f"{path.name} is missing: materialize {STATISTICS_KEY.to_user_string()} first")
    return json.loads(path.read_text())


def _sampling_config(con) -> dict | None:
    """The caps ehrxqa/silver and ehrxqa/gold ran with (their tables ehrxqa.<side>_sampling_config): one dict
    when both sides ran with the same caps, else one per side; None before either ran."""
    present = _tables_in(con, names.EHRXQA)
    sides = {which: dict(con.execute(f"SELECT setting, value FROM {names.EHRXQA}.{which}_sampling_config").fetchall())
             for which in ehrxqa.DATABASES if f"{which}_sampling_config" in present}
    if not sides:
        return None
    first = next(iter(sides.values()))
    return first if len(sides) == len(ehrxqa.DATABASES) and all(c == first for c in sides.values()) else sides


def _scalar(con, schema: str, table: str, column: str):
    """``column`` of the one-row table ``schema.table``; None before its asset ran."""
    if table not in _tables_in(con, schema):
        return None
    return con.execute(f"SELECT {column} FROM {schema}.{table}").fetchone()[0]


def _review_facts(con) -> dict:
    """The review setting the pools were built with and the SHA-256 of the review file the review state read
    (tables paraphrase.pools_config and paraphrase.review_file)."""
    return {"paraphrase_require_review": _scalar(con, names.PARAPHRASE, "pools_config", "require_review"),
            "paraphrase_review_sha256": _scalar(con, names.PARAPHRASE, "review_file", "sha256")}


def _tables_in(con, schema: str) -> set[str]:
    return {t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = ?",
                                      [schema]).fetchall()}


def _facts(context: dg.AssetExecutionContext, settings, warehouse: Warehouse) -> tuple[dict, dict, dict]:
    """(sources, code, config) as the datasheet and the manifest state them: nothing machine-specific."""
    cache = HashCache(settings.cache_dir / HASH_CACHE)
    layout = settings.layout()
    recorded = read_source_versions(context.instance)
    sources = manifest.source_section(layout, manifest.source_digests(layout, cache, recorded))
    with warehouse.connect() as con:
        sampling, paraphraser, review = _sampling_config(con), _paraphraser(con), _review_facts(con)
    config = {
        "check_images": settings.check_images,
        "ehrxqa_sampling": sampling,
        "paraphraser": paraphraser,
        **review,
    }
    return sources, manifest.code_section(), config


def _paraphraser(con) -> dict:
    """What made the released paraphrases, from the tables of paraphrase/candidates (paraphraser, candidates,
    llm_failures) and paraphrase/pools (not from today's settings): whether an LLM endpoint was used and its
    model (never its URL or key), the fallback, and per dataset the templates whose released phrasings come from
    the LLM, the offline paraphraser, reviewers only, or none (``original``: the template's own wording), the
    candidates' sources and the endpoint's failure kinds (templates per kind)."""
    schema = names.PARAPHRASE
    if not {"paraphraser", "candidates", "llm_failures", "pools"} <= _tables_in(con, schema):
        return {"llm_endpoint": None, "model": None, "fallback": None, "datasets": {}}
    made = con.execute(f"SELECT llm, model, fallback FROM {schema}.paraphraser").pl()
    candidates = con.execute(f"SELECT template_id, source FROM {schema}.candidates ORDER BY rowid").pl()
    failures = con.execute(f"SELECT template_id, kind FROM {schema}.llm_failures").pl()
    pool = con.execute(f"SELECT template_id, source FROM {schema}.pools").pl()
    templates = paraphrase.all_templates()  # those the paraphrase steps used
    facts = paraphrase.paraphraser_facts(templates, made, candidates, failures)
    pools, per = paraphrase.templates_by_source(templates, pool), facts["datasets"]
    return {"llm_endpoint": facts["llm"], "model": facts["model"], "fallback": facts["fallback"],
            "datasets": {ds: {"templates": pools.get(ds),
                              "candidates": {k: (per.get(ds) or {}).get(k) for k in ("llm", "offline", "none")},
                              "llm_failures": (per.get(ds) or {}).get("llm_failures", {})}
                         for ds in sorted(set(pools) | set(per))}}


def read_source_versions(instance: dg.DagsterInstance) -> dict[str, str | None]:
    """Source name -> the data version this build read: from the latest ingestion of the file (hashed as it was
    read, ``assets/ingest.py``; the semantics files: from the ontology, ``assets/cxr_labels.py``), else the latest
    observation of the source (the one that drove the build); None where neither exists (the manifest then
    hashes the file)."""
    out: dict[str, str | None] = {}
    for name, source_key in SOURCE_KEYS.items():
        reader = ONTOLOGY_KEY if name == names.SEMANTICS else ingest_key(name)
        event = instance.get_latest_materialization_event(reader)
        entry = event.asset_materialization.metadata.get(SOURCE_VERSION_FIELD) if (
            event and event.asset_materialization) else None
        if entry is not None:
            out[name] = entry.value
            continue
        record = instance.get_latest_data_version_record(source_key, is_source=True)
        observation = record.asset_observation if record is not None else None
        out[name] = (observation.tags or {}).get("dagster/data_version") if observation is not None else None
    return out


def _asset_code_versions(defs: dg.Definitions) -> dict[str, str | None]:
    """Code version of every asset of the code location. Read from the Definitions, not the run: a run of a
    selection (``ehrxqa build --select``) sees only its own assets, and the manifest must not depend on it."""
    graph = defs.resolve_asset_graph()
    return {k.to_user_string(): graph.get(k).code_version for k in graph.materializable_asset_keys}


@dg.asset(key=STATISTICS_KEY, code_version="1", kinds={"json", "markdown"}, pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS,
          deps=[mimic_cxr_vqa.STATS_KEY, mimic_cxr_vqa.RELEASE_KEY, ehrxqa.STATS_KEY, *ehrxqa.RELEASE_KEYS.values(),
                *QUARANTINES],
          description="Grain: one file pair of release statistics: paper Tables B4-B6 (copied from "
                      "mimic_cxr_vqa/statistics) and C9 (from ehrxqa/statistics), the cohort funnels, rows set "
                      "aside per table and reason (every *_rejected table), records per template and answer "
                      "distributions of the released files. Source: the release files, cxr_cohort.funnel, the "
                      "warehouse's *_rejected tables. Files: EHRXQA_HOME/release/statistics/tables.{md,json}.",
          **COMMON)
def release_statistics(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig,
                       warehouse: Warehouse) -> dg.MaterializeResult:
    settings = pipeline_config.settings()
    release = settings.release_dir
    with warehouse.connect() as con:
        funnels = tables.read_funnels(con, names.CXR_COHORT)
        rejected = tables.rejected_counts(con)
    gathered = tables.gather(release, funnels, rejected, memo=settings.cache_dir / "release_tables.json")
    md = tables.render_markdown(gathered, (release / tables.VQA_DIR / "statistics.md").read_text(),
                                (release / tables.EHRXQA_DIR / "statistics.md").read_text())
    paths = tables.write_tables(release, gathered, md)
    return dg.MaterializeResult(metadata={
        "tables": dg.MetadataValue.md(md), "path": dg.MetadataValue.path(str(paths["md"])), **written(paths["json"]),
        "rows_set_aside": sum(r["rows"] for r in rejected),
        "records": dg.MetadataValue.json({"mimic_cxr_vqa": gathered["mimic_cxr_vqa"]["records"],
                                          "ehrxqa": gathered["ehrxqa"]["records"]})})


@dg.asset(key=PLOTS_KEY, code_version="1", deps=[STATISTICS_KEY], kinds={"matplotlib"},
          description="Grain: one PNG per plot: MIMIC-CXR-VQA answer distribution per split, EHRXQA answer kinds "
                      "per split, records per template of both datasets, the silver and gold image-selection "
                      "funnels (deterministic bytes: no date, no software tag). Source: release/statistics. "
                      "Files: EHRXQA_HOME/release/plots/*.png; each is shown in this asset's metadata.", **COMMON)
def release_plots(pipeline_config: PipelineConfig) -> dg.MaterializeResult:
    settings = pipeline_config.settings()
    pngs = plots.render_all(_tables(settings), kept=settings.release_dir / plots.OUT_DIR,
                            memo=settings.cache_dir / "plots.json")
    plots.write_plots(settings.release_dir, pngs)
    return dg.MaterializeResult(metadata={
        **{name.removesuffix(".png"): dg.MetadataValue.md(plots.markdown_image(png, name))
           for name, png in pngs.items()},
        "path": dg.MetadataValue.path(str(settings.release_dir / plots.OUT_DIR))})


@dg.asset(key=DATASHEET_KEY, code_version="4", deps=[STATISTICS_KEY, *ehrxqa.QUESTION_KEYS.values(),
                                                     PARAPHRASE_STATS_KEY, PARAPHRASE_CANDIDATES_KEY,
                                                     PARAPHRASE_POOLS_KEY, PARAPHRASE_REVIEW_KEY],
          kinds={"markdown"}, pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS,
          description="Grain: one document: the paper's appendix A datasheet (motivation, composition, "
                      "collection, preprocessing with every filter's counts, uses, distribution, maintenance) "
                      "answered from this build: source releases and digests, counts, code version, seed, "
                      "configuration, and the deviations of docs/deviations.md; beside it the license note of the "
                      "data (the PhysioNet Credentialed Health Data License 1.5.0 and Data Use Agreement its "
                      "sources carry), and the folder's README (what each file is, how to load it, empty answers "
                      "per dataset and split, how study ids relate to MIMIC-CXR-JPG). Source: release/statistics, "
                      "the source files, the code. Files: EHRXQA_HOME/release/datasheet.md, LICENSE.txt, "
                      "README.md.", **COMMON)
def release_datasheet(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig,
                      warehouse: Warehouse) -> dg.MaterializeResult:
    settings = pipeline_config.settings()
    sources, code, config = _facts(context, settings, warehouse)
    deviations = manifest.repository_root() / "docs" / "deviations.md"
    gathered = _tables(settings)
    md = datasheet.render_datasheet(gathered, sources, code, settings.seed, config,
                                    deviations.read_text() if deviations.is_file() else None)
    path = write_text(settings.release_dir / DATASHEET_FILE, md)
    note = write_text(settings.release_dir / license_note.LICENSE_FILE, license_note.render_license(sources, code))
    guide = write_text(settings.release_dir / readme.README_FILE, readme.render_readme(gathered, code))
    return dg.MaterializeResult(metadata={"datasheet": dg.MetadataValue.md(md),
                                          "path": dg.MetadataValue.path(str(path)),
                                          "license": dg.MetadataValue.path(str(note)),
                                          "readme": dg.MetadataValue.path(str(guide))})


@dg.asset(key=CROISSANT_KEY, code_version="2", kinds={"json"}, pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS,
          deps=[mimic_cxr_vqa.RELEASE_KEY, *ehrxqa.RELEASE_KEYS.values(), HF_KEY, ehrxqa.CATALOG_KEY,
                DB_KEYS["silver"], DB_KEYS["gold"], STATISTICS_KEY, DATASHEET_KEY, *ehrxqa.QUESTION_KEYS.values(),
                PARAPHRASE_CANDIDATES_KEY, PARAPHRASE_POOLS_KEY, PARAPHRASE_REVIEW_KEY],
          check_specs=[dg.AssetCheckSpec("valid", asset=CROISSANT_KEY, blocking=True,
                                         description="mlcroissant (offline) validates croissant.json with no error, "
                                                     "every FileObject's sha256 equals its file's, and mlcroissant's "
                                                     "reader reads the answer vocabulary and the first 200 test "
                                                     "records of both datasets (as the JSON files hold them, whose "
                                                     "counts the parquet files' equal) from the local files; "
                                                     "warnings are listed in the metadata.")],
          description="Grain: one Croissant 1.1 JSON-LD document describing the release: a FileObject (relative "
                      "contentUrl, size, SHA-256) per split file of both datasets and its parquet copy (release/hf), "
                      "the EHRXQA template catalog and SQLite databases, the answer vocabulary and the license "
                      "(DuckDB databases and the datasheet only named: their bytes differ per build or with the "
                      "source's form); a cr:Split record set and one record set per dataset and split with a typed "
                      "field per record key, read from the parquet copy's columns; the "
                      "Croissant RAI fields from the datasheet's answers, the license and the uses it forbids. No "
                      "time, no absolute path, keys sorted: the same inputs give the same bytes. Source: the "
                      "release files, release/hf, release/statistics, the datasheet's facts (sources, code, seed, "
                      "configuration). Files: EHRXQA_HOME/release/croissant.json.", **COMMON)
def release_croissant(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig, warehouse: Warehouse):
    settings = pipeline_config.settings()
    sources, code, config = _facts(context, settings, warehouse)
    doc = croissant.build_croissant(settings.release_dir, tables=_tables(settings), sources=sources, code=code,
                                    seed=settings.seed, config=config)
    path = croissant.write_croissant(doc, settings.release_dir)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    yield dg.MaterializeResult(data_version=dg.DataVersion(digest[:16]), metadata={
        "path": dg.MetadataValue.path(str(path)), "sha256": digest, "bytes": path.stat().st_size,
        "files": len(doc["distribution"]), "record_sets": dg.MetadataValue.json([r["@id"] for r in doc["recordSet"]])})
    problems = croissant.validate(settings.release_dir)
    errors = [p for p in problems if p.startswith("error:")]
    yield dg.AssetCheckResult(check_name="valid", passed=not errors,
                              description=("; ".join(errors) if errors else
                                           f"valid ({len(problems)} warnings)")[:2000],
                              metadata={"errors": dg.MetadataValue.json(errors),
                                        "warnings": dg.MetadataValue.json([p for p in problems if p not in errors])})


@dg.asset(key=IMAGES_KEY, code_version="1", deps=[*SPLIT_KEYS.values(), GOLD_COHORT_KEY, DOWNLOADS_KEY],
          kinds={"duckdb", "csv"},
          description="Grain: one line per MIMIC-CXR-JPG image a split of the release uses, for partial "
                      "downloads: MIMIC-CXR-VQA train / valid / test (test adds every gold-cohort image, which the "
                      "EHRXQA test database draws from). Files: EHRXQA_HOME/release/images/{train,valid,test}.csv "
                      "and *_urls.txt, and README.md over every list with the wget command. Source: "
                      "splits.{silver,gold}, "
                      "cxr_cohort.gold, the build list of cxr_cohort/image_downloads.", **COMMON)
def release_images(pipeline_config: PipelineConfig, warehouse: Warehouse) -> dg.MaterializeResult:
    settings = pipeline_config.settings()
    folder, version = settings.release_dir / downloads.OUT_DIR, settings.layout().version(MIMIC_CXR)
    memo, counts = OutputMemo(settings.cache_dir / "image_lists.json"), {}
    with warehouse.connect() as con:
        for side in names.SIDE_SPLITS:  # a side whose tables are those its lists were written from is not read
            counts.update(downloads.write_side_lists(
                lambda side=side: downloads.split_images(con, side), content_digest(con, downloads.side_tables(side)),
                folder, side, version, memo))
    memo.save()
    path = downloads.write_readme(folder, version)
    return dg.MaterializeResult(metadata={
        "per_split": dg.MetadataValue.json({s: counts[s] for s in names.DATASET_SPLITS}),
        "readme": dg.MetadataValue.md(path.read_text()), "path": dg.MetadataValue.path(str(path)),
        **written(*(f for split in names.DATASET_SPLITS for f in downloads.list_files(folder, split)))})


@dg.asset(key=HF_KEY, code_version="1", deps=[mimic_cxr_vqa.RELEASE_KEY, *ehrxqa.RELEASE_KEYS.values()],
          kinds={"parquet", "markdown"},
          check_specs=[dg.AssetCheckSpec("matches_json", asset=HF_KEY, blocking=True,
                                         description="Every parquet file has the records of its JSON file: the same "
                                                     "count and, record by record in order, the same content (each "
                                                     "side written as canonical JSON by DuckDB, the JSON-text "
                                                     "columns parsed back).")],
          description="Grain: one parquet file per dataset and split (one row per record of the split's JSON file, "
                      "in its order) plus a dataset card per dataset, so that Hugging Face "
                      "`datasets.load_dataset(\"<release>/hf/ehrxqa\")` loads train / valid / test offline; one "
                      "schema per dataset, template-varying objects and EHRXQA answers as JSON text; deterministic "
                      "bytes. For local use only: the card states the PhysioNet license and data use agreement, "
                      "which forbid posting the files to any hub. Source: the release JSON files of "
                      "release/mimic_cxr_vqa and release/ehrxqa/{silver,gold}, the source releases read, the code "
                      "version. Files: EHRXQA_HOME/release/hf/{ehrxqa,mimic-cxr-vqa}/{train,valid,test}.parquet "
                      "and README.md.", **COMMON)
def release_hf(pipeline_config: PipelineConfig):
    settings = pipeline_config.settings()
    exported = hf.write_export(settings.release_dir, manifest.source_releases(settings.layout()),
                               manifest.code_section(), memo=settings.cache_dir / "hf_export.json")
    rows = {d: {s: w[s]["rows"] for s in hf.SPLITS} for d, w in exported.items()}
    yield dg.MaterializeResult(metadata={
        "rows_per_split": dg.MetadataValue.json(rows),
        "dagster/row_count": sum(n for per in rows.values() for n in per.values()),
        "bytes": sum(w[s]["bytes"] for w in exported.values() for s in hf.SPLITS),
        "files": dg.MetadataValue.md(markdown.table(["file", "rows", "bytes"], [
            [f"{hf.OUT_DIR}/{d}/{s}.parquet", f"{w[s]['rows']:,}", f"{w[s]['bytes']:,}"]
            for d, w in exported.items() for s in hf.SPLITS])),
        "path": dg.MetadataValue.path(str(settings.release_dir / hf.OUT_DIR))})
    compared = {f"{d}/{s}": w[s]["compared"] for d, w in exported.items() for s in hf.SPLITS}
    differing = {k: c for k, c in compared.items() if c["differing"]}
    yield dg.AssetCheckResult(check_name="matches_json", passed=not differing,
                              description=f"{len(differing)} of {len(compared)} parquet files differ from their JSON "
                                          "file" if differing else f"{len(compared)} parquet files equal their JSON "
                                          "files",
                              metadata={"compared": dg.MetadataValue.json(compared)})


def manifest_asset(definitions: Callable[[], dg.Definitions]) -> dg.AssetsDefinition:
    """The release manifest. ``definitions`` returns the code location's Definitions when the step runs (the
    manifest lists every asset's code version, and its check what is out of date upstream): passed in by
    ``ehrxqa_pipeline.definitions``, which assembles them, so this module imports nothing of it."""

    @dg.asset(key=MANIFEST_KEY, code_version="6", kinds={"json"}, pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS,
              deps=[*RELEASE_INPUTS, *ehrxqa.QUESTION_KEYS.values(), PARAPHRASE_CANDIDATES_KEY, PARAPHRASE_POOLS_KEY,
                    PARAPHRASE_REVIEW_KEY, vqa_scoring.PREDICTIONS_KEY],
              check_specs=[dg.AssetCheckSpec("portable", asset=MANIFEST_KEY, blocking=True,
                                             description="No absolute path of this machine (EHRXQA_HOME, the source "
                                                         "root, the repository) in the manifest or the datasheet."),
                           dg.AssetCheckSpec("consistent", asset=MANIFEST_KEY,
                                             description="Fails when an asset upstream of the manifest is out of date "
                                                         "(not built from its parents' current versions with its "
                                                         "current code, or held back by a blocking check): the "
                                                         "release folder is then a mix of old and new outputs. The "
                                                         "automation waits for them (UpstreamCurrent); an explicit "
                                                         "`ehrxqa build --select` that makes one fails.")],
              description="Grain: one JSON document listing every file under EHRXQA_HOME/release (path, bytes, "
                          "SHA-256; DuckDB databases by content digest) with the source releases and data versions, "
                          "the code version, seed, configuration (with `vqa_backbone` when a pretrained VQA backbone "
                          "was scored: its architecture, weights SHA-256 and leakage risk), every asset's code "
                          "version, the release version "
                          "and the published releases it reproduces; no time, no "
                          "absolute path, so the same inputs give the same manifest. Then SHA256SUMS.txt beside it: "
                          "every file of the folder, the manifest included, in `sha256sum -c` format (the "
                          "manifest's byte digests; DuckDB files and the manifest hashed byte for byte). Before them "
                          "CHANGELOG.md: one section per release version built in this home, newest first, each "
                          "against the version before it (snapshots kept in EHRXQA_HOME/release_history). Source: "
                          "the release folder, vqa_scoring.pretrained_backbone. Files: "
                          "EHRXQA_HOME/release/manifest.json, SHA256SUMS.txt, CHANGELOG.md.", **COMMON)
    def release_manifest(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig, warehouse: Warehouse):
        settings = pipeline_config.settings()
        sources, code, config = _facts(context, settings, warehouse)
        with warehouse.connect() as con:
            backbone = pretrained_backbone(con)  # of vqa_scoring/predictions: what vqa_scoring/scores scored
        config = {**config, **({"vqa_backbone": backbone} if backbone else {})}
        doc = manifest.build_manifest(settings.release_dir, sources=sources, code=code, seed=settings.seed,
                                      config=config, asset_code_versions=_asset_code_versions(definitions()))
        history = changelog.record(settings.release_history_dir, changelog.snapshot(settings.release_dir, doc))
        log = write_text(settings.release_dir / changelog.CHANGELOG_FILE, changelog.render_changelog(history))
        doc = manifest.with_file(doc, settings.release_dir, log)
        path = manifest.write_manifest(doc, settings.release_dir)
        sums = manifest.write_sha256sums(settings.release_dir, doc["files"])
        text = path.read_text()
        sheet = settings.release_dir / DATASHEET_FILE
        leaks = sorted({str(p) for p in (settings.home, settings.source_dir, manifest.repository_root())
                        if str(p) in text or (sheet.exists() and str(p) in sheet.read_text())})
        digest = hashlib.sha256(text.encode()).hexdigest()
        files = doc["files"]
        yield dg.MaterializeResult(data_version=dg.DataVersion(digest[:16]), metadata={
            "path": dg.MetadataValue.path(str(path)), "manifest_sha256": digest, "dagster/row_count": len(files),
            "sha256sums": dg.MetadataValue.path(str(sums)), **written(log),
            "changelog": dg.MetadataValue.md(log.read_text()), "release_versions_built": len(history),
            "bytes": sum(f.get("bytes", 0) for f in files),
            "content_digests": dg.MetadataValue.json([f["path"] for f in files if f["digest"] == "content"]),
            "input_data_versions": dg.MetadataValue.json(_input_versions(context, definitions())),
            "files": dg.MetadataValue.md(markdown.table(["file", "bytes", "sha256"], [
                [f["path"], f"{f['bytes']:,}" if "bytes" in f else f"{f['rows']:,} rows (content)", f["sha256"][:16]]
                for f in files]))})
        yield dg.AssetCheckResult(check_name="portable", passed=not leaks,
                                  metadata={"absolute_paths_found": dg.MetadataValue.json(leaks)})
        stale = _stale_inputs(context, definitions())
        yield dg.AssetCheckResult(check_name="consistent", passed=not stale,
                                  description=f"{len(stale)} upstream assets out of date",
                                  metadata={"out_of_date": dg.MetadataValue.json(stale)})

    return release_manifest


def _input_versions(context: dg.AssetExecutionContext, defs: dg.Definitions) -> dict[str, str | None]:
    """The data version of every asset the manifest lists files of, as this materialization read them."""
    from assets.freshness import data_versions

    return data_versions(defs.resolve_asset_graph(), context.instance, RELEASE_INPUTS)


def _stale_inputs(context: dg.AssetExecutionContext, defs: dg.Definitions) -> dict[str, str]:
    """The manifest's upstream assets that are out of date on this instance (``assets.freshness``)."""
    from assets.freshness import out_of_date

    graph = defs.resolve_asset_graph()
    upstream = graph.get_ancestor_asset_keys(MANIFEST_KEY)
    return out_of_date(defs, context.instance, sorted(k for k in upstream if k in graph.materializable_asset_keys))

