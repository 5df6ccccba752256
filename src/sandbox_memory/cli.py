"""The ``sandbox-memory`` command: inspect and correct memory in a workspace folder.

Exit codes: 0 done; 1 bad input (field and value named, an unknown workspace, conversation or
key); 2 usage error (a missing or malformed option); 3 conflict (stale version, unknown key,
refused change, no model for Refresh): re-read with ``show`` and retry; 4 the shared store
(``--dsn``) cannot be reached. With ``--json`` an error is one JSON object on stderr.

The global options (``--root``, ``--memories-dir``, ``--sessions-dir``, ``--dsn``,
``--namespace``, ``--json``, ``-v``) are accepted before the subcommand and after it; a flag
given anywhere beats the environment (``$SANDBOX_MEMORY_DSN``, ``$SANDBOX_MEMORY_NAMESPACE``).
A new subcommand is declared with :func:`command`, which adds them, and reads them with
:func:`current`; its docstring ends with an example.

The read commands (``show``, ``get``, ``log``, ``conversations``, ``search``) must start fast:
nothing here imports the Agents SDK at module level, and the modules they use do not either.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, get_args

import click

from . import __version__, bounded
from .engines.base import ENTRY_KINDS
from .errors import MemoryConfigError, MemoryConflict, MemoryStoreUnavailable
from .stores.records import Cause

if TYPE_CHECKING:
    from .commands import Command, ConversationView, LayoutView, MemoryClient
    from .stores.records import LogRecord

EXIT_BAD_INPUT = 1
EXIT_USAGE = 2
EXIT_CONFLICT = 3
EXIT_UNAVAILABLE = 4

DSN_ENV = "SANDBOX_MEMORY_DSN"
NAMESPACE_ENV = "SANDBOX_MEMORY_NAMESPACE"

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS_KEY = "sandbox_memory.cli.options"


@dataclass
class GlobalOptions:
    """The global options given on the command line (before or after the subcommand); the
    last one given wins. ``None`` is "not given": only then does the environment count."""

    root: Path | None = None
    memories_dir: str | None = None
    sessions_dir: str | None = None
    as_json: bool = False
    verbose: bool = False
    dsn: str | None = None
    namespace: str | None = None


def _options(ctx: click.Context) -> GlobalOptions:
    opts: GlobalOptions = ctx.meta.setdefault(_OPTIONS_KEY, GlobalOptions())
    return opts


def _keep(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value is None or value is False:
        return  # not given here: a value given before the subcommand stays
    assert param.name is not None
    setattr(_options(ctx), param.name, value)


def global_options(f: F, *, hidden: bool = False) -> F:
    """Add the global options to the group (listed in its help) or to a subcommand (accepted
    there too, ``hidden`` so its help does not repeat them)."""

    def option(*decls: str, **attrs: Any) -> Callable[[F], F]:
        return click.option(
            *decls, default=None, expose_value=False, callback=_keep, hidden=hidden, **attrs
        )

    decorators = [
        option(
            "--root",
            type=click.Path(file_okay=False, path_type=Path),
            help="Workspace folder (a sandbox workspace root or an unpacked snapshot) [.]",
        ),
        option("--memories-dir", "memories_dir", help="Memory folder inside the workspace."),
        option("--sessions-dir", "sessions_dir", help="Recorded runs inside the workspace."),
        option(
            "--dsn",
            "dsn",
            help=f"A shared store: PostgreSQL DSN [${DSN_ENV}]; --root is then a working copy "
            "(a temporary folder if not given).",
        ),
        option(
            "--namespace",
            "namespace",
            help=f"The layout's namespace in the shared store [${NAMESPACE_ENV}].",
        ),
        option("--json", "as_json", is_flag=True, help="Machine-readable output and errors."),
        option("-v", "--verbose", "verbose", is_flag=True, help="Log what memory does."),
    ]
    for decorate in reversed(decorators):
        f = decorate(f)
    return f


@dataclass
class Cli:
    """What a subcommand works with: the workspace, its layout, the output mode."""

    root: Path
    memories_dir: str
    sessions_dir: str
    as_json: bool
    dsn: str | None = None
    namespace: str | None = None
    root_given: bool = True

    def shared_store(self) -> Any:
        """The ``--dsn``/``--namespace`` store, or ``None`` (the workspace alone)."""

        if self.dsn is None:
            if self.namespace is not None:
                fail(f"--namespace needs --dsn (or ${DSN_ENV})")
            return None
        if self.namespace is None:
            fail(f"--dsn needs --namespace (or ${NAMESPACE_ENV})")
        from .stores import PostgresStore

        try:
            return PostgresStore(self.dsn, namespace=self.namespace)
        except MemoryConfigError as exc:
            fail(str(exc))

    def where(self) -> str:
        """Where a command reads and writes, in words (no password)."""

        if self.dsn is not None:
            from .stores import redact_dsn

            return f"namespace {self.namespace} of {redact_dsn(self.dsn)}"
        return str(self.root.resolve())

    def client(self, engine: str = "auto") -> MemoryClient:
        from .commands import MemoryClient
        from .config import MemoryGenerateConfig, MemoryLayoutConfig

        layout = MemoryLayoutConfig(memories_dir=self.memories_dir, sessions_dir=self.sessions_dir)
        store = self.shared_store()
        return MemoryClient(
            self.root if (store is None or self.root_given) else None,
            store=store,
            layout=layout,
            generate=MemoryGenerateConfig(engine=engine),  # type: ignore[arg-type]
        )

    def open(self, conversation: str | None = None, *, engine: str = "auto") -> MemoryClient:
        """A client on existing memory: fails, naming it, on an unknown workspace or
        conversation (memory is only created by ``init``)."""

        client = self.client(engine)
        self.known(client, conversation)
        return client

    def known(self, client: MemoryClient, conversation: str | None = None) -> None:
        """Fail, naming it, unless the workspace (and ``conversation``) hold memory."""

        shared = client.runtime.shared
        if shared is not None:
            run(shared.refresh())  # the copy from the store
        elif not self.root.is_dir():
            fail(f"workspace folder {self.root} does not exist (check --root)")
        run(client.require(conversation))


def current() -> Cli:
    """The global options of this invocation, checked; logging set up.

    An option given on the command line, before or after the subcommand, is used; the
    environment only fills in one that was not given anywhere.
    """

    opts = _options(click.get_current_context())
    logging.basicConfig(
        level=logging.INFO if opts.verbose else logging.WARNING, format="%(levelname)s %(message)s"
    )
    cli = Cli(
        root=opts.root if opts.root is not None else Path("."),
        memories_dir=opts.memories_dir or "memories",
        sessions_dir=opts.sessions_dir or "sessions",
        as_json=opts.as_json,
        dsn=opts.dsn if opts.dsn is not None else os.environ.get(DSN_ENV) or None,
        namespace=(
            opts.namespace if opts.namespace is not None else os.environ.get(NAMESPACE_ENV) or None
        ),
        root_given=opts.root is not None,
    )
    try:
        from .config import MemoryLayoutConfig

        MemoryLayoutConfig(memories_dir=cli.memories_dir, sessions_dir=cli.sessions_dir)
    except MemoryConfigError as exc:
        fail(str(exc))
    return cli


# ---------------------------------------------------------------------------------- errors

_ERROR_KINDS = {
    EXIT_BAD_INPUT: "bad_input",
    EXIT_USAGE: "usage",
    EXIT_CONFLICT: "conflict",
    EXIT_UNAVAILABLE: "unavailable",
}


def _wants_json() -> bool:
    ctx = click.get_current_context(silent=True)
    return ctx is not None and _options(ctx).as_json


def report_error(
    message: str, code: int, *, current_version: int | None = None, as_json: bool | None = None
) -> None:
    """An error on stderr: words, or with ``--json`` one JSON object
    ``{"error": {"kind", "exit_code", "message", "current_version"}}``."""

    if as_json if as_json is not None else _wants_json():
        error = {
            "kind": _ERROR_KINDS.get(code, "error"),
            "exit_code": code,
            "message": message,
            "current_version": current_version,
        }
        click.echo(json.dumps({"error": error}), err=True)
        return
    if code == EXIT_CONFLICT:
        click.echo(f"conflict: {message}", err=True)
        if current_version is not None:
            click.echo(f"current version: {current_version}", err=True)
        return
    click.echo(f"error: {message}", err=True)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    report_error(message, code)
    sys.exit(code)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one memory call; a conflict or bad input becomes its message and exit code."""

    try:
        return asyncio.run(coro)
    except MemoryConflict as exc:
        report_error(str(exc), EXIT_CONFLICT, current_version=exc.current_version)
        sys.exit(EXIT_CONFLICT)
    except MemoryStoreUnavailable as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
    except (MemoryConfigError, ValueError) as exc:
        fail(str(exc))


