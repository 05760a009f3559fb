"""Issue #22 against the local server: garbage, refusals, HTTP 500, 429 and a hanging server are failures with
a kind, never cached; a fixed server is asked again; the fan-out ends within its deadline (circuit breaker,
per-request timeout); the preflight stops a bad URL, an unreachable host or an unknown model at once."""

import socket
import time

import pytest

from ehrxqa_pipeline.paraphrase import rules
from ehrxqa_pipeline.paraphrase.cache import LlmCache
from ehrxqa_pipeline.paraphrase.generate import from_llm, validator
from ehrxqa_pipeline.paraphrase.llm import ChatClient, LlmSettings
from ehrxqa_pipeline.paraphrase.preflight import EndpointUnusable, preflight
from ehrxqa_pipeline.paraphrase.privacy import PrivacyGuard, ValueSet
from ehrxqa_pipeline.paraphrase.templates import all_templates, vqa_templates
from tests.paraphrase.server import ChatServer, Reply, completion, question_of

TEMPLATES = vqa_templates()[:12]
BY_TEXT = {t.text: t for t in all_templates()}
GARBAGE = "lorem ipsum dolor\nbanana split sundae\n{}}{"
REFUSAL = "I cannot help with that."


def good(prompt: str) -> Reply:
    t = BY_TEXT[question_of(prompt)]
    return completion("\n".join(f"{i}. {v}" for i, v in enumerate(rules.variants(t)[:5], 1)))


def _settings(url: str, **kw) -> LlmSettings:
    base = dict(model="test-model", timeout_s=5.0, max_retries=1, backoff_s=0.01, max_backoff_s=0.02,
                deadline_s=20.0, breaker_failures=3, concurrency=2, preflight_timeout_s=0.5)
    return LlmSettings(base_url=url, **{**base, **kw})


def _run(url, cache_path, templates=TEMPLATES, embedder=None, lines=None, **kw):
    log = lines.append if lines is not None else None
    return from_llm(list(templates), {"mimic_cxr_vqa": 5}, ChatClient(_settings(url, **kw)), LlmCache(cache_path),
                    PrivacyGuard(ValueSet()), usable=validator(embedder), log=log, progress_every_s=0.0)


@pytest.mark.parametrize("bad,kind", [(completion(GARBAGE), "unusable"), (completion(REFUSAL), "refusal"),
                                      (completion("  "), "malformed")], ids=["garbage", "refusal", "empty"])
def test_unusable_answers_are_failures_and_never_cached(tmp_path, embedder, bad, kind):
    cache = tmp_path / "c.duckdb"
    with ChatServer(default=bad) as server:
        frame, report = _run(server.base_url, cache, TEMPLATES[:3], embedder, breaker_failures=10)
        assert frame.height == 0 and report.errors == {t.template_id: kind for t in TEMPLATES[:3]}
        assert LlmCache(cache).statuses() == {kind: 3}  # recorded with their kind ...
        server.default = good  # the endpoint is fixed
        frame, report = _run(server.base_url, cache, TEMPLATES[:3], embedder)
    assert len(server.requests) == 6 and report.cache_hits == 0  # ... and not reused: asked again
    assert not report.errors and set(frame["template_id"]) == {t.template_id for t in TEMPLATES[:3]}
    assert LlmCache(cache).statuses() == {"ok": 3}  # the failures were replaced


def test_cache_key_holds_the_endpoint(tmp_path, embedder):
    cache = tmp_path / "c.duckdb"
    with ChatServer(default=good) as first, ChatServer(default=good) as second:
        _run(first.base_url, cache, TEMPLATES[:2], embedder)
        _, again = _run(first.base_url, cache, TEMPLATES[:2], embedder)
        _, other = _run(second.base_url, cache, TEMPLATES[:2], embedder)  # same model name, another server
    assert again.cache_hits == 2 and len(first.requests) == 2
    assert other.cache_hits == 0 and len(second.requests) == 2


@pytest.mark.parametrize("reply,kind", [(Reply(500, {"error": {"message": "boom"}}), "server_error"),
                                        (Reply(429, {"error": {"message": "slow"}}, headers={"retry-after": "0"}),
                                         "rate_limited"),
                                        (completion(REFUSAL), "refusal")], ids=["500", "429", "refusal"])
def test_circuit_breaker_stops_after_consecutive_failures(tmp_path, embedder, reply, kind):
    lines = []
    t0 = time.monotonic()
    with ChatServer(default=reply) as server:
        frame, report = _run(server.base_url, tmp_path / "c.duckdb", TEMPLATES, embedder, lines, concurrency=1)
    elapsed = time.monotonic() - t0
    if kind == "server_error":  # counted per request: two tries of the first template, one of the second
        assert len(server.requests) == 3 and report.failure_kinds() == {kind: 2, "circuit_open": 10}
    else:  # counted per template: 3 templates asked (a 429 is retried once), 9 not
        assert len(server.requests) == (3 if kind == "refusal" else 6)
        assert report.failure_kinds() == {kind: 3, "circuit_open": 9}
    assert report.breaker == kind
    assert frame.height == 0 and elapsed < 5
    assert any(f"circuit breaker open after 3 consecutive {kind}" in x for x in lines)
    assert "finished" in lines[-1] and "12/12 requested templates done (0 answered, 12 failed" in lines[-1]
    print(f"{kind}: {elapsed:.2f} s, {len(server.requests)} requests; last line: {lines[-1]}")
    with ChatServer(default=good) as fixed:  # nothing was cached as an answer: all 12 asked again
        frame, report = _run(fixed.base_url, tmp_path / "c.duckdb", TEMPLATES, embedder, concurrency=4)
    assert len(fixed.requests) == 12 and not report.errors and frame["template_id"].n_unique() == 12


