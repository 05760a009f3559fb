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
            "throughput": throughput(work, files_root, batch_sizes=batch_sizes, device=dev, max_images=max_images),
            "decode_memory": memory_bench(home, source)}


def _peak_anon_mib(fn) -> tuple[float, object]:
    """Run ``fn()`` and return (the peak growth of this process's anonymous memory in MiB, its result), sampled
    from /proc/self/status every 5 ms: anonymous memory, not RSS, because memory-mapped store pages are file
    pages the kernel can drop at any time."""
    import threading

    def anon() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
        return 0

    base, peak, done = anon(), [0], threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], anon())
            done.wait(0.005)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        out = fn()
    finally:
        done.set()
        t.join()
    return (max(peak[0], anon()) - base) / 1024, out


def decode_memory(home: Path, source: Path, repeat: int, store: bool) -> dict:
    """Peak anonymous memory of decoding the train split's images ``repeat`` times over (in memory, or into a
    memory-mapped store): the store's must stay flat as the image count grows. Run in a fresh process."""
    import tempfile

    import duckdb

    from ehrxqa_pipeline.sources.images import images_dir
    from ehrxqa_pipeline.vqa.dataset import select_images
    from ehrxqa_pipeline.vqa.images import decode_crops
    from ehrxqa_pipeline.vqa.workspace import snapshot

    with duckdb.connect(str(Path(home) / "warehouse.duckdb"), read_only=True) as con:
        work = snapshot(con, labels=("silver",))
    imgs = select_images(work, "train")
    items = list(zip(imgs["image_id"], imgs["image_path"])) * repeat
    with tempfile.TemporaryDirectory() as tmp:
        mib, crops = _peak_anon_mib(lambda: decode_crops(work, items, images_dir(Path(source)), workers=2,
                                                         store=Path(tmp) if store else None, chunk_images=256))
        return {"images": len(items), "crops": int(len(crops.crops)), "store": store,
                "crop_mib": round(crops.crops.nbytes / 2 ** 20, 1), "peak_anon_growth_mib": round(mib, 1)}


def memory_bench(home: Path, source: Path, repeats=(1, 4)) -> list[dict]:
    """``decode_memory`` for each repeat, in memory and with a store, each in its own process."""
    import subprocess
    import sys

    out = []
    for store in (False, True):
        for r in repeats:
            code = (f"import json; from pathlib import Path; from benchmarks.vqa_bench import decode_memory; "
                    f"print(json.dumps(decode_memory(Path({str(home)!r}), Path({str(source)!r}), {r}, {store})))")
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            out.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--home", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--out")
    p.add_argument("--device", default="auto")
    p.add_argument("--batch-sizes", default="32,64,128,256")
    p.add_argument("--max-images", type=int, default=512)
    p.add_argument("--memory-only", action="store_true", help="only the decode memory at two sizes")
    args = p.parse_args(argv)
    if args.memory_only:
        print(json.dumps(memory_bench(Path(args.home), Path(args.source)), indent=2), flush=True)
        return 0
    result = vqa_bench(Path(args.home), Path(args.source), args.device,
                       tuple(int(b) for b in args.batch_sizes.split(",")), args.max_images)
    text = json.dumps(result, indent=2, default=str)
    print(text, flush=True)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
