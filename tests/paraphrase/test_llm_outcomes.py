"""Issue #22 in Dagster: a configured LLM that yields nothing usable fails the candidates step (named templates
and failure kinds) unless EHRXQA_LLM_FALLBACK=offline; nothing unusable is cached; what the manifest and
datasheet state about the paraphraser is what happened; the API key is written nowhere under EHRXQA_HOME."""

import time

import dagster as dg
import pytest

import assets.paraphrase as para
from assets.release import _paraphraser
from ehrxqa_pipeline.cli import main
from ehrxqa_pipeline.paraphrase import rules
from ehrxqa_pipeline.paraphrase.cache import FILE_NAME, LlmCache
from ehrxqa_pipeline.paraphrase.templates import all_templates
from ehrxqa_pipeline.release.datasheet import paraphraser_text
from resources import LLMResource
from tests.instances import instance_for_test
from tests.paraphrase.server import ChatServer, Reply, completion, question_of
from tests.paraphrase.test_assets import PICK, _resources, _run, _table, home  # noqa: F401 - fixture

pytestmark = pytest.mark.slow  # Dagster runs of the paraphrase group against a local server: not in `make test-fast`

KEY = "sk-secret-issue-22"


def good(prompt):
    t = next(t for t in all_templates() if t.text == question_of(prompt))
    return completion("\n".join(f"{i}. {v}" for i, v in enumerate(rules.variants(t)[:6], 1)))


def _llm(url, **kw):
    base = dict(model="test-model", backoff_s=0.01, max_backoff_s=0.02, max_retries=1, timeout_s=2, deadline_s=10,
                breaker_failures=3, concurrency=1)
    return LLMResource(base_url=url, **{**base, **kw})


def _failure(result) -> str:
    return "\n".join(e.event_specific_data.error.message for e in result.get_step_failure_events())


def _meta(instance, key, field):
    return instance.get_latest_materialization_event(key).asset_materialization.metadata[field].value


def _cache(home):
    return LlmCache(home / "home" / "cache" / FILE_NAME)


def _under_home_holds(home, secret: bytes) -> list[str]:
    return [str(p) for p in (home / "home").rglob("*") if p.is_file() and secret in p.read_bytes()]


def test_garbage_fails_the_step_then_a_fixed_endpoint_is_asked_again(home, monkeypatch):
    monkeypatch.setenv("EHRXQA_LLM_API_KEY", KEY)
    with ChatServer(default=completion("banana split\nlorem ipsum")) as server, instance_for_test() as instance:
        t0 = time.monotonic()
        result = _run(home, _llm(server.base_url), instance)
        elapsed = time.monotonic() - t0
        assert not result.success
        message = _failure(result)
        assert "no usable paraphrase for 6 of 6 templates" in message and "'unusable': 3" in message
        assert "'circuit_open': 3" in message and "mimic_cxr_vqa/base_1 (unusable)" in message
        assert "EHRXQA_LLM_FALLBACK=offline" in message
        assert para.CANDIDATES_KEY not in {e.asset_key for e in result.get_asset_materialization_events()}
        assert len(server.requests) == 3 and _cache(home).statuses() == {"unusable": 3}
        print(f"garbage, default: step failed after {elapsed:.1f} s (whole run): {message[:300]}")

        server.default = good  # the endpoint is fixed: the next build asks again and gets paraphrases
        assert _run(home, _llm(server.base_url), instance).success
        assert len(server.requests) == 3 + len(PICK)
        assert _meta(instance, para.CANDIDATES_KEY, "cache_hits") == 0
        assert set(_table(home, "candidates")["source"]) == {"llm"}
        assert _meta(instance, para.POOLS_KEY, "templates_by_source") == {
            "ehrxqa": {"llm": 3, "offline": 0, "reviewer": 0, "original": 0},
            "mimic_cxr_vqa": {"llm": 3, "offline": 0, "reviewer": 0, "original": 0}}
        assert _cache(home).statuses() == {"ok": 6}
        assert _run(home, _llm(server.base_url), instance).success  # now from the cache
        assert len(server.requests) == 3 + len(PICK) and _meta(instance, para.CANDIDATES_KEY, "cache_hits") == 6
    assert _under_home_holds(home, KEY.encode()) == []  # privacy: the key is written nowhere
    assert all("Question: " in p for p in server.requests)


