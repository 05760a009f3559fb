"""VQA scoring: the reference model trained on silver images (and, when EHRXQA_VQA_BACKBONE is set, a pretrained
backbone's probe beside it), their predictions per image shard, and the scores of every VQA module on
MIMIC-CXR-VQA and EHRXQA (paper Tables 4, E12, E16)."""

import contextlib
import json
import tempfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import NamedTuple

import dagster as dg
import polars as pl
from pydantic import Field

from assets.automation import DUCKDB_POOL, DUCKDB_TAGS, GPU_POOL, GPU_TAGS, ON_CHANGE, RELEASE_ON_CHANGE
from assets.contract_checks import contract_check_result, contract_check_spec
from assets.cxr_cohort import GOLD_KEY as GOLD_COHORT_KEY
from assets.cxr_cohort import IMAGE_PARTITIONS
from assets.cxr_labels import LABEL_KEYS, ONTOLOGY_KEY
from assets.ehr_db import ANSWER_KEYS, DB_KEYS, answer_sheet_dir, database_dir
from assets.ehrxqa import QUESTION_KEYS as EHRXQA_QUESTION_KEYS
from assets.ingest import ingest_key
from assets.metadata import code_version, content_digest, table_metadata, table_result, written
from assets.mimic_cxr_vqa import QUESTION_KEYS as VQA_QUESTION_KEYS
from assets.mimic_cxr_vqa import read_sides
from assets.paraphrase import POOLS_KEY
from assets.splits import SPLIT_KEYS
from ehrxqa_pipeline import names
from ehrxqa_pipeline.atomic import replacing, write_text
from ehrxqa_pipeline.contracts import load_contract
from ehrxqa_pipeline.hashing import combine
from ehrxqa_pipeline.questions.ehrxqa.records import ORACLE_RUNS
from ehrxqa_pipeline.release.plots import markdown_image
from ehrxqa_pipeline.sources.images import images_dir
from ehrxqa_pipeline.vqa.predictions import (BACKBONE_CONTRACT, BACKBONE_SCHEMA, IMAGES_CONTRACT, IMAGES_SCHEMA,
                                             PRETRAINED_IMAGES_CONTRACT, PRETRAINED_RELATIONS_CONTRACT,
                                             RELATIONS_CONTRACT, RELATIONS_SCHEMA, Predictions, pretrained_backbone)
from ehrxqa_pipeline.vqa.worker import LEARNED_CHECK
from ehrxqa_pipeline.warehouse import replace_partition, replace_tables, transaction
from resources import PipelineConfig, VqaDevice, Warehouse
from resources.vqa_pipes import worker_launch

TRAINING_SET_KEY = dg.AssetKey([names.VQA_SCORING, "training_set"])
MODEL_KEY = dg.AssetKey([names.VQA_SCORING, "reference_model"])
PREDICTIONS_KEY = dg.AssetKey([names.VQA_SCORING, "predictions"])
SCORES_KEY = dg.AssetKey([names.VQA_SCORING, "scores"])
# What vqa.workspace.snapshot copies: to train, the silver side and its labels; to predict, the silver split
# (valid chooses the decision rule), every gold-cohort image (the test images and the gold EHRXQA database's
# studies) and the boxes, no labels. So a gold label edit retrains nothing and re-predicts nothing, and an EHR
# edit touches neither (issue 23).
TRAIN_WORKSPACE = [SPLIT_KEYS["silver"], ONTOLOGY_KEY, LABEL_KEYS["silver"], ingest_key("silver_bbox")]
PREDICT_WORKSPACE = [SPLIT_KEYS["silver"], GOLD_COHORT_KEY, ONTOLOGY_KEY, ingest_key("silver_bbox"),
                     ingest_key("gold_bbox")]
def train_workspace(con, path: Path | None = None):
    """The reference model's training copy: the silver splits and labels (``TRAIN_WORKSPACE``)."""
    from ehrxqa_pipeline.vqa.workspace import snapshot

    return snapshot(con, sides=("silver",), labels=("silver",), path=path)


def predict_workspace(con, top_folders: list[str], path: Path | None = None):
    """The inference copy of some top folders: the silver split (valid chooses the decision rule) and every
    gold-cohort image, no labels (``PREDICT_WORKSPACE``); the boxes of those folders' images only."""
    from ehrxqa_pipeline.vqa.workspace import GOLD_COHORT_IMAGES_SQL, snapshot

    return snapshot(con, con.execute(GOLD_COHORT_IMAGES_SQL).pl(), top_folders=top_folders, sides=("silver",),
                    path=path)


