"""EHRXQA templates: the table (paper appendix, 174), image (Table C11) and image+table (Table C12) catalogs,
the value filler and the gold-SQL-vs-NeuralSQL consistency check.

Pure library code (no Dagster). Entry points: ``CATALOG`` / ``BY_INDEX`` / ``templates(scope)``,
``ImageFiller`` / ``fill_items(conn, seed)``, ``FilledItem.record()``, ``check_items`` / ``assert_consistent``;
for table templates also ``EXCLUDED`` (EHRSQL templates left out, with reasons), ``table_empty_pool_reason``
and the optional ``unanswerable_items``.
"""

from ehrxqa_pipeline.questions.ehrxqa.catalog import ImageTemplate, render
from ehrxqa_pipeline.questions.ehrxqa.consistency import Mismatch, assert_consistent, check_item, check_items
from ehrxqa_pipeline.questions.ehrxqa.filler import ImageFiller, fill_items, run_sql
from ehrxqa_pipeline.questions.ehrxqa.item import FilledItem
from ehrxqa_pipeline.questions.ehrxqa.multimodal import MultimodalTemplate
from ehrxqa_pipeline.questions.ehrxqa.registry import BY_INDEX, CATALOG, EXCLUDED, SCOPES, modality, templates
from ehrxqa_pipeline.questions.ehrxqa.slots import TimeFilter, WithinFilter
from ehrxqa_pipeline.questions.ehrxqa.table_pools import empty_pool_reason as table_empty_pool_reason
from ehrxqa_pipeline.questions.ehrxqa.table_templates import TableTemplate
from ehrxqa_pipeline.questions.ehrxqa.unanswerable import UNANSWERABLE, unanswerable_items

__all__ = ["BY_INDEX", "CATALOG", "EXCLUDED", "SCOPES", "UNANSWERABLE", "FilledItem", "ImageFiller", "ImageTemplate",
           "Mismatch", "MultimodalTemplate", "TableTemplate", "TimeFilter", "WithinFilter", "assert_consistent",
           "check_item", "check_items", "fill_items", "modality", "render", "run_sql", "table_empty_pool_reason",
           "templates", "unanswerable_items"]
