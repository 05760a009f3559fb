"""Train the reference VQA model on silver TRAIN images, select the epoch on silver VALID images.

Grain: one trained model per (config, label pool, training data); ``curves`` has one row per epoch.
Sources: ``splits.images`` (split = train / valid), ``cxr_labels.silver`` (sparse positives; every other
pool pair of an object with a box is a negative), ``cxr_labels.pairs`` (the pool), ``ingest.silver_bbox``
and the JPEGs under ``files_root`` (decoded by ``vqa.images``).

The loss is the binary cross-entropy over the pool pairs of each object crop (attributes outside the pool
for that object are masked), plus BCE of the thumbnail's view (PA vs AP) and sex heads. The epoch kept is
the one with the best valid macro AUROC over pairs with >= ``min_valid_positives`` positives (valid loss
when no pair qualifies); training stops after ``patience`` epochs without improvement.
Same inputs + seed + torch thread count give bitwise identical weights on the CPU.
With a pretrained backbone (``vqa.backbone``), its probe trains the same way on the same decoded arrays,
after the reference model (``TrainResult.pretrained``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ehrxqa_pipeline.vqa.dataset import Vocab, build_arrays, load_vocab, prevalence, select_images
from ehrxqa_pipeline.vqa.jpeg import host_threads


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 6
    """Maximum passes over the training images (early stopping may end sooner)."""
    batch_size: int = 32
    """Images per optimisation step (all their object crops, ~36 per image, plus their thumbnails)."""
    lr: float = 3e-3
    """Peak AdamW learning rate (one-epoch linear warm-up, then cosine decay to 5%)."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    crop_size: int = 32
    """Side of the square object crop in pixels. Measured on the demo source (2 cores, 1 thread, 6 epochs):
    24 px valid macro AUROC 0.929 at ~1.2x the speed of 32 px (0.925); 48 px 0.915 at ~3.5x the cost. 32 is
    kept as the margin for thin devices and lines, which the demo's small test split cannot score."""
    thumb_size: int = 64
    """Side of the whole-image thumbnail for the view-position and sex heads."""
    seed: int = 0
    """Seeds weight init and batch order."""
    max_images: int | None = None
    """Cap on training images (a fixed hash-ordered sample of the split); None = all."""
    decode_workers: int | None = None
    """Threads decoding JPEGs into the training store (before any training step); None: ``jpeg.host_threads``
    (every core but one, at least 2: 2 threads would leave the 16-core GPU machine near 44 full-size films/s,
    at the 22 a core measured there)."""
    device: str = "auto"
    """auto | cpu | cuda | cuda:N (see vqa.device.resolve_device; EHRXQA_VQA_DEVICE in the resource)."""
    decode: str = "auto"
    """How the training store's JPEGs are decoded (``vqa.stream.parse_decoder``; EHRXQA_VQA_DECODE in the
    resource): ``auto`` is nvJPEG on CUDA, the CPU elsewhere, as in prediction."""
    amp: bool = True
    """bf16 autocast on CUDA; ignored on the CPU (which stays in fp32 for bitwise determinism)."""
    threads: int | None = 1
    """torch intra-op CPU threads while training (restored afterwards); None = torch's default (all cores).
    Measured on the 2-core machine with other jobs running: 1 thread ~250 train img/s steadily, 2 threads
    75-380 img/s (OpenMP barriers stall when the cores are oversubscribed, as under Dagster's multiprocess
    executor). On a dedicated many-core CPU machine set None. Irrelevant on CUDA."""
    patience: int = 3
    """Epochs without a better valid score before stopping."""
    min_valid_positives: int = 3
    """A pair enters the valid macro AUROC when it has at least this many positives among valid images."""

    def identity(self) -> dict:
        """The fields that change the weights (not where or how fast they are computed)."""
        d = asdict(self)
        for k in ("decode_workers", "device", "decode", "threads"):
            d.pop(k)
        return d


