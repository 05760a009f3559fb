"""Checks an LLM endpoint before any paraphrase request: one small request, bounded in time.

``preflight(client)`` raises ``EndpointUnusable(kind, message)`` when
- ``invalid_url``: the base URL is not an absolute http(s) URL with a host;
- ``connection`` / ``timeout``: GET <base URL>/models got no answer (one try, ``preflight_timeout_s``);
- ``unauthorized``: the server refused the key (401 / 403);
- ``server_error``: the server answered 5xx (501, "not implemented", counts as "does not list models");
- ``unknown_model``: the server lists its models and the configured one is not among them.
A server that does not list models (404, 405, 501, an answer that is no model list) or is busy (429) passes:
the fan-out's retries, circuit breaker and deadline handle the rest. Messages never hold the API key.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from ehrxqa_pipeline.paraphrase.llm import ChatClient

NO_LISTING = (404, 405, 501)


class EndpointUnusable(RuntimeError):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Preflight:
    models_listed: bool
    model_known: bool | None  # None: the server does not list models


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an endpoint base URL (None: it can)."""
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as err:
        return str(err)
    if parts.scheme not in ("http", "https"):
        return "the scheme must be http or https"
    if not parts.hostname:
        return "no host"
    return None


def shown(url: str) -> str:
    """The URL without user:password, query or fragment (for messages)."""
    p = urlsplit(url.strip())
    host = p.hostname or ""
    return f"{p.scheme}://{host}{f':{p.port}' if p.port else ''}{p.path}"


def preflight(client: ChatClient) -> Preflight:
    s, o = client.settings, client.openai
    problem = url_problem(s.base_url)
    if problem is not None:
        raise EndpointUnusable("invalid_url", f"EHRXQA_LLM_BASE_URL {s.base_url!r} is not usable: {problem}")
    where = shown(s.base_url)
    try:
        ids = client.list_models(s.preflight_timeout_s)
    except o.APITimeoutError:
        raise EndpointUnusable("timeout", f"{where}: no answer to GET /models within "
                                          f"{s.preflight_timeout_s:g} s") from None
    except o.APIConnectionError as err:
        raise EndpointUnusable("connection", f"{where}: cannot connect ({type(err.__cause__ or err).__name__})"
                               ) from None
    except o.APIStatusError as err:
        code = err.status_code
        if code in (401, 403):
            raise EndpointUnusable("unauthorized", f"{where}: HTTP {code} (check EHRXQA_LLM_API_KEY)") from None
        if code >= 500 and code not in NO_LISTING:
            raise EndpointUnusable("server_error", f"{where}: HTTP {code} to GET /models") from None
        return Preflight(False, None)  # 404/405/501: no listing; 429 and other 4xx: reachable
    except (ValueError, TypeError, AttributeError, o.APIResponseValidationError):
        return Preflight(False, None)  # an answer that is no model list
    if not ids:
        return Preflight(False, None)
    if s.model not in ids:
        listed = ", ".join(sorted(ids)[:10]) + (" ..." if len(ids) > 10 else "")
        raise EndpointUnusable("unknown_model", f"{where} does not serve model {s.model!r} (EHRXQA_LLM_MODEL); "
                                                f"it lists: {listed}")
    return Preflight(True, True)
