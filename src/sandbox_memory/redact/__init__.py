"""Secret redaction applied before anything an agent saw reaches disk, a log or a memory model.

`Redactor.redact_text` replaces every secret it finds with a typed marker such as
``[REDACTED:aws-access-key]`` (never a blank); `Redactor.redact_json` does the same for every
string inside a JSON-like structure (the shape of Agents SDK input and output items).

Detection has three layers:

* the token formats of detect-secrets' plugins (AWS, GitHub, GitLab, Slack, Stripe, SendGrid,
  PyPI, Twilio, Square, OpenAI legacy keys, basic-auth URLs) and its JWT validity rule, kept as
  our own data (`rules.py`; the package does not import detect-secrets);
* our own formats where detect-secrets has no plugin or a too narrow one (current OpenAI and
  Anthropic keys, fine-grained GitHub PATs, connection strings, URL query tokens,
  Authorization headers, ~150 vendor prefixes, commands): one row each in `formats.py`, with
  examples that the tests run; whole private key blocks are paired in `context.py`;
* context rules: ``password=...`` / ``"token": "..."`` / ``--api-key ...`` assignments, and
  long high-entropy strings shortly after a secret-like word.

Speed: every pattern is precompiled and, where possible, starts with a literal so that ``re``
uses its fast prefix search; patterns that cannot are gated by a cheap substring test.  Nothing
can backtrack over more than a bounded window, and private key blocks are paired BEGIN-to-END
with a bisect instead of a lazy scan, so cost grows linearly with the input.
"""

from __future__ import annotations

from .matcher import MATCHERS, available_matchers
from .redactor import REDACTION_MARKER, Redactor, default_redactor, redact_bytes

__all__ = [
    "MATCHERS",
    "REDACTION_MARKER",
    "Redactor",
    "available_matchers",
    "default_redactor",
    "redact_bytes",
]