# ---------------------------------------------------------------------------------- output


def on_off(value: bool) -> str:
    return "on" if value else "off"


def format_time(ms: int | None) -> str:
    if ms is None:
        return "never"
    from .render.files import format_time as fmt

    return fmt(ms)


def scope_words(conversation: str | None) -> str:
    return "layout memory" if conversation is None else f"conversation {conversation}"


def print_view(cli: Cli, view: ConversationView | LayoutView, *, kinds: Sequence[str] = ()) -> None:
    from .commands import ConversationView

    if kinds:
        entries = {k: e for k, e in view.entries.items() if e.kind in kinds}
        view = view.model_copy(update={"entries": entries})
    if cli.as_json:
        click.echo(view.model_dump_json(indent=2))
        return
    if isinstance(view, ConversationView):
        head = f"  head {view.head}" if view.head is not None else ""
        click.echo(f"conversation {view.rollout_id}  version {view.version}{head}")
        settings = ", ".join(f"{k}={on_off(v)}" for k, v in view.settings.items())
        overrides = ", ".join(f"{k}={on_off(v)}" for k, v in view.overrides.items()) or "none"
        click.echo(f"settings: {settings}   overrides: {overrides}")
        click.echo(f"processed items: {len(view.processed)}")
    else:
        click.echo(f"layout memory  version {view.version}")
    if not view.entries:
        click.echo(f"(no {'/'.join(kinds)} entries)" if kinds else "(no entries)")
    for entry in sorted(view.entries.values(), key=lambda e: e.updated_at, reverse=True):
        mark = "" if entry.status == "active" else "  [retracted]"
        owner = f"  [for {entry.person}]" if entry.person else ""
        click.echo(f"- {entry.key} ({entry.kind}){mark}{owner}: {entry.content}")
        refs = ", ".join(f"{s.conversation}#{s.item}" for s in entry.sources)
        click.echo(f"    updated {format_time(entry.updated_at)}; sources: {refs}")