@contextlib.contextmanager
def _worker_files(settings, context) -> Iterator[Path]:
    """A folder for one worker launch (its workspace DuckDB, its outputs), under EHRXQA_HOME/cache/vqa, removed
    afterwards whatever happens."""
    root = settings.cache_dir / "vqa"
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{context.run_id[:8]}-", dir=root) as tmp:
        yield Path(tmp)


def _run_worker(context, pipes: dg.PipesClient, settings, task: dict) -> list:
    """A ``vqa.worker`` task in its own process (``cli.vqa_worker``: a child process, or a pod of its own with
    EHRXQA_VQA_LAUNCH=k8s) through Dagster Pipes; what it reported (materialization, checks)."""
    return pipes.run(context=context, extras=task, **worker_launch(pipes, settings)).get_results()


def _split_results(results: list) -> tuple[dg.MaterializeResult, list[dg.AssetCheckResult]]:
    mats = [r for r in results if isinstance(r, dg.MaterializeResult)]
    if len(mats) != 1:
        raise dg.Failure(f"the VQA worker reported {len(mats)} materializations, expected 1")
    return mats[0], [r for r in results if isinstance(r, dg.AssetCheckResult)]
SCHEMA = names.VQA_SCORING
OWNERS = ["team:ehrxqa"]
_DEFAULT_EPOCHS = 6


class ReferenceModelConfig(dg.Config):
    """Training of the reference model (paper E.1.3, from scratch: no downloaded weights)."""

    epochs: int = Field(default=_DEFAULT_EPOCHS, description="maximum epochs (early stop on valid AUROC)")
    batch_size: int = Field(default=32, description="images per optimisation step (with their ~36 crops)")
    lr: float = Field(default=3e-3, description="Adam learning rate")
    crop_size: int = Field(default=32, description="side of an object crop in pixels")
    max_images: int | None = Field(default=None, description="train on at most this many silver-train images")
    decode_workers: int | None = Field(default=None, description="threads decoding JPEGs into the training store; "
                                       "unset: every core but one, at least 2")


class ScoringConfig(dg.Config):
    threshold: float = Field(default=0.5, description="prior-corrected probability from which the reference "
                             "model affirms a finding (0.5: the model's probability reaches the training prevalence)")
    min_positives: int = Field(default=10, description="relative AUROC: (object, attribute) pairs with at least "
                               "this many positives in test (paper: 10)")
    robustness_k: int = Field(default=3, description="phrasings per test item for paraphrase robustness")


def _files_root(settings):
    return images_dir(settings.layout())


def _training_set_path(settings):
    return settings.home / "models" / "training_set.duckdb"


def _model_path(settings):
    return settings.home / "models" / "reference_model.pt"


def _probe_path(settings):
    """The pretrained backbone's probe (``vqa.backbone``), trained beside the reference model when configured."""
    return settings.home / "models" / "pretrained_model.pt"


def _gold_files(settings):
    return (database_dir(settings, "gold") / "mimic_iv_cxr.db",
            answer_sheet_dir(settings, "gold") / "tb_cxr_plus.db")


@dg.asset(key=TRAINING_SET_KEY, group_name=names.VQA_SCORING, code_version="1", kinds={"duckdb"}, owners=OWNERS,
          deps=TRAIN_WORKSPACE, automation_condition=ON_CHANGE, pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS,
          description="Grain: one DuckDB file (EHRXQA_HOME/models/training_set.duckdb) with what the reference model "
                      "trains on, under the warehouse's table names: splits.images (the silver split), "
                      "cxr_labels.pairs, cxr_labels.silver and the ingest.silver_bbox rows of those images "
                      "(vqa.workspace.snapshot). Copied out so that training holds no warehouse lock: `ehrxqa "
                      "build` runs it beside the EHRXQA steps. Its data version is its content's, so an edit that "
                      "leaves the training data as it was retrains nothing. Source: splits.silver, "
                      "cxr_labels.pairs, cxr_labels.silver, ingest.silver_bbox.")