def test_fallback_offline_is_recorded_per_dataset(home):
    with ChatServer(default=Reply(500, {"error": {"message": "boom"}})) as server, \
            instance_for_test() as instance:
        t0 = time.monotonic()
        result = _run(home, _llm(server.base_url, fallback="offline"), instance)
        elapsed = time.monotonic() - t0
        # two tries of the first template, one of the second: 3 failed requests in a row open the breaker
        assert result.success and len(server.requests) == 3
        assert set(_table(home, "candidates")["source"]) == {rules.SOURCE}
        checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
        assert checks["llm_requests_succeeded"] is False
        with _resources(home)["warehouse"].connect() as con:
            facts = _paraphraser(con)
    assert _cache(home).statuses() == {"server_error": 2}
    assert facts["llm_endpoint"] is True and facts["model"] == "test-model" and facts["fallback"] == "offline"
    failures = {ds: d["llm_failures"] for ds, d in facts["datasets"].items()}
    assert sum(sum(f.values()) for f in failures.values()) == 6
    assert {k for f in failures.values() for k in f} == {"server_error", "circuit_open"}
    for d in facts["datasets"].values():
        assert d["templates"] == {"llm": 0, "offline": 3, "reviewer": 0, "original": 0}
        assert d["candidates"] == {"llm": 0, "offline": 3, "none": 0}
    text = paraphraser_text(facts)
    assert "MIMIC-CXR-VQA: 0 templates by an OpenAI-compatible LLM (model test-model), 3 by the offline" in text
    assert "no usable LLM answer for 3 templates (" in text
    print(f"HTTP 500, fallback offline: run {elapsed:.1f} s; datasheet: {text}")


HANG = completion("1. x")
HANG.delay_s = 2.0


@pytest.mark.parametrize("reply,kind", [(completion("I cannot help with that."), "refusal"),
                                        (Reply(429, {"error": {"message": "slow"}}), "rate_limited"),
                                        (HANG, "timeout")], ids=["refusal", "429", "hanging"])
def test_failing_endpoint_fails_the_step_within_its_deadline(home, reply, kind):
    with ChatServer(default=reply) as server, instance_for_test() as instance:
        t0 = time.monotonic()
        result = _run(home, _llm(server.base_url, timeout_s=0.3, deadline_s=1.5), instance)
        elapsed = time.monotonic() - t0
    message = _failure(result)
    assert not result.success and f"'{kind}': " in message and "no usable paraphrase for 6 of 6" in message
    assert elapsed < 8, elapsed  # the whole run (Dagster start-up included); the LLM part is bounded by 1.5 s
    assert set(_cache(home).statuses()) <= {kind}  # failures only, never an answer
    print(f"{kind}, default: run ended in {elapsed:.1f} s: {message.splitlines()[0][:400]}")


@pytest.mark.parametrize("fallback", [None, "offline"])
def test_bad_url_stops_before_any_request(home, fallback):
    with instance_for_test() as instance:
        result = _run(home, _llm("not-a-url", fallback=fallback), instance)
        if fallback is None:
            assert not result.success
            assert "LLM endpoint unusable (invalid_url)" in _failure(result)
        else:
            assert result.success and set(_table(home, "candidates")["source"]) == {rules.SOURCE}
            with _resources(home)["warehouse"].connect() as con:
                facts = _paraphraser(con)
            assert facts["datasets"]["ehrxqa"]["llm_failures"] == {"preflight_invalid_url": 3}


def test_settings_from_the_environment(monkeypatch):
    monkeypatch.setenv("EHRXQA_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("EHRXQA_LLM_DEADLINE_S", "42")
    monkeypatch.setenv("EHRXQA_LLM_FALLBACK", "Offline")
    s = LLMResource().settings()
    assert s.deadline_s == 42 and s.timeout_s == 60 and LLMResource().fallback_mode() == "offline"
    monkeypatch.setenv("EHRXQA_LLM_DEADLINE_S", "soon")
    with pytest.raises(ValueError, match="EHRXQA_LLM_DEADLINE_S"):
        LLMResource().settings()
    monkeypatch.setenv("EHRXQA_LLM_FALLBACK", "template")
    with pytest.raises(ValueError, match="expected one of none, offline"):
        LLMResource().fallback_mode()


def test_cache_clear_llm(tmp_path, capsys):
    cache = LlmCache(tmp_path / "cache" / FILE_NAME)
    cache.put("k", status="ok", model="m", prompt_version="1", template_id="t", template_text="x?", temperature=1.0,
              seed=0, count=1, response="1. y?", paraphrases=["y?"], usage={})
    assert main(["cache", "clear", "llm", "--home", str(tmp_path)]) == 0
    assert not cache.path.exists() and "removed" in capsys.readouterr().out
    assert main(["cache", "clear", "llm", "--home", str(tmp_path)]) == 0
    assert "no LLM answer cache" in capsys.readouterr().out
