"""Every contact with the Agents SDK's internals, in one place.

openai-agents 0.24 hands finished runs only to its own ``Memory`` class: the runtime looks up
``isinstance(capability, agents.sandbox.capabilities.Memory)`` and asks a per-session registry
(``agents.sandbox.memory.manager._MEMORY_GENERATION_MANAGERS``) for a manager, creating the
SDK's own when none is there. Our ``Memory`` subclasses the SDK's and, when bound to a session,
places a :class:`SessionMemoryManager` in that registry first, so the runtime hands every run
result to us and the SDK's own phase 1 and phase 2 never run.

:func:`check_sdk` verifies that contract and fails loudly on an SDK it does not know;
``tests/test_sdk_contract.py`` runs it against the pinned SDK.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import posixpath
import re
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .datapolicy import exc_text
from .errors import SandboxMemoryError
from .extract.rollout import CANCEL_GRACE_SECONDS, stray_cancel
from .runtime.facade import LayoutRuntime
from .stores.segments import display_id
from .workspace import LocalWorkspace, SessionWorkspace, Workspace

if TYPE_CHECKING:
    from agents.sandbox.session.base_sandbox_session import BaseSandboxSession

    from .typing import MemoryCapability
logger = logging.getLogger("sandbox_memory")

SUPPORTED_SDK = ">=0.24.0,<0.25"
"""The openai-agents range this bridge was tested against (pyproject pins the same)."""

current_person: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "sandbox_memory_person", default=None
)


class UnsupportedSDK(SandboxMemoryError, RuntimeError):
    """The installed openai-agents does not have the internals this bridge relies on."""


_SDK_CHECKED = False


def check_sdk() -> None:
    """Raise :class:`UnsupportedSDK`, naming what is missing, unless the contract holds.

    The check reads SDK source once per process; a passing result is remembered.
    """

    global _SDK_CHECKED
    if _SDK_CHECKED:
        return
    _check_sdk()
    _SDK_CHECKED = True


def _check_sdk() -> None:
    import inspect

    import agents
    from agents.sandbox import runtime
    from agents.sandbox.capabilities import memory as sdk_memory
    from agents.sandbox.memory import manager as sdk_manager

    version = getattr(agents, "__version__", "unknown")
    missing: list[str] = []
    registry = getattr(sdk_manager, "_MEMORY_GENERATION_MANAGERS", None)
    if registry is None:
        missing.append("agents.sandbox.memory.manager._MEMORY_GENERATION_MANAGERS")
    if not callable(getattr(sdk_manager, "_memory_layout_key", None)):
        missing.append("agents.sandbox.memory.manager._memory_layout_key")
    if not hasattr(sdk_memory, "Memory"):
        missing.append("agents.sandbox.capabilities.memory.Memory")
    get_cap = getattr(runtime, "_get_memory_capability", None)
    if get_cap is None or "isinstance(capability, Memory)" not in inspect.getsource(get_cap):
        missing.append("agents.sandbox.runtime._get_memory_capability (isinstance on Memory)")
    runtime_cls = getattr(runtime, "SandboxRuntime", None)
    if runtime_cls is None or "self._rollout_id" not in inspect.getsource(runtime_cls.__init__):
        missing.append("agents.sandbox.runtime.SandboxRuntime._rollout_id")
    elif "capability.bind(session)" not in inspect.getsource(runtime_cls.prepare_agent):
        missing.append("SandboxRuntime.prepare_agent binding capabilities")
    mgr_cls = getattr(sdk_manager, "SandboxMemoryGenerationManager", None)
    for method in ("enqueue_result", "enqueue_rollout_payload"):
        if mgr_cls is None or not hasattr(mgr_cls, method):
            missing.append(f"SandboxMemoryGenerationManager.{method}")
    try:
        from agents.sandbox.memory.rollouts import build_rollout_payload_from_result  # noqa: F401
    except ImportError:
        missing.append("agents.sandbox.memory.rollouts.build_rollout_payload_from_result")
    if missing:
        raise UnsupportedSDK(
            f"sandbox-memory needs openai-agents {SUPPORTED_SDK}; the installed version "
            f"{version} lacks: {', '.join(missing)}. Install a supported version, or use the "
            "public route (sandbox_memory.record_run) and report the SDK version."
        )


CLOSE_GRACE_SECONDS = 3 * CANCEL_GRACE_SECONDS
"""What a close may take beyond ``max_seconds_per_close`` whatever the provider does: the
after-run extractions and the close's own wind down once each (their HTTP requests are
cancelled), then phase 2, which is code (it waits for the layout lock only when another
process holds it, up to ``lock_timeout_seconds``)."""

PER_RUN_ID_RE = re.compile(r"run-[0-9a-f]{32}")
"""The rollout id the SDK makes up for a run without conversation id, session or group
(``agents.run_internal.run_grouping``: ``run-`` and a uuid4's hex)."""

RUNTIME_FRAMES_SEARCHED = 12
"""How far up the stack ``bind`` looks for the SDK runtime preparing the run (it is 1-3 frames
up in 0.24); bounded so a miss costs microseconds."""


def _preparing_runtime_locals() -> dict[str, Any] | None:
    """The local variables of ``SandboxRuntime.prepare_agent`` calling ``Capability.bind``
    (found within :data:`RUNTIME_FRAMES_SEARCHED` frames up), or ``None``."""

    import sys

    from agents.sandbox.runtime import SandboxRuntime

    frame = sys._getframe(2)
    for _ in range(RUNTIME_FRAMES_SEARCHED):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, SandboxRuntime):
            return dict(frame.f_locals)
        frame = frame.f_back  # type: ignore[assignment]
    return None