@dataclass
class TrainResult:
    model: object  # ReferenceModel in eval mode
    vocab: Vocab
    config: TrainConfig
    curves: list[dict] = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    version: str = ""
    best_epoch: int = 0
    backbone: dict = field(default_factory=dict)  # a pretrained model's: vqa.backbone.PretrainedModel.load_backbone
    pretrained: TrainResult | None = None  # the pretrained backbone's probe, trained beside this model

    @property
    def objects(self) -> tuple[str, ...]:
        return self.vocab.objects

    @property
    def attributes(self) -> tuple[str, ...]:
        return self.vocab.attributes


MODEL_CODE_VERSION = "2"  # bump when the network, loss or input preprocessing changes


def data_version(config: TrainConfig, vocab: Vocab, train_ids: list[str], n_positive: int,
                 valid_ids: list[str], model_config: dict | None = None, content: str = "") -> str:
    """Short sha256 of code version + model shape + config identity + vocab + the training data (sorted
    train / valid image ids, positive count, and ``content``: a digest of the crops' objects, boxes and
    targets, so relabelled or re-boxed images change the version too)."""
    h = hashlib.sha256(json.dumps({"code": MODEL_CODE_VERSION, "model": model_config or {},
                                   "config": config.identity(), "vocab": vocab.to_dict(), "n_positive": n_positive,
                                   "train": sorted(train_ids), "valid": sorted(valid_ids), "content": content},
                                  sort_keys=True, default=list).encode())
    return h.hexdigest()[:12]


def train_reference(con, files_root: Path, config: TrainConfig = TrainConfig(), log=print,
                    scratch: Path | None = None, backbone: Mapping | None = None) -> TrainResult:
    """Train on silver train images, keep the best epoch on silver valid images; see the module docstring.

    ``scratch``: a folder under which the decoded crops, thumbnails and targets are kept on disk
    (memory-mapped, removed afterwards) instead of in memory: memory then stays flat in the number of images
    (about 10 GB of crops at MIMIC-CXR scale). Same arrays, same weights.
    ``backbone``: {"architecture", "weights"} of a pretrained backbone whose probe is trained next on the same
    arrays (``result.pretrained``); a ``SettingError`` before any decoding when its weights do not load.
    """
    import tempfile

    from ehrxqa_pipeline.vqa.device import torch_threads

    with torch_threads(config.threads):
        if scratch is None:
            return _train(con, files_root, config, log, None, backbone)
        Path(scratch).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="reference-model-", dir=scratch) as tmp:
            return _train(con, files_root, config, log, Path(tmp), backbone)


def _train(con, files_root: Path, config: TrainConfig, log, store: Path | None,
           backbone: Mapping | None) -> TrainResult:
    from ehrxqa_pipeline.vqa.device import resolve_device, seed_everything
    from ehrxqa_pipeline.vqa.model import build_model

    t_start = time.perf_counter()
    device = resolve_device(config.device)
    amp = config.amp and device.startswith("cuda")
    seed_everything(config.seed, device)
    vocab = load_vocab(con)
    pretrained = None
    if backbone:
        from ehrxqa_pipeline.vqa.backbone import PretrainedModel

        pretrained = PretrainedModel(len(vocab.objects), len(vocab.attributes), backbone["architecture"])
        facts = pretrained.load_backbone(Path(backbone["weights"]))
    train_imgs = select_images(con, "train", max_images=config.max_images)
    valid_imgs = select_images(con, "valid")
    if train_imgs.height == 0:
        raise ValueError("no train images in splits.images")
    args = (files_root, vocab, "silver", config.crop_size, config.thumb_size, config.decode_workers or host_threads())
    on = {"device": device, "decode": config.decode}
    tr = build_arrays(con, train_imgs, *args, store=store and store / "train", **on)
    va = build_arrays(con, valid_imgs, *args, store=store and store / "valid", **on)
    decode_s = tr.crops.decode_seconds + va.crops.decode_seconds
    log(f"reference model: {tr.n_images} train / {va.n_images} valid images, {len(tr.obj)} train crops, "
        f"{tr.n_positive} positives, decode {decode_s:.1f}s, device {device}")

    digest = hashlib.sha256()
    for part in (tr.obj, tr.target, tr.crops.geom, va.obj, va.target, va.crops.geom):
        digest.update(memoryview(np.ascontiguousarray(part)).cast("B"))  # the bytes, without a copy
    fit = dict(tr=tr, va=va, vocab=vocab, config=config, device=device, amp=amp, log=log, decode_s=decode_s,
               content=digest.hexdigest())
    seed_everything(config.seed, device)
    result = _fit(build_model(len(vocab.objects), len(vocab.attributes)), t_start=t_start, **fit)
    if pretrained is not None:
        log(f"{facts['module']}: sha256 {facts['weights_sha256']}, leakage risk {facts['leakage_risk']}")
        seed_everything(config.seed, device)
        result.pretrained = _fit(pretrained, t_start=time.perf_counter(), facts=facts, **fit)
    return result


