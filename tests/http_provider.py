"""A local OpenAI-compatible HTTP server for tests: real HTTP, no network.

``ProviderServer`` listens on 127.0.0.1 (ephemeral port) in a background thread and answers
``POST /v1/responses`` and ``POST /v1/chat/completions`` the way the OpenAI API does, so the
SDK's real ``OpenAIResponsesModel`` and ``OpenAIChatCompletionsModel`` (and anything built on
the ``openai`` client) talk to it unchanged. Every request is recorded (path, headers, JSON
body). Replies are scripted per request by a *responder*: a function of the request returning
a :class:`Reply`. Helpers build the usual replies and failures:

- :func:`text` / :func:`items`: a completed response (text, or Responses output items);
- :func:`status`: an HTTP error (429 with ``retry-after`` in seconds or as a date, or
  ``retry-after-ms``; 500 ...);
- :func:`hang`: no answer until the client gives up (or the server stops);
- :func:`raw`: a body as given (invalid JSON from the model is ``text("{not json")``);
- :func:`refusal`, :func:`incomplete`: a refusal, a response cut at max_output_tokens;
- :func:`embeddings`: ``POST /v1/embeddings`` answered with deterministic vectors (not a
  semantic model: a bag of hashed words, with ``synonyms`` folded onto one word), optionally of
  the wrong size.

Use the ``provider`` fixture (``tests/conftest.py``) or ``with ProviderServer() as server``.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PHASE_ONE_MARKER = "You extract durable memory"
"""How the server tells a phase-1 extraction request from an agent turn (prompt's start)."""


@dataclass
class Request:
    """One HTTP request the server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)

    @property
    def api(self) -> str:
        return "chat" if self.path.endswith("/chat/completions") else "responses"

    @property
    def instructions(self) -> str:
        """System text: Responses ``instructions`` or the chat ``system`` message."""

        if self.api == "responses":
            return str(self.body.get("instructions") or "")
        for message in self.body.get("messages") or []:
            if message.get("role") in ("system", "developer"):
                return _content_text(message.get("content"))
        return ""

    @property
    def is_phase_one(self) -> bool:
        return self.instructions.startswith(PHASE_ONE_MARKER)

    @property
    def user_text(self) -> str:
        """Text of every user message of the request, joined."""

        raw = self.body.get("input") if self.api == "responses" else self.body.get("messages")
        if isinstance(raw, str):
            return raw
        parts = [
            _content_text(m.get("content"))
            for m in raw or []
            if isinstance(m, dict) and m.get("role") == "user"
        ]
        return "\n".join(parts)

    @property
    def schema(self) -> dict[str, Any] | None:
        """The JSON schema of the structured output the request asks for."""

        if self.api == "responses":
            fmt = (self.body.get("text") or {}).get("format") or {}
            return fmt.get("schema") if fmt.get("type") == "json_schema" else None
        fmt = self.body.get("response_format") or {}
        schema = (fmt.get("json_schema") or {}).get("schema")
        return schema if isinstance(schema, dict) else None

    def function_outputs(self) -> dict[str, str]:
        """Tool results sent back to the model, by call id (Responses and chat shapes)."""

        out: dict[str, str] = {}
        raw = self.body.get("input") if self.api == "responses" else self.body.get("messages")
        for item in raw if isinstance(raw, list) else []:
            if not isinstance(item, dict):
                continue
            if item.get("type") in ("function_call_output", "custom_tool_call_output"):
                out[str(item.get("call_id"))] = _content_text(item.get("output"))
            elif item.get("role") == "tool":
                out[str(item.get("tool_call_id"))] = _content_text(item.get("content"))
        return out


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text") or p.get("output") or "") for p in content if isinstance(p, dict)
        )
    return "" if content is None else json.dumps(content)


@dataclass
class Reply:
    """What the server sends back for one request."""

    status: int = 200
    body: bytes | dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False
    """Send nothing until the client disconnects or the server stops."""
    output: list[dict[str, Any]] | None = None
    """Responses output items; turned into the API's body for the request's API."""
    response_status: str = "completed"
    incomplete_reason: str | None = None


Responder = Callable[[Request], Reply]


def text(value: str | dict[str, Any]) -> Reply:
    """A completed assistant message (a dict is sent as its JSON)."""

    body = value if isinstance(value, str) else json.dumps(value)
    return items([_message(body)])


def items(output: Sequence[dict[str, Any]]) -> Reply:
    """A completed response with these Responses output items."""

    return Reply(output=list(output))


def status(
    code: int,
    *,
    retry_after: float | None = None,
    message: str = "",
    headers: dict[str, str] | None = None,
) -> Reply:
    """An HTTP error; ``retry_after`` seconds as a ``retry-after`` header, ``headers`` as given
    (``retry-after`` as an HTTP date, ``retry-after-ms``)."""

    headers = {
        **({} if retry_after is None else {"retry-after": f"{retry_after:g}"}),
        **(headers or {}),
    }
    error = {"message": message or f"scripted HTTP {code}", "type": "server_error", "code": None}
    return Reply(status=code, body={"error": error}, headers=headers)


def hang() -> Reply:
    return Reply(hang=True)


def raw(body: bytes, *, content_type: str = "application/json") -> Reply:
    return Reply(body=body, headers={"content-type": content_type})


def refusal(reason: str = "I can't help with that.") -> Reply:
    message = _message("")
    message["content"] = [{"type": "refusal", "refusal": reason}]
    return Reply(output=[message])


def incomplete(partial: str, reason: str = "max_output_tokens") -> Reply:
    message = _message(partial)
    message["status"] = "incomplete"
    return Reply(output=[message], response_status="incomplete", incomplete_reason=reason)


def embedding_of(text: str, dimension: int, synonyms: dict[str, str] | None = None) -> list[float]:
    """A deterministic vector for ``text``: each word (after ``synonyms``) adds 1 at a place
    fixed by its hash. Texts sharing words (or synonyms) point the same way."""

    vector = [0.0] * dimension
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        word = (synonyms or {}).get(word, word)
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % dimension] += 1.0
    return vector


def embeddings(
    dimension: int = 64, *, synonyms: dict[str, str] | None = None, size: int | None = None
) -> Responder:
    """A responder for ``POST /v1/embeddings``: one :func:`embedding_of` vector per input
    text, of ``size`` numbers when given (a wrong dimension), else ``dimension``."""

    def respond(request: Request) -> Reply:
        raw = request.body.get("input")
        texts = [raw] if isinstance(raw, str) else list(raw or [])
        data = [
            {
                "object": "embedding",
                "index": n,
                "embedding": embedding_of(str(t), dimension, synonyms)[: size or dimension]
                + [0.0] * max(0, (size or dimension) - dimension),
            }
            for n, t in enumerate(texts)
        ]
        body = {
            "object": "list",
            "data": data,
            "model": request.body.get("model", "unknown"),
            "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)},
        }
        return Reply(body=body)

    return respond


def function_call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def _message(value: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": "msg_1",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": value, "annotations": []}],
    }


_USAGE = {
    "input_tokens": 10,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 5,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 15,
}


def _responses_body(request: Request, reply: Reply, n: int) -> dict[str, Any]:
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": int(time.time()),
        "status": reply.response_status,
        "incomplete_details": (
            {"reason": reply.incomplete_reason} if reply.incomplete_reason else None
        ),
        "error": None,
        "model": request.body.get("model", "unknown"),
        "output": reply.output or [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": _USAGE,
    }


def _chat_body(request: Request, reply: Reply, n: int) -> dict[str, Any]:
    content: str | None = None
    refused: str | None = None
    calls: list[dict[str, Any]] = []
    for item in reply.output or []:
        if item.get("type") == "message":
            for part in item.get("content") or []:
                if part.get("type") == "refusal":
                    refused = part.get("refusal")
                else:
                    content = (content or "") + str(part.get("text", ""))
        elif item.get("type") == "function_call":
            calls.append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]},
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refused}
    if calls:
        message["tool_calls"] = calls
    finish = "length" if reply.incomplete_reason else ("tool_calls" if calls else "stop")
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.body.get("model", "unknown"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


class ProviderServer:
    """An OpenAI-compatible server on 127.0.0.1 answering with scripted replies.

    ``responder`` decides each reply; by default replies are taken in order from
    :meth:`script` (and an empty script answers 500, so a missing reply fails loudly).
    """

    def __init__(self, responder: Responder | None = None) -> None:
        self.requests: list[Request] = []
        self._script: list[Reply | Responder] = []
        self._responder = responder
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ control

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script(self, *replies: Reply | Responder) -> None:
        """Replies for the next requests, in order (a responder computes its reply)."""

        with self._lock:
            self._script.extend(replies)

    def respond_with(self, responder: Responder | None) -> None:
        """Answer every request with ``responder`` (``None``: back to the script)."""

        self._responder = responder

    def phase_one_requests(self) -> list[Request]:
        return [r for r in self.requests if r.is_phase_one]

    def start(self) -> ProviderServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

            def do_POST(self) -> None:  # noqa: N802
                server._handle(self)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ProviderServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- handling

    def _next_reply(self, request: Request) -> Reply:
        with self._lock:
            responder = self._responder
            step = self._script.pop(0) if responder is None and self._script else None
        if responder is not None:
            return responder(request)
        if step is None:
            return status(500, message=f"no scripted reply for request {len(self.requests)}")
        return step(request) if callable(step) else step

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("content-length") or 0)
        data = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(data or b"{}")
        except ValueError:
            body = {"_unparsed": data.decode("utf-8", "replace")}
        request = Request(
            path=handler.path,
            headers={k.lower(): v for k, v in handler.headers.items()},
            body=body if isinstance(body, dict) else {"_body": body},
        )
        with self._lock:
            self.requests.append(request)
            n = len(self.requests)
        reply = self._next_reply(request)
        if reply.hang:
            # Wait until the server stops; a client that gives up closes the socket, and the
            # write below then fails quietly.
            self._stopping.wait()
            return
        if isinstance(reply.body, bytes):
            payload = reply.body
        elif reply.body is not None:
            payload = json.dumps(reply.body).encode()
        elif request.api == "chat":
            payload = json.dumps(_chat_body(request, reply, n)).encode()
        else:
            payload = json.dumps(_responses_body(request, reply, n)).encode()
        try:
            handler.send_response(reply.status)
            headers = {"content-type": "application/json", **reply.headers}
            for key, value in headers.items():
                handler.send_header(key, value)
            handler.send_header("content-length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
        except OSError:
            pass


def serve(responder: Responder | None = None) -> Iterator[ProviderServer]:
    """Generator for a fixture: a started server, stopped afterwards."""

    server = ProviderServer(responder).start()
    try:
        yield server
    finally:
        server.stop()
