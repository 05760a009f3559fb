"""EHRXQA image-related templates (paper Table C11): catalog, value filler, gold-vs-NeuralSQL consistency.

Pure library code (no Dagster). Entry points: ``CATALOG`` / ``templates(scope)``, ``ImageFiller`` /
``fill_items(conn, seed)``, ``check_items`` / ``assert_consistent``.
"""

from ehrxqa_pipeline.questions.ehrxqa.catalog import BY_INDEX, CATALOG, SCOPES, ImageTemplate, render, templates
from ehrxqa_pipeline.questions.ehrxqa.consistency import Mismatch, assert_consistent, check_item, check_items
from ehrxqa_pipeline.questions.ehrxqa.filler import FilledItem, ImageFiller, fill_items, run_sql
from ehrxqa_pipeline.questions.ehrxqa.slots import TimeFilter

__all__ = ["BY_INDEX", "CATALOG", "SCOPES", "FilledItem", "ImageFiller", "ImageTemplate", "Mismatch", "TimeFilter",
           "assert_consistent", "check_item", "check_items", "fill_items", "render", "run_sql", "templates"]
