"""Where the pipeline reads and writes: the one place that decides the environment.

``EHRXQA_SOURCE_ROOT`` points at a PhysioNet root (design.md section 2); unset means the synthetic source
generated under ``EHRXQA_HOME/source``. ``EHRXQA_SOURCE_VERSIONS`` (``mimiciv=3.1,mimic-cxr-jpg=2.1.0``) opts
in to PhysioNet releases other than the paper's (``ehrxqa_pipeline.sources.layout``). ``EHRXQA_HOME`` (default ``./data``) holds the generated source,
the Dagster instance, the DuckDB warehouse, caches and the release files. The environment is read when
``Settings.resolve`` is called (by a resource or the CLI), never at import time.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ehrxqa_pipeline.sources.layout import VERSIONS_ENV, SourceLayout, parse_versions

HOME_ENV = "EHRXQA_HOME"
SOURCE_ENV = "EHRXQA_SOURCE_ROOT"
SEED_ENV = "EHRXQA_SEED"
CHECK_IMAGES_ENV = "EHRXQA_CHECK_IMAGES"  # "0": skip JPEG checks (metadata-only sources, benchmarks)
DEFAULT_HOME = "data"


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
            seed = int(env.get(SEED_ENV, "0"))
        versions = parse_versions(source_versions if source_versions else env.get(VERSIONS_ENV))
        return cls(Path(home).expanduser().absolute(),
                   Path(source_root).expanduser().absolute() if source_root else None, seed,
                   env.get(CHECK_IMAGES_ENV, "1") != "0", tuple(sorted(versions.items())))

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
