"""The SDK's data policies for logs, honoured in every log line memory writes.

``OPENAI_AGENTS_DONT_LOG_MODEL_DATA`` and ``OPENAI_AGENTS_DONT_LOG_TOOL_DATA`` (both on unless
set to ``0``/``false``) keep model inputs and outputs and tool data out of the SDK's logs.
What memory handles is both at once (recorded runs, model extractions, rendered entries), and
an exception raised while handling it may quote it, so while either policy is on, memory's log
lines name the exception's type and withhold its text (unless memory wrote that text itself
and it quotes no data: ``quotes_data = False`` on the class), as the SDK's own
``agents.logger.log_model_and_tool_action_*`` helpers do (used directly where memory logs a
run the SDK handed it: ``_sdk.py``).

The flags are read from ``agents._debug`` when the SDK is loaded (where the SDK and its tests
set them); otherwise from the environment with the SDK's rule, so the command line, which
does not import the SDK, follows the same policy.
"""

from __future__ import annotations

import os
import sys

WITHHELD = "details withheld: OPENAI_AGENTS_DONT_LOG_MODEL_DATA/_TOOL_DATA"
"""Said in place of an exception's text or a quote of model output while a policy is on."""


def _env_flag(name: str) -> bool:
    value = os.getenv(name)
    return True if value is None else (value == "1" or value.lower() == "true")


def withheld() -> bool:
    """True while either SDK policy keeps model or tool data out of logs."""

    debug = sys.modules.get("agents._debug")
    if debug is not None:
        return bool(
            getattr(debug, "DONT_LOG_MODEL_DATA", True)
            or getattr(debug, "DONT_LOG_TOOL_DATA", True)
        )
    return _env_flag("OPENAI_AGENTS_DONT_LOG_MODEL_DATA") or _env_flag(
        "OPENAI_AGENTS_DONT_LOG_TOOL_DATA"
    )


def exc_text(exc: BaseException) -> str:
    """``Type: text`` of an exception for a log line; only ``Type (details withheld ...)``
    while a policy is on, unless memory wrote the text itself and it quotes no model or tool
    data (the class says ``quotes_data = False``: memory's own errors, a short write)."""

    if getattr(type(exc), "quotes_data", True) and withheld():
        cause = exc.__cause__
        named = type(exc).__name__ + (f" from {type(cause).__name__}" if cause else "")
        return f"{named} ({WITHHELD})"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def data_text(text: str) -> str:
    """Text that may quote model output or tool data (a failure's description), for a log
    line: itself, or a note that it is withheld while a policy is on."""

    return f"({WITHHELD})" if withheld() else text
