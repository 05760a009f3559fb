"""The EHRXQA template catalog: every template of every family, by index and by scope.

Scopes (the test-harness names of reference-builders.md 6.1): TABLE-NONE, TABLE-SINGLE, TABLE-GROUP
(174 table templates, ``table_templates``; the 9 EHRSQL templates left out are in ``EXCLUDED`` with their
reasons), IMAGE-SINGLE-1, IMAGE-SINGLE-2, IMAGE-SINGLE-N, IMAGE-GROUP-N (168 image templates, ``catalog``),
MULTIMODAL-SINGLE, MULTIMODAL-GROUP (75 image+table templates, ``multimodal``). Every template has ``index``, ``scope``, ``text``,
``vqa_key``, ``one_row``, ``question(values)``, ``references(values)`` and ``queries(values)``.
"""

from __future__ import annotations

from ehrxqa_pipeline.questions.ehrxqa.catalog import IMAGE_SCOPES, IMAGE_TEMPLATES
from ehrxqa_pipeline.questions.ehrxqa.multimodal import MULTIMODAL_TEMPLATES
from ehrxqa_pipeline.questions.ehrxqa.multimodal import SCOPES as MULTIMODAL_SCOPES
from ehrxqa_pipeline.questions.ehrxqa.table_templates import EXCLUDED, TABLE_TEMPLATES
from ehrxqa_pipeline.questions.ehrxqa.table_templates import SCOPES as TABLE_SCOPES

SCOPES = (*TABLE_SCOPES, *IMAGE_SCOPES, *MULTIMODAL_SCOPES)
MODALITY = {"IMAGE": "image", "MULTIMODAL": "image+table", "TABLE": "table"}
CATALOG = (*TABLE_TEMPLATES, *IMAGE_TEMPLATES, *MULTIMODAL_TEMPLATES)
BY_INDEX = {t.index: t for t in CATALOG}
if len(BY_INDEX) != len(CATALOG) or set(BY_INDEX) & set(EXCLUDED):
    raise RuntimeError("two EHRXQA templates share an index, or an excluded table template is in the catalog")


def modality(scope: str) -> str:
    """'image', 'image+table' or 'table' from a scope name."""
    return MODALITY[scope.split("-")[0]]


def templates(scope: str | None = None) -> tuple:
    """The catalog, or one scope's templates."""
    if scope is not None and scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; known: {SCOPES}")
    return tuple(t for t in CATALOG if scope is None or t.scope == scope)
