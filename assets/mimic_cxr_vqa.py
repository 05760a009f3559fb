"""MIMIC-CXR-VQA: balanced (image, question, answer) triples over the 48 templates, one asset per side (silver:
train and valid; gold: test), the answer vocabulary, statistics and the release."""

from collections import Counter
from pathlib import Path

import dagster as dg
import polars as pl

from assets.automation import DUCKDB_POOL, DUCKDB_TAGS, ON_CHANGE
from assets.metadata import content_digest, records_metadata, schema_metadata, table_result, written
from assets.cxr_labels import LABEL_KEYS, ONTOLOGY_KEY
from assets.paraphrase import POOLS_KEY
from assets.splits import SPLIT_KEYS
from ehrxqa_pipeline import atomic, names
from ehrxqa_pipeline.contracts import load_contract
from ehrxqa_pipeline.hashing import combine, file_digest, frame_digest
from ehrxqa_pipeline.cxr.splits import SIDES
from ehrxqa_pipeline.paraphrase import choose_vqa_phrasings
from ehrxqa_pipeline.questions.ehrxqa.memo import ResultMemo
from ehrxqa_pipeline.questions.mimic_cxr_vqa import records
from ehrxqa_pipeline.questions.mimic_cxr_vqa import stats as vqa_stats
from ehrxqa_pipeline.questions.mimic_cxr_vqa.programs import answer_vocabulary
from ehrxqa_pipeline.questions.mimic_cxr_vqa.records import merged_types, record_frame, write_side
from ehrxqa_pipeline.questions.mimic_cxr_vqa.sampling import sample_vqa
from ehrxqa_pipeline.warehouse import replace_tables
from resources import PipelineConfig, Warehouse

QUESTION_KEYS = {side: dg.AssetKey([names.MIMIC_CXR_VQA, side]) for side in SIDES}
VOCABULARY_KEY = dg.AssetKey([names.MIMIC_CXR_VQA, "vocabulary"])
STATS_KEY = dg.AssetKey([names.MIMIC_CXR_VQA, "statistics"])
RELEASE_KEY = dg.AssetKey([names.RELEASE, "mimic_cxr_vqa"])
SPLIT_NAMES = names.DATASET_SPLITS
MIN_QUESTIONS_FOR_ENTROPY = 20  # below this, one question more or less swings the entropy comparison
ENTROPY_SCHEMA = load_contract("mimic_cxr_vqa.answer_entropy").polars_schema()
COMMON = dict(automation_condition=ON_CHANGE, pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS, owners=["team:ehrxqa"])

# The positive labels of one side's images: train/valid images from the silver set, test images from the gold set.
POSITIVES_SQL = """
    SELECT l.image_id, l.object, l.attribute FROM cxr_labels.{side} l
    JOIN splits.{side} i ON i.image_id = l.image_id
    ORDER BY image_id, object, attribute"""


def read_sides(con, table: str, order: str = "", sides=SIDES) -> pl.DataFrame:
    """``<schema>.<side>``-style tables of every side, one after the other (silver's train and valid, then
    gold's test: the release order); ``table`` holds ``{side}``."""
    return pl.concat([con.execute(f"SELECT * FROM {table.format(side=side)} {order}").pl() for side in sides],
                     how="vertical_relaxed")


