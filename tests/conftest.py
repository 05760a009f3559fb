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
def exported_settings(monkeypatch) -> None:
    """What ``Settings.export`` writes to the environment (``cli.prepare_instance`` calls it) is put back as it
    was after the test."""
    import os

    from ehrxqa_pipeline.config import HOME_ENV, SEED_ENV, SOURCE_ENV
    from ehrxqa_pipeline.sources.layout import VERSIONS_ENV

    for name in ("DAGSTER_HOME", HOME_ENV, SEED_ENV, SOURCE_ENV, VERSIONS_ENV):
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)


@pytest.fixture
def source_copy(small_source, tmp_path) -> tuple[Path, dict]:
    """A private copy of the small source that a test may damage."""
    src, manifest = small_source
    dst = tmp_path / "source"
    shutil.copytree(src, dst)
    return dst, manifest


# The files that build the whole graph take most of the suite's time. `make test` hands whole files to two
# xdist workers in this order (--no-loadscope-reorder): the data-edit scenarios of the pipeline (the longest) to
# one, the end to end build to the other, which then takes the code-edit scenarios (they copy the build the
# first worker made: tests/pipeline_graph.py, ``pristine_build``); then the other files with tests that take
# several seconds, longest first, so that the short files even out the two workers at the end (only there: the
# other files keep collection order under `make test-fast`, whose xdist hands out single tests). Measured on
# 2 cores (2026-11-28): test_cli 22.6 s, test_withheld 17 s, test_train 16.3 s, sources/test_validate 15.5 s,
# test_backbone 13.0 s, test_deploy 11.5 s, test_scope 11.0 s, test_llm_outcomes 10.0 s, paraphrase/test_assets
# and test_llm_failures 8.5 s; the rest under 7 s.
FIRST_FILES = ("tests/test_pipeline.py", "tests/test_end_to_end.py", "tests/test_pipeline_code.py")
LONG_FILES = ("tests/test_cli.py", "tests/test_withheld.py", "tests/vqa/test_train.py",
              "tests/sources/test_validate.py", "tests/vqa/test_backbone.py", "tests/test_deploy.py",
              "tests/test_scope.py", "tests/paraphrase/test_llm_outcomes.py", "tests/paraphrase/test_assets.py",
              "tests/paraphrase/test_llm_failures.py", "tests/test_definitions.py", "tests/release/test_hf.py",
              "tests/release/test_plots.py", "tests/sources/test_layout.py")


def pytest_collection_finish(session):
    """Everything collection created (the imported libraries: Dagster, polars, pandas, sqlglot, the test
    modules) lives until the end anyway: moved to the permanent generation, the garbage collector's full
    collections during the tests no longer walk it (make test-fast: time in gc about 4 s -> 2.4 s a worker);
    and the collector runs as in `ehrxqa build` (``ehrxqa_pipeline.gc_settings``: tests/test_pipeline.py alone
    20.7 s -> 6.7 s in the collector)."""
    from ehrxqa_pipeline import gc_settings

    gc_settings.for_many_steps()


def _dist(config) -> str:
    """The run's --dist mode. On an xdist worker, where the files are ordered (the controller schedules the
    workers' common collection), xdist sets the worker's own option to "no": the controller's command line
    says it."""
    argv = getattr(config, "workerinput", {}).get("mainargv")
    if argv is None:
        return getattr(config.option, "dist", "no")
    for i, arg in enumerate(argv):
        if arg.startswith("--dist="):
            return arg.split("=", 1)[1]
        if arg == "--dist" and i + 1 < len(argv):
            return argv[i + 1]
    return "no"


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(FIRST_FILES + (LONG_FILES if _dist(config) == "loadfile" else ()))}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: file order kept
