"""The reference VQA model: a small CNN over object crops with one output per attribute, plus image heads.

Grain: one forward row per (image, object) crop -> logits over the attribute vocabulary (only the label
pool's attributes of that object are trained and predicted; the rest are masked), and one row per image
thumbnail -> view position (PA vs AP) and sex logits.
Source: crops and thumbnails from ``vqa.images``; vocabularies from ``cxr_labels.pairs``.

This follows the paper's reference model (E.1.3: a shared backbone over the Chest ImaGenome box of the
object, "attribute-specific headers" that classify presence per object-attribute pair), scaled down to a
from-scratch CNN that trains on two CPU cores in well under a minute on the demo source (no pre-trained
weights can be downloaded here; the paper uses a DINO ViT-S/16). The crop net sees the box region (with a
little context), the object's embedding and the box geometry in 224 space (position and size, which is what
makes e.g. an enlarged cardiac silhouette visible after resizing), and a learnable per-(object, attribute)
bias initialised at the training prevalence, so an untrained model starts at the prior.
torch is imported by this module; ``ehrxqa_pipeline.vqa`` imports it only through train / infer.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ehrxqa_pipeline.vqa.jpeg import GEOM_FEATURES


def _block(cin: int, cout: int, stride: int, bn: bool = True) -> list[nn.Module]:
    conv = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=not bn)
    return [conv, nn.BatchNorm2d(cout), nn.ReLU(inplace=True)] if bn else [conv, nn.ReLU(inplace=True)]


class CropNet(nn.Module):
    """Conv backbone for one object crop: strided 3x3 convs (no max-pool: memory-bound ops dominate CPU
    time at these sizes), the first without batch norm, pooled to 2x2, then a linear map to ``out``."""

    def __init__(self, widths: tuple[int, ...] = (16, 32, 64, 64), strides: tuple[int, ...] = (2, 2, 2, 1),
                 out: int = 128):
        super().__init__()
        layers, cin = [], 1
        for k, (w, s) in enumerate(zip(widths, strides)):
            layers += _block(cin, w, s, bn=k > 0)
            cin = w
        self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.proj = nn.Sequential(nn.Linear(cin * 4, out), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.features(x.contiguous(memory_format=torch.channels_last)))


class CropClassifier(nn.Module):
    """What a crop model puts on top of its crop features (``crop_net``): the object's embedding and the box
    geometry into an attribute head, plus a learnable per-(object, attribute) bias initialised at the training
    prevalence (``set_prior``). Shared by ``ReferenceModel`` and ``vqa.backbone.PretrainedModel``."""

    crop_net: nn.Module

    def _add_heads(self, n_objects: int, n_attributes: int, feat: int, obj_dim: int, hidden: int) -> None:
        self.obj_emb = nn.Embedding(n_objects, obj_dim)
        self.head = nn.Sequential(nn.Linear(feat + obj_dim + GEOM_FEATURES, hidden), nn.ReLU(inplace=True),
                                  nn.Linear(hidden, n_attributes))
        self.prior = nn.Embedding(n_objects, n_attributes)  # per-(object, attribute) bias, see set_prior
        nn.init.zeros_(self.prior.weight)

    def set_prior(self, prevalence: np.ndarray, eps: float = 0.5) -> None:
        """Initialise the per-pair bias at the smoothed log-odds of ``prevalence`` = (pos, n) counts.

        ``prevalence`` has shape (2, n_objects, n_attributes): positives and labelled crops per pair.
        """
        pos, n = prevalence
        p = (pos + eps) / (n + 2 * eps)
        with torch.no_grad():
            self.prior.weight.copy_(torch.from_numpy(np.log(p / (1 - p)).astype(np.float32)))

    def forward_objects(self, crops: torch.Tensor, objects: torch.Tensor, geom: torch.Tensor) -> torch.Tensor:
        """(N, 1, c, c) normalised crops, (N,) object indices, (N, 6) geometry -> (N, n_attributes) logits."""
        z = torch.cat([self.crop_net(crops), self.obj_emb(objects), geom], dim=1)
        return self.head(z) + self.prior(objects)


class ReferenceModel(CropClassifier):
    """Object-crop attribute classifier + thumbnail view/sex classifier (two independent networks)."""

    def __init__(self, n_objects: int, n_attributes: int, widths: tuple[int, ...] = (16, 32, 64, 64),
                 strides: tuple[int, ...] = (2, 2, 2, 1), feat: int = 128, obj_dim: int = 16, hidden: int = 128,
                 thumb_widths: tuple[int, ...] = (16, 32, 64, 64)):
        super().__init__()
        self.config = dict(n_objects=n_objects, n_attributes=n_attributes, widths=tuple(widths),
                           strides=tuple(strides), feat=feat, obj_dim=obj_dim, hidden=hidden,
                           thumb_widths=tuple(thumb_widths))
        self.crop_net = CropNet(widths, strides, feat)
        self._add_heads(n_objects, n_attributes, feat, obj_dim, hidden)
        thumb, cin = [], 2  # channels: the thumbnail and its texture energy (see vqa.images.Crops)
        for k, w in enumerate(thumb_widths):
            thumb += _block(cin, w, 2, bn=k > 0)
            cin = w
        self.thumb_net = nn.Sequential(*thumb, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 2))
        # Channels-last (NHWC) weights, and inputs made so in the forwards: oneDNN's CPU convolutions of these small
        # nets run about a third faster than in the default NCHW layout (a demo training epoch on one thread
        # 9.4-10.8 -> 7.1-7.4 s), and, like NCHW, give the same bits on every run; on CUDA NHWC suits the
        # tensor cores. Saved state_dicts are made contiguous (``train.save_model``): the file does not depend
        # on the layout.
        self.to(memory_format=torch.channels_last)

    def forward_images(self, thumbs: torch.Tensor) -> torch.Tensor:
        """(M, 2, t, t) from ``thumb_tensor`` -> (M, 2) logits: [PA (vs AP), male]."""
        return self.thumb_net(thumbs.contiguous(memory_format=torch.channels_last))


def build_model(n_objects: int, n_attributes: int, **kwargs) -> CropClassifier:
    """A ``ReferenceModel`` (``train.load_model`` builds a ``vqa.backbone.PretrainedModel`` where a saved config
    names an architecture)."""
    return ReferenceModel(n_objects, n_attributes, **kwargs)


def image_stats(thumbs: np.ndarray) -> np.ndarray:
    """Per-image (mean, std) of the thumbnail, shape (M, 2) float32: the crop normalisation of that image.

    Normalising crops by their image (not by themselves) keeps "brighter than this patient's lungs usually
    are" visible while removing the random window/level of each exposure.
    """
    out = np.zeros((len(thumbs), 2), np.float32)
    for s in range(0, len(thumbs), 4096):  # row by row statistics: chunks keep a memory-mapped set out of RAM
        t = thumbs[s:s + 4096].reshape(-1, thumbs[0].size).astype(np.float32)
        out[s:s + 4096] = np.stack([t.mean(1), t.std(1) + 1.0], axis=1)
    return out


def to_tensor(u8: np.ndarray, stats: np.ndarray, device: str, non_blocking: bool = False) -> torch.Tensor:
    """uint8 (N, s, s) + per-row (mean, std) -> normalised float32 (N, 1, s, s) on ``device``."""
    x = torch.from_numpy(np.ascontiguousarray(u8)).to(device, non_blocking=non_blocking).float().unsqueeze(1)
    st = torch.from_numpy(stats).to(device, non_blocking=non_blocking)
    return (x - st[:, 0, None, None, None]) / st[:, 1, None, None, None]


def thumb_tensor(thumbs: np.ndarray, texture: np.ndarray, stats: np.ndarray, device: str) -> torch.Tensor:
    """(M, 2, t, t): the image-normalised thumbnail and the texture energy on a fixed scale (/ 64)."""
    tex = torch.from_numpy(np.ascontiguousarray(texture)).to(device).float().unsqueeze(1) / 64.0  # as in steps
    return torch.cat([to_tensor(thumbs, stats, device), tex], dim=1)


def masked_bce(logits: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean binary cross-entropy over the pool entries (mask == 1) only."""
    loss = nn.functional.binary_cross_entropy_with_logits(logits.float(), target, reduction="none")
    return (loss * mask).sum() / mask.sum().clamp_min(1.0)