def print_write(
    cli: Cli, verb: str, conversation: str | None, view: ConversationView | LayoutView
) -> None:
    """What a write did and where it wrote: stdout in words (before the view), stderr with
    ``--json`` (stdout is the view)."""

    line = f"{verb}: {scope_words(conversation)} in {cli.where()}, now at version {view.version}"
    click.echo(line, err=cli.as_json)
    print_view(cli, view)


def describe_change(record: LogRecord) -> str:
    """What a log record changed, in words: the command, the switches set, the rejections."""

    if not record.detail:
        return ""
    try:
        data = bounded.loads(record.detail, limit=bounded.MAX_FIELD_BYTES, what="a log detail")
    except ValueError:
        return record.detail  # prose: rejections, forgotten conversations
    if not isinstance(data, dict):
        return record.detail
    if "configure" in data and isinstance(data["configure"], dict):
        parts = [
            f"{k}={'default' if v is None else on_off(bool(v))}"
            for k, v in sorted(data["configure"].items())
        ]
        return "configure " + ", ".join(parts)
    command = data.get("command")
    if isinstance(command, dict) and isinstance(command.get("_tag"), str):
        return str(command["_tag"]).lower()
    return record.detail


def log_line(record: LogRecord) -> str:
    keys = ", ".join(record.keys) or "-"
    line = (
        f"v{record.version:<4} {format_time(record.at)}  {record.cause:<13} "
        f"{record.scope:<30} {keys}"
    )
    what = describe_change(record)
    return line + (f"  ({what})" if what else "")


