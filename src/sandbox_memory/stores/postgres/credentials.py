"""The DSN's password kept out of text: what a log line, an error or :meth:`repr` shows of a
connection string."""

from __future__ import annotations

import os
import re

_URI_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/?#@\s]*):(?P<pw>[^@/?#\s]*)@", re.I)


_PARAM_PASSWORD = re.compile(
    r"(?P<head>(?:^|[?&\s])password\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|[^&\s]*)"
)


def redact_dsn(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***`` (URI form and ``key=value`` form)."""

    out = _URI_PASSWORD.sub(lambda m: f"{m.group('head')}:***@", dsn)
    return _PARAM_PASSWORD.sub(lambda m: f"{m.group('head')}***", out)


def _passwords(dsn: str) -> list[str]:
    found = [m.group("pw") for m in _URI_PASSWORD.finditer(dsn)]
    found += [m.group("pw").strip("'") for m in _PARAM_PASSWORD.finditer(dsn)]
    env = os.environ.get("PGPASSWORD")
    if env:
        found.append(env)
    from urllib.parse import unquote

    found += [unquote(p) for p in found]
    return sorted({p for p in found if p}, key=len, reverse=True)


def scrub(text: str, dsn: str) -> str:
    """``text`` with the DSN's password (raw or URL-decoded) removed wherever it appears."""

    out = redact_dsn(text)
    for pw in _passwords(dsn):
        out = out.replace(pw, "***")
    return out