def training_set(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig,
                 warehouse: Warehouse) -> dg.MaterializeResult:
    path = _training_set_path(pipeline_config.settings())
    with replacing(path) as tmp:
        with warehouse.connect() as con:
            work = train_workspace(con, tmp)
        tables = [r[0] for r in work.execute(
            "SELECT schema_name || '.' || table_name FROM duckdb_tables() ORDER BY 1").fetchall()]
        rows = {t: work.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
        digest = content_digest(work, tables)
        work.close()
    return dg.MaterializeResult(data_version=dg.DataVersion(combine(code_version(context), digest)), metadata={
        "path": dg.MetadataValue.path(str(path)), "dagster/row_count": rows["splits.images"],
        "rows": dg.MetadataValue.json(rows)})


@dg.asset(key=MODEL_KEY, group_name=names.VQA_SCORING, code_version="3", kinds={"pytorch"}, owners=OWNERS,
          deps=[TRAINING_SET_KEY], check_specs=[dg.AssetCheckSpec(LEARNED_CHECK, asset=MODEL_KEY, description=(
              "The kept epoch's valid macro AUROC is above 0.5, the untrained model's (its prior alone); a warning "
              "otherwise. Reported by the training process (cli.vqa_worker) through Dagster Pipes."))],
          automation_condition=ON_CHANGE, pool=GPU_POOL, op_tags=GPU_TAGS,
          description="Grain: one model file (EHRXQA_HOME/models/reference_model.pt): a small CNN over each "
                      "object's box crop with one presence output per attribute, plus view-position and sex heads "
                      "on the whole image (paper E.1.3, trained from scratch). With EHRXQA_VQA_BACKBONE set, a "
                      "second file (models/pretrained_model.pt): that pretrained backbone, frozen, under the same "
                      "heads, trained on the same decoded crops (metadata `pretrained`: weights SHA-256, leakage "
                      "risk). Trained on silver-train images, best epoch by silver-valid AUROC, in its own "
                      "process (ehrxqa_pipeline.cli.vqa_worker, launched through Dagster Pipes). CUDA when present "
                      "(bf16 autocast), else CPU. It reads no warehouse table. Source: vqa_scoring/training_set, the "
                      "JPEGs (and EHRXQA_VQA_BACKBONE_WEIGHTS).")
def reference_model(context: dg.AssetExecutionContext, config: ReferenceModelConfig, pipeline_config: PipelineConfig,
                    vqa_device: VqaDevice, vqa_pipes: dg.ResourceParam[dg.PipesClient]):
    from ehrxqa_pipeline.vqa.train import TrainConfig

    settings = pipeline_config.settings()
    path, probe = _model_path(settings), _probe_path(settings)
    backbone = vqa_device.pretrained()
    if backbone is None or not settings.check_images:
        probe.unlink(missing_ok=True)  # predictions use no probe of an earlier setting
    if not settings.check_images:
        path.unlink(missing_ok=True)
        context.log.warning("EHRXQA_CHECK_IMAGES=0 (a source without JPEGs): no reference model is trained; "
                            "vqa_scoring/scores reports the modules that read no pixels")
        yield dg.MaterializeResult(data_version=dg.DataVersion("untrained"),
                                   metadata={"trained": False, "reason": "source without JPEGs"})
        yield dg.AssetCheckResult(check_name=LEARNED_CHECK, passed=True, description="no model: no JPEGs")
        return
    train_config = TrainConfig(epochs=config.epochs, batch_size=config.batch_size, lr=config.lr,
                               crop_size=config.crop_size, seed=settings.seed, max_images=config.max_images,
                               decode_workers=config.decode_workers, device=vqa_device.requested(),
                               decode=vqa_device.decoder(), amp=vqa_device.use_amp())
    task = {"task": "train", "files_root": str(_files_root(settings)), "model": str(path),
            "config": asdict(train_config), **({"backbone": {**backbone, "model": str(probe)}} if backbone else {})}
    with _worker_files(settings, context) as tmp:
        # the decoded training set goes to a memory-mapped store in tmp (flat memory at MIMIC scale)
        mat, checks = _split_results(_run_worker(context, vqa_pipes, settings, {
            **task, "workspace": str(_training_set_path(settings)), "scratch": str(tmp)}))
    png = path.with_name("training_curves.png").read_bytes()
    yield dg.MaterializeResult(data_version=mat.data_version, metadata={
        **(mat.metadata or {}), "path": dg.MetadataValue.path(str(path)),
        "training_curves": dg.MetadataValue.md(markdown_image(png, "training curves"))})
    yield from checks


def _partition_images(work, partition: str) -> list[str]:
    """Valid (to choose the decision rule) and test images, and the gold cohort's images, in top folder
    ``partition`` (pNN)."""
    return [r[0] for r in work.execute(
        "SELECT image_id FROM splits.images WHERE split IN ('valid', 'test', 'ehrxqa') AND image_path LIKE ? "
        "ORDER BY image_id", [f"{partition}/%"]).fetchall()]


class _Shard(NamedTuple):
    """One partition's predictions: the reference model's, the probe's (empty without one) and the backbone
    facts row naming the probe's weights (empty without one), and the worker's timings (empty: no launch)."""

    preds: Predictions
    probed: Predictions
    backbone: pl.DataFrame
    timings: dict

    @classmethod
    def empty(cls) -> "_Shard":
        return cls(Predictions.empty(), Predictions.empty(), pl.DataFrame(schema=BACKBONE_SCHEMA), {})


def _predict_shards(context, pipes: dg.PipesClient, warehouse: Warehouse, settings, device: VqaDevice,
                    parts: list[str]) -> dict[str, _Shard]:
    """The predictions of each partition of ``parts`` by one worker launch (torch starts once however many
    partitions the run holds); a partition without images to predict gets none."""
    path, probe = _model_path(settings), _probe_path(settings)
    out = {part: _Shard.empty() for part in parts}
    with _worker_files(settings, context) as tmp:
        with warehouse.connect() as con:
            work = predict_workspace(con, parts, tmp / "workspace.duckdb")
        shards = {part: ids for part in parts if (ids := _partition_images(work, part))}
        work.close()
        if not shards:
            return out
        mat, _ = _split_results(_run_worker(context, pipes, settings, {
            "task": "predict", "workspace": str(tmp / "workspace.duckdb"), "files_root": str(_files_root(settings)),
            "model": str(path), "device": device.requested(), "decode": device.decoder(), "shards": shards,
            "out": str(tmp / "out"), "pretrained": str(probe) if probe.is_file() else None}))
        reported = {k: getattr(v, "value", v) for k, v in (mat.metadata or {}).items()}
        facts = reported.get("pretrained")
        backbone = (pl.DataFrame([facts], schema_overrides=BACKBONE_SCHEMA).select(*BACKBONE_SCHEMA) if facts
                    else pl.DataFrame(schema=BACKBONE_SCHEMA))
        for part, done in reported["shards"].items():
            folder = tmp / "out" / part
            out[part] = _Shard(_read_predictions(folder, ""),
                               _read_predictions(folder, "pretrained_") if facts else Predictions.empty(),
                               backbone, done["timings"])
    return out


@dg.asset(key=PREDICTIONS_KEY, group_name=names.VQA_SCORING, code_version="2", kinds={"pytorch", "duckdb"},
          owners=OWNERS, deps=[MODEL_KEY, *PREDICT_WORKSPACE], partitions_def=IMAGE_PARTITIONS,
          backfill_policy=dg.BackfillPolicy.single_run(), check_specs=[contract_check_spec(PREDICTIONS_KEY)],
          automation_condition=ON_CHANGE, pool=GPU_POOL, op_tags={**DUCKDB_TAGS, **GPU_TAGS},
          description="Grain: one row per (image, object, attribute) of the label pool with the reference model's "
                      "probability (vqa_scoring.predicted_relations) and one row per image with P(PA), P(male) and "
                      "the given boxes' CTR/MTR (vqa_scoring.predicted_images), for the valid and test images and "
                      "every gold-cohort image (the gold EHRXQA database draws from them) in one MIMIC-CXR top "
                      "folder (partition pNN). The pretrained backbone's probe, when one was trained, predicts the "
                      "same images into vqa_scoring.pretrained_relations / pretrained_images, and "
                      "vqa_scoring.pretrained_backbone names its weights (architecture, SHA-256, leakage risk); "
                      "all three are empty otherwise. Batch inference with parallel JPEG decoding; no labels are read. "
                      "The partitions of one run (a backfill, or every one in a build) share one worker process. "
                      "Source: vqa_scoring/reference_model, splits.silver, cxr_cohort.gold, cxr_labels.pairs, "
                      "ingest.silver_bbox, ingest.gold_bbox (the test images' CTR/MTR), the JPEGs.")
def predictions(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig, warehouse: Warehouse,
                vqa_device: VqaDevice, vqa_pipes: dg.ResourceParam[dg.PipesClient]) -> dg.MaterializeResult:
    settings = pipeline_config.settings()
    parts = list(context.partition_keys)
    if _model_path(settings).is_file():
        shards = _predict_shards(context, vqa_pipes, warehouse, settings, vqa_device, parts)
    else:
        context.log.warning(f"{', '.join(parts)}: no reference model ({_model_path(settings)}); nothing predicted")
        shards = {part: _Shard.empty() for part in parts}
    with warehouse.connect() as con:
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        with transaction(con):  # every table's rows of the run's partitions at once
            for part, shard in shards.items():
                for contract, frame, schema in ((RELATIONS_CONTRACT, shard.preds.relations, RELATIONS_SCHEMA),
                                                (IMAGES_CONTRACT, shard.preds.images, IMAGES_SCHEMA),
                                                (PRETRAINED_RELATIONS_CONTRACT, shard.probed.relations,
                                                 RELATIONS_SCHEMA),
                                                (PRETRAINED_IMAGES_CONTRACT, shard.probed.images, IMAGES_SCHEMA),
                                                (BACKBONE_CONTRACT, shard.backbone, BACKBONE_SCHEMA)):
                    replace_partition(con, f"{SCHEMA}.{contract.table}", contract.duckdb_columns(), part,
                                      frame.select(*schema))
        for part, shard in shards.items():
            context.log.info(f"{part}: {shard.preds.images.height} images predicted")
            rows = f"""(SELECT * FROM {SCHEMA}.predicted_relations WHERE "partition" = '{part}')"""
            context.add_asset_metadata({
                **table_metadata(con, rows), "images": shard.preds.images.height,
                **({"timings": dg.MetadataValue.json(shard.timings)} if shard.timings else {}),
                **({"pretrained": dg.MetadataValue.json(shard.backbone.row(0, named=True))}
                   if shard.backbone.height else {})}, partition_key=part)
        return dg.MaterializeResult(check_results=[contract_check_result(con, PREDICTIONS_KEY)])


# Laplace-smoothed share of silver-train images on which each pool pair is affirmed (evaluate.prior_corrected)
PREVALENCE_SQL = """
    SELECT p.object, p.attribute, (count(l.image_id) + 1.0) / (max(n.n) + 2.0) AS prevalence
    FROM cxr_labels.pairs p
    CROSS JOIN (SELECT count(*) AS n FROM splits.silver WHERE split = 'train') n
    LEFT JOIN (SELECT s.image_id, s.object, s.attribute FROM cxr_labels.silver s
               JOIN splits.silver i ON i.image_id = s.image_id AND i.split = 'train') l
      ON l.object = p.object AND l.attribute = p.attribute
    GROUP BY p.object, p.attribute ORDER BY p.object, p.attribute"""


def _read_predictions(folder: Path, prefix: str) -> Predictions:
    """What a predict task wrote under ``folder`` (``vqa.worker``: ``{prefix}relations.parquet`` and images)."""
    return Predictions(pl.read_parquet(folder / f"{prefix}relations.parquet"),
                       pl.read_parquet(folder / f"{prefix}images.parquet"))


def _load_predictions(con, prefix: str = "predicted_") -> Predictions | None:
    """Every partition's predictions: the reference model's, or with ``prefix`` "pretrained_" the probe's."""
    rel = con.execute(f"SELECT {', '.join(RELATIONS_SCHEMA)} FROM {SCHEMA}.{prefix}relations "
                      "ORDER BY image_id, object, attribute").pl().cast(RELATIONS_SCHEMA)
    img = con.execute(f"SELECT {', '.join(IMAGES_SCHEMA)} FROM {SCHEMA}.{prefix}images ORDER BY image_id"
                      ).pl().cast(IMAGES_SCHEMA)
    return Predictions(rel, img) if img.height else None


@dg.asset(key=SCORES_KEY, group_name=names.VQA_SCORING, code_version="3", kinds={"duckdb", "json"}, owners=OWNERS,
          deps=[PREDICTIONS_KEY, *VQA_QUESTION_KEYS.values(), EHRXQA_QUESTION_KEYS["gold"], *SPLIT_KEYS.values(),
                ONTOLOGY_KEY, LABEL_KEYS["silver"], LABEL_KEYS["gold"], POOLS_KEY, DB_KEYS["gold"],
                ANSWER_KEYS["gold"]],
          automation_condition=RELEASE_ON_CHANGE, pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS,
          description="Grain: one row per (VQA module, metric): MIMIC-CXR-VQA test accuracy and micro F1 (overall, "
                      "per content type), relative AUROC vs the reference model (E.1.3), EHRXQA execution accuracy "
                      "of the gold NeuralSQL per modality x patient scope (Table E16), paraphrase robustness of "
                      "text-reading modules; a pretrained backbone's probe, when one predicted, as module "
                      "pretrained_<architecture> (metadata `pretrained_backbone`: weights SHA-256, leakage risk). "
                      "Table vqa_scoring.scores; EHRXQA_HOME/release/scores.{json,md}; each "
                      "scored module's answer per test item, one file per dataset and module: "
                      "release/predictions/{mimic-cxr-vqa,ehrxqa}/test/<module>.json ([{id, answer}], the "
                      "format `ehrxqa score` reads, which gives the same scores). "
                      "Source: vqa_scoring.predicted_*, mimic_cxr_vqa.{silver,gold}, ehrxqa.gold (test), "
                      "splits.{silver,gold}, cxr_labels.pairs, cxr_labels.gold, cxr_labels.silver (train prevalence), "
                      "paraphrase.pools, the gold database and answer sheet.")
def scores(context: dg.AssetExecutionContext, config: ScoringConfig, pipeline_config: PipelineConfig,
           warehouse: Warehouse, vqa_device: VqaDevice) -> dg.MaterializeResult:
    from ehrxqa_pipeline.vqa.evaluate import EvaluationInputs, evaluate
    from ehrxqa_pipeline.vqa.leaderboard import leaderboard_markdown, scores_json
    from ehrxqa_pipeline.vqa.prediction_files import write_module_predictions

    settings = pipeline_config.settings()
    database, sheet = _gold_files(settings)
    with warehouse.connect() as con:
        preds = _load_predictions(con)
        try:
            backbone = pretrained_backbone(con)
        except ValueError as err:
            raise dg.Failure(str(err)) from None
        pretrained = {backbone["module"]: _load_predictions(con, "pretrained_")} if backbone else {}
        inputs = EvaluationInputs(
            questions=read_sides(con, f"{names.MIMIC_CXR_VQA}.{{side}}", "ORDER BY split_order, q"),
            images=read_sides(con, "splits.{side}"),
            pairs=con.execute("SELECT object, attribute, category FROM cxr_labels.pairs").pl(),
            gold_positives=con.execute("SELECT image_id, object, attribute FROM cxr_labels.gold").pl(),
            ehrxqa_items=con.execute(f"SELECT * FROM {names.EHRXQA}.gold WHERE split = 'test' ORDER BY id").pl(),
            gold_database=database, answer_sheet=sheet,
            images_root=_files_root(settings) if settings.check_images else None, predictions=preds,
            pretrained=pretrained,
            prevalence=con.execute(PREVALENCE_SQL).pl(),
            pools=con.execute(f"SELECT * FROM {names.PARAPHRASE}.pools").pl(), vision=vqa_device.vision(),
            parse_store=settings.neuralsql_parse_store, memo=settings.cache_dir / "scores_memo.json",
            oracle_runs=settings.cache_dir / ORACLE_RUNS)
    result = evaluate(inputs, seed=settings.seed, threshold=config.threshold, min_positives=config.min_positives,
                      robustness_k=config.robustness_k, log=context.log.info)
    text = scores_json(result.scores)
    md = leaderboard_markdown(result.scores)
    write_text(settings.release_dir / "scores.json", text)
    write_text(settings.release_dir / "scores.md", md)
    written_predictions = write_module_predictions(settings.release_dir, result.predictions, split="test")
    rows = pl.DataFrame([{"module": m, "metric": k, "value": None if v is None else float(v)}
                         for m, metrics in json.loads(text).items() for k, v in metrics.items()],
                        schema=load_contract("vqa_scoring.scores").polars_schema())
    with warehouse.connect() as con:
        replace_tables(con, SCHEMA, {"scores": rows})
        return table_result(context, con, f"{SCHEMA}.scores", metadata={
            "leaderboard": dg.MetadataValue.md(md), "modules": dg.MetadataValue.json(sorted(result.scores)),
            "reference_trained": preds is not None,
            "reference_decision": dg.MetadataValue.json(result.decisions.get("reference", {})),
            **({"pretrained_backbone": dg.MetadataValue.json({**backbone, "decision": result.decisions.get(
                backbone["module"], {})})} if backbone else {}),
            "path": dg.MetadataValue.path(str(settings.release_dir / "scores.json")),
            **written(settings.release_dir / "scores.md", *written_predictions),
            "prediction_files": dg.MetadataValue.json(
                [p.relative_to(settings.release_dir).as_posix() for p in written_predictions])})