# ----------------------------------------------------------------------------- the command


_ARGV_KEY = "sandbox_memory.cli.argv"


class JsonUsageError(click.ClickException):
    """A usage error shown as the JSON error object (``--json`` was among the arguments)."""

    def __init__(self, exc: click.ClickException) -> None:
        super().__init__(exc.format_message())
        self.exit_code = exc.exit_code  # type: ignore[misc]  # the error it stands for

    def show(self, file: Any = None) -> None:
        report_error(self.message, self.exit_code, as_json=True)


def _as_json(ctx: click.Context, exc: click.ClickException) -> click.ClickException:
    """``exc`` as a JSON error when ``--json`` was asked for, even where it comes after the
    argument that failed to parse."""

    argv: list[str] = ctx.meta.get(_ARGV_KEY, [])
    argv = argv[: argv.index("--")] if "--" in argv else argv
    if isinstance(exc, JsonUsageError) or not (_options(ctx).as_json or "--json" in argv):
        return exc
    return JsonUsageError(exc)


class MemoryGroup(click.Group):
    """The ``sandbox-memory`` group: usage errors are reported as JSON under ``--json``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_ARGV_KEY] = list(args)
        try:
            return super().parse_args(ctx, args)
        except click.ClickException as exc:
            raise _as_json(ctx, exc) from exc

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            raise _as_json(ctx, exc) from exc


@click.group(
    cls=MemoryGroup,
    epilog="Run `sandbox-memory COMMAND --help` for a command's own options and an example. "
    "Exit status: 0 done, 1 bad input, 2 usage error, 3 conflict (re-read with `show`), "
    "4 the shared store cannot be reached.",
)
@click.version_option(__version__, "--version", prog_name="sandbox-memory")
@global_options
def main() -> None:
    """Inspect and correct sandbox-agent memory in a workspace folder or a shared store.

    The options below are global: they work before or after the command, and a flag given
    anywhere beats the environment.
    """


_GLOBAL_EPILOG = (
    "Global options (--root, --memories-dir, --sessions-dir, --dsn, --namespace, --json, -v) "
    "work here too: see `sandbox-memory --help`."
)


def command(*args: Any, **kwargs: Any) -> Callable[[F], click.Command]:
    """Declare a subcommand of ``sandbox-memory``; it takes the global options too."""

    kwargs.setdefault("epilog", _GLOBAL_EPILOG)

    def decorate(f: F) -> click.Command:
        made: click.Command = main.command(*args, **kwargs)(global_options(f, hidden=True))
        return made

    return decorate


conversation_option = click.option(
    "--conversation",
    "-c",
    default=None,
    help="Rollout id of a conversation; without it, the layout memory.",
)
expected_option = click.option(
    "--expected",
    type=int,
    default=None,
    help="The version you last saw (from `show`); a stale one is a conflict. Required from "
    "a program; at a terminal, left out, the current version is read and the change applies "
    "only if nothing changed in between.",
)


def at_terminal() -> bool:
    """Whether a person is typing the command (its input is a terminal)."""

    return sys.stdin.isatty()


def apply(
    cli: Cli,
    client: MemoryClient,
    command: Command,
    *,
    expected: int | None,
    conversation: str | None,
) -> ConversationView | LayoutView:
    """Apply ``command`` at the version given, or, at a terminal without ``--expected``, at the
    version read just before: a change made in between is a conflict, as with a stale
    ``--expected``."""

    if expected is None:
        if not at_terminal():
            raise click.UsageError(
                "--expected is required when the input is not a terminal: pass the version "
                "you last saw (`sandbox-memory show` prints it)"
            )
        expected = run(client.view(conversation)).version
    return run(client.apply(command, expected=expected, conversation=conversation))


@command()
@conversation_option
@click.option(
    "--kind",
    "kinds",
    type=click.Choice(ENTRY_KINDS),
    multiple=True,
    help="Only entries of this kind (repeat for several).",
)
def show(conversation: str | None, kinds: tuple[str, ...]) -> None:
    """Entries, settings, overrides and version.

    \b
    Example:
      sandbox-memory --root ws show -c fix-invoice-bug --kind procedure
    """

    cli = current()
    client = cli.open(conversation)
    print_view(cli, run(client.view(conversation)), kinds=kinds)


@command()
@click.argument("key")
@conversation_option
def get(key: str, conversation: str | None) -> None:
    """One entry: its content, sources and every change to it.

    \b
    Example:
      sandbox-memory --root ws get test-command
    """

    cli = current()
    client = cli.open(conversation)
    view = run(client.view(conversation))
    entry = view.entries.get(key)
    if entry is None:
        known = sorted(view.entries)
        listed = ", ".join(known[:10]) + (", ..." if len(known) > 10 else "")
        fail(
            f"no entry {key!r} in {scope_words(conversation)} (known: {listed or 'none'}; "
            "`sandbox-memory show` lists them)"
        )
    from .commands import ConversationView

    scope = f"conversation:{view.rollout_id}" if isinstance(view, ConversationView) else "layout"
    history = [r for r in run(client.log()) if r.scope == scope and key in r.keys]
    if cli.as_json:
        data = {
            "scope": scope,
            "version": view.version,
            "entry": entry.model_dump(),
            "history": [r.model_dump() for r in history],
        }
        click.echo(json.dumps(data, indent=2))
        return
    status = "" if entry.status == "active" else "  [retracted]"
    owner = f"  [for {entry.person}]" if entry.person else ""
    click.echo(f"{entry.key} ({entry.kind}){status}{owner} in {scope_words(conversation)}")
    click.echo(f"  {entry.content}")
    click.echo(
        f"updated {format_time(entry.updated_at)}; {scope_words(conversation)} version "
        f"{view.version}"
    )
    click.echo("sources:")
    for source in entry.sources:
        click.echo(f"  {source.conversation}#{source.item}")
    click.echo("history:")
    for record in history:
        click.echo(f"  {log_line(record)}")
    if not history:
        click.echo("  (no logged change names it)")


_RELATIVE = re.compile(r"^(\d+)([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class When(click.ParamType):  # type: ignore[type-arg]
    """A point in time: ISO 8601 (``2026-12-01``, ``2026-12-01T14:30``; UTC unless it says
    otherwise, as the log prints times) or a span back from now (``30m``, ``2h``, ``7d``)."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        relative = _RELATIVE.match(text)
        if relative:
            span = timedelta(seconds=int(relative.group(1)) * _UNIT_SECONDS[relative.group(2)])
            return int((datetime.now(tz=timezone.utc) - span).timestamp() * 1000)
        try:
            at = datetime.fromisoformat(text)
        except ValueError:
            self.fail(
                f"{text!r} is neither an ISO 8601 time (2026-12-01, 2026-12-01T14:30) nor a "
                "span back from now (30m, 2h, 7d)",
                param,
                ctx,
            )
        if at.tzinfo is None:
            at = at.replace(tzinfo=timezone.utc)
        return int(at.timestamp() * 1000)


