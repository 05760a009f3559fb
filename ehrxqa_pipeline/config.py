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
EXECUTOR_ENV = "EHRXQA_EXECUTOR"  # read by ehrxqa_pipeline.definitions when the code location loads
EXECUTORS = ("multiprocess", "k8s")
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


def _flag(env: Mapping[str, str], name: str, default: str, accepted=("0", "1")) -> str:
    value = env.get(name, default)
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
        check_images = _flag(env, CHECK_IMAGES_ENV, "1") != "0"
        return cls(Path(home).expanduser().absolute(),
                   Path(source_root).expanduser().absolute() if source_root else None, seed,
                   check_images, tuple(sorted(versions.items())))

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
    def staging_dir(self) -> Path:
        return self.home / "staging"

    @property
    def release_dir(self) -> Path:
        return self.home / "release"


# -- start-up checks of every setting the steps read later -------------------------------------------------
# The steps read these when they run (resources, executor choice); a bad value found there would surface as a
# traceback deep in a run. ``check_environment`` reads them all once, before any work.
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
_HOST = re.compile(r"^[A-Za-z0-9_.:\-\[\]]+$")


def _url(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _bad(name, value, "use an http(s) URL with a host, e.g. http://127.0.0.1:8000/v1")
    return parts.hostname.lower()


def _count(env: Mapping[str, str], name: str) -> None:
    value = env.get(name, "").strip()
    if value and not (value.isdigit() and int(value) > 0):
        raise _bad(name, env[name], "use a positive integer (candidates per template), or leave it unset")


def check_environment(env: Mapping[str, str] | None = None) -> Settings:
    """Every EHRXQA_* setting checked at start-up; the resolved ``Settings``. Raises ``SettingError`` naming
    the variable, its value and the accepted forms. The VQA vision endpoint must be on the allow-list
    (images are PhysioNet record data: README.md, Configuration and Privacy)."""
    from ehrxqa_pipeline.vqa.modules import ALLOW_HOSTS_ENV, allowed_hosts

    env = os.environ if env is None else env
    settings = Settings.resolve(env=env)
    executor = env.get(EXECUTOR_ENV, "").strip()
    if executor and executor not in EXECUTORS:
        raise _bad(EXECUTOR_ENV, env[EXECUTOR_ENV], f"use {' or '.join(repr(e) for e in EXECUTORS)} (default "
                                                     "multiprocess)")
    device = env.get("EHRXQA_VQA_DEVICE", "").strip()
    if device and not _DEVICE.match(device.lower()):
        raise _bad("EHRXQA_VQA_DEVICE", env["EHRXQA_VQA_DEVICE"], "use auto, cpu, cuda or cuda:N")
    _flag(env, "EHRXQA_VQA_AMP", "1")
    _flag(env, "EHRXQA_PARAPHRASE_REQUIRE_REVIEW", "0", ("0", "1", "true", "false", "yes", "no"))
    for name in ("EHRXQA_PARAPHRASE_COUNT_MIMIC_CXR_VQA", "EHRXQA_PARAPHRASE_COUNT_EHRXQA"):
        _count(env, name)
    _url(env, "EHRXQA_LLM_BASE_URL")
    hosts = env.get(ALLOW_HOSTS_ENV, "")
    bad = [h for h in hosts.split(",") if h.strip() and not _HOST.match(h.strip())]
    if bad:
        raise _bad(ALLOW_HOSTS_ENV, hosts, "use comma-separated host names or addresses, no scheme or path, "
                                           "e.g. 127.0.0.1,vqa.internal")
    host = _url(env, "EHRXQA_VQA_BASE_URL")
    if host is not None and host not in allowed_hosts(env=env):
        raise SettingError(
            f"EHRXQA_VQA_BASE_URL={env['EHRXQA_VQA_BASE_URL']!r}: host {host!r} is not on the allow-list "
            f"{sorted(allowed_hosts(env=env))}; chest X-ray images are PhysioNet record data and go only to hosts "
            f"covered by the data use agreement (README.md, Configuration). Serve the model locally, or add the "
            f"host to {ALLOW_HOSTS_ENV} (comma-separated) if it is yours to send the images to.")
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
