"""The ``sandbox-memory`` command: inspect and correct memory in a workspace folder.

Exit codes: 0 done; 1 bad input (field and value named); 3 conflict (stale version, unknown
key, refused change): re-read with ``show`` and retry; 2 usage error (from click).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from .commands import (
    Configure,
    ConversationView,
    Forget,
    LayoutView,
    MemoryClient,
    Refresh,
    Remember,
)
from .config import MemoryGenerateConfig, MemoryLayoutConfig
from .engines.base import ENTRY_KINDS
from .errors import MemoryConfigError, MemoryConflict
from .render import format_time

EXIT_BAD_INPUT = 1
EXIT_CONFLICT = 3


class _Ctx:
    def __init__(self, root: Path, memories_dir: str, sessions_dir: str, as_json: bool) -> None:
        self.root = root
        self.layout = MemoryLayoutConfig(memories_dir=memories_dir, sessions_dir=sessions_dir)
        self.as_json = as_json

    def client(self, engine: str = "offline") -> MemoryClient:
        return MemoryClient(
            self.root,
            layout=self.layout,
            generate=MemoryGenerateConfig(engine=engine),  # type: ignore[arg-type]
        )


def _run(coro: Any) -> Any:
    try:
        return asyncio.run(coro)
    except MemoryConflict as exc:
        click.echo(f"conflict: {exc}", err=True)
        if exc.current_version is not None:
            click.echo(f"current version: {exc.current_version}", err=True)
        sys.exit(EXIT_CONFLICT)
    except (MemoryConfigError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)


def _print_view(ctx: _Ctx, view: ConversationView | LayoutView) -> None:
    if ctx.as_json:
        click.echo(view.model_dump_json(indent=2))
        return
    if isinstance(view, ConversationView):
        click.echo(f"conversation {view.rollout_id}  version {view.version}  head {view.head}")
        settings = ", ".join(f"{k}={'on' if v else 'off'}" for k, v in view.settings.items())
        overrides = ", ".join(f"{k}={v}" for k, v in view.overrides.items()) or "none"
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


@click.group()
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Workspace folder (a sandbox workspace root or an unpacked snapshot).",
)
@click.option("--memories-dir", default="memories", show_default=True)
@click.option("--sessions-dir", default="sessions", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("-v", "--verbose", is_flag=True, help="Log what memory does.")
@click.pass_context
def main(
    ctx: click.Context,
    root: Path,
    memories_dir: str,
    sessions_dir: str,
    as_json: bool,
    verbose: bool,
) -> None:
    """Inspect and correct sandbox-agent memory in a workspace folder."""

    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s"
    )
    try:
        ctx.obj = _Ctx(root, memories_dir, sessions_dir, as_json)
    except MemoryConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)


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


@main.command()
@conversation_option
@click.pass_obj
def show(ctx: _Ctx, conversation: str | None) -> None:
    """Entries, settings, overrides and version."""

    _print_view(ctx, _run(ctx.client().view(conversation)))


@main.command()
@click.pass_obj
def log(ctx: _Ctx) -> None:
    """Every change: version, time, cause and keys."""

    records = _run(ctx.client().log())
    if ctx.as_json:
        click.echo(json.dumps([r.model_dump() for r in records], indent=2))
        return
    for r in records:
        keys = ", ".join(r.keys) or "-"
        line = f"v{r.version:<4} {format_time(r.at)}  {r.cause:<13} {r.scope:<30} {keys}"
        click.echo(line + (f"  ({r.detail})" if r.detail and r.cause != "person" else ""))


@main.command()
@click.argument("key")
@click.argument("content")
@click.option("--kind", type=click.Choice(ENTRY_KINDS), default="fact", show_default=True)
@click.option("--person", default=None, help="Make it a private entry of this person.")
@conversation_option
@expected_option
@click.pass_obj
def remember(
    ctx: _Ctx,
    key: str,
    content: str,
    kind: str,
    person: str | None,
    conversation: str | None,
    expected: int,
) -> None:
    """Add a fact, or replace the fact with this key (revives a retracted one)."""

    command = Remember(key=key, content=content, kind=kind, person=person)
    _print_view(
        ctx, _run(ctx.client().apply(command, expected=expected, conversation=conversation))
    )


@main.command()
@click.argument("key")
@conversation_option
@expected_option
@click.pass_obj
def forget(ctx: _Ctx, key: str, conversation: str | None, expected: int) -> None:
    """Mark a fact retracted (an unknown key is a conflict)."""

    view = _run(ctx.client().apply(Forget(key=key), expected=expected, conversation=conversation))
    _print_view(ctx, view)


def _switch(value: str | None) -> tuple[bool, bool | None]:
    if value is None:
        return False, None
    return True, {"on": True, "true": True, "off": False, "false": False, "default": None}[value]


SWITCH = click.Choice(["on", "off", "true", "false", "default"])


@main.command()
@click.option("--conversation", "-c", required=True, help="Rollout id of the conversation.")
@click.option("--use", type=SWITCH, default=None, help="on/off, or default to drop the override.")
@click.option("--generate", type=SWITCH, default=None, help="on/off, or default.")
@expected_option
@click.pass_obj
def configure(
    ctx: _Ctx, conversation: str, use: str | None, generate: str | None, expected: int
) -> None:
    """Set a conversation's switches; an option you leave out stays as it is."""

    fields: dict[str, bool | None] = {}
    for name, raw in (("use", use), ("generate", generate)):
        given, value = _switch(raw)
        if given:
            fields[name] = value
    command = Configure(**fields)
    _print_view(
        ctx, _run(ctx.client().apply(command, expected=expected, conversation=conversation))
    )


@main.command()
@conversation_option
@click.option("--expected", type=int, required=True, help="Required, but not checked.")
@click.option(
    "--engine",
    type=click.Choice(["offline", "model", "auto"]),
    default="offline",
    show_default=True,
)
@click.pass_obj
def refresh(ctx: _Ctx, conversation: str | None, expected: int, engine: str) -> None:
    """Learn from unprocessed runs now (does nothing when generate is off)."""

    view = _run(ctx.client(engine).apply(Refresh(), expected=expected, conversation=conversation))
    _print_view(ctx, view)


if __name__ == "__main__":  # pragma: no cover
    main()
