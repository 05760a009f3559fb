"""The reviewed-paraphrases file: rejected candidates never return, new candidates are pending."""

import polars as pl
import pytest

from ehrxqa_pipeline.config import Environment
from ehrxqa_pipeline.paraphrase import review
from ehrxqa_pipeline.paraphrase.pools import build_pools
from ehrxqa_pipeline.paraphrase.templates import vqa_templates

T = vqa_templates()[0]  # mimic_cxr_vqa/base_1
A, B, C = ("Can you see any ${category} in the ${object}?", "Does the ${object} show any ${category}?",
           "Is there evidence of any ${category} in the ${object}?")


def _valid(*texts):
    return pl.DataFrame({"template_id": [T.template_id] * len(texts), "rank": list(range(len(texts))),
                         "text": list(texts), "source": ["llm"] * len(texts), "similarity": [0.9] * len(texts)})


def _file(tmp_path, *rows, header="template,text,decision,note"):
    p = tmp_path / "reviewed.csv"
    p.write_text("\n".join([header, *rows]) + "\n")
    return p


def test_decisions_new_pending_and_rejected_never_return(tmp_path):
    path = _file(tmp_path, f'{T.template_id},"{A}",accepted,good', f'{T.template_id},"  {B} ",rejected,too vague')
    reviews = review.read_reviews(path)
    state = review.review_state(_valid(A, B, C), reviews)
    assert dict(zip(state["text"], state["decision"])) == {A: "accepted", B: "rejected", C: "pending"}
    assert state.filter(pl.col("text") == B)["note"].item() == "too vague"
    pools = build_pools([T], state)
    assert set(pools["text"]) == {A, C}
    assert set(build_pools([T], state, require_review=True)["text"]) == {A}
    # the same rejected text generated again later (another model, another rank) stays out
    again = review.review_state(_valid(C, B, "A brand new ${category} question about the ${object}?"), reviews)
    assert B not in set(build_pools([T], again)["text"])
    assert again.filter(pl.col("decision") == "pending").height == 2


def test_queue_lists_pending_in_file_format(tmp_path):
    state = review.review_state(_valid(A, C), review.read_reviews(_file(tmp_path, f"{T.template_id},{A},accepted,")))
    queue = tmp_path / "queue.csv"
    queue.write_text(review.queue_csv(state))
    back = review.read_reviews(queue)
    assert back.select("template_id", "text", "decision").rows() == [(T.template_id, C, "pending")]


def test_reviewer_phrasings_become_candidates(tmp_path):
    own = "On this chest X-ray, are any ${category} visible in the ${object}?"
    rows = (f"{T.template_id},{A},accepted,", f'{T.template_id},"{own}",accepted,')
    reviews = review.read_reviews(_file(tmp_path, *rows))
    extra = review.reviewer_candidates(reviews, _valid(A))
    assert extra.rows() == [(T.template_id, own, "reviewer")]


def test_missing_file_means_everything_pending(tmp_path):
    state = review.review_state(_valid(A), review.read_reviews(tmp_path / "absent.csv"))
    assert state["decision"].to_list() == ["pending"]


@pytest.mark.parametrize("rows,header,message", [
    ([], "template,text,verdict,note", "header"),
    ([f"{T.template_id},{A},maybe,"], "template,text,decision,note", "decision 'maybe'"),
    ([f"{T.template_id},{A},accepted,", f"{T.template_id},{A},rejected,"], "template,text,decision,note",
     "accepted on line 2")])
def test_malformed_file_fails_loudly(tmp_path, rows, header, message):
    with pytest.raises(review.ReviewFileError, match=message):
        review.read_reviews(_file(tmp_path, *rows, header=header))


def test_repository_file_is_readable():
    path = Environment.read({}).review_file()
    assert path.name == "reviewed.csv" and path.exists()
    reviews = review.read_reviews(path)
    known = {t.template_id for t in __import__("ehrxqa_pipeline.paraphrase.templates",
                                               fromlist=["all_templates"]).all_templates()}
    assert set(reviews["template_id"]) <= known


def test_the_review_file_is_an_observed_source(tmp_path):
    """An edit of the review file is a new data version of sources/paraphrase_review, which paraphrase/validated
    and paraphrase/review read: `build --changed` and the sensor re-run them (before: only by hand)."""
    from assets.paraphrase import REVIEW_KEY, VALIDATED_KEY
    from assets.sources import NO_FILE, REVIEW_SOURCE_KEY, review_file_version
    from ehrxqa_pipeline.definitions import defs

    graph = defs.resolve_asset_graph()
    assert REVIEW_SOURCE_KEY in graph.get(VALIDATED_KEY).parent_keys & graph.get(REVIEW_KEY).parent_keys
    path = tmp_path / "reviewed.csv"
    assert review_file_version(path, tmp_path) == NO_FILE
    path.write_text("template,text,decision,note\n")
    empty = review_file_version(path, tmp_path)
    path.write_text(f"template,text,decision,note\n{T.template_id},{A},rejected,\n")
    assert len({NO_FILE, empty, review_file_version(path, tmp_path)}) == 3
