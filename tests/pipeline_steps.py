"""Run the pipeline's library steps (no Dagster) on a source root: ingest, cohorts, labels, splits."""

import duckdb

from ehrxqa_pipeline.contracts import load_contract
from ehrxqa_pipeline.cxr import labels, selection
from ehrxqa_pipeline.cxr.ontology import Ontology, build_ontology
from ehrxqa_pipeline.cxr.splits import SIDES, build_splits
from ehrxqa_pipeline.ingest import ingest_table
from ehrxqa_pipeline.sources.schema import TABLES
from ehrxqa_pipeline.sources.semantics import read_semantics


def build_through_labels(con: duckdb.DuckDBPyConnection, root, stage_dir, tables=tuple(TABLES)) -> Ontology:
    """Ingest ``tables``, select both cohorts (no JPEG checks) and refine their labels."""
    for table in tables:
        ingest_table(con, root, load_contract(f"ingest/{table}"), stage_dir)
    selection.build_gold_studies(con)
    selection.build_image_rules(con)
    selection.build_cohorts(con, check_jpegs=False)
    onto = build_ontology(read_semantics(root))
    for name, rel, images in (("silver", "silver_relations", "SELECT image_id FROM cxr_cohort.silver"),
                              ("gold", "gold_relations", "SELECT image_id FROM cxr_cohort.gold"),
                              ("gold_later", "silver_relations", labels.GOLD_LATER_STUDIES)):
        sql = labels.relations_sql(f"ingest.{rel}", images_sql=images)
        labels.refine_labels(con, sql, onto, f"cxr_labels.{name}")
    return onto


def build_through_splits(con, root, stage_dir, valid_fraction: float = 0.05, tables=tuple(TABLES)) -> Ontology:
    onto = build_through_labels(con, root, stage_dir, tables)
    for side in SIDES:
        build_splits(con, side, seed=0, valid_fraction=valid_fraction)
    return onto