def _against_a_hanging_server(tmp_path, embedder, **settings):
    """Every template asked of a server that answers after 2 s (its longest), with a 0.3 s request timeout:
    (frame, report, server, progress lines, seconds)."""
    hang = completion("1. x")
    hang.delay_s = 2.0
    lines = []
    t0 = time.monotonic()
    with ChatServer(default=hang) as server:
        frame, report = _run(server.base_url, tmp_path / "c.duckdb", TEMPLATES, embedder, lines, timeout_s=0.3,
                             **settings)
    return frame, report, server, lines, time.monotonic() - t0


def test_hanging_server_opens_the_breaker_long_before_the_deadline(tmp_path, embedder):
    """Timeouts count per request: 3 timed-out requests in a row (2 workers) stop the fan-out, instead of
    retrying every template until the deadline (before: a hanging server with the default settings ran the
    whole 300 s deadline)."""
    frame, report, server, lines, elapsed = _against_a_hanging_server(
        tmp_path, embedder, deadline_s=30.0, breaker_failures=3, max_retries=4)
    assert report.breaker == "timeout" and elapsed < 3, (elapsed, report.failure_kinds())
    assert len(server.requests) <= 4 and frame.height == 0  # 3 timed out, at most one more was in flight
    assert set(report.failure_kinds()) == {"timeout", "circuit_open"} and len(report.errors) == len(TEMPLATES)
    assert any("circuit breaker open after 3 consecutive timeout" in x for x in lines)
    print(f"hanging, breaker: {elapsed:.2f} s, {len(server.requests)} requests; last line: {lines[-1]}")


def test_hanging_server_ends_within_the_deadline(tmp_path, embedder):
    frame, report, server, lines, elapsed = _against_a_hanging_server(
        tmp_path, embedder, deadline_s=1.0, breaker_failures=100, concurrency=2)
    assert elapsed < 3, elapsed  # deadline 1 s, plus the last request cut to the time left (margin: a loaded machine)
    assert frame.height == 0 and set(report.failure_kinds()) <= {"timeout", "deadline"}
    assert report.failure_kinds().get("deadline", 0) > 0 and len(report.errors) == len(TEMPLATES)
    assert LlmCache(tmp_path / "c.duckdb").statuses() == {"timeout": report.failure_kinds()["timeout"]}
    print(f"hanging: {elapsed:.2f} s, {len(server.requests)} requests; last line: {lines[-1]}")
    with ChatServer(default=good) as fixed:
        _, report = _run(fixed.base_url, tmp_path / "c.duckdb", TEMPLATES, embedder, concurrency=4)
    assert len(fixed.requests) == 12 and not report.errors


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case,kind", [("not-a-url", "invalid_url"), ("ftp://host/v1", "invalid_url"),
                                       ("closed", "connection"), ("models-500", "server_error"),
                                       ("models-hang", "timeout"), ("unknown-model", "unknown_model"),
                                       ("models-401", "unauthorized")])
def test_preflight_stops_at_once(case, kind):
    models = {"models-500": Reply(500, {}), "models-hang": Reply(200, {}, delay_s=2.0),
              "unknown-model": ["other-model"], "models-401": Reply(401, {})}.get(case)
    with ChatServer(default=completion("1. x"), models=models) as server:
        url = {"not-a-url": "not-a-url", "ftp://host/v1": "ftp://host/v1",
               "closed": f"http://127.0.0.1:{_free_port()}/v1"}.get(case, server.base_url)
        t0 = time.monotonic()
        with pytest.raises(EndpointUnusable) as err:
            preflight(ChatClient(_settings(url, api_key="sk-secret-test")))
        elapsed = time.monotonic() - t0
        assert server.requests == []  # no chat request
    assert err.value.kind == kind and elapsed < 1.5 and "sk-secret-test" not in str(err.value)
    print(f"preflight {case}: {kind} in {elapsed:.2f} s: {err.value}")


@pytest.mark.parametrize("models", [None, ["test-model", "other"], Reply(429, {})], ids=["unlisted", "listed", "429"])
def test_preflight_passes(models):
    with ChatServer(models=models) as server:
        found = preflight(ChatClient(_settings(server.base_url)))
    assert found.model_known is (True if isinstance(models, list) else None) and server.model_requests == 1


def test_an_interrupted_fan_out_ends_at_once_and_starts_nothing_more():
    """SIGTERM / Ctrl-C reach a Dagster step as an exception in the calling thread: the fan-out drops its
    queue and starts no new attempt, so the step ends at once instead of when the queue or the deadline runs
    out (measured before: a build sent SIGTERM during a hanging endpoint ended 285 s later, at the deadline)."""
    from ehrxqa_pipeline.paraphrase.llm import Gate

    class Interrupted(BaseException):
        pass

    def interrupt():
        raise Interrupted

    items = [(f"k{i}", f"prompt {i}") for i in range(20)]
    with ChatServer(default=Reply(200, None, delay_s=1.5)) as server:
        client = ChatClient(_settings(server.base_url, concurrency=2, timeout_s=5.0))
        start = time.monotonic()
        with pytest.raises(Interrupted):
            client.complete(items, gate=Gate(60.0, 3), on_tick=interrupt, tick_s=0.05)
        assert time.monotonic() - start < 1.0
        time.sleep(2.0)  # the two requests in flight end; nothing else is asked
        assert len(server.requests) <= 2
