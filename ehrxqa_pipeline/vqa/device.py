"""Where the reference VQA model runs: device resolution, mixed precision and seeding.

Grain: process-wide settings (no tables). Source: the ``EHRXQA_VQA_DEVICE`` setting the caller passes in
(``auto`` by default) and what torch reports about the machine. torch is imported inside the functions so
``ehrxqa_pipeline.vqa`` stays importable (and fast) without it.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
from collections.abc import Iterator

import numpy as np

from ehrxqa_pipeline.config import ENVIRONMENT

ENV_VAR = ENVIRONMENT["vqa_device"]  # named in errors: the setting to change
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def resolve_device(requested: str | None = "auto") -> str:
    """``auto`` -> ``cuda`` when torch sees a CUDA device, else ``cpu``; ``cpu``/``cuda``/``cuda:N`` honoured.

    Asking for CUDA on a machine without one raises a ValueError that names the setting and the fix,
    rather than silently training for hours on the CPU.
    """
    import torch

    req = (requested or "auto").strip().lower()
    if not _DEVICE.match(req):
        raise ValueError(f"unknown VQA device {requested!r}: use auto, cpu, cuda or cuda:N "
                         f"(set {ENV_VAR})")
    if req == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if req == "cpu":
        return "cpu"
    if not torch.cuda.is_available():
        raise ValueError(f"VQA device {req!r} was requested but torch sees no CUDA device "
                         f"(torch {torch.__version__}, CUDA build: {torch.version.cuda}); set {ENV_VAR}=cpu "
                         f"or {ENV_VAR}=auto, or install a CUDA build of torch on a GPU machine")
    if ":" in req and int(req.split(":")[1]) >= torch.cuda.device_count():
        raise ValueError(f"VQA device {req!r}: only {torch.cuda.device_count()} CUDA device(s) visible; "
                         f"set {ENV_VAR} to cuda:0..cuda:{torch.cuda.device_count() - 1} or auto")
    return req


def is_cuda(device: str) -> bool:
    return str(device).startswith("cuda")


@contextlib.contextmanager
def autocast(device: str, enabled: bool = True) -> Iterator[None]:
    """bf16 autocast on CUDA (when ``enabled``); a no-op on the CPU, so CPU results stay bitwise stable."""
    if not (enabled and is_cuda(device)):
        yield
        return
    import torch

    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        yield


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op CPU threads (None: leave the setting), then restore it."""
    import torch

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def seed_everything(seed: int, device: str = "cpu") -> None:
    """Seed python, numpy and torch; on the CPU also ask for deterministic algorithms.

    Same inputs + seed + thread count give bitwise identical weights on the CPU. On CUDA, cuDNN is put in
    deterministic mode too, but atomics in some kernels can still differ in the last bits between runs.
    """
    import torch

    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)
    if is_cuda(device):
        torch.cuda.manual_seed_all(seed)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    else:
        torch.use_deterministic_algorithms(True, warn_only=True)
        # ... which by default also fills every new tensor's memory with NaN (so an op that read memory before
        # writing it would show): a tenth of a CPU training step. No op of these models reads it (the weights are
        # the same bits with and without the fill: tests/vqa/test_train.py), so new memory is left as it comes.
        torch.utils.deterministic.fill_uninitialized_memory = False


def torch_generator(seed: int):
    """A CPU torch Generator for shuffling batches (independent of the global stream)."""
    import torch

    g = torch.Generator()
    g.manual_seed(seed)
    return g


def device_info(device: str) -> dict:
    """What the run used, for asset metadata: device name, torch version, threads, the process's CPU priority
    (niceness: `ehrxqa build` runs training at a lower one, ``cli.beside``), GPU name/memory."""
    import torch

    info = {"device": device, "torch": str(torch.__version__), "threads": torch.get_num_threads(),
            **({"niceness": os.nice(0)} if hasattr(os, "nice") else {})}
    if is_cuda(device):
        idx = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(idx)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2 ** 30, 1))
    return info
