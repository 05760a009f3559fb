"""EHRXQA templates: the image (paper Table C11) and image+table (Table C12) catalogs, the value filler and
the gold-SQL-vs-NeuralSQL consistency check.

Pure library code (no Dagster). Entry points: ``CATALOG`` / ``BY_INDEX`` / ``templates(scope)``,
``ImageFiller`` / ``fill_items(conn, seed)``, ``FilledItem.record()``, ``check_items`` / ``assert_consistent``.
"""

from ehrxqa_pipeline.questions.ehrxqa.catalog import ImageTemplate, render
from ehrxqa_pipeline.questions.ehrxqa.consistency import Mismatch, assert_consistent, check_item, check_items
from ehrxqa_pipeline.questions.ehrxqa.filler import ImageFiller, fill_items, run_sql
from ehrxqa_pipeline.questions.ehrxqa.item import FilledItem
from ehrxqa_pipeline.questions.ehrxqa.multimodal import MultimodalTemplate
from ehrxqa_pipeline.questions.ehrxqa.registry import BY_INDEX, CATALOG, SCOPES, modality, templates
from ehrxqa_pipeline.questions.ehrxqa.slots import TimeFilter, WithinFilter

__all__ = ["BY_INDEX", "CATALOG", "SCOPES", "FilledItem", "ImageFiller", "ImageTemplate", "Mismatch",
           "MultimodalTemplate", "TimeFilter", "WithinFilter", "assert_consistent", "check_item", "check_items",
           "fill_items", "modality", "render", "run_sql", "templates"]
