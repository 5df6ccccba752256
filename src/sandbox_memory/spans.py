"""Memory's work in the Agents SDK's traces: one custom span per step, figures only.

Each step of the flow opens a span of the SDK's public tracing API
(:func:`agents.tracing.custom_span`) named ``sandbox_memory.<step>``:

- ``sandbox_memory.read``: the memory prompt of a turn (characters, entries injected);
- ``sandbox_memory.record``: a run segment appended (bytes, items, secrets redacted);
- ``sandbox_memory.extract``: phase 1 of one rollout (engine, model calls, tokens, changes
  accepted and rejected with their reasons);
- ``sandbox_memory.consolidate``: phase 2 of a layout (promoted, forgotten, changes);
- ``sandbox_memory.close``: the sandbox's close around them (rollouts extracted and deferred,
  model calls, secrets redacted);
- ``sandbox_memory.search.index``: a search (query length, hits by kind).

A span nests under the run's trace where one is active (the SDK sets it for the run, its
tools and the memory work done after it; a sandbox closed outside any trace gets none: wrap the
close in ``agents.trace(...)`` to see it). With no active trace, or tracing disabled
(``RunConfig(tracing_disabled=True)``, ``OPENAI_AGENTS_DISABLE_TRACING``), the SDK hands out a
span that records nothing.

What a span holds is counts, sizes, names of engines and the reasons changes were refused:
never an entry's content, a query, a key, a person or a secret (a rejection's reason has the
key cut out and is passed through the redactor). Trace processors may send span data to a
vendor; memory's data stays what any reader of the trace may see.

Sites call :func:`traced` (a decorator) or :func:`span` and add figures with :func:`add` and
:func:`note`, which write to the innermost memory span of the current task and do nothing
outside one. Nothing here imports the SDK unless it is already loaded: without it no trace can
be active, and the command line stays fast.
"""

from __future__ import annotations

import contextvars
import functools
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

if TYPE_CHECKING:
    from .redact import Redactor

P = ParamSpec("P")
T = TypeVar("T")

PREFIX = "sandbox_memory."
"""Every memory span's name starts with it (``sandbox_memory.read`` ...)."""

READ = PREFIX + "read"
RECORD = PREFIX + "record"
EXTRACT = PREFIX + "extract"
CONSOLIDATE = PREFIX + "consolidate"
SEARCH = PREFIX + "search"
CLOSE = PREFIX + "close"

MAX_REASONS = 20
"""Rejection reasons kept in one span (the count is always whole): a model that proposes a
hundred bad changes does not make a trace of a hundred lines."""

REASON_CHARS = 200
"""Characters of one rejection reason kept in a span."""

_current: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "sandbox_memory_span_data", default=None
)
"""The data of the innermost memory span of this task (``None``: not in one)."""


@contextmanager
def span(name: str, **data: Any) -> Iterator[dict[str, Any]]:
    """A memory span around a block; yields its data, which the block may fill in.

    The data is read by trace processors when the span ends, so figures known only at the
    end (hits, bytes) are simply added to the dict.
    """

    tracing = sys.modules.get("agents.tracing")
    if tracing is None:
        # The SDK is not loaded, so no trace is active: the figures go nowhere.
        token = _current.set(dict(data))
        try:
            yield _current.get() or {}
        finally:
            _current.reset(token)
        return
    with tracing.custom_span(name, data=dict(data)) as made:
        fields: dict[str, Any] = made.span_data.data  # what processors export at the end
        token = _current.set(fields)
        try:
            yield fields
        finally:
            _current.reset(token)


def traced(
    name: str, *, result: Callable[[Any], dict[str, Any]] | None = None, **initial: Any
) -> Callable[[Callable[P, Coroutine[Any, Any, T]]], Callable[P, Coroutine[Any, Any, T]]]:
    """Decorate a coroutine function: each call runs inside a memory span ``name``, whose data
    starts as ``initial`` and gets ``result(returned value)`` at the end."""

    def decorate(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            with span(name, **initial) as fields:
                value = await fn(*args, **kwargs)
                if result is not None:
                    fields.update(result(value))
                return value

        return wrapper

    return decorate


def note(**data: Any) -> None:
    """Set figures on the innermost memory span of this task (nothing outside one)."""

    fields = _current.get()
    if fields is not None:
        fields.update(data)


def add(**counts: int) -> None:
    """Add to counters of the innermost memory span of this task (nothing outside one)."""

    fields = _current.get()
    if fields is not None:
        for name, value in counts.items():
            fields[name] = int(fields.get(name, 0)) + int(value)


EXTRACT_START: dict[str, Any] = {
    "model_calls": 0,
    "input_tokens": 0,
    "output_tokens": 0,
    "accepted": 0,
    "rejected": 0,
}
"""An extraction's counters before it runs (the offline engine calls no model)."""


def extract_figures(changed: bool) -> dict[str, Any]:
    """What an extraction returned: whether memory changed."""

    return {"changed": changed}


def changes(accepted: int, rejected: list[Any], redactor: Redactor) -> None:
    """Count the changes accepted and rejected, and keep the reasons of the rejected ones,
    each without the key it was about (a key can be private, or be what held a secret) and
    redacted."""

    fields = _current.get()
    if fields is None:
        return
    reasons: list[str] = list(fields.get("rejected_reasons", []))
    for r in rejected:
        if len(reasons) >= MAX_REASONS:
            break
        reason = str(r.reason)
        reason = reason.replace(repr(r.key), "<key>")  # "key 'x' is not a safe slug"
        reasons.append(redactor.redact_text(reason)[:REASON_CHARS])
    fields["accepted"] = int(fields.get("accepted", 0)) + accepted
    fields["rejected"] = int(fields.get("rejected", 0)) + len(rejected)
    fields["rejected_reasons"] = reasons


def hit_figures(hits: list[Any]) -> dict[str, Any]:
    """A search's figures: hits in all and by kind (never their text)."""

    by_kind: dict[str, int] = {}
    for hit in hits:
        by_kind[str(hit.kind)] = by_kind.get(str(hit.kind), 0) + 1
    return {"hits": len(hits), "hits_by_kind": by_kind}


def close_figures(report: dict[str, Any]) -> dict[str, Any]:
    """A close's figures from its report (rollout ids are left out: they can name people)."""

    return {
        "extracted": len(report.get("extracted", [])),
        "deferred": len(report.get("deferred", [])),
        "model_calls": report.get("model_calls", 0),
        "redactions": report.get("redactions", 0),
    }


def prompt_figures(text: str | None) -> dict[str, Any]:
    """A memory prompt's figures: its characters and the entries it injects (one ``- **key**``
    line each in its summary; no fixed line of the prompt starts so)."""

    text = text or ""
    entries = sum(1 for line in text.splitlines() if line.startswith("- **"))
    return {"prompt_chars": len(text), "entries": entries}