def _scope_order(record: LogRecord) -> tuple[int, str, int]:
    return (0 if record.scope == "layout" else 1, record.scope, record.version)


@command()
@click.option("--conversation", "-c", default=None, help="Only this conversation's changes.")
@click.option("--key", "-k", default=None, help="Only changes naming this key.")
@click.option(
    "--cause",
    "causes",
    type=click.Choice(get_args(Cause)),
    multiple=True,
    help="Only changes of this cause (repeat for several).",
)
@click.option("--since", type=When(), default=None, help="Changes at or after this time.")
@click.option("--until", type=When(), default=None, help="Changes before this time.")
def log(
    conversation: str | None,
    key: str | None,
    causes: tuple[str, ...],
    since: int | None,
    until: int | None,
) -> None:
    """Every change: version, time, cause, scope, keys and what changed.

    Layout memory's changes come first, then each conversation's, each in version order.
    Times are UTC; --since and --until take ISO 8601 times or spans back from now.

    \b
    Example:
      sandbox-memory --root ws log -c fix-invoice-bug --cause person --since 7d
    """

    cli = current()
    client = cli.open(conversation)
    from .stores.segments import safe_rollout_id

    scope = f"conversation:{safe_rollout_id(conversation)}" if conversation is not None else None
    records = [
        r
        for r in run(client.log())
        if (scope is None or r.scope == scope)
        and (key is None or key in r.keys)
        and (not causes or r.cause in causes)
        and (since is None or r.at >= since)
        and (until is None or r.at < until)
    ]
    records.sort(key=_scope_order)
    if cli.as_json:
        click.echo(json.dumps([r.model_dump() for r in records], indent=2))
        return
    for r in records:
        click.echo(log_line(r))


