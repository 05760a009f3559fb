"""The real openai client against a local OpenAI-compatible server: good, malformed, placeholder-dropping,
429-then-success and timeout answers; the cache makes a second run send nothing."""

import pytest

from ehrxqa_pipeline.paraphrase import rules
from ehrxqa_pipeline.paraphrase.cache import LlmCache
from ehrxqa_pipeline.paraphrase.generate import from_llm
from ehrxqa_pipeline.paraphrase.llm import ChatClient, LlmSettings, parse_paraphrases
from ehrxqa_pipeline.paraphrase.privacy import PrivacyGuard, PrivacyViolation, ValueSet
from ehrxqa_pipeline.paraphrase.templates import vqa_templates
from ehrxqa_pipeline.paraphrase.validate import validate_template
from tests.paraphrase.server import ChatServer, Reply, completion

BASE_1 = next(t for t in vqa_templates() if t.key == "base_1")  # Are there any ${category} in the ${object}?
GOOD = "1. Can you see any ${category} in the ${object}?\n2. Does the ${object} show any ${category}?"


def _client(server: ChatServer, **kw) -> ChatClient:
    settings = LlmSettings(base_url=server.base_url, model="test-model", timeout_s=kw.pop("timeout_s", 5.0),
                           max_retries=kw.pop("max_retries", 2), backoff_s=0.01, max_backoff_s=0.05, **kw)
    return ChatClient(settings)


def _run(server, tmp_path, templates=(BASE_1,), **kw):
    return from_llm(list(templates), {"mimic_cxr_vqa": 5}, _client(server, **kw), LlmCache(tmp_path / "c.duckdb"),
                    PrivacyGuard(ValueSet()))


def test_good_answer_gives_candidates_and_token_usage(tmp_path):
    with ChatServer([completion(GOOD)]) as server:
        frame, report = _run(server, tmp_path)
    assert frame["text"].to_list() == ["Can you see any ${category} in the ${object}?",
                                       "Does the ${object} show any ${category}?"]
    assert set(frame["source"]) == {"llm"} and set(frame["model"]) == {"test-model"}
    assert report.requests == 1 and not report.errors
    assert report.usage == {"calls": 1, "retries": 0, "prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    assert "Question: Are there any ${category} in the ${object}?" in server.requests[0]
    assert "Write 5 paraphrases" in server.requests[0]


def test_second_run_is_served_from_the_cache(tmp_path):
    with ChatServer([completion(GOOD)]) as server:
        first, _ = _run(server, tmp_path)
        second, report = _run(server, tmp_path)
    assert len(server.requests) == 1  # the second run sent nothing
    assert report.cache_hits == 1 and report.requests == 0
    assert second.equals(first)


@pytest.mark.parametrize("reply", [Reply(200, b"this is not json"), Reply(200, {"choices": []}),
                                   completion("   ")], ids=["not-json", "no-choices", "empty"])
def test_malformed_answer_is_an_error_not_cached(tmp_path, reply):
    with ChatServer([reply, completion(GOOD)]) as server:
        frame, report = _run(server, tmp_path)
        assert frame.height == 0 and report.errors == {BASE_1.template_id: "malformed"}
        assert len(server.requests) == 1  # malformed answers are not retried
        again, report = _run(server, tmp_path)  # not cached: asked again next run
    assert report.requests == 1 and again.height == 2


def test_dropped_placeholder_is_rejected_by_validation(tmp_path, embedder):
    answer = "1. Are there any ${category} in this region?\n2. Can you see any ${category} in the ${object}?"
    with ChatServer([completion(answer)]) as server:
        frame, _ = _run(server, tmp_path)
    verdicts = validate_template(BASE_1, list(zip(frame["text"], frame["source"])), embedder)
    assert verdicts[0].reason == "placeholder_mismatch" and "${object}" in verdicts[0].detail
    assert verdicts[1].reason is None


def test_429_then_success_is_retried(tmp_path):
    script = [Reply(429, {"error": {"message": "slow down"}}, headers={"retry-after": "0"}),
              Reply(503, {"error": {"message": "busy"}}), completion(GOOD)]
    with ChatServer(script) as server:
        frame, report = _run(server, tmp_path)
    assert len(server.requests) == 3 and frame.height == 2
    assert not report.errors and report.usage["retries"] == 2


def test_retries_are_bounded(tmp_path):
    with ChatServer(default=Reply(429, {"error": {"message": "slow down"}})) as server:
        frame, report = _run(server, tmp_path, max_retries=2)
    assert len(server.requests) == 3 and frame.height == 0
    assert report.errors == {BASE_1.template_id: "rate_limited"}


def test_client_error_is_not_retried(tmp_path):
    with ChatServer(default=Reply(400, {"error": {"message": "bad request"}})) as server:
        _, report = _run(server, tmp_path)
    assert len(server.requests) == 1 and report.errors == {BASE_1.template_id: "http_400"}


def test_timeout_is_retried_then_reported(tmp_path):
    slow = completion(GOOD)
    slow.delay_s = 1.0
    with ChatServer(default=slow) as server:
        frame, report = _run(server, tmp_path, timeout_s=0.2, max_retries=1)
    assert len(server.requests) == 2 and frame.height == 0
    assert report.errors == {BASE_1.template_id: "timeout"}


def test_concurrency_is_bounded_and_order_kept(tmp_path):
    templates = vqa_templates()[:6]
    answers = {t.text: completion("\n".join(f"{i}. {v}" for i, v in enumerate(rules.variants(t)[:4], 1)))
               for t in templates}

    def step(prompt):
        reply = answers[prompt.rsplit("Question: ", 1)[1].split("\n")[0]]
        reply.delay_s = 0.05
        return reply
    with ChatServer(default=step) as server:
        frame, report = _run(server, tmp_path, templates=templates, concurrency=3)
    assert len(server.requests) == 6 and not report.errors
    assert frame["template_id"].unique(maintain_order=True).to_list() == [t.template_id for t in templates]


def test_privacy_guard_runs_before_any_request(tmp_path):
    poisoned = BASE_1.__class__(BASE_1.template_id, BASE_1.dataset, BASE_1.key,
                                "Are there any ${category} in the ${object} of patient 10000032?", BASE_1.form)
    with ChatServer([completion(GOOD)]) as server:
        with pytest.raises(PrivacyViolation, match="long_number"):
            from_llm([poisoned], None, _client(server), LlmCache(tmp_path / "c.duckdb"),
                     PrivacyGuard(ValueSet.of([10000032])))
    assert server.requests == []


def test_parse_paraphrases_formats():
    assert parse_paraphrases('["a ${x}?", " b ${x}? "]') == ["a ${x}?", "b ${x}?"]
    text = "Paraphrased questions:\n1. \"One ${x}?\"\n2) Two ${x}?\n- Three ${x}?\n\n* Four ${x}?\n10. Ten ${x}?"
    assert parse_paraphrases(text) == ["One ${x}?", "Two ${x}?", "Three ${x}?", "Four ${x}?", "Ten ${x}?"]