def predict_arrays(model: ReferenceModel, crops: np.ndarray, crop_stats: np.ndarray, obj: np.ndarray,
                   geom: np.ndarray, thumbs: np.ndarray, texture: np.ndarray, thumb_stats: np.ndarray, device: str,
                   amp: bool = False, crop_batch: int = 8192, image_batch: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Sigmoid outputs for all crops (N, n_attributes) and thumbnails (M, 2), in bounded-memory batches."""
    from ehrxqa_pipeline.vqa.device import autocast

    model.eval()
    probs = np.zeros((len(crops), model.config["n_attributes"]), np.float32)
    img = np.zeros((len(thumbs), 2), np.float32)
    with torch.inference_mode(), autocast(device, amp):
        for s in range(0, len(crops), crop_batch):
            sl = slice(s, s + crop_batch)
            x = to_tensor(crops[sl], crop_stats[sl], device)
            o = torch.from_numpy(obj[sl]).to(device)
            g = torch.from_numpy(geom[sl]).to(device)
            probs[sl] = torch.sigmoid(model.forward_objects(x, o, g).float()).cpu().numpy()
        for s in range(0, len(thumbs), image_batch):
            sl = slice(s, s + image_batch)
            x = thumb_tensor(thumbs[sl], texture[sl], thumb_stats[sl], device)
            img[sl] = torch.sigmoid(model.forward_images(x).float()).cpu().numpy()
    return probs, img


CROP_BUCKET = 512  # predict_tensors pads a batch's crops to a multiple of this (cuDNN plans one shape per size)


def predict_tensors(model: ReferenceModel, crops: torch.Tensor, crop_image: torch.Tensor, obj: torch.Tensor,
                    geom: torch.Tensor, thumbs: torch.Tensor, texture: torch.Tensor,
                    amp: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``predict_arrays`` for one batch already on the model's device (``vqa.stream.Batch``): uint8 crops
    (N, c, c) of images ``crop_image`` (N,), thumbnails and texture (M, t, t) -> sigmoid outputs (N,
    n_attributes) and (M, 2), float32 on the device. Normalisation as ``image_stats`` / ``thumb_tensor``."""
    from ehrxqa_pipeline.vqa.device import autocast

    device = str(crops.device)
    t = thumbs.reshape(len(thumbs), -1).float()
    stats = torch.stack([t.mean(1), t.std(1, unbiased=False) + 1.0], 1)
    norm = (thumbs.float().unsqueeze(1) - stats[:, 0, None, None, None]) / stats[:, 1, None, None, None]
    cs = stats[crop_image]
    x = (crops.float().unsqueeze(1) - cs[:, 0, None, None, None]) / cs[:, 1, None, None, None]
    n, pad = len(x), -len(x) % CROP_BUCKET  # a batch's crop count varies: round it up, so shapes repeat
    if pad:
        x, obj, geom = (torch.cat([t, t.new_zeros((pad, *t.shape[1:]))]) for t in (x, obj, geom))
    model.eval()
    with torch.inference_mode(), autocast(device, amp):
        prob = torch.sigmoid(model.forward_objects(x, obj, geom).float())[:n]
        img = torch.sigmoid(model.forward_images(torch.cat([norm, texture.float().unsqueeze(1) / 64.0], 1)).float())
    return prob, img