@command()
def conversations() -> None:
    """Every conversation: active and retracted entries, version, last update.

    \b
    Example:
      sandbox-memory --root ws conversations
    """

    cli = current()
    client = cli.open()
    found = run(client.conversations())
    if cli.as_json:
        click.echo(json.dumps([c.model_dump() for c in found], indent=2))
        return
    if not found:
        click.echo("(no conversations)")
    for c in found:
        recorded = "" if c.recorded else "  (no recorded runs)"
        click.echo(
            f"{c.rollout_id}  {c.active} active, {c.retracted} retracted  version {c.version}  "
            f"updated {format_time(c.updated_at)}{recorded}"
        )


@command()
@conversation_option
def init(conversation: str | None) -> None:
    """Start memory in this workspace (or an empty memory for a conversation).

    \b
    Example:
      sandbox-memory --root ws init -c trip
    """

    cli = current()
    if not cli.root.is_dir():
        fail(f"workspace folder {cli.root} does not exist (check --root)")
    print_write(cli, "init", conversation, run(cli.client().create(conversation)))


@command()
@click.argument("query")
@click.option(
    "--conversation", "-c", default=None, help="Only this conversation's material (rollout id)."
)
@click.option("--limit", "-n", type=int, default=10, show_default=True, help="Hits to show.")
@click.option("--person", default=None, help="Include this person's private memory.")
def search(query: str, conversation: str | None, limit: int, person: str | None) -> None:
    """Ranked search over entries, rollout summaries and recorded items.

    \b
    Example:
      sandbox-memory --root ws search "tax rate" -n 5
    """

    from .search.index import format_hits

    cli = current()
    client = cli.open(conversation)
    hits = run(client.search(query, conversation=conversation, limit=limit, person=person))
    if cli.as_json:
        click.echo(json.dumps([h.model_dump() for h in hits], indent=2))
        return
    click.echo(format_hits(hits))


@command()
@click.argument("key")
@click.argument("content")
@click.option("--kind", type=click.Choice(ENTRY_KINDS), default="fact", show_default=True)
@click.option("--person", default=None, help="Make it a private entry of this person.")
@conversation_option
@expected_option
def remember(
    key: str,
    content: str,
    kind: str,
    person: str | None,
    conversation: str | None,
    expected: int | None,
) -> None:
    """Add a fact, or replace the fact with this key (revives a retracted one).

    \b
    Example:
      sandbox-memory --root ws remember invoice-owner "Finance owns the rounding rules." \\
          -c fix-invoice-bug --expected 1
    """

    from .commands import Remember

    cli = current()
    client = cli.open(conversation)
    command = Remember(key=key, content=content, kind=kind, person=person)
    view = apply(cli, client, command, expected=expected, conversation=conversation)
    print_write(cli, f"remember {key}", conversation, view)


