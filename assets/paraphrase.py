"""Paraphrase pools: prompts (privacy-checked) -> candidates (LLM or offline rules) -> machine validation ->
human review -> pools split 3:1 -> statistics. Library: ehrxqa_pipeline.paraphrase."""

import hashlib

import dagster as dg
import polars as pl

from assets.automation import DUCKDB_POOL, DUCKDB_TAGS, LLM_POOL, ON_CHANGE
from assets.metadata import records_metadata, table_metadata, written
from assets.ingest import ingest_key
from assets.sources import REVIEW_SOURCE_KEY
from ehrxqa_pipeline import atomic, filters, names
from ehrxqa_pipeline.config import Environment
from ehrxqa_pipeline.contracts import load_contract
from ehrxqa_pipeline.paraphrase import rules
from ehrxqa_pipeline.paraphrase.generate import CANDIDATE_SCHEMA, from_llm, prompts_for, rule_based
from ehrxqa_pipeline.paraphrase.pools import build_pools, pool_problems, pool_sizes
from ehrxqa_pipeline.paraphrase.privacy import PrivacyGuard, ValueSet
from ehrxqa_pipeline.paraphrase.prompts import PAPER_COUNTS, PROMPT_VERSION, scaffold_texts
from ehrxqa_pipeline.paraphrase.templates import all_templates
from ehrxqa_pipeline.hashing import sha256_file
from ehrxqa_pipeline.warehouse import replace_tables
from resources import LLMResource, PipelineConfig, Warehouse

G = names.PARAPHRASE
PROMPTS_KEY = dg.AssetKey([G, "prompts"])
CANDIDATES_KEY = dg.AssetKey([G, "candidates"])
VALIDATED_KEY = dg.AssetKey([G, "validated"])
REVIEW_KEY = dg.AssetKey([G, "review"])
POOLS_KEY = dg.AssetKey([G, "pools"])
STATS_KEY = dg.AssetKey([G, "statistics"])
# record values that must never reach a prompt (dates are caught by shape): ingest table -> columns
VALUE_COLUMNS = {"patients": ("subject_id",), "admissions": ("hadm_id",), "icustays": ("stay_id",),
                 "cxr_metadata": ("dicom_id", "study_id"), "prescriptions": ("drug",)}
COMMON = dict(group_name=G, automation_condition=ON_CHANGE, owners=["team:ehrxqa"], kinds={"duckdb"})


def _read(con, table: str) -> pl.DataFrame:
    return con.execute(f"SELECT * FROM {G}.{table}").pl()


def _version(*frames: pl.DataFrame) -> dg.DataVersion:
    """Content hash of ``frames``: downstream re-runs only when the content changed."""
    h = hashlib.sha256("".join(f.write_csv() for f in frames).encode()).hexdigest()[:32]
    return dg.DataVersion(h)


def record_values(con) -> tuple[ValueSet, list[str]]:
    """Ids and names from the ingested tables (those present), and the tables read."""
    present = {r[0] for r in con.execute(f"SELECT table_name FROM duckdb_tables() WHERE schema_name = "
                                         f"'{names.INGEST}'").fetchall()}
    values, read = [], []
    for table, cols in VALUE_COLUMNS.items():
        if table in present:
            read.append(table)
            for c in cols:
                values += [r[0] for r in con.execute(f"SELECT DISTINCT {c} FROM {names.INGEST}.{table} "
                                                     f"WHERE {c} IS NOT NULL").fetchall()]
    return ValueSet.of(values), read


def _dataset_rows(stats: dict) -> list[dict]:
    """The statistics' scalar fields, one row per dataset (the asset's row count and column schema)."""
    return [{"dataset": ds, **{k: v for k, v in d.items() if not isinstance(v, (dict, list))},
             "paraphrases_per_template": d["paraphrases_per_template"]["mean"]} for ds, d in stats.items()]