def current_rollout_id() -> str | None:
    """The rollout id the SDK resolved for the run being prepared, read from its runtime.

    ``Capability.bind`` is called by ``SandboxRuntime.prepare_agent``, which holds the id the
    runner resolved (``conversation_id``, session id, group id, or one per run) but passes it
    to nobody but its memory manager, and only after the run. Knowing it at run start lets the
    read prompt carry this conversation's own memory. ``None`` when not found (then the history
    fingerprint is used).
    """

    found = _preparing_runtime_locals()
    value = getattr(found.get("self"), "_rollout_id", None) if found else None
    return value if isinstance(value, str) and value else None


def current_run_input() -> str | list[Any] | None:
    """The input of the run being prepared (``prepare_agent``'s ``current_input``: the user's
    message as a string, or the items of the conversation so far), read when ``bind`` is
    called. ``Capability.process_context`` sees the items, but never a string input, which is
    how most runs start; the read prompt's relevant section is looked up from it. ``None``
    when not found."""

    found = _preparing_runtime_locals()
    value = found.get("current_input") if found else None
    return value if isinstance(value, (str, list)) else None


_LAST_RUN_LOOP: list[weakref.ref[asyncio.AbstractEventLoop]] = []
"""The event loop of the last run memory was bound to (at most one reference)."""


def renew_shared_http_client() -> None:
    """At run start: drop the SDK's shared HTTP client when it belongs to a closed loop.

    A model given by name (``SandboxAgent(model="gpt-5.4")``) goes through the SDK's default
    provider, whose OpenAI client shares one process-wide httpx client
    (``agents.models.openai_provider.shared_http_client``). Its pooled connections belong to
    the event loop that opened them, so after ``asyncio.run`` returns, the agent's first turn
    in the next ``asyncio.run`` fails with "Event loop is closed". When the last run memory
    was bound to ran in a loop that is now closed, the shared client is dropped and the SDK
    makes a fresh one in this loop (unclosed: its loop is gone). A client the application set
    (``set_default_openai_client``), or one passed to its own provider, is not touched.
    """

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    last = _LAST_RUN_LOOP[0]() if _LAST_RUN_LOOP else None
    if last is loop:
        return
    if _LAST_RUN_LOOP and (last is None or last.is_closed()):
        from agents.models import openai_provider

        if getattr(openai_provider, "_http_client", None) is not None:
            openai_provider._http_client = None
            logger.debug("the SDK's shared HTTP client belonged to a closed event loop: dropped")
    _LAST_RUN_LOOP[:] = [weakref.ref(loop)]


def _layout_key(memory: MemoryCapability) -> tuple[str, str]:
    return (
        posixpath.normpath(memory.layout.memories_dir),
        posixpath.normpath(memory.layout.sessions_dir),
    )


def workspace_for_session(session: BaseSandboxSession) -> Workspace:
    """A local-folder fast path for the UnixLocal backend, else the session's own API."""

    from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxSession

    inner = getattr(session, "_inner", session)
    if isinstance(inner, UnixLocalSandboxSession):
        from .integrity import KEY_ENV, warn_key_exposure

        allowed = getattr(inner, "_host_environment_allowlist", None)
        warn_key_exposure(inherits_environment=allowed is None or KEY_ENV in allowed)
        root = Path(inner.state.manifest.root)
        if root.is_dir():
            return LocalWorkspace(root)
    return SessionWorkspace(session)


def build_payload(
    result: Any, *, exception: BaseException | None, input_override: Any
) -> dict[str, Any]:
    from agents.sandbox.memory.rollouts import build_rollout_payload_from_result

    payload: dict[str, Any] = build_rollout_payload_from_result(
        result, exception=exception, input_override=input_override
    )
    return payload


