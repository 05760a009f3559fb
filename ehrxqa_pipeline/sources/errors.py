"""The one error type for bad source input.

A ``SourceError`` always names the file (relative to SOURCE_ROOT), says what is wrong with it (the column
and the row when known) and gives a concrete fix, so a user who points the pipeline at a damaged or
incomplete PhysioNet download gets one readable line instead of a stack trace.
"""

from __future__ import annotations

_MAX_VALUE_CHARS = 60


def show_value(value: object) -> str:
    """A raw value as it appears in messages: quoted, shortened when long."""
    text = str(value)
    if len(text) > _MAX_VALUE_CHARS:
        text = text[: _MAX_VALUE_CHARS - 3] + "..."
    return repr(text)


class SourceError(Exception):
    """A source file is missing, damaged or does not match the PhysioNet layout.

    ``str(err)`` reads like::

        mimiciv/2.2/hosp/patients.csv.gz: column 'anchor_age' has a value that is not an integer
        (row 17: 'abc'). Fix: ...

    Attributes: ``file`` (path relative to the source root), ``problem`` (what is wrong, a sentence
    fragment without the file), ``column``, ``row`` (1-based data row, or text line when ``unit`` is
    "line"), ``value`` (the raw offending
    value), ``count`` (how many rows are affected, when counted) and ``fix``.
    """

    def __init__(self, file: str, problem: str, *, fix: str, column: str | None = None,
                 row: int | None = None, value: object = None, count: int | None = None,
                 unit: str = "row"):
        self.file = file
        self.problem = problem
        self.column = column
        self.row = row
        self.value = value
        self.count = count
        self.fix = fix
        self.unit = unit  # "row" for data rows of a table, "line" for text files
        super().__init__(str(self))

    @property
    def detail(self) -> str:
        """The message without the file name and the fix."""
        where = []
        if self.row is not None:
            where.append(f"{self.unit} {self.row}: {show_value(self.value)}" if self.value is not None
                         else f"{self.unit} {self.row}")
        if self.count is not None and self.count > 1:
            where.append(f"{self.count} bad rows in all")
        return self.problem + (f" ({'; '.join(where)})" if where else "")

    def __str__(self) -> str:
        return f"{self.file}: {self.detail}. Fix: {self.fix}"

    def __reduce__(self):  # picklable across Dagster's multiprocess executor
        return (_rebuild, (self.file, self.problem, self.fix, self.column, self.row, self.value, self.count,
                           self.unit))


def _rebuild(file, problem, fix, column, row, value, count, unit) -> SourceError:
    return SourceError(file, problem, fix=fix, column=column, row=row, value=value, count=count, unit=unit)
