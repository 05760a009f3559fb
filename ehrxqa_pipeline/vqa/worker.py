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
  the untrained prior's; passed when no valid pair has enough positives to say);
- ``{"task": "predict", "workspace", "files_root", "model", "device", "image_ids", "out"}`` writes
  ``relations.parquet`` and ``images.parquet`` under ``out``; returns the timings.
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
    with duckdb.connect(task["workspace"], read_only=True) as con:
        result = train_reference(con, Path(task["files_root"]), config, log=log, scratch=Path(task["scratch"]))
    path = save_model(result, Path(task["model"]))
    write_bytes(path.with_name("training_curves.png"), plot_curves(result.curves))
    best = result.curves[result.best_epoch - 1] if result.curves else {}
    auroc = best.get("valid_auroc")
    metadata = {"trained": True, "version": result.version, "device": config.device, "path": str(path),
                "best_epoch": result.best_epoch, "valid_auroc": auroc, "curves": result.curves,
                "timings": result.timings, "config": asdict(config)}
    known = auroc is not None and auroc == auroc  # NaN: no valid pair with enough positives
    check = {"passed": (not known) or auroc > 0.5,
             "metadata": {"valid_auroc": auroc if known else None, "best_epoch": result.best_epoch},
             "description": (f"best valid macro AUROC {auroc:.3f} (the prior's: 0.5)" if known else
                             "no valid pair has enough positives to measure AUROC")}
    return metadata, result.version, check


def predict(task: dict) -> dict:
    """Metadata of a predict task (its parquet files are written under ``task["out"]``)."""
    import duckdb

    from ehrxqa_pipeline.vqa.device import resolve_device
    from ehrxqa_pipeline.vqa.infer import predict as run
    from ehrxqa_pipeline.vqa.train import load_model

    out = Path(task["out"])
    out.mkdir(parents=True, exist_ok=True)
    device = resolve_device(task["device"])
    timings: dict = {}
    with duckdb.connect(task["workspace"], read_only=True) as con:
        preds = run(load_model(Path(task["model"]), device), con, Path(task["files_root"]), split=None,
                    image_ids=task["image_ids"], device=device, timings=timings)
    preds.relations.write_parquet(out / "relations.parquet")
    preds.images.write_parquet(out / "images.parquet")
    return {"timings": {k: v for k, v in timings.items() if k != "missing"}}


def run_task(task: dict, log=print) -> tuple[dict, str | None, dict | None]:
    """(materialization metadata, data version or None, ``learned`` check fields or None) of one task."""
    if task["task"] == "train":
        return train(task, log)
    if task["task"] == "predict":
        return predict(task), None, None
    raise ValueError(f"unknown VQA worker task {task['task']!r}: use train or predict")
