"""The code location `ehrxqa dev` opens and `ehrxqa build` creates its runs in (``code_location``):
workspace.yaml of a checkout, else the installed Definitions module. Runs created with its origin show on the
UI's Overview and under their job, and "Re-execute" works from the UI (``dagster_private.execute``)."""

from __future__ import annotations

from pathlib import Path

MODULE = "ehrxqa_pipeline.definitions"
WORKSPACE = Path(__file__).resolve().parents[2] / "workspace.yaml"
ASSET_JOB = "__ASSET_JOB"  # the implicit job of every asset, which the UI's "Materialize" launches


def code_location() -> list[str]:
    """`dagster dev` arguments naming the code location from any working directory: the project's
    workspace.yaml by absolute path (a checkout), else the installed Definitions module."""
    return ["-w", str(WORKSPACE)] if WORKSPACE.is_file() else ["-m", MODULE]
