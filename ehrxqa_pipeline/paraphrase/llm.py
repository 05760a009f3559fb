"""Chat completions from any OpenAI-compatible server, through the ``openai`` client.

Retries are ours, not the client's (it is built with ``max_retries=0``): a 429, a 5xx, a timeout or a
dropped connection is retried up to ``max_retries`` times after ``min(max_backoff_s, backoff_s * 2**k)``
seconds (or the server's Retry-After, capped the same way): no jitter, so a run's behaviour is reproducible.
Other 4xx errors and malformed answers are not retried. Requests run in a bounded thread pool; results
come back in input order. Token usage is summed for asset metadata.

A ``Gate`` bounds one fan-out: an overall deadline (no attempt starts after it; each request's timeout and
each backoff is cut to the time left) and a circuit breaker (after ``breaker_failures`` consecutive failures
of the same kind, the rest are not asked: ``circuit_open``). Transport failures (a timeout, a dropped
connection, a 5xx) count per request, so a hanging or broken server trips it after a few requests instead of
a few templates' worth of retries; other failures (a refusal, an unusable answer, a 429 the server asked us
to wait out) count per template. A template not asked because the deadline passed is ``deadline``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LlmSettings:
    base_url: str
    model: str
    api_key: str = "unused"  # OpenAI-compatible local servers ignore it; the client needs a string
    timeout_s: float = 60.0
    max_retries: int = 4
    backoff_s: float = 2.0
    max_backoff_s: float = 60.0
    concurrency: int = 4
    temperature: float = 1.0
    seed: int = 0
    max_tokens: int | None = None
    deadline_s: float = 300.0  # the whole fan-out
    breaker_failures: int = 5  # consecutive failures of the same kind (requests or templates, see Gate): stop asking
    preflight_timeout_s: float = 10.0


@dataclass
class Completion:
    key: str
    text: str | None = None
    # rate_limited | server_error | timeout | connection | http_<status> | malformed; set by the judge of
    # the answer (``complete``): malformed | refusal | unusable; not asked: deadline | circuit_open
    error: str | None = None
    attempts: int = 0
    usage: dict = field(default_factory=dict)
    candidates: list[str] = field(default_factory=list)  # set by the judge of the answer

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class Usage:
    calls: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    retries_started: int = 0  # counted as they start (progress lines); ``retries`` as requests finish
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def retrying(self) -> None:
        with self._lock:
            self.retries_started += 1

    def add(self, c: Completion) -> None:
        with self._lock:
            self.calls += c.attempts
            self.retries += max(0, c.attempts - 1)
            for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
                setattr(self, k, getattr(self, k) + int(c.usage.get(k) or 0))

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("calls", "retries", "prompt_tokens", "completion_tokens", "total_tokens")}


NOT_ASKED = ("deadline", "circuit_open")
PER_REQUEST = frozenset({"timeout", "connection", "server_error"})  # counted by the breaker at each failed request


class Gate:
    """Deadline and circuit breaker of one fan-out, shared by the worker threads (``record`` takes a lock)."""

    def __init__(self, deadline_s: float, breaker_failures: int, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self.end = clock() + max(0.0, deadline_s)
        self.threshold = max(1, breaker_failures)
        self.tripped: str | None = None  # the failure kind that opened the breaker
        self._kind: str | None = None
        self._run = 0
        self._lock = threading.Lock()

    def remaining(self) -> float:
        return self.end - self._clock()

    def stop(self) -> None:
        """No further attempt may start (the fan-out was interrupted): the deadline is now."""
        self.end = self._clock()

    def closed(self) -> str | None:
        """Why no further attempt may start (None: it may)."""
        if self.tripped is not None:
            return "circuit_open"
        return "deadline" if self.remaining() <= 0.01 else None

    def record(self, error: str | None) -> None:
        """One outcome (None: success): a failed request of a ``PER_REQUEST`` kind, else a template's. Transport
        failures are recorded by the worker that saw them (so its next attempt is not started), answers by
        whoever judges them."""
        if error in NOT_ASKED:
            return
        with self._lock:
            if error is None:
                self._kind, self._run = None, 0
                return
            self._run = self._run + 1 if error == self._kind else 1
            self._kind = error
            if self._run >= self.threshold and self.tripped is None:
                self.tripped = error


class ChatClient:
    """One OpenAI client; ``complete`` asks for many prompts with bounded concurrency."""

    def __init__(self, settings: LlmSettings, sleep: Callable[[float], None] = time.sleep):
        import openai

        self.settings = settings
        self.usage = Usage()
        self._sleep = sleep
        self.openai = openai  # the module: its exception classes
        self._client = openai.OpenAI(base_url=settings.base_url, api_key=settings.api_key or "unused",
                                     timeout=settings.timeout_s, max_retries=0)

    def list_models(self, timeout_s: float) -> list[str]:
        """Ids from GET <base URL>/models: one try (the client retries nothing); errors are the client's."""
        page = self._client.models.list(timeout=timeout_s)
        return [m.id for m in page.data if isinstance(getattr(m, "id", None), str)]

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        s = self.settings
        try:
            wanted = float(retry_after) if retry_after is not None else s.backoff_s * 2 ** attempt
        except ValueError:
            wanted = s.backoff_s * 2 ** attempt
        return max(0.0, min(s.max_backoff_s, wanted))

    def _classify(self, exc: Exception) -> tuple[str, bool, str | None]:
        """(error name, retryable, Retry-After header)."""
        o = self.openai
        if isinstance(exc, o.APITimeoutError):
            return "timeout", True, None
        if isinstance(exc, o.APIConnectionError):
            return "connection", True, None
        if isinstance(exc, o.APIStatusError):
            after = exc.response.headers.get("retry-after") if exc.response is not None else None
            if exc.status_code == 429:
                return "rate_limited", True, after
            if exc.status_code >= 500:
                return "server_error", True, after
            return f"http_{exc.status_code}", False, None
        if isinstance(exc, (ValueError, o.APIResponseValidationError)):
            return "malformed", False, None
        raise exc

    def complete_one(self, key: str, prompt: str, gate: Gate | None = None) -> Completion:
        s, out = self.settings, Completion(key)
        kwargs = {"max_tokens": s.max_tokens} if s.max_tokens else {}
        for attempt in range(s.max_retries + 1):
            stop = gate.closed() if gate is not None else None
            if stop is not None:
                out.error = out.error or stop  # a retry cut short keeps the failure it had
                break
            timeout = s.timeout_s if gate is None else max(0.01, min(s.timeout_s, gate.remaining()))
            out.attempts = attempt + 1
            try:
                r = self._client.chat.completions.create(
                    model=s.model, messages=[{"role": "user", "content": prompt}], temperature=s.temperature,
                    seed=s.seed, n=1, timeout=timeout, **kwargs)
            except Exception as exc:  # noqa: BLE001 - classified, unknown ones re-raised
                out.error, retry, after = self._classify(exc)
                if gate is not None and out.error in PER_REQUEST:
                    gate.record(out.error)
                if retry and attempt < s.max_retries:
                    delay = self._delay(attempt, after)
                    self.usage.retrying()
                    self._sleep(delay if gate is None else max(0.0, min(delay, gate.remaining())))
                    continue
                break
            text = None
            try:
                text = r.choices[0].message.content
            except (TypeError, IndexError, AttributeError):
                pass
            usage = getattr(r, "usage", None)
            out.usage = {k: getattr(usage, k, 0) or 0 for k in ("prompt_tokens", "completion_tokens",
                                                               "total_tokens")} if usage else {}
            out.text, out.error = (text, None) if isinstance(text, str) and text.strip() else (None, "malformed")
            break
        if gate is not None and out.error is not None and out.error not in PER_REQUEST:
            gate.record(out.error)  # a failed request of a PER_REQUEST kind was recorded as it failed
        self.usage.add(out)
        return out

    def complete(self, items: Sequence[tuple[str, str]],
                 on_result: Callable[[Completion], None] | None = None, gate: Gate | None = None,
                 judge: Callable[[Completion], tuple[list[str], str | None]] | None = None,
                 on_tick: Callable[[], None] | None = None, tick_s: float = 1.0) -> list[Completion]:
        """Ask for every (key, prompt); ``on_result`` runs in the calling thread as each finishes (completion
        order). ``judge`` reads a received answer into (candidates, failure kind or None); it runs in the
        worker, one at a time, before the worker starts its next request, so the gate's breaker sees the
        outcome at once. ``on_tick`` runs in the calling thread after each batch of results and at least
        every ``tick_s`` seconds while requests are in flight (progress lines). Results come back in input
        order."""
        if not items:
            return []
        lock = threading.Lock()

        def one(key: str, prompt: str) -> Completion:
            c = self.complete_one(key, prompt, gate)
            if judge is not None and c.ok:
                with lock:
                    c.candidates, c.error = judge(c)
                if gate is not None:
                    gate.record(c.error)
            return c

        pool = ThreadPoolExecutor(max_workers=max(1, self.settings.concurrency))
        try:
            futures = {pool.submit(one, k, p): i for i, (k, p) in enumerate(items)}
            results: list[Completion | None] = [None] * len(items)
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, timeout=tick_s, return_when=FIRST_COMPLETED)
                for f in finished:
                    results[futures[f]] = f.result()
                    if on_result is not None:
                        on_result(results[futures[f]])
                if on_tick is not None:
                    on_tick()
        except BaseException:
            # Interrupted (SIGTERM / Ctrl-C reach the step as an exception in this thread) or failed: queued
            # prompts are dropped and the workers start no new attempt, so the step ends at once instead of
            # when the queue or the deadline runs out. A request in flight ends with its own timeout.
            if gate is not None:
                gate.stop()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        return results


_NUMBERING = re.compile(r"^\s*(?:[-*\u2022]|\(?\d{1,3}[.)\]:-]|\d{1,3}\s)\s*")


def parse_paraphrases(text: str) -> list[str]:
    """Paraphrases from a model answer: a JSON list of strings, or one per line (numbering, bullets and
    surrounding quotes removed; blank lines and headings ending in ':' dropped). Order kept."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
            if isinstance(data, list) and all(isinstance(x, str) for x in data):
                return [x.strip() for x in data if x.strip()]
        except ValueError:
            pass
    out = []
    for line in stripped.splitlines():
        line = _NUMBERING.sub("", line, count=1).strip()
        if len(line) >= 2 and line[0] == line[-1] and line[0] in "\"'\u201c`":
            line = line[1:-1].strip()
        line = line.strip("\u201c\u201d").strip()
        if line and not line.endswith(":"):
            out.append(line)
    return out
