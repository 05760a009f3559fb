"""The VQA device resource: where the reference model trains and infers, and the vision endpoint (if any).

Every field left unset comes from the environment when a step runs (never at import; read by
``ehrxqa_pipeline.config.Environment``):
EHRXQA_VQA_DEVICE ("auto" = CUDA when present, else CPU; or "cpu", "cuda", "cuda:N"), EHRXQA_VQA_AMP ("0" turns bf16
autocast off on GPU; CPU always runs fp32), EHRXQA_VQA_DECODE (the VQA step's JPEG decoder, for the training store
and the predictions: "auto", "cpu", "torch", "mixed" or "mixed:SHARE"; ``vqa.stream``), EHRXQA_VQA_BASE_URL /
EHRXQA_VQA_MODEL / EHRXQA_VQA_API_KEY (an OpenAI-compatible vision endpoint, scored as one more module; unset =
none) and EHRXQA_VQA_ALLOW_HOSTS (comma-separated hosts images may be sent to; default loopback only; README.md,
Configuration; `ehrxqa` checks them at start-up: ehrxqa_pipeline.config.check_environment), and EHRXQA_VQA_BACKBONE
/ EHRXQA_VQA_BACKBONE_WEIGHTS (a pretrained backbone's architecture and local weights file, scored beside the
reference model; unset = none). torch is not imported here: the VQA worker resolves the device.
"""

from dataclasses import replace

import dagster as dg

from ehrxqa_pipeline.config import Environment, allowed_hosts


class VqaDevice(dg.ConfigurableResource):
    """Device for torch work and the optional vision endpoint; explicit values win over the environment."""

    device: str | None = None  # None: EHRXQA_VQA_DEVICE, else "auto"
    amp: bool | None = None  # None: EHRXQA_VQA_AMP != "0"
    decode: str | None = None  # None: EHRXQA_VQA_DECODE, else "auto"
    vision_base_url: str | None = None
    vision_model: str | None = None
    vision_api_key: str | None = None
    allow_hosts: str | None = None  # comma-separated, exactly these; None: loopback plus EHRXQA_VQA_ALLOW_HOSTS
    backbone: str | None = None  # None: EHRXQA_VQA_BACKBONE (unset: no pretrained backbone)
    backbone_weights: str | None = None  # None: EHRXQA_VQA_BACKBONE_WEIGHTS

    def requested(self) -> str:
        """"auto" / "cpu" / "cuda" / "cuda:N" as set: the VQA worker resolves it where it runs (its own pod may
        hold the GPU the step's has not), with a clear error when CUDA is asked for and absent."""
        return self.device or Environment.read().vqa_device or "auto"

    def use_amp(self) -> bool:
        if self.amp is not None:
            return self.amp
        return (Environment.read().vqa_amp or "1") != "0"

    def decoder(self) -> str:
        """The VQA step's JPEG decoder as set (``vqa.stream.parse_decoder``'s forms), resolved by the worker."""
        return self.decode or Environment.read().vqa_decode or "auto"

    def hosts(self) -> tuple[str, ...]:
        """The allow-list (``config.allowed_hosts``): an explicit value wins and is never widened."""
        explicit = None if self.allow_hosts is None else self.allow_hosts.split(",")
        return tuple(sorted(allowed_hosts(explicit, extra=Environment.read().extra_hosts())))

    def vision(self) -> dict | None:
        """Settings of the OpenAI-compatible vision endpoint, or None when none is configured."""
        env = Environment.read()
        base_url = self.vision_base_url or env.vqa_base_url
        if not base_url:
            return None
        return {"base_url": base_url, "model": self.vision_model or env.vqa_model or "gpt-4o",
                "api_key": self.vision_api_key or env.vqa_api_key or "unused",
                "allow_hosts": self.hosts()}

    def pretrained(self) -> dict | None:
        """{"architecture", "weights"} of the pretrained backbone to train beside the reference model, or None;
        a ``SettingError`` naming the variable and the fix when it is set wrong (``Environment.backbone``)."""
        env = Environment.read()
        chosen = replace(env, vqa_backbone=self.backbone or env.vqa_backbone,
                         vqa_backbone_weights=self.backbone_weights or env.vqa_backbone_weights).backbone()
        return None if chosen is None else {"architecture": chosen[0], "weights": str(chosen[1])}
