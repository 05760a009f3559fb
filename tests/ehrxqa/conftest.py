"""Fixtures: the hand-built database, a connection to it, the oracle, and an ask(template, values) helper."""

from __future__ import annotations

import sqlite3

import pytest

from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX, run_sql
from ehrxqa_pipeline.questions.neuralsql import NeuralSqlExecutor, OracleModule
from tests.ehrxqa import build_db


@pytest.fixture(scope="session")
def db_path(tmp_path_factory):
    return build_db(tmp_path_factory.mktemp("ehrxqa") / "mimic_iv_cxr.db")


@pytest.fixture(scope="session")
def conn(db_path):
    c = sqlite3.connect(db_path)
    yield c
    c.close()


@pytest.fixture(scope="session")
def oracle(conn):
    return OracleModule(conn)


@pytest.fixture
def ask(conn, oracle):
    """ask(index, values) -> (question, gold answer, NeuralSQL answer with the oracle)."""
    executor = NeuralSqlExecutor(conn, oracle)

    def _ask(index, values):
        t = BY_INDEX[index]
        gold, neural = t.queries(values)
        return t.question(values), run_sql(conn, gold), executor.execute(neural).answer

    return _ask


# -- the table-template database (tests.ehrxqa.table_db) -------------------------------------------------
@pytest.fixture(scope="session")
def table_db_path(tmp_path_factory):
    from tests.ehrxqa.table_db import build_table_db
    return build_table_db(tmp_path_factory.mktemp("ehrxqa_table") / "mimic_iv_cxr.db")


@pytest.fixture(scope="session")
def table_conn(table_db_path):
    c = sqlite3.connect(table_db_path)
    yield c
    c.close()


@pytest.fixture
def ask_table(table_conn):
    """ask_table(index, values) -> (question, gold answer, answer of the same SQL through the NeuralSQL executor)."""
    executor = NeuralSqlExecutor(table_conn)

    def _ask(index, values):
        t = BY_INDEX[index]
        gold, neural = t.queries(values)
        return t.question(values), run_sql(table_conn, gold), executor.execute(neural).answer

    return _ask
