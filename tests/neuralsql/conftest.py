"""Fixtures: the hand-built database (once per session), the oracle over it, and a spy VQA module."""

from __future__ import annotations

import pytest

from ehrxqa_pipeline.questions.neuralsql import NeuralSqlExecutor, OracleModule
from tests.neuralsql import build_db


class Spy:
    """Wraps a module (or answers a constant) and records every call's (study_ids, questions)."""

    name = "spy"

    def __init__(self, inner=None, constant=True):
        self.inner, self.constant, self.calls = inner, constant, []

    def __call__(self, images, questions):
        self.calls.append(([i.study_id for i in images], list(questions)))
        return self.inner(images, questions) if self.inner else [self.constant] * len(questions)

    @property
    def asked(self) -> list[tuple[int, str]]:
        return [(s, q) for studies, qs in self.calls for s, q in zip(studies, qs)]


@pytest.fixture(scope="session")
def db_path(tmp_path_factory):
    return build_db(tmp_path_factory.mktemp("neuralsql") / "mimic_iv_cxr.db")


@pytest.fixture(scope="session")
def oracle(db_path):
    return OracleModule(db_path)


@pytest.fixture
def run(db_path, oracle):
    """run(query, module=oracle, **executor options) -> ExecutionResult, on a fresh executor."""
    opened = []

    def _run(query, module=None, **options):
        ex = NeuralSqlExecutor(db_path, module or oracle, **options)
        opened.append(ex)
        return ex.execute(query)

    yield _run
    for ex in opened:
        ex.close()