@command()
@click.argument("key")
@conversation_option
@expected_option
def forget(key: str, conversation: str | None, expected: int | None) -> None:
    """Mark a fact retracted (an unknown key is a conflict).

    \b
    Example:
      sandbox-memory --root ws forget test-command --expected 3
    """

    from .commands import Forget

    cli = current()
    client = cli.open(conversation)
    view = apply(cli, client, Forget(key=key), expected=expected, conversation=conversation)
    print_write(cli, f"forget {key}", conversation, view)


def _switch(value: str | None) -> tuple[bool, bool | None]:
    if value is None:
        return False, None
    return True, {"on": True, "true": True, "off": False, "false": False, "default": None}[value]


SWITCH = click.Choice(["on", "off", "true", "false", "default"])


@command()
@click.option("--conversation", "-c", required=True, help="Rollout id of the conversation.")
@click.option("--use", type=SWITCH, default=None, help="on/off, or default to drop the override.")
@click.option("--generate", type=SWITCH, default=None, help="on/off, or default.")
@expected_option
def configure(
    conversation: str, use: str | None, generate: str | None, expected: int | None
) -> None:
    """Set a conversation's switches; an option you leave out stays as it is.

    \b
    Example:
      sandbox-memory --root ws configure -c fix-invoice-bug --generate off --expected 3
    """

    from .commands import Configure

    if use is None and generate is None:
        raise click.UsageError("nothing to configure: give --use, --generate or both")
    cli = current()
    client = cli.open(conversation)
    fields: dict[str, bool | None] = {}
    for name, raw in (("use", use), ("generate", generate)):
        given, value = _switch(raw)
        if given:
            fields[name] = value
    command = Configure(**fields)
    view = apply(cli, client, command, expected=expected, conversation=conversation)
    print_write(cli, "configure", conversation, view)


@command()
@conversation_option
@click.option(
    "--engine",
    type=click.Choice(["auto", "offline", "model"]),
    default="auto",
    show_default=True,
    help="auto: the model where OPENAI_API_KEY is set, else the offline engine.",
)
def refresh(conversation: str | None, engine: str) -> None:
    """Learn from unprocessed runs now (does nothing when generate is off).

    \b
    Example:
      sandbox-memory --root ws refresh -c fix-invoice-bug --engine offline
    """

    cli = current()
    client = cli.open(conversation, engine=engine)
    print_write(cli, "refresh", conversation, run(client.refresh(conversation)))


@command()
@conversation_option
def adopt(conversation: str | None) -> None:
    """Vouch for recorded runs memory cannot verify, so they are learned from.

    Runs recorded by the SDK's own memory, or on a machine whose key this one does not hold
    (a restored snapshot), carry no seal this host verifies and are skipped. Adopting seals
    them with this host's key; whatever the agent appended to those files is adopted too.
    Without a conversation, memory's own store records written before records were sealed
    (layout shards, conversation records, the registry) are sealed as well.
    Run it while no sandbox session records into the workspace.

    \b
    Example:
      sandbox-memory --root ws adopt
    """

    cli = current()
    client = cli.client("offline")
    if not cli.root.is_dir():
        fail(f"workspace folder {cli.root} does not exist (check --root)")
    counts = run(client.adopt(conversation))
    click.echo(
        f"adopted {counts['adopted']} run line(s); {counts['verified']} already verified; "
        f"{counts['unreadable']} unreadable, left as they are"
        + (
            f"; sealed {counts['records_adopted']} store record(s)"
            if "records_adopted" in counts
            else ""
        )
    )


