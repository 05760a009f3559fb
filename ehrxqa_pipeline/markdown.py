"""Markdown tables for asset metadata and reports."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def table(header: Sequence[str], rows: Iterable[Sequence]) -> str:
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def count(n: int | None) -> str:
    """``n`` with thousands separators (``1,234``); ``-`` for None (no count)."""
    return "-" if n is None else f"{n:,}"