def templates_by_source(templates, pool: pl.DataFrame) -> dict[str, dict[str, int]]:
    """Per dataset: templates whose pool holds LLM phrasings (``llm``), else offline ones (``offline``), else
    only reviewers' own (``reviewer``), else none: the question keeps the template's wording (``original``)."""
    have = {(t, s) for t, s in pool.select("template_id", "source").unique().iter_rows()}
    out: dict[str, dict[str, int]] = {}
    for t in templates:
        d = out.setdefault(t.dataset, {"llm": 0, "offline": 0, "reviewer": 0, "original": 0})
        kind = next((k for k, src in (("llm", "llm"), ("offline", rules.SOURCE)) if (t.template_id, src) in have),
                    "reviewer" if any(x[0] == t.template_id for x in have) else "original")
        d[kind] += 1
    return dict(sorted(out.items()))


def paraphraser_frame(model: str | None, fallback: str | None) -> pl.DataFrame:
    """One row: whether an LLM endpoint made the candidates, its model (never its URL or key), the fallback."""
    return pl.DataFrame({"llm": [model is not None], "model": [model], "fallback": [fallback]},
                        schema=load_contract("paraphrase.paraphraser").polars_schema())


def paraphraser_facts(templates, made: pl.DataFrame, candidates_frame: pl.DataFrame,
                      failures: pl.DataFrame) -> dict:
    """What made the candidates (tables paraphrase.paraphraser, .candidates, .llm_failures): the endpoint's use,
    model and fallback, and per dataset the candidates' sources and the endpoint's failure kinds."""
    from ehrxqa_pipeline.paraphrase.generate import sources_per_dataset

    row = made.row(0, named=True) if made.height else {"llm": False, "model": None, "fallback": None}
    return {"llm": row["llm"], "model": row["model"], "fallback": row["fallback"],
            "datasets": sources_per_dataset(templates, candidates_frame, dict(failures.iter_rows()))}


def _counts(llm: LLMResource) -> dict[str, int]:
    return {**PAPER_COUNTS, **llm.counts()}


@dg.asset(key=PROMPTS_KEY, code_version=f"1-{PROMPT_VERSION}", pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS,
          deps=[ingest_key(t) for t in VALUE_COLUMNS],
          check_specs=[dg.AssetCheckSpec("no_record_values", asset=PROMPTS_KEY, blocking=True,
                                         description="No prompt holds an id, a date or a drug name of the "
                                                     "databases (PhysioNet DUA): only template text is sent.")],
          description="Grain: one row per template (48 MIMIC-CXR-VQA + the EHRXQA image and image+table "
                      "templates) with the paper's prompt (Figures B1 / C4, version in code_version) asking for "
                      "the configured number of paraphrases. Source: the template catalogs; the privacy check "
                      "reads ids and drug names from ingest.{patients,admissions,icustays,cxr_metadata,"
                      "prescriptions}.", **COMMON)
def prompts(llm: LLMResource, warehouse: Warehouse):
    templates = all_templates()
    counts = _counts(llm)
    texts = prompts_for(templates, counts)
    frame = pl.DataFrame({"template_id": [t.template_id for t in templates], "dataset": [t.dataset for t in templates],
                          "template_key": [t.key for t in templates], "form": [t.form for t in templates],
                          "text": [t.text for t in templates], "count": [counts[t.dataset] for t in templates],
                          "prompt_version": PROMPT_VERSION, "prompt": [texts[t.template_id] for t in templates]},
                         schema=load_contract("paraphrase.prompts").polars_schema())
    with warehouse.connect() as con:
        replace_tables(con, G, {"prompts": frame})
        stored = table_metadata(con, f"{G}.prompts")
        values, read = record_values(con)
    leaks = PrivacyGuard(values, exempt=scaffold_texts()).scan_all(texts)
    kinds = {}
    for leak in leaks:
        kinds[leak.kind] = kinds.get(leak.kind, 0) + 1
    yield dg.MaterializeResult(data_version=_version(frame), metadata={
        **stored, "prompt_version": PROMPT_VERSION,
        "templates_per_dataset": dg.MetadataValue.json(dict(frame.group_by("dataset").len().sort("dataset").rows()))})
    yield dg.AssetCheckResult(check_name="no_record_values", passed=not leaks,
                              description=f"{len(leaks)} record values in {len({x.key for x in leaks})} prompts; "
                                          f"{len(values)} values scanned from {', '.join(read) or 'no tables'}",
                              metadata={"leaks_by_kind": dg.MetadataValue.json(kinds),
                                        "first_leaks": dg.MetadataValue.json([x.describe() for x in leaks[:20]])})