def _shared_runtime(cli: Cli) -> Any:
    """A runtime on ``--root`` with the ``--dsn`` store (both required)."""

    if not cli.root_given:
        fail("--root is required: the workspace to move memory from or to")
    store = cli.shared_store()
    if store is None:
        fail(f"--dsn and --namespace are required (or ${DSN_ENV} and ${NAMESPACE_ENV})")
    from .commands import MemoryClient
    from .config import MemoryGenerateConfig, MemoryLayoutConfig

    layout = MemoryLayoutConfig(memories_dir=cli.memories_dir, sessions_dir=cli.sessions_dir)
    client = MemoryClient(
        cli.root, store=store, layout=layout, generate=MemoryGenerateConfig(engine="offline")
    )
    return client.runtime


async def _export(rt: Any) -> dict[str, int]:
    async with rt.shared.session() as fence:
        if fence is None:
            raise MemoryStoreUnavailable(f"{rt.shared.store.describe()} is unreachable")
    layout = await rt.store.load_layout()
    return {"entries": len(layout.entries), "rollouts": len(await rt.shared.store.rollouts())}


async def _import(rt: Any) -> dict[str, int]:
    await rt.shared.push_segments()  # the folder's own runs are never dropped
    if await rt.shared.has_unsent_changes():
        raise MemoryConflict(
            "the workspace holds memory the store does not have: send it first with "
            "`sandbox-memory export`, or import into an empty folder"
        )
    await rt.shared.pull()
    layout = await rt.store.load_layout()
    return {"entries": len(layout.entries), "rollouts": len(await rt.shared.store.rollouts())}


@command("export")
def export_cmd() -> None:
    """Send a workspace's memory (runs, entries, log, notes) to the --dsn store.

    Entries the store already holds in another state are kept as the store has them (each
    is reported as a rejected change).

    \b
    Example:
      sandbox-memory export --root ws --dsn "postgresql:///memory?host=/tmp/pg" \\
          --namespace acme-eng
    """

    cli = current()
    if not cli.root.is_dir():
        fail(f"workspace folder {cli.root} does not exist (check --root)")
    rt = _shared_runtime(cli)
    counts = run(_export(rt))
    click.echo(
        f"exported {cli.root} to {cli.where()}: {counts['entries']} layout entries, "
        f"{counts['rollouts']} rollouts in the store"
    )


@command("import")
def import_cmd() -> None:
    """Bring the --dsn store's memory into a workspace folder (created if missing).

    \b
    Example:
      sandbox-memory import --root copy --dsn "postgresql:///memory?host=/tmp/pg" \\
          --namespace acme-eng
    """

    cli = current()
    cli.root.mkdir(parents=True, exist_ok=True)
    rt = _shared_runtime(cli)
    counts = run(_import(rt))
    click.echo(
        f"imported {cli.where()} into {cli.root}: {counts['entries']} layout entries, "
        f"{counts['rollouts']} rollouts"
    )


@command("mcp")
@click.option(
    "--allow-writes",
    is_flag=True,
    help="Also serve memory_remember, memory_forget and memory_configure (read-only without).",
)
@click.option(
    "--person",
    default=None,
    help="Whom the server acts for: their private entries are visible, and private Remember "
    "is theirs. Without it, shared memory only. No tool can change it.",
)
def mcp_cmd(allow_writes: bool, person: str | None) -> None:
    """Serve this memory to MCP clients over stdio: Claude Desktop, Codex, the Agents SDK's
    MCPServerStdio (docs/mcp.md).

    \b
    Example:
      sandbox-memory --root ./workspace mcp --person ann --allow-writes
    """

    from .mcp_server import serve_stdio

    cli = current()
    if cli.dsn is None and not cli.root.is_dir():
        fail(f"workspace folder {cli.root} does not exist (check --root)")
    run(serve_stdio(cli.client(), person=person, allow_writes=allow_writes))


if __name__ == "__main__":  # pragma: no cover (after every command, so --help lists them all)
    main()
