"""One optimisation step and one evaluation pass of the reference model, shared by training and the benchmark.

Grain: a step = one batch of object crops (all pool attributes of each) + one batch of image thumbnails;
an evaluation = every crop and thumbnail of an ``Arrays`` (one split's images).
Source: ``vqa.dataset.Arrays`` (decoded crops, silver/gold targets, view position, sex).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ehrxqa_pipeline.vqa.dataset import Arrays, Vocab
from ehrxqa_pipeline.vqa.device import autocast
from ehrxqa_pipeline.vqa.model import image_stats, masked_bce, predict_arrays

IMAGE_LOSS_WEIGHT = 0.5  # view + sex BCE next to the relation BCE


def array_stats(a: Arrays) -> tuple[np.ndarray, np.ndarray]:
    """Per-crop and per-image normalisation stats (the crop's image's thumbnail mean / std)."""
    thumb = image_stats(a.crops.thumbs)
    return thumb[a.crops.index["image_row"].to_numpy()], thumb


def _norm(u8: torch.Tensor, stats: torch.Tensor) -> torch.Tensor:
    return (u8.float().unsqueeze(1) - stats[:, 0, None, None, None]) / stats[:, 1, None, None, None]


@dataclass
class StepData:
    """The training arrays as tensors on the device (uint8 images: ~1 KiB per crop), indexed per step, so a
    GPU step does no host-to-device copies."""
    crops: torch.Tensor
    crop_stats: torch.Tensor
    obj: torch.Tensor
    target: torch.Tensor
    geom: torch.Tensor
    thumbs: torch.Tensor
    texture: torch.Tensor
    thumb_stats: torch.Tensor
    view_pa: torch.Tensor
    male: torch.Tensor
    male_known: torch.Tensor
    pool: torch.Tensor  # (n_objects, n_attributes) float mask
    device: str
    amp: bool

    @classmethod
    def of(cls, a: Arrays, vocab: Vocab, device: str, amp: bool) -> StepData:
        cs, ts = array_stats(a)

        def t(x):
            x = np.ascontiguousarray(x)
            return torch.from_numpy(x if x.flags.writeable else x.copy()).to(device)
        return cls(t(a.crops.crops), t(cs), t(a.obj), t(a.target), t(a.crops.geom), t(a.crops.thumbs),
                   t(a.crops.texture), t(ts), t(a.view_pa), t(np.nan_to_num(a.male)), t(~np.isnan(a.male)),
                   t(vocab.pool.astype(np.float32)), device, amp)


def train_step(model, opt, d: StepData, ci: np.ndarray, ii: np.ndarray) -> float:
    """Forward + backward + optimiser step on crops ``ci`` and images ``ii``; returns the relation loss."""
    ci, ii = torch.from_numpy(ci).to(d.device), torch.from_numpy(ii).to(d.device)
    x, o = _norm(d.crops[ci], d.crop_stats[ci]), d.obj[ci]
    th = torch.cat([_norm(d.thumbs[ii], d.thumb_stats[ii]), d.texture[ii].float().unsqueeze(1) / 64.0], dim=1)
    with autocast(d.device, d.amp):
        logits = model.forward_objects(x, o, d.geom[ci])
        img_logits = model.forward_images(th).float()
    loss = masked_bce(logits, d.target[ci].float(), d.pool[o])
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    known = d.male_known[ii].float()
    img_loss = bce(img_logits[:, 0], d.view_pa[ii]) + (
        bce(img_logits[:, 1], d.male[ii], reduction="none") * known).sum() / known.sum().clamp_min(1.0)
    opt.zero_grad(set_to_none=True)
    (loss + IMAGE_LOSS_WEIGHT * img_loss).backward()
    opt.step()
    return float(loss.detach())


def evaluate(model, a: Arrays, vocab: Vocab, device: str, amp: bool, min_positives: int) -> dict:
    """Masked BCE, macro AUROC (pairs with >= min_positives), view and sex accuracy on labelled ``a``."""
    from ehrxqa_pipeline.vqa.auroc import matrix_macro_auroc

    cs, ts = array_stats(a)
    prob, img = predict_arrays(model, a.crops.crops, cs, a.obj, a.crops.geom, a.crops.thumbs, a.crops.texture, ts,
                               device, amp)
    mask = vocab.pool[a.obj]
    p = np.clip(prob.astype(np.float64), 1e-7, 1 - 1e-7)
    bce = -(a.target * np.log(p) + (1 - a.target) * np.log(1 - p))
    auc, n_pairs = matrix_macro_auroc(a.obj, a.target, prob, vocab.pool, min_positives)
    known = ~np.isnan(a.male)
    return {"valid_loss": float(bce[mask].mean()), "valid_auroc": auc, "valid_auroc_pairs": n_pairs,
            "valid_view_acc": float(((img[:, 0] > 0.5) == (a.view_pa > 0.5)).mean()),
            "valid_sex_acc": float(((img[known, 1] > 0.5) == (a.male[known] > 0.5)).mean()) if known.any()
            else float("nan")}