@dg.asset(key=CANDIDATES_KEY, code_version=f"2-{PROMPT_VERSION}-{rules.VERSION}", pool=LLM_POOL,
          op_tags=DUCKDB_TAGS, deps=[PROMPTS_KEY],
          check_specs=[dg.AssetCheckSpec("llm_requests_succeeded", asset=CANDIDATES_KEY, blocking=False,
                                         description="Every template got a usable LLM answer (with "
                                                     "EHRXQA_LLM_FALLBACK=offline, the others got the offline "
                                                     "paraphraser's; without it the step fails).")],
          description="Grain: one row per (template, candidate paraphrase) in generation order, with its source: "
                      "the LLM (EHRXQA_LLM_BASE_URL; usable answers cached in EHRXQA_HOME/cache/llm_cache.duckdb "
                      "by endpoint, model, prompt version, template, temperature and seed) or, with no endpoint, "
                      "the offline rule-based paraphraser. The endpoint is checked first (preflight); a template "
                      "with no usable LLM answer fails the step unless EHRXQA_LLM_FALLBACK=offline. Source: "
                      "paraphrase.prompts.", **COMMON)
def candidates(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig, llm: LLMResource,
               warehouse: Warehouse):
    from ehrxqa_pipeline.paraphrase.cache import FILE_NAME, LlmCache
    from ehrxqa_pipeline.paraphrase.embed import Embedder
    from ehrxqa_pipeline.paraphrase.generate import GenerationReport, LlmFailed, fall_back, validator
    from ehrxqa_pipeline.paraphrase.llm import ChatClient
    from ehrxqa_pipeline.paraphrase.preflight import EndpointUnusable, preflight

    settings = pipeline_config.settings()
    templates = all_templates()
    try:
        llm_settings, fallback = llm.settings(settings.seed), llm.fallback_mode()
    except ValueError as err:
        raise dg.Failure(f"LLM settings: {err}") from None
    context.log.info(f"generating paraphrase candidates for {len(templates)} templates with "
                     f"{'the offline rule-based paraphraser' if llm_settings is None else 'the LLM endpoint'}")
    counts = _counts(llm)
    if llm_settings is None:
        frame, report = rule_based(templates, counts, settings.seed)
    else:
        client = ChatClient(llm_settings)
        try:
            found = preflight(client)
        except EndpointUnusable as err:
            if fallback != "offline":
                raise dg.Failure(f"LLM endpoint unusable ({err.kind}): {err}. Nothing was sent. Fix it, or set "
                                 "EHRXQA_LLM_FALLBACK=offline to use the offline rule-based paraphraser.",
                                 metadata={"preflight": err.kind}) from None
            context.log.warning(f"LLM endpoint unusable ({err.kind}): {err}; EHRXQA_LLM_FALLBACK=offline: "
                                "the offline paraphraser writes every template's candidates")
            frame = pl.DataFrame(schema=CANDIDATE_SCHEMA)
            report = GenerationReport(f"llm:{llm_settings.model}", len(templates),
                                      errors={t.template_id: f"preflight_{err.kind}" for t in templates})
        else:
            listed = "model listed" if found.models_listed else "the server lists no models"
            context.log.info(f"LLM endpoint preflight passed ({listed}); deadline {llm_settings.deadline_s:g} s, "
                             f"request timeout {llm_settings.timeout_s:g} s")
            with warehouse.connect() as con:
                values, _ = record_values(con)
            guard = PrivacyGuard(values, exempt=scaffold_texts())
            usable = validator(Embedder(cache_path=settings.embedding_cache))
            frame, report = from_llm(templates, counts, client, LlmCache(settings.cache_dir / FILE_NAME), guard,
                                     usable=usable, log=context.log.info)
        if report.errors:
            if fallback != "offline":
                raise dg.Failure(str(LlmFailed(report)), metadata={
                    "failure_kinds": dg.MetadataValue.json(report.failure_kinds()),
                    "errors": dg.MetadataValue.json(dict(sorted(report.errors.items()))),
                    "cache_hits": report.cache_hits, "requests": report.requests})
            context.log.warning(f"{len(report.errors)} templates without a usable LLM answer "
                                f"({report.failure_kinds()}): EHRXQA_LLM_FALLBACK=offline, the offline paraphraser "
                                "writes their candidates")
            frame = fall_back(templates, frame, report, counts, settings.seed)
    context.log.info(f"candidates: {frame.height} from {report.generator}; {report.requests} requests, "
                     f"{report.cache_hits} answers from the cache, {len(report.errors)} templates without a "
                     f"usable LLM answer")
    made = paraphraser_frame(llm_settings.model if llm_settings is not None else None,
                             fallback if llm_settings is not None else None)
    failures = pl.DataFrame(sorted(report.errors.items()), orient="row",
                            schema=load_contract("paraphrase.llm_failures").polars_schema())
    with warehouse.connect() as con:  # what made the candidates, read by the datasheet and the manifest
        replace_tables(con, G, {"candidates": frame, "paraphraser": made, "llm_failures": failures})
        stored = table_metadata(con, f"{G}.candidates")
    meta = report.as_metadata()
    meta["candidates"] = frame.height
    meta["paraphraser"] = paraphraser_facts(templates, made, frame, failures)
    yield dg.MaterializeResult(data_version=_version(frame, failures, made), metadata={
        **stored, **{k: dg.MetadataValue.json(v) if isinstance(v, dict) else v
                                              for k, v in meta.items()}})
    yield dg.AssetCheckResult(check_name="llm_requests_succeeded", passed=not report.errors,
                              severity=dg.AssetCheckSeverity.WARN,
                              description=f"{len(report.errors)} templates without a usable LLM answer "
                                          f"({report.failure_kinds()})",
                              metadata={"errors": dg.MetadataValue.json(dict(sorted(report.errors.items())))})


