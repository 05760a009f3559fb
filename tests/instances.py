"""Test instances on the storage `ehrxqa` names in the dagster.yaml it writes (``cli.dagster_private``)."""

import contextlib
import tempfile
from collections.abc import Iterator

import dagster as dg
import yaml

from ehrxqa_pipeline.cli import DAGSTER_YAML_BLOCKS


@contextlib.contextmanager
def instance_for_test(temp_dir: str | None = None) -> Iterator[dg.DagsterInstance]:
    """``dg.instance_for_test`` whose runs and events go to ``PooledSqliteStorage`` in ``temp_dir`` (default: a
    temporary folder), as an instance under EHRXQA_HOME/dagster does."""
    with contextlib.ExitStack() as stack:
        folder = temp_dir or stack.enter_context(tempfile.TemporaryDirectory())
        storage = yaml.safe_load(DAGSTER_YAML_BLOCKS["storage"])["storage"]
        storage["custom"]["config"]["base_dir"] = str(folder)
        yield stack.enter_context(dg.instance_for_test(temp_dir=str(folder), overrides={"storage": storage}))
