"""The template catalog against the published template list (resources/published/, with its source)."""

import json
from pathlib import Path

import pytest

from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX, CATALOG, EXCLUDED
from ehrxqa_pipeline.questions.ehrxqa.records import catalog_rows

PUBLISHED = json.loads((Path(__file__).parents[2] / "resources/published/template_idx_to_template_info.json")
                       .read_text(encoding="utf-8"))
ROWS = catalog_rows()


def test_the_stored_copy_is_the_published_file():
    assert len(PUBLISHED) == 426 and all(set(v) == {"question_template", "vqa_template"} for v in PUBLISHED.values())


def test_every_published_index_is_in_the_catalog_or_excluded_with_a_reason():
    assert set(PUBLISHED) == {str(t.index) for t in CATALOG} | {str(i) for i in EXCLUDED}
    assert not {str(i) for i in EXCLUDED} & set(ROWS)


@pytest.mark.parametrize("index", sorted(BY_INDEX))
def test_q_tag_and_vqa_template_are_the_published_ones(index):
    published, ours = PUBLISHED[str(index)], ROWS[str(index)]
    assert ours["question_template"] == published["question_template"]
    assert ours["vqa_template"] == published["vqa_template"]