@dg.asset(key=VALIDATED_KEY, code_version="1", pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS,
          deps=[CANDIDATES_KEY, REVIEW_SOURCE_KEY],
          description="Grain: one row per machine-valid candidate (placeholders kept, question form kept, no "
                      "(near-)duplicate, sentence-embedding similarity to the template >= the threshold); refused "
                      "ones in paraphrase.validated_rejected with a named reason. Includes reviewers' own accepted "
                      "phrasings from paraphrases/reviewed.csv. Source: paraphrase.candidates, the review file.",
          **COMMON)
def validated(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig, warehouse: Warehouse):
    from ehrxqa_pipeline.paraphrase import review
    from ehrxqa_pipeline.paraphrase.embed import Embedder
    from ehrxqa_pipeline.paraphrase.validate import MEANING_THRESHOLD, REASONS, validate

    settings = pipeline_config.settings()
    with warehouse.connect() as con:
        cands = _read(con, "candidates")
    own = review.reviewer_candidates(review.read_reviews(Environment.read().review_file()), cands)
    start = cands.group_by("template_id").agg(pl.len().alias("_n"))
    own = (own.with_columns(rank=pl.int_range(pl.len()).over("template_id"))
           .join(start, on="template_id", how="left").with_columns(rank=pl.col("rank") + pl.col("_n").fill_null(0))
           .drop("_n"))
    everything = pl.concat([cands.select("template_id", "rank", "text", "source"),
                            own.select("template_id", "rank", "text", "source")])
    embedder = Embedder(cache_path=settings.embedding_cache)
    context.log.info(f"validating {everything.height} candidates ({own.height} reviewer phrasings) against "
                     f"{len(all_templates())} templates")
    out = validate(all_templates(), everything, embedder)
    checked = filters.split(out.drop("valid"), REASONS)  # valid <=> no reason
    valid, rejected = checked.kept, checked.rejected
    context.log.info(f"{valid.height} valid, {rejected.height} refused; {embedder.computed} embeddings computed")
    with warehouse.connect() as con:
        replace_tables(con, G, {"validated": valid, names.rejected("validated"): rejected})
        stored = table_metadata(con, f"{G}.validated")
    return dg.MaterializeResult(data_version=_version(valid), metadata={
        **stored, "rejected_rows": rejected.height,
        "rejected_by_reason": dg.MetadataValue.json(checked.counts),
        "meaning_threshold": MEANING_THRESHOLD, "reviewer_phrasings": own.height,
        "embeddings_computed": embedder.computed})


