"""A generated source run through ingest, cohorts, labels and splits once; databases built on copies."""

from __future__ import annotations

import shutil

import duckdb
import pytest

from ehrxqa_pipeline.ehr.build import build_answer_sheet, build_database
from ehrxqa_pipeline.ehr.config import DbConfig
from tests.pipeline_steps import build_through_splits

# 100 CXR patients give 12 gold patients; a large valid share gives the silver database enough patients.
SOURCE = dict(seed=11, scale="demo", patients=100)
CONFIG = DbConfig(silver_patients=20, gold_patients=10)


@pytest.fixture(scope="session")
def ehr_inputs(tmp_path_factory):
    """(source root, warehouse file with every input of the database build, ontology)."""
    from ehrxqa_pipeline.demo.generate import generate_source

    base = tmp_path_factory.mktemp("ehr")
    root = base / "source"
    generate_source(root, images=False, log=lambda _: None, **SOURCE)
    path = base / "inputs.duckdb"
    con = duckdb.connect(str(path))
    onto = build_through_splits(con, root, base / "stage", valid_fraction=0.5)
    con.close()
    return root, path, onto


@pytest.fixture(scope="session")
def warehouse_copy(ehr_inputs, tmp_path_factory):
    """A factory: a connection to a private copy of the input warehouse."""
    _, path, _ = ehr_inputs
    opened = []

    def make() -> duckdb.DuckDBPyConnection:
        dst = tmp_path_factory.mktemp("wh") / "warehouse.duckdb"
        shutil.copy(path, dst)
        con = duckdb.connect(str(dst))
        opened.append(con)
        return con

    yield make
    for con in opened:
        con.close()


@pytest.fixture(scope="session")
def built(ehr_inputs, warehouse_copy):
    """(connection, {which: DbResult}) with both databases built at seed 0."""
    _, _, onto = ehr_inputs
    con = warehouse_copy()
    results = {which: build_database(con, which, CONFIG, seed=0) for which in ("silver", "gold")}
    return con, results


@pytest.fixture(scope="session")
def sheets(built):
    """{which: AnswerSheetResult} of both databases' answer sheets (on ``built``'s connection)."""
    con, results = built
    return {which: build_answer_sheet(con, which, CONFIG) for which in results}


@pytest.fixture(scope="session")
def exported(built, tmp_path_factory):
    """{which: ExportResult} of both databases."""
    from ehrxqa_pipeline.ehr.export import export_database

    con, results = built
    out = tmp_path_factory.mktemp("release") / "database"
    return {w: export_database(con, r.schema, out / w) for w, r in results.items()}


@pytest.fixture(scope="session")
def exported_sheets(built, sheets, tmp_path_factory):
    """{which: ExportResult} of both answer sheets."""
    from ehrxqa_pipeline.ehr.export import export_answer_sheet

    con, _ = built
    out = tmp_path_factory.mktemp("answer_sheets")
    return {w: export_answer_sheet(con, sheet.schema, out / w) for w, sheet in sheets.items()}

