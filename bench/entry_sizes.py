"""Where memory's characters go: entries by kind, what people said by part, MEMORY.md's own lines.

A script, not a test. Each LoCoMo dev conversation is fed as ``bench/quality.py`` feeds it (the
real SDK, the offline engine, one run per session, the sandbox closed after each); then every
active entry's characters are counted by what made it (what a person said on a day, a
preference, a decision, anything else), the text of what people said by part (the
``Name (day):`` lead, notes in brackets such as a shared photo's caption, asides in
parentheses such as a resolved date or the question a short answer answers, the sentences
themselves), and ``MEMORY.md`` by what it adds to the entries (each line's key and kind, its
sources comment, headings). Every figure is a share of the dialogue's characters.

    .venv/bin/python bench/entry_sizes.py                    # all dev conversations
    .venv/bin/python bench/entry_sizes.py --samples 26,30,41
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from quality import DEFAULT_DATA, feed, load_locomo  # noqa: E402

_SAID_RE = re.compile(r"^[^:()]{1,40} \([^)]*\d{4}\): ")
_LINE_RE = re.compile(r"^(- \*\*[^*]+\*\* \([a-z]+\): )(.*?)(  <!-- .*-->)?$")


def _kind(entry: dict[str, object]) -> str:
    content = str(entry["content"])
    if entry["kind"] == "fact" and _SAID_RE.match(content):
        return "what a person said on a day"
    return str(entry["kind"])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo-dev.zip")
    parser.add_argument("--samples", help="comma-separated sample ids (e.g. 26,30)")
    args = parser.parse_args()
    conversations = load_locomo(args.data)
    if args.samples:
        conversations = [c for c in conversations if c.sample in args.samples.split(",")]
    dialogue = 0
    kinds: dict[str, list[int]] = {}
    parts = {"lead": 0, "[notes]": 0, "(asides)": 0, "sentences": 0}
    md = {"entry text": 0, "key and kind": 0, "sources comments": 0, "other lines": 0}
    for conv in conversations:
        root = Path(tempfile.mkdtemp(prefix=f"sbm-sizes-{conv.sample}-"))
        try:
            state = await feed(conv, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        dialogue += sum(len(t.message) for s in conv.sessions for t in s.turns)
        for entry in state.entries:
            if entry.get("status") != "active":
                continue
            content = str(entry["content"])
            tally = kinds.setdefault(_kind(entry), [0, 0])
            tally[0] += 1
            tally[1] += len(content)
            lead = _SAID_RE.match(content)
            if entry["kind"] == "fact" and lead:
                body = content[lead.end() :]
                parts["lead"] += lead.end()
                notes = sum(len(m) for m in re.findall(r"\[[^\]]*\]", body))
                asides = sum(len(m) for m in re.findall(r"\([^)]*\)", body))
                parts["[notes]"] += notes
                parts["(asides)"] += asides
                parts["sentences"] += len(body) - notes - asides
        for line in state.memory_md.splitlines(keepends=True):
            match = _LINE_RE.match(line.rstrip("\n"))
            if match is None:
                md["other lines"] += len(line)
                continue
            md["key and kind"] += len(match.group(1)) + 1
            md["entry text"] += len(match.group(2))
            md["sources comments"] += len(match.group(3) or "")

    def share(n: int) -> str:
        return f"{n:>9,}  {n / max(dialogue, 1):.3f}"

    print(f"dialogue: {dialogue:,} characters ({', '.join(c.sample for c in conversations)})")
    print("\nactive entries, by what made them        entries  characters  share")
    for name, (count, chars) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        print(f"  {name:<38} {count:>7} {share(chars)}")
    total = sum(chars for _, chars in kinds.values())
    print(f"  {'all':<38} {sum(c for c, _ in kinds.values()):>7} {share(total)}")
    print("\nwhat people said, by part                         characters  share")
    for name, chars in parts.items():
        print(f"  {name:<46} {share(chars)}")
    print("\nMEMORY.md, by part                                characters  share")
    for name, chars in md.items():
        print(f"  {name:<46} {share(chars)}")
    print(f"  {'all':<46} {share(sum(md.values()))}")


if __name__ == "__main__":
    asyncio.run(main())
