"""A scripted OpenAI-compatible chat server on 127.0.0.1 (port 0) for tests: no network beyond loopback.

``ChatServer(script)``: each POST /v1/chat/completions takes the next step of the script (a callable
``step(prompt) -> Reply`` or a ``Reply``); when the script is exhausted the server answers 500. Every request
is recorded (its prompt). Replies may delay (bounded, for timeouts) and set headers (Retry-After).
GET /v1/models answers ``models``: a list of ids (a model list), a ``Reply``, or None (404, no listing);
those requests are counted in ``model_requests``, not in ``requests``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_DELAY_S = 2.0


@dataclass
class Reply:
    status: int = 200
    body: object = None  # dict -> JSON; bytes -> raw
    delay_s: float = 0.0
    headers: dict = field(default_factory=dict)


def completion(content: str, prompt_tokens: int = 11, completion_tokens: int = 7) -> Reply:
    return Reply(200, {"id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "test-model",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": content}}],
                       "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                 "total_tokens": prompt_tokens + completion_tokens}})


def question_of(prompt: str) -> str:
    """The template text inside a paraphrase prompt."""
    return prompt.rsplit("Question: ", 1)[1].split("\nParaphrased questions:")[0]


class ChatServer:
    def __init__(self, script=None, default=None, models=None):
        self.script = list(script or [])
        self.models = models
        self.model_requests = 0
        self.default = default  # used when the script is exhausted (None: 500)
        self.requests: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server API
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                prompt = body.get("messages", [{}])[-1].get("content", "")
                with server._lock:
                    server.requests.append(prompt)
                    step = server.script.pop(0) if server.script else server.default
                reply = step(prompt) if callable(step) else step or Reply(500, {"error": {"message": "no script"}})
                self._send(reply)

            def do_GET(self):  # noqa: N802 - http.server API
                with server._lock:
                    server.model_requests += 1
                m = server.models
                if isinstance(m, Reply):
                    reply = m
                elif m is None or not self.path.rstrip("/").endswith("/models"):
                    reply = Reply(404, {"error": {"message": "not found"}})
                else:
                    reply = Reply(200, {"object": "list", "data": [{"id": x, "object": "model", "created": 0,
                                                                     "owned_by": "test"} for x in m]})
                self._send(reply)

            def _send(self, reply):
                time.sleep(min(reply.delay_s, MAX_DELAY_S))
                data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        # shutdown() waits for the serving loop to look at its flag, once per poll interval: the default 0.5 s
        # cost each test about 0.4 s of idle time at its end.
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}/v1"

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
