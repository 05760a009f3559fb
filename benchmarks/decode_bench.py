"""JPEG decode and reference-model throughput, CPU and CUDA, on a bundle of images (issue 18 point 6).

Two steps, so the measuring side needs only torch, torchvision, numpy, PIL and OpenCV (a GPU machine's image;
no polars, DuckDB or Dagster):

    python -m benchmarks.decode_bench export --home H --source S --out BUNDLE [--images 1024]
    python -m benchmarks.decode_bench run --bundle BUNDLE [--device cuda] [--real-size] [--out FILE]
    python -m benchmarks.decode_bench run --bundle BUNDLE --home H --source S ...   (export, then run: make bench)

``export`` (here, on a built home) copies the train split's first ``--images`` JPEGs (hash order) with their
usable boxes (``boxes.npz``: JPEG-pixel coordinates, object index, model geometry) and the label pool's shape.
``run`` measures, per decoder and batch size, in images/s:
- ``decode``: JPEG -> crops + thumbnails on the device through ``vqa.stream`` (``cpu``: PIL draft + OpenCV in
  reader threads; ``torch``: the threads read bytes, torchvision's decode_jpeg (nvJPEG on CUDA) decodes and
  ``vqa.decode.cut`` crops on the device; ``mixed:S``: both at once, a share S of the images on the CPU);
- ``model``: inference of the reference model (random weights, the trained model's shape) on decoded batches
  already on the device, and one training step (forward, backward, AdamW);
- ``end_to_end``: stream + inference, the decode hidden behind the model where the device allows;
- ``split`` (``--split``): the torch decoder's stages timed apart: reading bytes, decode_gray, cut.
``--real-size`` first re-encodes every image at MIMIC-CXR-JPG's size (short side 2,500 px, quality 95, film
grain, ~1 MB per file) with its boxes scaled: the phantoms are ~350 px, and real decode cost is per pixel.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

REAL_SHORT_SIDE = 2500


def export(home: Path, source: Path, out: Path, images: int = 1024) -> dict:
    import duckdb

    from ehrxqa_pipeline.sources.images import images_dir
    from ehrxqa_pipeline.vqa.dataset import load_vocab, select_images
    from ehrxqa_pipeline.vqa.images import box_table
    from ehrxqa_pipeline.vqa.workspace import snapshot

    root = images_dir(Path(source))
    with duckdb.connect(str(Path(home) / "warehouse.duckdb"), read_only=True) as con:
        work = snapshot(con, labels=("silver",))
    vocab = load_vocab(work)
    imgs = select_images(work, "train", max_images=images)
    ids = imgs["image_id"].to_list()
    boxes, first, counts, coords, geom = box_table(work, ids, list(vocab.objects))
    obj = boxes["object"].replace_strict(list(vocab.objects), range(len(vocab.objects))).to_numpy()
    (out / "images").mkdir(parents=True, exist_ok=True)
    names = []
    for k, rel in enumerate(imgs["image_path"]):
        names.append(f"{k:05d}.jpg")
        shutil.copyfile(root / rel, out / "images" / names[-1])
    np.savez(out / "boxes.npz", coords=coords, first=first, counts=counts, obj=obj, geom=geom,
             names=np.array(names), n_objects=len(vocab.objects), n_attributes=len(vocab.attributes))
    return {"images": len(names), "boxes": len(coords), "bytes": sum((out / "images" / n).stat().st_size
                                                                      for n in names)}


def _enlarge(job) -> tuple[int, int, float]:
    """Re-encode one phantom at real size (short side REAL_SHORT_SIDE) with film grain; returns w, h, factor."""
    import cv2

    src, dst, seed = job
    img = cv2.imread(str(src), cv2.IMREAD_GRAYSCALE)
    f = REAL_SHORT_SIDE / min(img.shape)
    big = cv2.resize(img, (round(img.shape[1] * f), round(img.shape[0] * f)), interpolation=cv2.INTER_CUBIC)
    grain = np.random.default_rng(seed).normal(0, 2.5, big.shape).astype(np.float32)
    big = np.clip(big.astype(np.float32) + grain, 0, 255).astype(np.uint8)
    cv2.imwrite(str(dst), big, [cv2.IMWRITE_JPEG_QUALITY, 95])
    return big.shape[1], big.shape[0], f


def _load(bundle: Path, real_size: bool, workdir: Path) -> dict:
    z = np.load(bundle / "boxes.npz")
    paths = [bundle / "images" / str(n) for n in z["names"]]
    per_image = [z["coords"][f:f + c] for f, c in zip(z["first"], z["counts"])]
    if real_size:
        workdir.mkdir(parents=True, exist_ok=True)
        dst = [workdir / p.name for p in paths]
        with ProcessPoolExecutor(os.cpu_count()) as pool:
            sizes = list(pool.map(_enlarge, [(s, d, k) for k, (s, d) in enumerate(zip(paths, dst))], chunksize=16))
        paths = dst
        per_image = [b * f for b, (_, _, f) in zip(per_image, sizes)]  # boxes in the new JPEG pixels
    rows = [np.arange(f, f + c) for f, c in zip(z["first"], z["counts"])]
    return {"paths": paths, "boxes": per_image, "rows": rows, "obj": z["obj"], "geom": z["geom"],
            "n_objects": int(z["n_objects"]), "n_attributes": int(z["n_attributes"]),
            "mean_bytes": float(np.mean([p.stat().st_size for p in paths]))}


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _stream(data: dict, device: str, decoder: str, batch: int, workers: int):
    """``vqa.stream`` over the bundle; ``decoder``: cpu, torch, mixed or mixed:SHARE (the share decoded on the CPU)."""
    from ehrxqa_pipeline.vqa.stream import stream

    return stream(data["paths"], data["boxes"], device, decoder, batch, workers)


def _decode_rate(data: dict, device: str, decoder: str, batch: int, workers: int) -> dict:
    n, t0 = 0, time.perf_counter()
    for b in _stream(data, device, decoder, batch, workers):
        n += len(b.rows)
    _sync(device)
    wall = time.perf_counter() - t0
    return {"images": n, "seconds": round(wall, 3), "images_per_s": round(n / wall, 1)}


def _split(data: dict, device: str, batch: int, workers: int) -> dict:
    """The torch decoder's stages apart, each timed alone (images/s): the reader threads reading the files'
    bytes, ``decode_gray`` (nvJPEG on CUDA) on bytes already read, ``cut`` on images already decoded."""
    from concurrent.futures import ThreadPoolExecutor

    from ehrxqa_pipeline.vqa.decode import cut, decode_gray, read_jpeg

    paths, boxes = data["paths"], data["boxes"]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max(1, workers)) as pool:
        raw = list(pool.map(read_jpeg, paths))
    read_s = time.perf_counter() - t0
    decode_gray(raw[:batch], device)  # the decoder's set-up, outside the timing
    _sync(device)
    decode_s = cut_s = 0.0
    for s in range(0, len(raw), batch):
        t0 = time.perf_counter()
        imgs = decode_gray(raw[s:s + batch], device)
        _sync(device)
        t1 = time.perf_counter()
        cut(imgs, boxes[s:s + batch])
        _sync(device)
        decode_s, cut_s = decode_s + t1 - t0, cut_s + time.perf_counter() - t1
    n = len(raw)
    return {"images": n, "read_images_per_s": round(n / read_s, 1), "decode_images_per_s": round(n / decode_s, 1),
            "cut_images_per_s": round(n / cut_s, 1)}


def _model_rates(data: dict, device: str, batch: int, amp: bool, steps: int = 20) -> dict:
    """Inference and training images/s of the reference model on one decoded batch kept on the device."""
    import torch

    from ehrxqa_pipeline.vqa.model import build_model, masked_bce, predict_tensors
    from ehrxqa_pipeline.vqa.stream import stream

    b = next(iter(stream(data["paths"][:batch], data["boxes"][:batch], device, "auto", batch, 0)))
    rows = np.concatenate([data["rows"][k] for k in b.rows])
    obj = torch.from_numpy(np.asarray(data["obj"][rows], np.int64)).to(device)
    geom = torch.from_numpy(data["geom"][rows]).to(device)
    ci = torch.from_numpy(b.crop_image).to(device)
    model = build_model(data["n_objects"], data["n_attributes"]).to(device)
    predict_tensors(model, b.crops, ci, obj, geom, b.thumbs, b.texture, amp)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        predict_tensors(model, b.crops, ci, obj, geom, b.thumbs, b.texture, amp)
    _sync(device)
    infer = steps * len(b.rows) / (time.perf_counter() - t0)

    from ehrxqa_pipeline.vqa.device import autocast

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = (b.crops.float().unsqueeze(1) - 128.0) / 64.0
    target = torch.randint(0, 2, (len(rows), data["n_attributes"]), device=device).float()
    mask = torch.ones_like(target)

    def step():
        with autocast(device, amp):
            loss = masked_bce(model.forward_objects(x, obj, geom), target, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    train = steps * len(b.rows) / (time.perf_counter() - t0)
    return {"batch": len(b.rows), "crops": int(len(rows)), "infer_images_per_s": round(infer, 1),
            "train_images_per_s": round(train, 1)}


def _end_to_end(data: dict, device: str, decoder: str, batch: int, workers: int, amp: bool) -> dict:
    import torch

    from ehrxqa_pipeline.vqa.model import build_model, predict_tensors

    model = build_model(data["n_objects"], data["n_attributes"]).to(device)
    obj_all = torch.from_numpy(np.asarray(data["obj"], np.int64)).to(device)
    geom_all = torch.from_numpy(data["geom"]).to(device)
    n, decode_s, t0 = 0, 0.0, time.perf_counter()
    for b in _stream(data, device, decoder, batch, workers):
        rows = torch.from_numpy(np.concatenate([data["rows"][k] for k in b.rows])).to(device)
        prob, img = predict_tensors(model, b.crops, torch.from_numpy(b.crop_image).to(device), obj_all[rows],
                                    geom_all[rows], b.thumbs, b.texture, amp)
        prob.cpu(), img.cpu()
        n += len(b.rows)
        decode_s += b.decode_seconds
    wall = time.perf_counter() - t0
    return {"images": n, "seconds": round(wall, 3), "images_per_s": round(n / wall, 1),
            "decode_seconds": round(decode_s, 3)}


def run(bundle: Path, device: str = "auto", real_size: bool = False, batches=(64, 256), workers: int | None = None,
        repeat: int = 1, decoders=("torch", "cpu"), out_file: Path | None = None, log=print,
        split: bool = False) -> dict:
    """Every measurement of the module docstring; each is logged (and ``out_file`` rewritten) as it lands, so
    a run stopped at a time limit keeps what it measured."""
    import torch

    from ehrxqa_pipeline.vqa.device import device_info, resolve_device

    dev = resolve_device(device)
    workers = workers if workers is not None else max(1, (os.cpu_count() or 2) - 1)
    t_start = time.perf_counter()
    data = _load(Path(bundle), real_size, Path(bundle) / "_real_size")
    if repeat > 1:  # more images than the bundle holds: the same files again (the page cache serves them)
        for key in ("paths", "boxes", "rows"):
            data[key] = data[key] * repeat
    amp = dev.startswith("cuda")
    out = {**device_info(dev), "cpus": os.cpu_count(), "workers": workers, "images": len(data["paths"]),
           "real_size": real_size, "mean_jpeg_bytes": round(data["mean_bytes"]),
           "prepare_seconds": round(time.perf_counter() - t_start, 1), "decode": {}, "model": {}, "end_to_end": {}}

    def record(section: str, key: str, value: dict) -> None:
        out.setdefault(section, {})[key] = value
        log(f"[{time.perf_counter() - t_start:7.1f} s] {section} {key}: {json.dumps(value)}")
        if out_file:
            Path(out_file).write_text(json.dumps(out, indent=2, default=str) + "\n")

    log(f"{out.get('gpu', dev)}: {out['images']} images, real size {real_size}, {out['mean_jpeg_bytes']:,} B/JPEG, "
        f"{workers} workers, prepared in {out['prepare_seconds']} s")
    if dev.startswith("cuda"):  # nvJPEG + the device's resampling against the same code on the CPU
        from ehrxqa_pipeline.vqa.decode import cut, decode_gray, read_jpeg

        k = min(64, len(data["paths"]))
        raw = [read_jpeg(p) for p in data["paths"][:k]]
        on = [t.cpu() for t in cut(decode_gray(raw, dev), data["boxes"][:k])]
        off = cut(decode_gray(raw, "cpu"), data["boxes"][:k])
        for name, a, b in zip(("crops", "thumbs", "texture"), on, off):
            record("cuda_vs_cpu_grey_levels", name, {"mean": round(float((a.float() - b.float()).abs().mean()), 3),
                                                      "max": int((a.int() - b.int()).abs().max())})
    # one torch thread, as the build trains and predicts (TrainConfig.threads); irrelevant on CUDA, where the
    # calling thread only feeds the device and the reader threads decode
    torch.set_num_threads(1)
    for bs in batches:
        record("model", str(bs), _model_rates(data, dev, bs, amp))
    if split:
        for bs in batches:
            record("split", str(bs), _split(data, dev, bs, workers))
    for dec in decoders:
        for bs in batches:
            record("decode", f"{dec}/{bs}", _decode_rate(data, dev, dec, bs, workers))
            record("end_to_end", f"{dec}/{bs}", _end_to_end(data, dev, dec, bs, workers, amp))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("--home", required=True)
    e.add_argument("--source", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--images", type=int, default=1024)
    r = sub.add_parser("run")
    r.add_argument("--bundle", required=True)
    r.add_argument("--device", default="auto")
    r.add_argument("--real-size", action="store_true")
    r.add_argument("--batches", default="64,256")
    r.add_argument("--workers", type=int)
    r.add_argument("--repeat", type=int, default=1)
    r.add_argument("--decoders", default="torch,cpu", help="comma-separated; empty: none")
    r.add_argument("--split", action="store_true", help="also time the torch decoder's stages apart")
    r.add_argument("--out")
    r.add_argument("--home", help="export the bundle from this built home first (with --source)")
    r.add_argument("--source")
    a = p.parse_args(argv)
    if a.cmd == "export":
        print(json.dumps(export(Path(a.home), Path(a.source), Path(a.out), a.images)))
        return 0
    if a.home:
        from ehrxqa_pipeline.sources.images import images_dir

        if not images_dir(Path(a.source)).is_dir():
            print(json.dumps({"skipped": f"no JPEGs under {images_dir(Path(a.source))} (a metadata-only source)"}))
            return 0
        shutil.rmtree(a.bundle, ignore_errors=True)
        print(json.dumps(export(Path(a.home), Path(a.source), Path(a.bundle))), flush=True)
    run(Path(a.bundle), a.device, a.real_size, tuple(int(b) for b in a.batches.split(",")), a.workers, a.repeat,
        tuple(d for d in a.decoders.split(",") if d), Path(a.out) if a.out else None,
        log=lambda m: print(m, flush=True), split=a.split)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
