"""Errors of the NeuralSQL parser, executor and VQA modules.

Every error is a ``NeuralSqlError`` (a ``ValueError``) whose message names the problem and, when it comes
from a place in the query text, the position as ``line L, column C``.
"""

from __future__ import annotations


class NeuralSqlError(ValueError):
    """A NeuralSQL query cannot be parsed, validated or executed."""

    def __init__(self, message: str, *, line: int | None = None, col: int | None = None):
        self.line, self.col = line, col
        where = f" (line {line}, column {col})" if line is not None else ""
        super().__init__(f"{message}{where}")


class NeuralSqlSyntaxError(NeuralSqlError):
    """The text is not valid SQL (SQLite dialect)."""


class NeuralSqlValidationError(NeuralSqlError):
    """Valid SQL that is not an allowed NeuralSQL query (statement kind, FUNC_VQA form, unknown names)."""


class NeuralSqlExecutionError(NeuralSqlError):
    """SQLite or the FUNC_VQA evaluation failed while running a validated query."""


class VqaModuleError(NeuralSqlError):
    """A VQA module broke its contract (answer count or answer type)."""


class OracleQuestionError(NeuralSqlError):
    """The oracle cannot map a question back to exactly one MIMIC-CXR-VQA template and its arguments."""