def _log_record_failure(message: str, exc: BaseException) -> None:
    """An ERROR about a run the SDK handed memory, through the SDK's own helper for its data
    policies: the exception's text and traceback only when both allow them."""

    if not getattr(type(exc), "quotes_data", True):  # memory's own words (a full disk, a link)
        logger.error("%s: %s", message, exc_text(exc), stacklevel=3)
        return
    from agents.logger import log_model_and_tool_action_error

    log_model_and_tool_action_error(logger, message, exc, stacklevel=4)


class SessionMemoryManager:
    """Sits in the SDK's registry for one sandbox session and layout; receives every run."""

    def __init__(self, *, session: BaseSandboxSession, memory: MemoryCapability) -> None:
        self.session = session
        self.memory = memory
        self.runtime: LayoutRuntime = LayoutRuntime(
            workspace_for_session(session),
            layout=memory.layout,
            generate=memory.generate,
            read=memory.read,
            engine=memory.engine,
            store=memory.store,
        )
        self.runtime.state.session_id = str(session.state.session_id)
        self._tasks: set[asyncio.Task[None]] = set()
        """The workers extracting after runs: at most ``generate.phase_one_concurrency``."""
        self._queued: dict[str, None] = {}
        """Rollouts waiting for a worker, oldest first (a rollout waits once, however many
        of its runs arrive meanwhile: one extraction reads them all)."""
        self._closed = False
        self.last_report: dict[str, Any] | None = None
        session.register_pre_stop_hook(self.flush)

    async def enqueue_result(
        self,
        result: Any,
        *,
        exception: BaseException | None = None,
        input_override: Any = None,
        rollout_id: str,
    ) -> None:
        try:
            payload = build_payload(result, exception=exception, input_override=input_override)
        except Exception as exc:  # noqa: BLE001
            _log_record_failure(
                f"could not serialise the run of conversation {display_id(rollout_id)} for "
                "memory; recording its input and final output only",
                exc,
            )
            payload = {
                "input": input_override if input_override is not None else [],
                "generated_items": [],
                "final_output": str(getattr(result, "final_output", None)),
                "terminal_metadata": {"terminal_state": "failed", "has_final_output": False},
            }
        await self.enqueue_rollout_payload(payload, rollout_id=rollout_id)

    async def enqueue_rollout_payload(self, payload: dict[str, Any], *, rollout_id: str) -> None:
        person = current_person.get() or self.memory.person
        for attempt in (1, 2):
            try:
                rid = await self.runtime.record(
                    payload,
                    rollout_id=rollout_id,
                    person=person,
                    per_run_id=PER_RUN_ID_RE.fullmatch(rollout_id) is not None,
                )
                break
            except Exception as exc:  # noqa: BLE001
                if attempt == 2:
                    _log_record_failure(
                        f"memory could not record a run of conversation "
                        f"{display_id(rollout_id)}. The run is not in "
                        f"{self.memory.layout.sessions_dir}; nothing else was changed",
                        exc,
                    )
                    return
        if self._closed:
            return
        self._queued[rid] = None
        running = sum(1 for task in self._tasks if not task.done())
        if running < max(1, self.runtime.generate.phase_one_concurrency):
            task = asyncio.create_task(self._work())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _work(self) -> None:
        """One worker: extract queued rollouts until none is left."""

        while self._queued:
            rid = next(iter(self._queued))
            del self._queued[rid]
            await self._background(rid)

    async def _background(self, rollout_id: str) -> None:
        try:
            await self.runtime.consolidate_conversation(rollout_id)
        except Exception as exc:  # noqa: BLE001
            logger.warning(
                "memory consolidation after a run of %s failed: %s; it is retried at the next "
                "run or close",
                rollout_id,
                exc_text(exc),
            )

    async def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait for background consolidation; ``False`` if ``timeout`` ran out first."""

        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        while self._tasks:
            remaining = None if deadline is None else deadline - asyncio.get_running_loop().time()
            if remaining is not None and remaining <= 0:
                return False
            await asyncio.wait(list(self._tasks), timeout=remaining)
        return True

    async def flush(self) -> None:
        """Pre-stop hook: bounded by the close's time budget, and never raises, so a memory
        failure never skips (nor long delays) the snapshot.

        The close's deadline is ``max_seconds_per_close`` from now: extractions still running
        after the last run stop at it, then the close extracts what is pending until it, then
        phase 2 (code, no model) renders memory. Work left over stays pending for the next
        close. The close takes at most the budget plus :data:`CLOSE_GRACE_SECONDS`.
        """

        if self._closed:
            return
        self._closed = True
        try:
            deadline = time.monotonic() + self.runtime.generate.max_seconds_per_close
            self._queued.clear()  # the close takes whatever is pending, within its budget
            self.runtime.begin_close(deadline)
            if not await self.wait_idle(deadline - time.monotonic() + CANCEL_GRACE_SECONDS):
                # Only work stuck outside the model call gets here (the call itself stops at
                # the deadline); its rollout stays pending, like any deferred work.
                for task in list(self._tasks):
                    task.cancel()
                await asyncio.wait(list(self._tasks), timeout=CANCEL_GRACE_SECONDS)
            if self.runtime.generate_enabled:
                self.last_report = await self.runtime.close(deadline=deadline)
        except BaseException as exc:  # noqa: BLE001
            if not isinstance(exc, Exception) and not stray_cancel(exc):
                raise  # the close itself is being cancelled, or the process is stopping
            logger.warning(
                "memory generation at close failed: %s. The recorded runs stay in %s and are "
                "processed at the next close; the workspace snapshot goes ahead",
                exc_text(exc),
                self.memory.layout.sessions_dir,
            )
        finally:
            unregister(self.session, self)


def install(session: BaseSandboxSession, memory: MemoryCapability) -> SessionMemoryManager:
    """Place our manager in the SDK's registry for this session and layout (idempotent)."""

    from agents.exceptions import UserError
    from agents.sandbox.memory import manager as sdk_manager

    registry = sdk_manager._MEMORY_GENERATION_MANAGERS
    by_layout = registry.get(session)
    key = _layout_key(memory)
    if by_layout is not None:
        existing = by_layout.get(key)
        if isinstance(existing, SessionMemoryManager):
            if existing.memory.generate != memory.generate:
                raise UserError(
                    "Sandbox session already has a different Memory generation config attached "
                    f"for the layout memories_dir={key[0]!r}, sessions_dir={key[1]!r}."
                )
            return existing
        for other in by_layout:
            if other[0] == key[0] or other[1] == key[1]:
                field = "memories_dir" if other[0] == key[0] else "sessions_dir"
                raise UserError(
                    f"Sandbox session already has a Memory capability for {field}="
                    f"{(other[0] if field == 'memories_dir' else other[1])!r} with a different "
                    "layout. Use different directories for isolated memories, or the same "
                    "layout to share memory."
                )
    manager = SessionMemoryManager(session=session, memory=memory)
    if by_layout is None:
        by_layout = {}
        registry[session] = by_layout
    by_layout[key] = manager  # type: ignore[assignment]
    return manager


