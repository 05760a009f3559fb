"""Stage ``vqa_model`` of ``make bench``: the reference VQA model's training and inference throughput.

Needs a home where the ``cxr`` stage ran (splits and labels in its warehouse) and a source with JPEGs (the
``demo`` scale; the ``full`` source has none, so the stage reports that and does nothing). Measures, on the
device ``--device`` resolves to (CUDA when present): one training run with the default configuration (wall
seconds, images/s, decode vs model seconds, best valid AUROC) and ``vqa.bench.throughput`` per batch size
(training and inference images/s, decode vs model time; on a GPU also its memory and utilisation).
Run on a GPU machine: ``python -m benchmarks.vqa_bench --home H --source S --device cuda``.

    python -m benchmarks.vqa_bench --home DIR --source DIR [--out FILE] [--device auto] [--batch-sizes 32,64]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def vqa_bench(home: Path, source: Path, device: str = "auto", batch_sizes: tuple[int, ...] = (32, 64, 128, 256),
              max_images: int = 512) -> dict:
    import duckdb

    from ehrxqa_pipeline.sources.images import images_dir
    from ehrxqa_pipeline.vqa.bench import throughput
    from ehrxqa_pipeline.vqa.device import device_info, resolve_device
    from ehrxqa_pipeline.vqa.train import TrainConfig, train_reference
    from ehrxqa_pipeline.vqa.workspace import snapshot

    files_root = images_dir(Path(source))
    if not files_root.is_dir():
        return {"skipped": f"no JPEGs under {files_root} (a metadata-only source)"}
    dev = resolve_device(device)
    with duckdb.connect(str(Path(home) / "warehouse.duckdb"), read_only=True) as con:
        work = snapshot(con, labels=("silver",))
    start = time.perf_counter()
    result = train_reference(work, files_root, TrainConfig(device=dev), log=lambda _: None)
    wall = time.perf_counter() - start
    best = result.curves[result.best_epoch - 1] if result.curves else {}
    return {"device": device_info(dev),
            "train_default": {"wall_seconds": round(wall, 2), "best_epoch": result.best_epoch,
                              "valid_auroc": best.get("valid_auroc"), **result.timings},
            "throughput": throughput(work, files_root, batch_sizes=batch_sizes, device=dev, max_images=max_images)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--home", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--out")
    p.add_argument("--device", default="auto")
    p.add_argument("--batch-sizes", default="32,64,128,256")
    p.add_argument("--max-images", type=int, default=512)
    args = p.parse_args(argv)
    result = vqa_bench(Path(args.home), Path(args.source), args.device,
                       tuple(int(b) for b in args.batch_sizes.split(",")), args.max_images)
    text = json.dumps(result, indent=2, default=str)
    print(text, flush=True)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
