"""The ``sandbox-memory`` command: inspect and correct memory in a workspace folder.

Exit codes: 0 done; 1 bad input (field and value named, an unknown workspace or conversation);
3 conflict (stale version, unknown key, refused change, no model for Refresh): re-read with
``show`` and retry; 4 the shared store (``--dsn``) cannot be reached; 2 usage error (from click).

The global options (``--root``, ``--memories-dir``, ``--sessions-dir``, ``--json``, ``-v``) are
accepted before the subcommand and after it. A new subcommand is declared with
:func:`command`, which adds them, and reads them with :func:`current`.

The read commands (``show``, ``log``, ``conversations``) must start fast: nothing here imports
the Agents SDK at module level, and the modules they use do not either.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from .engines.base import ENTRY_KINDS
from .errors import MemoryConfigError, MemoryConflict, MemoryStoreUnavailable

if TYPE_CHECKING:
    from .commands import ConversationView, LayoutView, MemoryClient
    from .store import LogRecord

EXIT_BAD_INPUT = 1
EXIT_CONFLICT = 3
EXIT_UNAVAILABLE = 4

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS_KEY = "sandbox_memory.cli.options"


@dataclass
class GlobalOptions:
    """The options every subcommand takes; the last one given wins."""

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


def global_options(f: F) -> F:
    """Add the global options to the group or to a subcommand."""

    decorators = [
        click.option(
            "--root",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            expose_value=False,
            callback=_keep,
            help="Workspace folder (a sandbox workspace root or an unpacked snapshot) [.]",
        ),
        click.option(
            "--memories-dir",
            "memories_dir",
            default=None,
            expose_value=False,
            callback=_keep,
            help="Memory folder inside the workspace [memories]",
        ),
        click.option(
            "--sessions-dir",
            "sessions_dir",
            default=None,
            expose_value=False,
            callback=_keep,
            help="Recorded runs inside the workspace [sessions]",
        ),
        click.option(
            "--dsn",
            "dsn",
            default=None,
            envvar="SANDBOX_MEMORY_DSN",
            expose_value=False,
            callback=_keep,
            help="A shared store: PostgreSQL DSN [$SANDBOX_MEMORY_DSN]; --root is then a "
            "working copy (a temporary folder if not given)",
        ),
        click.option(
            "--namespace",
            "namespace",
            default=None,
            envvar="SANDBOX_MEMORY_NAMESPACE",
            expose_value=False,
            callback=_keep,
            help="The layout's namespace in the shared store [$SANDBOX_MEMORY_NAMESPACE]",
        ),
        click.option(
            "--json",
            "as_json",
            is_flag=True,
            expose_value=False,
            callback=_keep,
            help="Machine-readable output.",
        ),
        click.option(
            "-v",
            "--verbose",
            "verbose",
            is_flag=True,
            expose_value=False,
            callback=_keep,
            help="Log what memory does.",
        ),
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
                fail("--namespace needs --dsn (or $SANDBOX_MEMORY_DSN)")
            return None
        if self.namespace is None:
            fail("--dsn needs --namespace (or $SANDBOX_MEMORY_NAMESPACE)")
        from .stores import PostgresStore

        try:
            return PostgresStore(self.dsn, namespace=self.namespace)
        except MemoryConfigError as exc:
            fail(str(exc))

    def where(self) -> str:
        if self.dsn is not None:
            from .stores import redact_dsn

            return f"namespace {self.namespace} of {redact_dsn(self.dsn)}"
        return str(self.root)

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
    """The global options of this invocation, checked; logging set up."""

    opts = _options(click.get_current_context())
    logging.basicConfig(
        level=logging.INFO if opts.verbose else logging.WARNING, format="%(levelname)s %(message)s"
    )
    cli = Cli(
        root=opts.root if opts.root is not None else Path("."),
        memories_dir=opts.memories_dir or "memories",
        sessions_dir=opts.sessions_dir or "sessions",
        as_json=opts.as_json,
        dsn=opts.dsn,
        namespace=opts.namespace,
        root_given=opts.root is not None,
    )
    try:
        from .config import MemoryLayoutConfig

        MemoryLayoutConfig(memories_dir=cli.memories_dir, sessions_dir=cli.sessions_dir)
    except MemoryConfigError as exc:
        fail(str(exc))
    return cli


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one memory call; a conflict or bad input becomes its message and exit code."""

    try:
        return asyncio.run(coro)
    except MemoryConflict as exc:
        click.echo(f"conflict: {exc}", err=True)
        if exc.current_version is not None:
            click.echo(f"current version: {exc.current_version}", err=True)
        sys.exit(EXIT_CONFLICT)
    except MemoryStoreUnavailable as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
    except (MemoryConfigError, ValueError) as exc:
        fail(str(exc))


def on_off(value: bool) -> str:
    return "on" if value else "off"


def format_time(ms: int | None) -> str:
    if ms is None:
        return "never"
    from .render import format_time as fmt

    return fmt(ms)


def print_view(cli: Cli, view: ConversationView | LayoutView) -> None:
    from .commands import ConversationView

    if cli.as_json:
        click.echo(view.model_dump_json(indent=2))
        return
    if isinstance(view, ConversationView):
        click.echo(f"conversation {view.rollout_id}  version {view.version}  head {view.head}")
        settings = ", ".join(f"{k}={on_off(v)}" for k, v in view.settings.items())
        overrides = ", ".join(f"{k}={on_off(v)}" for k, v in view.overrides.items()) or "none"
        click.echo(f"settings: {settings}   overrides: {overrides}")
        click.echo(f"processed items: {len(view.processed)}")
    else:
        click.echo(f"layout memory  version {view.version}")
    if not view.entries:
        click.echo("(no entries)")
    for entry in sorted(view.entries.values(), key=lambda e: e.updated_at, reverse=True):
        mark = "" if entry.status == "active" else "  [retracted]"
        owner = f"  [for {entry.person}]" if entry.person else ""
        click.echo(f"- {entry.key} ({entry.kind}){mark}{owner}: {entry.content}")
        refs = ", ".join(f"{s.conversation}#{s.item}" for s in entry.sources)
        click.echo(f"    updated {format_time(entry.updated_at)}; sources: {refs}")