@dg.asset(key=REVIEW_KEY, code_version="1", pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS,
          deps=[VALIDATED_KEY, CANDIDATES_KEY, REVIEW_SOURCE_KEY],
          description="Grain: one row per machine-valid candidate with the human decision from "
                      "paraphrases/reviewed.csv (accepted / rejected; none: pending) and the reviewer's note. "
                      "Pending candidates are listed in EHRXQA_HOME/paraphrase/review_queue.csv in the file's "
                      "format. An edit of the file is a change the automation sees (sources/paraphrase_review); "
                      "paraphrase.review_file holds the SHA-256 of the file read. Source: paraphrase.validated, the "
                      "file (and paraphrase.candidates: review rows that match no candidate are counted).",
          **COMMON)
def review_state(pipeline_config: PipelineConfig, warehouse: Warehouse):
    from ehrxqa_pipeline.paraphrase import review

    path = Environment.read().review_file()
    reviews = review.read_reviews(path)
    with warehouse.connect() as con:
        valid = _read(con, "validated")
        cands = _read(con, "candidates")
        state = review.review_state(valid, reviews)
        read = pl.DataFrame({"sha256": [sha256_file(path) if path.is_file() else None]},
                            schema=load_contract("paraphrase.review_file").polars_schema())
        replace_tables(con, G, {"review": state, "review_file": read})
        stored = table_metadata(con, f"{G}.review")
    queue = pipeline_config.settings().home / "paraphrase" / "review_queue.csv"
    atomic.write_text(queue, review.queue_csv(state))
    counts = {d: state.filter(pl.col("decision") == d).height for d in review.DECISIONS}
    seen = pl.concat([cands.select("template_id", "text"), valid.select("template_id", "text")])
    stale = review.orphans(reviews, seen)
    return dg.MaterializeResult(data_version=_version(state, read), metadata={
        **stored, **{f"decision/{k}": v for k, v in counts.items()},
        "review_rows_matching_nothing": stale.height, "review_file": dg.MetadataValue.path(str(path)),
        "review_queue": dg.MetadataValue.path(str(queue))})


@dg.asset(key=POOLS_KEY, code_version="1", pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS, deps=[REVIEW_KEY],
          check_specs=[
              dg.AssetCheckSpec("placeholders_match_template", asset=POOLS_KEY, blocking=True,
                                description="Every phrasing keeps exactly its template's placeholders."),
              dg.AssetCheckSpec("train_test_disjoint", asset=POOLS_KEY, blocking=True,
                                description="No phrasing of a template is in both the train and valid/test pool."),
              dg.AssetCheckSpec("every_template_has_phrasings", asset=POOLS_KEY, blocking=False,
                                description="Templates with no usable phrasing keep their own wording.")],
          description="Grain: one row per (template, phrasing): usable candidates (accepted, or pending unless "
                      "EHRXQA_PARAPHRASE_REQUIRE_REVIEW=1), k-means (k=4) cluster over word edit distance, side "
                      "train or test (valid/test), clusters 3:1. Source: paraphrase.review.", **COMMON)
