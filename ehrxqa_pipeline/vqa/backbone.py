"""An optional pretrained backbone, frozen under the reference model's heads: the VQA module ``pretrained_<arch>``.

Grain: as ``vqa.model``: one forward row per (image, object) crop -> logits over the attribute vocabulary, one
per thumbnail -> view position and sex logits.
Source: a local state_dict file (EHRXQA_VQA_BACKBONE_WEIGHTS) for a torchvision architecture
(EHRXQA_VQA_BACKBONE, ``config.BACKBONES``), built with ``weights=None`` and filled from that file only, so
nothing is ever downloaded. The file's SHA-256 is taken from the bytes that are loaded.

The backbone stands where the reference model has its two small CNNs and stays frozen (eval mode, no
gradients): a probe of its features. What trains is the reference model's part on top of the crop features
(``model.CropClassifier``: object embedding, box geometry, attribute head, per-pair prior) and a linear view /
sex head on the thumbnail's features, on the reference model's decoded silver-train crops, with its loop
(``vqa.train``), so the two modules differ only in where the crop features come from. The grey crops go in
as they are: a three-channel stem (ImageNet weights) is folded to one channel by summing its filters over the
colour channels, which equals feeding the grey image three times; torchxrayvision's stems are one-channel.
The classifier of the file (torchvision's ``fc`` / ``classifier``, torchxrayvision's ``op_threshs``) is dropped.

Leakage: torchxrayvision's published weights were trained on datasets that include MIMIC-CXR, whose images
are this dataset's images, test images included; scores of such a backbone are optimistic. ``leakage_risk``
is ``high`` when the file carries torchxrayvision's ``op_threshs``, else ``unknown`` (the pipeline cannot tell
what other weights were trained on).
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import torch
from torch import nn

from ehrxqa_pipeline.config import BACKBONES, ENVIRONMENT, SettingError
from ehrxqa_pipeline.vqa.model import CropClassifier

_HEAD = {"densenet121": "classifier", "resnet18": "fc", "resnet50": "fc"}  # replaced: the probe is the head
_STEM = {"densenet121": "features.conv0", "resnet18": "conv1", "resnet50": "conv1"}
_DROPPED = ("op_threshs",)  # torchxrayvision's operating points: part of its classifier
FEATURE_BATCH = 1024  # crops per backbone forward: bounds activation memory whatever the caller's batch
WEIGHTS = ENVIRONMENT["vqa_backbone_weights"]
ARCHITECTURE = ENVIRONMENT["vqa_backbone"]


class FrozenBackbone(nn.Module):
    """A torchvision classifier without its classifier and with a one-channel stem: (N, 1, s, s) -> (N, dim)
    features, in chunks of ``FEATURE_BATCH``, without gradients and always in eval mode."""

    def __init__(self, architecture: str):
        super().__init__()
        import torchvision

        if architecture not in BACKBONES:
            raise SettingError(f"{ARCHITECTURE}={architecture!r} is not valid: use one of {', '.join(BACKBONES)}")
        net = getattr(torchvision.models, architecture)(weights=None)
        self.dim = getattr(net, _HEAD[architecture]).in_features
        setattr(net, _HEAD[architecture], nn.Identity())
        parent, name = _STEM[architecture].rpartition(".")[::2]
        owner = net.get_submodule(parent) if parent else net
        stem = getattr(owner, name)
        setattr(owner, name, nn.Conv2d(1, stem.out_channels, stem.kernel_size, stem.stride, stem.padding,
                                       bias=False))
        # channels-last, as the reference model (``vqa.model``): resnet18's forward over 1,024 crops of 32 px on one
        # CPU thread 4.1-4.5 -> 2.3-2.7 s; the weights a file fills keep this layout (load_state_dict copies)
        self.net = net.requires_grad_(False).eval().to(memory_format=torch.channels_last)

    def train(self, mode: bool = True) -> FrozenBackbone:
        return super().train(False)  # frozen: batch-norm statistics stay the pretrained ones

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            return torch.cat([self.net(x[s:s + FEATURE_BATCH]) for s in range(0, len(x), FEATURE_BATCH)])


class PretrainedModel(CropClassifier):
    """``ReferenceModel``'s interface over a ``FrozenBackbone`` (see the module docstring)."""

    def __init__(self, n_objects: int, n_attributes: int, architecture: str, obj_dim: int = 16, hidden: int = 128):
        super().__init__()
        self.config = dict(n_objects=n_objects, n_attributes=n_attributes, architecture=architecture,
                           obj_dim=obj_dim, hidden=hidden)
        self.crop_net = FrozenBackbone(architecture)
        self._add_heads(n_objects, n_attributes, self.crop_net.dim, obj_dim, hidden)
        self.image_head = nn.Linear(self.crop_net.dim, 2)

    def forward_images(self, thumbs: torch.Tensor) -> torch.Tensor:
        """(M, 2, t, t) from ``thumb_tensor`` -> (M, 2) logits: the thumbnail's features (not its texture
        channel) -> [PA (vs AP), male]."""
        return self.image_head(self.crop_net(thumbs[:, :1]))

    def load_backbone(self, weights: Path) -> dict:
        """Fill the backbone from the state_dict file ``weights``; what the scores and the manifest say of it:
        module name, architecture, file name, SHA-256 and leakage risk. A ``SettingError`` names the variable,
        the file and the fix when the file is missing, not a state_dict, or not of this architecture."""
        arch, path = self.config["architecture"], Path(weights)
        fix = (f"point {WEIGHTS} at a {arch} state_dict saved with torch.save(model.state_dict(), path), or set "
               f"{ARCHITECTURE} to the architecture the file is for ({', '.join(BACKBONES)})")
        if not path.is_file():
            raise SettingError(f"{WEIGHTS}={path}: no such file; {fix}")
        data = path.read_bytes()
        try:
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as err:
            raise SettingError(f"{WEIGHTS}={path} is not a torch state_dict file ({type(err).__name__}: "
                               f"{str(err).splitlines()[0] if str(err) else ''}); {fix}") from None
        state = state.get("state_dict", state) if isinstance(state, dict) else state
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise SettingError(f"{WEIGHTS}={path} holds a {type(state).__name__}, not a state_dict of tensors; {fix}")
        leakage = "high" if any(k in state for k in _DROPPED) else "unknown"
        head = _HEAD[arch] + "."
        kept = {k: v for k, v in state.items() if not k.startswith(head) and k not in _DROPPED}
        stem = _STEM[arch] + ".weight"
        if stem in kept and kept[stem].ndim == 4 and kept[stem].shape[1] == 3:
            kept[stem] = kept[stem].sum(dim=1, keepdim=True)
        try:
            self.crop_net.net.load_state_dict(kept, strict=True)
        except RuntimeError as err:
            detail = " ".join(str(err).split())[:600]
            raise SettingError(f"{WEIGHTS}={path} does not fit torchvision's {arch} ({ARCHITECTURE}): {detail}; "
                               f"{fix}") from None
        return {"module": f"pretrained_{arch}", "architecture": arch, "weights_file": path.name,
                "weights_sha256": hashlib.sha256(data).hexdigest(), "leakage_risk": leakage}