def _fit(model, tr, va, vocab: Vocab, config: TrainConfig, device: str, amp: bool, log, decode_s: float,
         content: str, t_start: float, facts: dict | None = None) -> TrainResult:
    """Train ``model``'s trainable parameters on ``tr``, keep the best epoch on ``va`` (module docstring).
    ``facts``: a pretrained backbone's (``PretrainedModel.load_backbone``), which enter its version."""
    import torch

    from ehrxqa_pipeline.vqa.device import device_info, torch_generator
    from ehrxqa_pipeline.vqa.steps import StepData, evaluate, train_step

    name = f"{facts['module']} " if facts else ""
    model.set_prior(prevalence(tr, vocab))
    model.to(device)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr,
                            weight_decay=config.weight_decay)
    steps = max(1, -(-tr.n_images // config.batch_size))
    total = steps * config.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / steps) * (
        0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * min(1.0, s / total)))))
    data = StepData.of(tr, vocab, device, amp)
    gen = torch_generator(config.seed)
    n_crops, crops_per_step = len(tr.obj), -(-len(tr.obj) // steps)
    curves, best, best_state, best_epoch, model_s = [], None, None, 0, 0.0
    for epoch in range(1, config.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        crop_order = torch.randperm(n_crops, generator=gen).numpy()
        img_order = torch.randperm(tr.n_images, generator=gen).numpy()
        total_loss = 0.0
        for s in range(steps):
            ci = np.sort(crop_order[s * crops_per_step:(s + 1) * crops_per_step])
            ii = np.sort(img_order[s * config.batch_size:(s + 1) * config.batch_size])
            total_loss += train_step(model, opt, data, ci, ii)
            sched.step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        train_s = time.perf_counter() - t0
        row = {"epoch": epoch, "train_loss": total_loss / steps, "train_seconds": train_s,
               "train_images_per_s": tr.n_images / train_s}
        t1 = time.perf_counter()
        row.update(evaluate(model, va, vocab, device, amp, config.min_valid_positives) if va.n_images else {})
        row["valid_seconds"] = time.perf_counter() - t1
        model_s += train_s + row["valid_seconds"]
        curves.append(row)
        score = row.get("valid_auroc", float("nan"))
        score = -row.get("valid_loss", -row["train_loss"]) if np.isnan(score) else score
        log(f"{name}epoch {epoch}: train loss {row['train_loss']:.4f}, "
            f"valid loss {row.get('valid_loss', float('nan')):.4f}, "
            f"valid AUROC {row.get('valid_auroc', float('nan')):.3f} ({row.get('valid_auroc_pairs', 0)} pairs), "
            f"{row['train_images_per_s']:.0f} img/s")
        if best is None or score > best:
            best, best_state, best_epoch = score, copy.deepcopy(model.state_dict()), epoch
        elif epoch - best_epoch >= config.patience:
            break
    model.load_state_dict(best_state)
    model.eval()
    epochs_run = len(curves)
    train_model_s = sum(r["train_seconds"] for r in curves)
    timings = {"wall_seconds": time.perf_counter() - t_start, "decode_seconds": decode_s, "model_seconds": model_s,
               "train_seconds": train_model_s, "epochs_run": epochs_run,
               "train_images_per_s": tr.n_images * epochs_run / max(train_model_s, 1e-9),
               "train_images": tr.n_images, "valid_images": va.n_images, **device_info(device)}
    identity = {**model.config, **({"weights_sha256": facts["weights_sha256"]} if facts else {})}
    version = data_version(config, vocab, tr.crops.image_ids, tr.n_positive, va.crops.image_ids, identity, content)
    return TrainResult(model, vocab, config, curves, timings, version, best_epoch, dict(facts or {}))


FORMAT = 1


def save_model(result: TrainResult, path: Path) -> Path:
    """One file: state_dict (CPU tensors) + model shape + vocab + config + curves + timings + version.

    Written to a temporary file in the same folder, then renamed, so a reader never sees half a model.
    """
    import os

    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    plain = json.loads(json.dumps({"model_config": result.model.config, "vocab": result.vocab.to_dict(),
                                   "config": asdict(result.config), "curves": result.curves,
                                   "timings": result.timings}, default=str))  # weights_only-loadable
    state = {k: v.detach().cpu().contiguous() for k, v in result.model.state_dict().items()}  # any layout: NCHW
    payload = {"format": FORMAT, "state_dict": state, **plain, "version": result.version,
               "best_epoch": result.best_epoch, "backbone": result.backbone}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def load_model(path: Path, device: str = "cpu") -> TrainResult:
    """The TrainResult that ``save_model`` wrote (model in eval mode on ``device``)."""
    import torch

    from ehrxqa_pipeline.vqa.device import resolve_device
    from ehrxqa_pipeline.vqa.model import build_model

    payload = torch.load(Path(path), map_location="cpu", weights_only=True)
    if payload.get("format") != FORMAT:
        raise ValueError(f"{path}: reference model format {payload.get('format')!r}, expected {FORMAT}; retrain")
    mc = {k: tuple(v) if isinstance(v, list) else v for k, v in payload["model_config"].items()}
    shape = mc.pop("n_objects"), mc.pop("n_attributes")
    if "architecture" in mc:  # a pretrained backbone's probe (vqa.backbone imports vqa.model, not the reverse)
        from ehrxqa_pipeline.vqa.backbone import PretrainedModel

        model = PretrainedModel(*shape, **mc)
    else:
        model = build_model(*shape, **mc)
    model.load_state_dict(payload["state_dict"])
    model.to(resolve_device(device)).eval()
    return TrainResult(model, Vocab.from_dict(payload["vocab"]), TrainConfig(**payload["config"]),
                       payload["curves"], payload["timings"], payload["version"], payload["best_epoch"],
                       payload.get("backbone", {}))


def plot_curves(curves: list[dict]) -> bytes:
    """PNG of the per-epoch train / valid loss and valid macro AUROC (matplotlib, Agg backend)."""
    import io

    import matplotlib
    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3), dpi=100)
    ax1, ax2 = fig.subplots(1, 2)
    ep = [r["epoch"] for r in curves]
    ax1.plot(ep, [r["train_loss"] for r in curves], "o-", label="train")
    ax1.plot(ep, [r.get("valid_loss", float("nan")) for r in curves], "s-", label="valid")
    ax1.set(xlabel="epoch", ylabel="masked BCE", title="loss")
    ax1.legend()
    ax2.plot(ep, [r.get("valid_auroc", float("nan")) for r in curves], "o-", color="C2")
    ax2.set(xlabel="epoch", ylabel="macro AUROC", title="valid AUROC", ylim=(0.4, 1.0))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