def describe_change(record: LogRecord) -> str:
    """What a log record changed, in words: the command, the switches set, the rejections."""

    if not record.detail:
        return ""
    try:
        data = json.loads(record.detail)
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


@click.group()
@global_options
def main() -> None:
    """Inspect and correct sandbox-agent memory in a workspace folder.

    Global options work before or after the subcommand.
    """


def command(*args: Any, **kwargs: Any) -> Callable[[F], click.Command]:
    """Declare a subcommand of ``sandbox-memory``; it takes the global options too."""

    def decorate(f: F) -> click.Command:
        made: click.Command = main.command(*args, **kwargs)(global_options(f))
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
    required=True,
    help="The version you last saw (from `show`); a stale one is a conflict.",
)


@command()
@conversation_option
def show(conversation: str | None) -> None:
    """Entries, settings, overrides and version."""

    cli = current()
    client = cli.open(conversation)
    print_view(cli, run(client.view(conversation)))


@command()
def log() -> None:
    """Every change: version, time, cause, scope, keys and what changed."""

    cli = current()
    client = cli.open()
    records = run(client.log())
    if cli.as_json:
        click.echo(json.dumps([r.model_dump() for r in records], indent=2))
        return
    for r in records:
        keys = ", ".join(r.keys) or "-"
        line = f"v{r.version:<4} {format_time(r.at)}  {r.cause:<13} {r.scope:<30} {keys}"
        what = describe_change(r)
        click.echo(line + (f"  ({what})" if what else ""))


@command()
def conversations() -> None:
    """Every conversation: active and retracted entries, version, last update."""

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
    """Start memory in this workspace (or an empty memory for a conversation)."""

    cli = current()
    if not cli.root.is_dir():
        fail(f"workspace folder {cli.root} does not exist (check --root)")
    print_view(cli, run(cli.client().create(conversation)))


@command()
@click.argument("query")
@click.option(
    "--conversation", "-c", default=None, help="Only this conversation's material (rollout id)."
)
@click.option("--limit", "-n", type=int, default=10, show_default=True, help="Hits to show.")
@click.option("--person", default=None, help="Include this person's private memory.")
def search(query: str, conversation: str | None, limit: int, person: str | None) -> None:
    """Ranked search over entries, rollout summaries and recorded items."""

    from .search import format_hits

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
    key: str, content: str, kind: str, person: str | None, conversation: str | None, expected: int
) -> None:
    """Add a fact, or replace the fact with this key (revives a retracted one)."""

    from .commands import Remember

    cli = current()
    client = cli.open(conversation)
    command = Remember(key=key, content=content, kind=kind, person=person)
    print_view(cli, run(client.apply(command, expected=expected, conversation=conversation)))


@command()
@click.argument("key")
@conversation_option
@expected_option
def forget(key: str, conversation: str | None, expected: int) -> None:
    """Mark a fact retracted (an unknown key is a conflict)."""

    from .commands import Forget

    cli = current()
    client = cli.open(conversation)
    print_view(
        cli, run(client.apply(Forget(key=key), expected=expected, conversation=conversation))
    )


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
def configure(conversation: str, use: str | None, generate: str | None, expected: int) -> None:
    """Set a conversation's switches; an option you leave out stays as it is."""

    from .commands import Configure

    cli = current()
    client = cli.open(conversation)
    fields: dict[str, bool | None] = {}
    for name, raw in (("use", use), ("generate", generate)):
        given, value = _switch(raw)
        if given:
            fields[name] = value
    command = Configure(**fields)
    print_view(cli, run(client.apply(command, expected=expected, conversation=conversation)))


@command()
@conversation_option
@click.option("--expected", type=int, required=True, help="Required, but not checked.")
@click.option(
    "--engine",
    type=click.Choice(["auto", "offline", "model"]),
    default="auto",
    show_default=True,
    help="auto: the model where OPENAI_API_KEY is set, else the offline engine.",
)
def refresh(conversation: str | None, expected: int, engine: str) -> None:
    """Learn from unprocessed runs now (does nothing when generate is off)."""

    from .commands import Refresh

    cli = current()
    client = cli.open(conversation, engine=engine)
    print_view(cli, run(client.apply(Refresh(), expected=expected, conversation=conversation)))


if __name__ == "__main__":  # pragma: no cover
    main()


def _shared_runtime(cli: Cli) -> Any:
    """A runtime on ``--root`` with the ``--dsn`` store (both required)."""

    if not cli.root_given:
        fail("--root is required: the workspace to move memory from or to")
    store = cli.shared_store()
    if store is None:
        fail("--dsn and --namespace are required (or $SANDBOX_MEMORY_DSN/_NAMESPACE)")
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
    """Bring the --dsn store's memory into a workspace folder (created if missing)."""

    cli = current()
    cli.root.mkdir(parents=True, exist_ok=True)
    rt = _shared_runtime(cli)
    counts = run(_import(rt))
    click.echo(
        f"imported {cli.where()} into {cli.root}: {counts['entries']} layout entries, "
        f"{counts['rollouts']} rollouts"
    )
