"""Where the pipeline reads and writes: the one place that decides the environment.

``EHRXQA_SOURCE_ROOT`` points at a PhysioNet root (README.md, "Using your PhysioNet data"); unset means the
synthetic source generated under ``EHRXQA_HOME/source``. ``EHRXQA_SOURCE_VERSIONS``
(``mimiciv=3.1,mimic-cxr-jpg=2.1.0``) opts in to PhysioNet releases other than the paper's
(``ehrxqa_pipeline.sources.layout``). ``EHRXQA_HOME`` (default ``./data``) holds the generated source, the
Dagster instance, the DuckDB warehouse, caches and the release files. The environment is read when
``Settings.resolve`` is called (by a resource or the CLI), never at import time. ``check_environment`` checks
every EHRXQA_* setting the steps read later, and ``check_home`` the home, when `ehrxqa` starts.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ehrxqa_pipeline.sources.layout import VERSIONS_ENV, SourceLayout, parse_versions

HOME_ENV = "EHRXQA_HOME"
SOURCE_ENV = "EHRXQA_SOURCE_ROOT"
SEED_ENV = "EHRXQA_SEED"
CHECK_IMAGES_ENV = "EHRXQA_CHECK_IMAGES"  # "0": skip JPEG checks (metadata-only sources, benchmarks)
DEFAULT_HOME = "data"
EXECUTORS = ("multiprocess", "k8s")
VQA_LAUNCHES = ("subprocess", "k8s")
BACKBONES = ("densenet121", "resnet18", "resnet50")  # torchvision architectures (densenet121: torchxrayvision's)
# The step settings (README.md, Configuration): Environment field -> variable. Unset or empty = the default.
ENVIRONMENT = {
    "executor": "EHRXQA_EXECUTOR",  # multiprocess (default) or k8s: chosen when the code location loads
    "llm_base_url": "EHRXQA_LLM_BASE_URL",  # unset: the offline rule-based paraphraser
    "llm_model": "EHRXQA_LLM_MODEL",
    "llm_api_key": "EHRXQA_LLM_API_KEY",
    "llm_timeout_s": "EHRXQA_LLM_TIMEOUT_S",  # one request
    "llm_deadline_s": "EHRXQA_LLM_DEADLINE_S",  # the whole paraphrase fan-out
    "llm_fallback": "EHRXQA_LLM_FALLBACK",  # none (default) or offline
    "count_mimic_cxr_vqa": "EHRXQA_PARAPHRASE_COUNT_MIMIC_CXR_VQA",  # candidates per template (paper: 30)
    "count_ehrxqa": "EHRXQA_PARAPHRASE_COUNT_EHRXQA",  # (paper: 15)
    "reviewed_paraphrases": "EHRXQA_REVIEWED_PARAPHRASES",  # the review file (default paraphrases/reviewed.csv)
    "require_review": "EHRXQA_PARAPHRASE_REQUIRE_REVIEW",  # 1: pools of accepted candidates only
    "vqa_device": "EHRXQA_VQA_DEVICE",  # auto (default), cpu, cuda, cuda:N
    "vqa_amp": "EHRXQA_VQA_AMP",  # 0: no bf16 autocast on GPU
    "vqa_decode": "EHRXQA_VQA_DECODE",  # the VQA step's JPEG decoder: auto (default), cpu, torch, mixed[:SHARE]
    "vqa_base_url": "EHRXQA_VQA_BASE_URL",  # an OpenAI-compatible vision endpoint, scored as one more module
    "vqa_model": "EHRXQA_VQA_MODEL",
    "vqa_api_key": "EHRXQA_VQA_API_KEY",
    "vqa_allow_hosts": "EHRXQA_VQA_ALLOW_HOSTS",  # hosts images may go to besides loopback (comma-separated)
    "vqa_launch": "EHRXQA_VQA_LAUNCH",  # subprocess (default) or k8s: chosen when the code location loads
    "vqa_worker_image": "EHRXQA_VQA_WORKER_IMAGE",  # with k8s: the image of deploy/vqa-worker.Dockerfile
    "vqa_backbone": "EHRXQA_VQA_BACKBONE",  # a pretrained backbone's architecture, scored beside the reference
    "vqa_backbone_weights": "EHRXQA_VQA_BACKBONE_WEIGHTS",  # its local state_dict file (never downloaded)
}
EXECUTOR_ENV = ENVIRONMENT["executor"]
REVIEW_FLAGS = ("0", "1", "true", "false", "yes", "no")
REVIEW_FILE = Path(__file__).resolve().parents[1] / "paraphrases" / "reviewed.csv"  # the repository's reviews
MIN_FREE_BYTES = 512 << 20  # refuse to start a build on a home with less free space than this


class SettingError(ValueError):
    """A setting (environment variable or option) with a value the pipeline cannot use; the message names the
    variable, the value and the accepted forms."""


def _bad(name: str, value: str, forms: str) -> SettingError:
    return SettingError(f"{name}={value!r} is not valid: {forms}")


def _seed(value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise _bad(SEED_ENV, value, "use an integer, e.g. 0") from None


def _flag(name: str, value: str, accepted=("0", "1")) -> str:
    if value.strip().lower() not in accepted:
        raise _bad(name, value, f"use {' or '.join(accepted)}")
    return value.strip().lower()


@dataclass(frozen=True)
class Settings:
    home: Path
    source_root: Path | None = None  # None: the synthetic source under home/source
    seed: int = 0
    check_images: bool = True
    source_versions: tuple[tuple[str, str], ...] = ()  # (dataset, release) read instead of the paper's

    @classmethod
    def resolve(cls, home: str | None = None, source_root: str | None = None, seed: int | None = None,
                env: Mapping[str, str] | None = None,
                source_versions: str | Iterable[str] | None = None) -> Settings:
        """Explicit arguments win, then the environment, then the defaults. A malformed source version
        setting raises ``ValueError`` naming the accepted values."""
        env = os.environ if env is None else env
        home = home or env.get(HOME_ENV) or DEFAULT_HOME
        source_root = source_root or env.get(SOURCE_ENV) or None
        if seed is None:
            seed = _seed(env.get(SEED_ENV, "0"))
        try:
            versions = parse_versions(source_versions if source_versions else env.get(VERSIONS_ENV))
        except ValueError as err:
            raise SettingError(str(err)) from None
        check_images = _flag(CHECK_IMAGES_ENV, env.get(CHECK_IMAGES_ENV, "1")) != "0"
        return cls(Path(home).expanduser().absolute(),
                   Path(source_root).expanduser().absolute() if source_root else None, seed,
                   check_images, tuple(sorted(versions.items())))

    def export(self) -> None:
        """Write these settings to this process's environment (and DAGSTER_HOME = ``dagster_home``): what the
        Dagster instance, the code location and every step it starts read."""
        os.environ["DAGSTER_HOME"] = str(self.dagster_home)
        os.environ[HOME_ENV] = str(self.home)
        os.environ[SEED_ENV] = str(self.seed)
        if self.source_root is not None:
            os.environ[SOURCE_ENV] = str(self.source_root)
        if self.source_versions:
            os.environ[VERSIONS_ENV] = self.source_versions_text

    def layout(self) -> SourceLayout:
        """Where each dataset lives below the source root, at the releases these settings name."""
        return SourceLayout(self.source_dir, dict(self.source_versions), self.cache_dir)

    @property
    def source_versions_text(self) -> str:
        """The setting as written in ``EHRXQA_SOURCE_VERSIONS`` (empty: the paper's releases)."""
        return ",".join(f"{k}={v}" for k, v in self.source_versions)

    @property
    def synthetic(self) -> bool:
        return self.source_root is None

    @property
    def source_dir(self) -> Path:
        return self.source_root if self.source_root is not None else self.home / "source"

    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse.duckdb"

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache"

    @property
    def embedding_cache(self) -> Path:
        """The sentence embeddings of paraphrase validation, per text (``paraphrase.embed.Embedder``)."""
        return self.cache_dir / "embeddings.duckdb"

    @property
    def neuralsql_parse_store(self) -> Path:
        """The NeuralSQL parses kept between processes and builds (``questions.neuralsql.parse_store``)."""
        return self.cache_dir / "neuralsql_parses.sqlite"

    @property
    def staging_dir(self) -> Path:
        return self.home / "staging"

    @property
    def release_dir(self) -> Path:
        return self.home / "release"

    @property
    def release_history_dir(self) -> Path:
        """One snapshot per release version built in this home, from which release/CHANGELOG.md is written
        (``release.changelog.record``); outside the release folder, which it describes."""
        return self.home / "release_history"


@dataclass(frozen=True)
class Environment:
    """The step settings of ``ENVIRONMENT`` as written ("" where unset), read when a resource or the CLI asks
    (``Environment.read``): the only reader of these variables. Resources turn them into values (an explicit
    resource field wins) and hand the values to the library."""

    executor: str = ""
    llm_base_url: str = ""
    llm_model: str = ""
    llm_api_key: str = ""
    llm_timeout_s: str = ""
    llm_deadline_s: str = ""
    llm_fallback: str = ""
    count_mimic_cxr_vqa: str = ""
    count_ehrxqa: str = ""
    reviewed_paraphrases: str = ""
    require_review: str = ""
    vqa_device: str = ""
    vqa_amp: str = ""
    vqa_decode: str = ""
    vqa_base_url: str = ""
    vqa_model: str = ""
    vqa_api_key: str = ""
    vqa_allow_hosts: str = ""
    vqa_launch: str = ""
    vqa_worker_image: str = ""
    vqa_backbone: str = ""
    vqa_backbone_weights: str = ""

    @classmethod
    def read(cls, env: Mapping[str, str] | None = None) -> Environment:
        env = os.environ if env is None else env
        return cls(**{field: env.get(name, "").strip() for field, name in ENVIRONMENT.items()})

    def review_file(self) -> Path:
        """The reviewed-paraphrases file: EHRXQA_REVIEWED_PARAPHRASES, else the repository's
        ``paraphrases/reviewed.csv``."""
        return Path(self.reviewed_paraphrases).expanduser().absolute() if self.reviewed_paraphrases else REVIEW_FILE

    def review_required(self) -> bool:
        """EHRXQA_PARAPHRASE_REQUIRE_REVIEW=1: pools of accepted candidates only (default: accepted + pending)."""
        return self.require_review.lower() in ("1", "true", "yes")

    def extra_hosts(self) -> tuple[str, ...]:
        """The hosts of ``EHRXQA_VQA_ALLOW_HOSTS``, lower-cased."""
        return tuple(h.strip().lower() for h in self.vqa_allow_hosts.split(",") if h.strip())

    def vqa_worker_pod_image(self) -> str | None:
        """The image of the VQA worker's own pod (EHRXQA_VQA_LAUNCH=k8s, EHRXQA_VQA_WORKER_IMAGE), or None: the
        worker is a child process of the step (default). A ``SettingError`` for another launch, or for k8s
        without an image: the cluster user builds and pushes it, so it has no default."""
        name = ENVIRONMENT
        if self.vqa_launch in ("", "subprocess"):
            return None
        if self.vqa_launch != "k8s":
            raise _bad(name["vqa_launch"], self.vqa_launch, f"use {' or '.join(VQA_LAUNCHES)} (default subprocess)")
        if not self.vqa_worker_image:
            raise SettingError(f"{name['vqa_launch']}=k8s needs {name['vqa_worker_image']}: the image built from "
                               "deploy/vqa-worker.Dockerfile, e.g. ghcr.io/your-org/ehrxqa-vqa:0.1.0")
        return self.vqa_worker_image

    def backbone(self) -> tuple[str, Path] | None:
        """(architecture, weights file) of EHRXQA_VQA_BACKBONE and EHRXQA_VQA_BACKBONE_WEIGHTS; None when neither
        is set. A ``SettingError`` names the variable and the fix when only one is set, the architecture is not
        one of ``BACKBONES`` or the file is missing; whether the file holds weights of that architecture is
        checked where torch loads them (``vqa.backbone``)."""
        arch, weights = self.vqa_backbone.lower(), self.vqa_backbone_weights
        name = ENVIRONMENT
        if not arch and not weights:
            return None
        if not weights:
            raise SettingError(f"{name['vqa_backbone']}={self.vqa_backbone!r} needs {name['vqa_backbone_weights']}: "
                               f"the local file of its weights (a state_dict saved with torch.save; nothing is "
                               f"downloaded), or unset {name['vqa_backbone']}")
        if not arch:
            raise SettingError(f"{name['vqa_backbone_weights']}={weights!r} needs {name['vqa_backbone']}: the "
                               f"architecture of those weights, one of {', '.join(BACKBONES)}")
        if arch not in BACKBONES:
            raise _bad(name["vqa_backbone"], self.vqa_backbone, f"use one of {', '.join(BACKBONES)}")
        path = Path(weights).expanduser().absolute()
        if not path.is_file():
            raise SettingError(f"{name['vqa_backbone_weights']}={weights!r}: no such file; point it at a local "
                               f"{arch} state_dict (.pt or .pth, saved with torch.save(model.state_dict(), path)), or "
                               f"unset {name['vqa_backbone']} and {name['vqa_backbone_weights']}")
        return arch, path


def quiet_third_parties() -> None:
    """Environment the libraries read: no usage analytics leave the machine (Great Expectations, privacy), no
    progress bars in build logs. Set only where unset."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("TQDM_DISABLE", "1")


# -- start-up checks of every setting the steps read later -------------------------------------------------
# The steps read these when they run (resources, executor choice); a bad value found there would surface as a
# traceback deep in a run. ``check_environment`` reads them all once, before any work.
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
_DECODE = re.compile(r"^(auto|cpu|torch|mixed(:(0|1|0?\.\d+|1\.0*))?)$")  # vqa.stream.parse_decoder's forms
_HOST = re.compile(r"^[A-Za-z0-9_.:\-\[\]]+$")


def _url(e: Environment, field: str) -> str | None:
    value = getattr(e, field)
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _bad(ENVIRONMENT[field], value, "use an http(s) URL with a host, e.g. http://127.0.0.1:8000/v1")
    return parts.hostname.lower()


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def allowed_hosts(allow_hosts=None, extra=()) -> set[str]:
    """The hosts images may be sent to: exactly ``allow_hosts`` when given (an explicit value is never widened);
    else loopback plus ``extra`` (the resource passes EHRXQA_VQA_ALLOW_HOSTS); used by
    ``vqa.modules.OpenAIVisionModule``, ``resources.VqaDevice`` and ``check_environment``."""
    if allow_hosts is not None:
        return {h.strip().lower() for h in allow_hosts if h.strip()}
    return set(LOOPBACK) | {h.strip().lower() for h in extra if h.strip()}


def check_environment(env: Mapping[str, str] | None = None) -> Settings:
    """Every EHRXQA_* setting checked at start-up; the resolved ``Settings``. Raises ``SettingError`` naming
    the variable, its value and the accepted forms. The VQA vision endpoint must be on the allow-list
    (images are PhysioNet record data: README.md, Configuration and Privacy)."""
    settings = Settings.resolve(env=env)
    e = Environment.read(env)
    name = ENVIRONMENT
    if e.executor and e.executor not in EXECUTORS:
        raise _bad(name["executor"], e.executor, f"use {' or '.join(repr(x) for x in EXECUTORS)} (default "
                                                 "multiprocess)")
    e.vqa_worker_pod_image()
    if e.vqa_device and not _DEVICE.match(e.vqa_device.lower()):
        raise _bad(name["vqa_device"], e.vqa_device, "use auto, cpu, cuda or cuda:N")
    _flag(name["vqa_amp"], e.vqa_amp or "1")
    if e.vqa_decode and not _DECODE.match(e.vqa_decode.lower()):
        raise _bad(name["vqa_decode"], e.vqa_decode, "use auto, cpu, torch, mixed or mixed:SHARE (the share of "
                                                     "images decoded on the CPU, 0 to 1)")
    _flag(name["require_review"], e.require_review or "0", REVIEW_FLAGS)
    for field in ("count_mimic_cxr_vqa", "count_ehrxqa"):
        value = getattr(e, field)
        if value and not (value.isdigit() and int(value) > 0):
            raise _bad(name[field], value, "use a positive integer (candidates per template), or leave it unset")
    _url(e, "llm_base_url")
    bad = [h for h in e.vqa_allow_hosts.split(",") if h.strip() and not _HOST.match(h.strip())]
    if bad:
        raise _bad(name["vqa_allow_hosts"], e.vqa_allow_hosts, "use comma-separated host names or addresses, no "
                                                               "scheme or path, e.g. 127.0.0.1,vqa.internal")
    e.backbone()
    host = _url(e, "vqa_base_url")
    allowed = allowed_hosts(extra=e.extra_hosts())
    if host is not None and host not in allowed:
        raise SettingError(
            f"{name['vqa_base_url']}={e.vqa_base_url!r}: host {host!r} is not on the allow-list {sorted(allowed)}; "
            f"chest X-ray images are PhysioNet record data and go only to hosts covered by the data use agreement "
            f"(README.md, Configuration). Serve the model locally, or add the host to {name['vqa_allow_hosts']} "
            f"(comma-separated) if it is yours to send the images to.")
    return settings


def check_home(home: Path, min_free: int = MIN_FREE_BYTES) -> None:
    """EHRXQA_HOME exists (created if need be), is writable and has ``min_free`` bytes free: else a
    ``SettingError`` naming the path and the cause (read-only, permission, free space), before any work."""
    where = f"{HOME_ENV}={home}"
    try:
        home.mkdir(parents=True, exist_ok=True)
        probe = home / f".write-probe.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        probe.write_bytes(b"x")
        probe.unlink()
    except OSError as err:
        raise SettingError(f"{where} is not writable: {err.strerror or err} ({type(err).__name__}, errno "
                           f"{err.errno}); point {HOME_ENV} at a writable folder") from None
    free = shutil.disk_usage(home).free
    if free < min_free:
        raise SettingError(f"{where} has {free / 2**20:.0f} MiB free on its file system; a build needs at least "
                           f"{min_free / 2**20:.0f} MiB: free space there or point {HOME_ENV} elsewhere")
