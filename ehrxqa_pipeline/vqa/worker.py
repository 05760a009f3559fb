"""The reference VQA model's steps as tasks for a process of their own (``ehrxqa_pipeline.cli.vqa_worker``).

Grain: one task per launch: ``train`` (one model file) or ``predict`` (one partition's predictions).
Sources: the task's workspace (a DuckDB file ``vqa.workspace.snapshot`` wrote: splits, labels, boxes), the
JPEGs under ``files_root`` and, to predict, the model file.

``assets/vqa_scoring.py`` launches ``python -m ehrxqa_pipeline.cli.vqa_worker`` through Dagster Pipes, which
hands ``run_task`` the task and reports what it returns; this module and the library it drives import no
Dagster, so the torch work runs in a slim GPU image. Every setting comes in the task (the device as set,
resolved here, in the process that holds the GPU; nothing is read from the environment here):

- ``{"task": "train", "workspace", "files_root", "model", "scratch", "config": TrainConfig fields}`` writes the
  model file and ``training_curves.png`` beside it; returns the materialization metadata and data version
  (the model's version: epochs, valid AUROC, timings) and the check ``learned`` (valid macro AUROC above 0.5,
  the untrained prior's; passed when no valid pair has enough positives to say). With ``"backbone":
  {"architecture", "weights", "model"}`` it also trains a pretrained backbone's probe (``vqa.backbone``) on the
  same arrays into ``backbone["model"]``: its facts (SHA-256 of the weights, leakage risk) and training go in
  the metadata under ``pretrained``, and its version joins the data version;
- ``{"task": "predict", "workspace", "files_root", "model", "device", "shards": {shard: image ids}, "out"}``
  writes ``relations.parquet`` and ``images.parquet`` under ``out/<shard>`` for each shard (an image partition,
  pNN: one launch predicts every partition of a run, so torch starts once, and each shard is predicted on its
  own, in the batches a launch of its own would use); returns each shard's timings under ``shards``. With
  ``"pretrained"`` (that probe's model file) it writes ``pretrained_relations.parquet`` and
  ``pretrained_images.parquet`` too and returns the probe's facts under ``pretrained``.
The calling asset writes the warehouse (its single writer), so the task only reads.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

LEARNED_CHECK = "learned"


def train(task: dict, log=print) -> tuple[dict, str, dict]:
    """(materialization metadata, data version, check result fields) of a train task; ``log(message)`` per epoch."""
    import duckdb

    from ehrxqa_pipeline.atomic import write_bytes
    from ehrxqa_pipeline.vqa.device import resolve_device
    from ehrxqa_pipeline.vqa.train import TrainConfig, plot_curves, save_model, train_reference

    config = TrainConfig(**{**task["config"], "device": resolve_device(task["config"]["device"])})
    backbone = task.get("backbone")
    with duckdb.connect(task["workspace"], read_only=True) as con:
        result = train_reference(con, Path(task["files_root"]), config, log=log, scratch=Path(task["scratch"]),
                                 backbone=backbone)
    path = save_model(result, Path(task["model"]))
    write_bytes(path.with_name("training_curves.png"), plot_curves(result.curves))
    auroc = _best(result).get("valid_auroc")
    metadata = {"trained": True, "version": result.version, "device": config.device, "path": str(path),
                "best_epoch": result.best_epoch, "valid_auroc": auroc, "curves": result.curves,
                "timings": result.timings, "config": asdict(config)}
    version = result.version
    if result.pretrained is not None:
        probe = result.pretrained
        save_model(probe, Path(backbone["model"]))
        metadata["pretrained"] = {**probe.backbone, "version": probe.version, "path": backbone["model"],
                                  "best_epoch": probe.best_epoch, "valid_auroc": _best(probe).get("valid_auroc"),
                                  "curves": probe.curves, "timings": probe.timings}
        version = f"{version}+{probe.version}"
    known = auroc is not None and auroc == auroc  # NaN: no valid pair with enough positives
    check = {"passed": (not known) or auroc > 0.5,
             "metadata": {"valid_auroc": auroc if known else None, "best_epoch": result.best_epoch},
             "description": (f"best valid macro AUROC {auroc:.3f} (the prior's: 0.5)" if known else
                             "no valid pair has enough positives to measure AUROC")}
    return metadata, version, check


def _best(result) -> dict:
    return result.curves[result.best_epoch - 1] if result.curves else {}


def predict(task: dict) -> dict:
    """Metadata of a predict task (its parquet files are written under ``task["out"]/<shard>``)."""
    import duckdb

    from ehrxqa_pipeline.vqa.device import resolve_device
    from ehrxqa_pipeline.vqa.train import load_model

    device = resolve_device(task["device"])
    models = {"": load_model(Path(task["model"]), device)}
    if task.get("pretrained"):
        models["pretrained_"] = load_model(Path(task["pretrained"]), device)
    metadata: dict = {"shards": {}}
    with duckdb.connect(task["workspace"], read_only=True) as con:
        for shard, ids in task["shards"].items():
            out = Path(task["out"]) / shard
            out.mkdir(parents=True, exist_ok=True)
            timings = {prefix: _predict_into(con, task, model, device, ids, out, prefix)
                       for prefix, model in models.items()}
            metadata["shards"][shard] = {"timings": timings[""], **(
                {"pretrained_timings": timings["pretrained_"]} if "pretrained_" in timings else {})}
    if "pretrained_" in models:
        metadata["pretrained"] = models["pretrained_"].backbone
    return metadata


def _predict_into(con, task: dict, model, device: str, ids: list[str], out: Path, prefix: str) -> dict:
    """The loaded model ``model``'s predictions of ``ids`` as ``{prefix}relations.parquet`` and
    ``{prefix}images.parquet`` under ``out``; the timings."""
    from ehrxqa_pipeline.vqa.infer import predict as run

    timings: dict = {}
    preds = run(model, con, Path(task["files_root"]), split=None, image_ids=ids, device=device, timings=timings,
                decode=task.get("decode", "auto"))
    preds.relations.write_parquet(out / f"{prefix}relations.parquet")
    preds.images.write_parquet(out / f"{prefix}images.parquet")
    return {k: v for k, v in timings.items() if k != "missing"}


def run_task(task: dict, log=print) -> tuple[dict, str | None, dict | None]:
    """(materialization metadata, data version or None, ``learned`` check fields or None) of one task."""
    if task["task"] == "train":
        return train(task, log)
    if task["task"] == "predict":
        return predict(task), None, None
    raise ValueError(f"unknown VQA worker task {task['task']!r}: use train or predict")