def find_manager(
    session: BaseSandboxSession, memory: MemoryCapability
) -> SessionMemoryManager | None:
    from agents.sandbox.memory import manager as sdk_manager

    by_layout = sdk_manager._MEMORY_GENERATION_MANAGERS.get(session) or {}
    found = by_layout.get(_layout_key(memory))
    return found if isinstance(found, SessionMemoryManager) else None


def unregister(session: BaseSandboxSession, manager: SessionMemoryManager) -> None:
    from agents.sandbox.memory import manager as sdk_manager

    registry = sdk_manager._MEMORY_GENERATION_MANAGERS
    by_layout = registry.get(session)
    if not by_layout:
        return
    key = _layout_key(manager.memory)
    if by_layout.get(key) is manager:  # type: ignore[comparison-overlap]
        by_layout.pop(key, None)
    if not by_layout:
        registry.pop(session, None)


_READ_RUNTIMES: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], LayoutRuntime]] = (
    weakref.WeakKeyDictionary()
)


def sdk_read_prompt(*, memory_dir: str, summary: str, live_update: bool) -> str | None:
    """The memory prompt the SDK's own ``Memory`` gives for ``summary`` (its template and its
    token cut, read at call time), for memory the SDK left and sandbox-memory has not taken in
    yet (``runtime/carryover.py``); ``None`` when nothing is left after the cut."""

    from agents.sandbox.capabilities import memory as sdk_memory
    from agents.sandbox.memory.prompts import render_memory_read_prompt
    from agents.sandbox.util.token_truncation import TruncationPolicy, truncate_text

    text = truncate_text(summary, TruncationPolicy.tokens(sdk_memory._MEMORY_SUMMARY_MAX_TOKENS))
    if not text:
        return None
    return render_memory_read_prompt(
        memory_dir=memory_dir, memory_summary=text, live_update=live_update
    )


def runtime_for(session: BaseSandboxSession, memory: MemoryCapability) -> LayoutRuntime:
    """The session's runtime when generation is on, else one read-only runtime per session."""

    manager = find_manager(session, memory)
    if manager is not None:
        return manager.runtime
    by_layout = _READ_RUNTIMES.setdefault(session, {})
    key = _layout_key(memory)
    if key in by_layout:
        return by_layout[key]
    by_layout[key] = runtime = LayoutRuntime(
        workspace_for_session(session),
        layout=memory.layout,
        generate=memory.generate,
        read=memory.read,
        engine=memory.engine,
        store=memory.store,
    )
    return runtime
