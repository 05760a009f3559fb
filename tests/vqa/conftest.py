"""Fixtures of the reference-model tests: a tiny synthetic source WITH phantom JPEGs, built through splits.

``vqa_warehouse`` is generated once per session (per xdist worker): 60 CXR patients (~160 frontal images),
ingested, cohorts, labels and splits built by the library steps (``tests.pipeline_steps``), plus the label
pool ``cxr_labels.pairs`` (what the ontology asset writes) and ``splits.images``, both sides' splits as the
model's workspace holds them (``vqa.workspace.snapshot``). 45% of the non-gold patients go to valid; half
of those are then moved to test, so the held-out checks (silver labels of those test images,
``VqaWarehouse.holdout``) use images the model neither trained on nor was selected on.
``vqa_trained`` is one small training run shared by the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

VQA_SOURCE = dict(seed=11, scale="demo", patients=60)
VALID_FRACTION = 0.45


@dataclass(frozen=True)
class VqaWarehouse:
    db: Path
    source: Path

    @property
    def files_root(self) -> Path:
        return self.source / "mimic-cxr-jpg" / "2.0.0" / "files"

    def connect(self, read_only: bool = True) -> duckdb.DuckDBPyConnection:
        return duckdb.connect(str(self.db), read_only=read_only)

    def holdout(self, con) -> list[str]:
        """Test images with silver labels (former valid patients): held out from training and selection."""
        return con.sql("""SELECT image_id FROM splits.images i WHERE split = 'test'
                          AND image_id IN (SELECT image_id FROM cxr_labels.silver_images)
                          ORDER BY image_id""").pl()["image_id"].to_list()


def tiny_config(**overrides):
    from ehrxqa_pipeline.vqa.train import TrainConfig

    base = dict(epochs=6, batch_size=8, lr=3e-3, seed=0, threads=1, min_valid_positives=2, patience=6)
    return TrainConfig(**{**base, **overrides})


@pytest.fixture(scope="session")
def vqa_warehouse(tmp_path_factory) -> VqaWarehouse:
    from ehrxqa_pipeline.demo.generate import generate_source
    from ehrxqa_pipeline.cxr.splits import split_images_sql
    from tests.pipeline_steps import build_through_splits

    out = tmp_path_factory.mktemp("vqa")
    source = out / "source"
    generate_source(source, images=True, workers=1, log=lambda _: None, **VQA_SOURCE)
    db = out / "warehouse.duckdb"
    con = duckdb.connect(str(db))
    try:
        onto = build_through_splits(con, source, out / "stage", valid_fraction=VALID_FRACTION)
        con.register("_pairs", onto.pairs)
        con.execute("CREATE OR REPLACE TABLE cxr_labels.pairs AS SELECT * FROM _pairs")
        # the reference model's workspace layout (vqa.workspace.snapshot): both sides' splits in splits.images
        con.execute(f"CREATE TABLE splits.images AS {split_images_sql()}")
        con.execute("UPDATE splits.images SET split = 'test' WHERE split = 'valid' AND hash(subject_id) % 2 = 0")
    finally:
        con.close()
    return VqaWarehouse(db, source)


@pytest.fixture
def vqa_con(vqa_warehouse):
    con = vqa_warehouse.connect()
    yield con
    con.close()


@pytest.fixture(scope="session")
def vqa_trained(vqa_warehouse):
    from ehrxqa_pipeline.vqa.train import train_reference

    con = vqa_warehouse.connect()
    try:
        return train_reference(con, vqa_warehouse.files_root, tiny_config(), log=lambda _: None)
    finally:
        con.close()