def side_questions(con, side: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One side's questions (release order, without the ordering columns) and its split images."""
    return (con.execute(f"SELECT * FROM {names.MIMIC_CXR_VQA}.{side} ORDER BY split_order, q").pl()
            .drop("split_order", "q"), con.execute(f"SELECT * FROM splits.{side}").pl())


def _questions_asset(side: str) -> dg.AssetsDefinition:
    key, splits = QUESTION_KEYS[side], names.SIDE_SPLITS[side]

    @dg.asset(key=key, group_name=names.MIMIC_CXR_VQA, code_version="2", kinds={"duckdb", "polars"},
              deps=[SPLIT_KEYS[side], LABEL_KEYS[side], ONTOLOGY_KEY],
              check_specs=[dg.AssetCheckSpec("answers_in_vocabulary", asset=key, blocking=True,
                                             description="Every answer is in the answer vocabulary."),
                           dg.AssetCheckSpec("one_question_per_image_template", asset=key, blocking=True,
                                             description="Each template is asked at most once per image and "
                                                         "split."),
                           dg.AssetCheckSpec("entropy_at_least_uniform", asset=key, blocking=False,
                                             description="Per template, balanced answers are at least as "
                                                         "diverse as a uniform-random sample of the pool.")],
              description=f"Grain: one row per sampled (image, template, arguments) with its answer, for the "
                          f"{' and '.join(splits)} split{'s' if len(splits) > 1 else ''} ({side} images and labels). "
                          "Arguments from ontology-valid combinations; per template the answer distribution is "
                          "balanced (entropy), each template at most once per image, rarely used images "
                          "favoured; every split draws from its own generators, so one side is sampled without "
                          f"the other. Answer entropy per (split, template): mimic_cxr_vqa.{side}_answer_entropy. "
                          f"Source: splits.{side}, cxr_labels.{side}, cxr_labels.pairs.", **COMMON)
    def _asset(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig, warehouse: Warehouse):
        seed = pipeline_config.settings().seed
        with warehouse.connect() as con:
            pairs = con.execute("SELECT object, attribute, category FROM cxr_labels.pairs").pl()
            positives = con.execute(POSITIVES_SQL.format(side=side)).pl()
            images = con.execute(f"SELECT * FROM splits.{side}").pl()
        context.log.info(f"{side}: sampling 48 templates over {images.height} images, {positives.height} positive "
                         "labels")
        sample = sample_vqa(pairs, positives, images, seed=seed)
        context.log.info(f"{side}: sampled {sample.questions.height} questions; computing answer entropy")
        entropy = vqa_stats.answer_entropy(sample, seed=seed)
        vocabulary = answer_vocabulary(pairs)
        q = sample.questions.with_row_index("q").with_columns(
            split_order=pl.col("split").replace_strict({s: i for i, s in enumerate(SPLIT_NAMES)},
                                                       return_dtype=pl.Int8))
        schema = names.MIMIC_CXR_VQA
        with warehouse.connect() as con:
            replace_tables(con, schema, {  # in one transaction
                side: q, f"{side}_answer_entropy": pl.DataFrame(entropy, schema=ENTROPY_SCHEMA)})
            materialized = table_result(context, con, f"{schema}.{side}", tables=[f"{schema}.{side}_answer_entropy"])
        outside = q.explode("answer").filter(pl.col("answer").is_not_null() & ~pl.col("answer").is_in(vocabulary))
        repeated = q.group_by("split", "template_key", "image_id").len().filter(pl.col("len") > 1).height
        judged = [r for r in entropy if r["n"] >= MIN_QUESTIONS_FOR_ENTROPY]
        low = [f"{r['split']}/{r['template_key']}" for r in judged
               if r["entropy"] + 1e-9 < r["uniform_sample_entropy"]]
        per_split = dict(q.group_by("split").len().sort("split").rows())
        yield dg.MaterializeResult(data_version=materialized.data_version, metadata={
            **materialized.metadata, "questions_per_split": dg.MetadataValue.json(per_split),
            "vocabulary_size": len(vocabulary), "rejected_positives": sample.rejected_positives.height})
        yield dg.AssetCheckResult(check_name="answers_in_vocabulary", passed=outside.height == 0,
                                  metadata={"answers_outside": outside.height})
        yield dg.AssetCheckResult(check_name="one_question_per_image_template", passed=repeated == 0,
                                  metadata={"repeated_image_templates": repeated})
        yield dg.AssetCheckResult(check_name="entropy_at_least_uniform", passed=not low,
                                  severity=dg.AssetCheckSeverity.WARN,
                                  description=f"{len(judged) - len(low)} of {len(judged)} (split, template) samples "
                                              f"with >= {MIN_QUESTIONS_FOR_ENTROPY} questions are at least as "
                                              f"diverse as uniform random; {len(entropy) - len(judged)} too small "
                                              "to judge",
                                  metadata={"templates_below_uniform": dg.MetadataValue.json(low)})

    return _asset


QUESTION_ASSETS = [_questions_asset(side) for side in SIDES]


@dg.asset(key=VOCABULARY_KEY, group_name=names.MIMIC_CXR_VQA, code_version="1", kinds={"duckdb"}, deps=[ONTOLOGY_KEY],
          description="Grain: one row per possible answer word (the pool's objects and attributes plus the fixed "
                      "answer words), sorted: released as answer_vocabulary.json. Source: cxr_labels.pairs.",
          **COMMON)
def vocabulary(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    with warehouse.connect() as con:
        pairs = con.execute("SELECT object, attribute, category FROM cxr_labels.pairs").pl()
        words = pl.DataFrame({"answer": answer_vocabulary(pairs)},
                             schema=load_contract("mimic_cxr_vqa.vocabulary").polars_schema())
        replace_tables(con, names.MIMIC_CXR_VQA, {"vocabulary": words})
        return table_result(context, con, f"{names.MIMIC_CXR_VQA}.vocabulary")


# What a side's statistics tables are computed with (assets/mimic_cxr_vqa.statistics keeps them by it)
STATS_CODE = combine(file_digest(Path(vqa_stats.__file__)), file_digest(Path(records.__file__)), pl.__version__)


@dg.asset(key=STATS_KEY, group_name=names.MIMIC_CXR_VQA, code_version="1",
          deps=[*QUESTION_KEYS.values(), *SPLIT_KEYS.values()],
          kinds={"duckdb"}, description="Grain: one table per view (cf. paper Tables B4, B5, B6: images, "
          "questions, answers, samples per split; by content type; by semantic type) plus answer entropy per "
          "template vs a uniform-random sample. Source: mimic_cxr_vqa.{silver,gold} (and their answer entropy), "
          "splits.{silver,gold}. Also written to EHRXQA_HOME/release/mimic-cxr-vqa/statistics.{md,json}.", **COMMON)
def statistics(pipeline_config: PipelineConfig, warehouse: Warehouse) -> dg.MaterializeResult:
    # Each side's tables are kept (cache/mimic_cxr_vqa_statistics.json) under the content digests of its questions
    # and split images: an edit on one side reads and counts that side's questions only.
    memo, parts = ResultMemo(pipeline_config.settings().cache_dir / "mimic_cxr_vqa_statistics.json"), []
    with warehouse.connect() as con:
        for side in SIDES:
            tables = [f"{names.MIMIC_CXR_VQA}.{side}", f"splits.{side}"]
            inputs = combine(content_digest(con, tables), STATS_CODE)
            if (part := memo.get(side, inputs)) is None:
                part = vqa_stats.split_tables(record_frame(*side_questions(con, side)))
                memo.put(side, inputs, part, save=False)
            parts.append(part)
        entropy = read_sides(con, f"{names.MIMIC_CXR_VQA}.{{side}}_answer_entropy").to_dicts()
    memo.save()
    stats = {**vqa_stats.merge_split_tables(parts), "answer_entropy": entropy}
    md = vqa_stats.render_markdown(stats, entropy)
    out = pipeline_config.settings().release_dir / "mimic-cxr-vqa"
    atomic.write_text(out / "statistics.md", md)
    atomic.write_json(out / "statistics.json", stats, sort_keys=True, ensure_ascii=True)
    overall = [{"measure": k, **per_split} for k, per_split in stats["overall"].items()]  # Table B4
    return dg.MaterializeResult(metadata={**records_metadata(overall), "statistics": dg.MetadataValue.md(md),
                                          "overall": dg.MetadataValue.json(stats["overall"]),
                                          **written(out / "statistics.md", out / "statistics.json")})


@dg.asset(key=RELEASE_KEY, group_name=names.RELEASE, code_version="2",
          deps=[*QUESTION_KEYS.values(), VOCABULARY_KEY, *SPLIT_KEYS.values(), POOLS_KEY],
          kinds={"json"},
          check_specs=[dg.AssetCheckSpec("no_leftover_or_missing_placeholder", asset=RELEASE_KEY, blocking=True,
                                         description="Every released question is fully filled: no placeholder "
                                                     "left, every argument value present.")],
          description="Grain: one JSON record per question in the published MIMIC-CXR-VQA format, one file "
          "per split: EHRXQA_HOME/release/mimic-cxr-vqa/{train,valid,test}.json (plus answer_vocabulary.json). "
          "Each question is a phrasing drawn from its template's paraphrase pool (train pool for train, "
          "valid/test pool for valid and test); ``template`` is that phrasing with its slots. "
          "Source: mimic_cxr_vqa.{silver,gold}, mimic_cxr_vqa.vocabulary, splits.{silver,gold}, paraphrase.pools.",
          **COMMON)
def release_mimic_cxr_vqa(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig, warehouse: Warehouse):
    settings = pipeline_config.settings()
    out = settings.release_dir / "mimic-cxr-vqa"
    by_split: dict[str, dict] = {}
    with warehouse.connect() as con:
        vocabulary = [r[0] for r in con.execute(f"SELECT answer FROM {names.MIMIC_CXR_VQA}.vocabulary").fetchall()]
        pools = con.execute(f"SELECT * FROM {names.PARAPHRASE}.pools").pl()
        sizes = {side: con.execute(f"SELECT count(*) FROM {names.MIMIC_CXR_VQA}.{side}").fetchone()[0]
                 for side in SIDES}
        total, start = sum(sizes.values()), 0
        for side in SIDES:  # release order; the phrasing draws run on across the sides
            def load(side=side, start=start) -> tuple[pl.DataFrame, pl.DataFrame]:
                context.log.info(f"writing the {side} side's {sizes[side]} records to {out}/"
                                 f"{{{','.join(names.SIDE_SPLITS[side])}}}.json")
                q, images = side_questions(con, side)
                return choose_vqa_phrasings(q, pools, settings.seed, start, total), images

            # a side whose inputs are those its files were written from is not read (records.write_side)
            inputs = combine(content_digest(con, [f"{names.MIMIC_CXR_VQA}.{side}", f"splits.{side}"]),
                             frame_digest(pools), str(settings.seed), f"{start}/{total}")
            by_split.update(write_side(load, inputs, out, names.SIDE_SPLITS[side],
                                       memo=settings.cache_dir / "mimic_cxr_vqa_release.json"))
            start += sizes[side]
    atomic.write_json(out / "answer_vocabulary.json", vocabulary, ensure_ascii=True)
    para_types = dict(sorted(sum((Counter(by_split[s]["para_types"]) for s in SPLIT_NAMES), Counter()).items()))
    bad = [b for split in SPLIT_NAMES for b in by_split[split]["placeholder_problems"]]
    yield dg.MaterializeResult(metadata={
        **schema_metadata(sum(w["records"] for w in by_split.values()),
                          merged_types(by_split[split]["types"] for split in SPLIT_NAMES)),
        "path": dg.MetadataValue.path(str(out)),
        "records_per_split": dg.MetadataValue.json({s: by_split[s]["records"] for s in SPLIT_NAMES}),
        "questions_by_phrasing_source": dg.MetadataValue.json(para_types)})
    yield dg.AssetCheckResult(check_name="no_leftover_or_missing_placeholder", passed=not bad,
                              description=f"{len(bad)} questions with a leftover or missing placeholder",
                              metadata={"first": dg.MetadataValue.json(bad[:20])})
