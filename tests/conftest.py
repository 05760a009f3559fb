"""Shared fixtures: small synthetic sources generated once per test session (per xdist worker)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

SMALL = dict(seed=7, scale="demo", patients=40)


@pytest.fixture(scope="session")
def small_source(tmp_path_factory) -> tuple[Path, dict]:
    """40 CXR patients, no images: the EHR, metadata and label files of a tiny synthetic PhysioNet root."""
    from ehrxqa_pipeline.demo.generate import generate_source

    out = tmp_path_factory.mktemp("small") / "source"
    manifest = generate_source(out, images=False, log=lambda _: None, **SMALL)
    return out, manifest


@pytest.fixture
def source_copy(small_source, tmp_path) -> tuple[Path, dict]:
    """A private copy of the small source that a test may damage."""
    src, manifest = small_source
    dst = tmp_path / "source"
    shutil.copytree(src, dst)
    return dst, manifest
