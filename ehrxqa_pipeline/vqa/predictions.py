"""What the reference model predicts for a set of images: the one interface between training/inference
(``vqa.model``, ``vqa.train``, ``vqa.infer``) and answering/scoring (``vqa.modules``, ``vqa.scoring``).

Grain:
- ``relations``: one row per (image, object, attribute) of the label pool (``cxr_labels.pairs``) for every
  object that has a box on the image; ``prob`` is the predicted probability that the attribute is
  affirmed for the object (the paper's "presence per object-attribute pair").
- ``images``: one row per image: predicted view position (``p_pa`` = probability of PA) and sex
  (``p_male``), and the cardiothoracic / mediastinal-to-thoracic ratios the model uses (from the boxes
  it was given; None where a needed box is missing).

Thresholding to hard labels happens downstream (``threshold`` of the module that answers), so AUROC can
be computed from the same frame.

A pretrained backbone's probe (``vqa.backbone``) predicts into tables of the same shape,
``vqa_scoring.pretrained_relations`` / ``pretrained_images``, and ``vqa_scoring.pretrained_backbone`` says per
partition which weights (``pretrained_backbone`` reads it back for the scores and the release manifest).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ehrxqa_pipeline.contracts import load_contract

# the tables vqa_scoring.predicted_relations / predicted_images, without the partition the warehouse adds
RELATIONS_CONTRACT = load_contract("vqa_scoring.predicted_relations")
IMAGES_CONTRACT = load_contract("vqa_scoring.predicted_images")
RELATIONS_SCHEMA = RELATIONS_CONTRACT.polars_schema(without=("partition",))
IMAGES_SCHEMA = IMAGES_CONTRACT.polars_schema(without=("partition",))
PRETRAINED_RELATIONS_CONTRACT = load_contract("vqa_scoring.pretrained_relations")
PRETRAINED_IMAGES_CONTRACT = load_contract("vqa_scoring.pretrained_images")
BACKBONE_CONTRACT = load_contract("vqa_scoring.pretrained_backbone")
BACKBONE_SCHEMA = BACKBONE_CONTRACT.polars_schema(without=("partition",))


@dataclass(frozen=True)
class Predictions:
    relations: pl.DataFrame  # RELATIONS_SCHEMA, sorted by (image_id, object, attribute)
    images: pl.DataFrame  # IMAGES_SCHEMA, sorted by image_id

    def __post_init__(self) -> None:
        for name, frame, schema in (("relations", self.relations, RELATIONS_SCHEMA),
                                    ("images", self.images, IMAGES_SCHEMA)):
            got = dict(frame.schema)
            if got != schema:
                raise ValueError(f"Predictions.{name}: schema {got} != expected {schema}")

    @classmethod
    def empty(cls) -> Predictions:
        return cls(pl.DataFrame(schema=RELATIONS_SCHEMA), pl.DataFrame(schema=IMAGES_SCHEMA))


def pretrained_backbone(con) -> dict | None:
    """The pretrained backbone that predicted (``BACKBONE_SCHEMA`` fields: module, architecture, weights file
    name and SHA-256, leakage risk), None when none did (or the warehouse predates these tables). A
    ``ValueError`` when the predicted partitions do not all come from one backbone (the setting changed and not
    every partition was predicted again)."""
    table, images = BACKBONE_CONTRACT.name, IMAGES_CONTRACT.name
    if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE schema_name || '.' || table_name = ?",
                       [table]).fetchone()[0]:
        return None
    used = con.execute(f"SELECT DISTINCT {', '.join(BACKBONE_SCHEMA)} FROM {table}").pl()
    if not used.height:
        return None
    mixed = con.execute(f"""SELECT count(*) FROM (SELECT DISTINCT "partition" FROM {images}) p
                            ANTI JOIN {table} b USING ("partition")""").fetchone()[0]
    if used.height > 1 or mixed:
        raise ValueError(f"{table}: the predicted partitions come from {used.height} pretrained "
                         f"backbones, {mixed} from none: materialize vqa_scoring/predictions again, every partition")
    return used.row(0, named=True)