def pools(warehouse: Warehouse):
    require_review = Environment.read().review_required()
    templates = all_templates()
    with warehouse.connect() as con:
        state = _read(con, "review")
        frame = build_pools(templates, state, require_review)
        config = pl.DataFrame({"require_review": [require_review]},
                              schema=load_contract("paraphrase.pools_config").polars_schema())
        replace_tables(con, G, {"pools": frame, "pools_config": config})
        stored = table_metadata(con, f"{G}.pools")
    problems = pool_problems(templates, frame)
    sizes = pool_sizes(templates, frame)
    empty = sizes.filter(pl.col("total") == 0)["template_id"].to_list()
    yield dg.MaterializeResult(data_version=_version(frame, config), metadata={
        **stored, "require_review": require_review,
        "mean_per_template": dg.MetadataValue.json(
            {ds: round(float(g["total"].mean()), 2) for (ds,), g in sizes.group_by("dataset")}),
        "templates_by_source": dg.MetadataValue.json(templates_by_source(templates, frame))})
    yield dg.AssetCheckResult(check_name="placeholders_match_template", passed=not problems["placeholders"],
                              metadata={"bad": dg.MetadataValue.json(problems["placeholders"][:20])})
    yield dg.AssetCheckResult(check_name="train_test_disjoint", passed=not problems["train_test_overlap"],
                              metadata={"overlap": dg.MetadataValue.json(problems["train_test_overlap"][:20])})
    yield dg.AssetCheckResult(check_name="every_template_has_phrasings", passed=not empty,
                              severity=dg.AssetCheckSeverity.WARN,
                              description=f"{len(empty)} templates without phrasings",
                              metadata={"templates": dg.MetadataValue.json(empty)})


@dg.asset(key=STATS_KEY, code_version="1", pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS,
          deps=[CANDIDATES_KEY, VALIDATED_KEY, REVIEW_KEY, POOLS_KEY],
          description="Grain: one table per dataset: candidates by source, machine rejections per reason, review "
                      "decisions, paraphrases per template (paper: 16.5 MIMIC-CXR-VQA, 10.4 EHRXQA) and per side. "
                      "Also EHRXQA_HOME/release/paraphrases/statistics.{md,json}. Source: paraphrase.*.", **COMMON)
def statistics(pipeline_config: PipelineConfig, warehouse: Warehouse) -> dg.MaterializeResult:
    from ehrxqa_pipeline.paraphrase.stats import render_markdown
    from ehrxqa_pipeline.paraphrase.stats import statistics as compute

    with warehouse.connect() as con:
        frames = {t: _read(con, t) for t in ("candidates", "validated", names.rejected("validated"), "review", "pools")}
    checked = pl.concat([frames["validated"].with_columns(valid=pl.lit(True)),
                         frames[names.rejected("validated")].with_columns(valid=pl.lit(False))], how="diagonal")
    stats = compute(all_templates(), frames["candidates"], checked, frames["review"], frames["pools"])
    md = render_markdown(stats)
    out = pipeline_config.settings().release_dir / "paraphrases"
    atomic.write_text(out / "statistics.md", md)
    atomic.write_json(out / "statistics.json", stats, sort_keys=True, ensure_ascii=True)
    return dg.MaterializeResult(metadata={**records_metadata(_dataset_rows(stats)),
                                          "statistics": dg.MetadataValue.md(md),
                                          "overall": dg.MetadataValue.json(stats),
                                          **written(out / "statistics.md", out / "statistics.json")})
