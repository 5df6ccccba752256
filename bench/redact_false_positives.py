"""How often the redactor redacts ordinary text: the repository's docs and source, and LoCoMo.

Every redaction it would make is listed with its context, by source, so each can be judged by
hand: ordinary prose (the LoCoMo conversations: long chats between two people) should lose
nothing; the docs and the tests hold secret-shaped examples on purpose. The LoCoMo data is read
at run time from ``../shared/data/locomo-dev.zip`` (or ``--data``), never copied here.

Run: ``python bench/redact_false_positives.py [--data PATH] [--list]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import zipfile
from collections import Counter
from pathlib import Path

from sandbox_memory.redact import Redactor

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "locomo-dev.zip"


def repository_texts() -> dict[str, list[tuple[str, str]]]:
    """(name, text) of the docs and of the package source (tests hold secrets on purpose;
    the redactor's own modules are counted apart, their docstrings show secret forms)."""
    docs = sorted([*REPO.glob("*.md"), *(REPO / "docs").glob("*.md")])
    source = sorted((REPO / "src").rglob("*.py"))
    redactor = [p for p in source if p.parent.name == "redact"]  # documents secret forms
    return {
        "docs": [(str(p.relative_to(REPO)), p.read_text(errors="replace")) for p in docs],
        "source": [
            (str(p.relative_to(REPO)), p.read_text(errors="replace"))
            for p in source
            if p not in redactor
        ],
        "source:redact": [
            (str(p.relative_to(REPO)), p.read_text(errors="replace")) for p in redactor
        ],
    }


def locomo_texts(path: Path) -> list[tuple[str, str]]:
    """Every dialogue turn of the LoCoMo conversations, as the user message it would be."""
    out: list[tuple[str, str]] = []
    with zipfile.ZipFile(path) as archive:
        for name in sorted(n for n in archive.namelist() if n.endswith(".json")):
            raw = json.loads(archive.read(name))
            number = 1
            while f"session_{number}" in raw:
                for turn in raw[f"session_{number}"]:
                    text = str(turn.get("text") or "")
                    if turn.get("blip_caption"):
                        text += f" [shares a photo: {turn['blip_caption']}]"
                    out.append((f"{Path(name).stem}:{turn['dia_id']}", text))
                number += 1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--list", action="store_true", help="print every redaction")
    args = parser.parse_args()
    redactor = Redactor()
    sources = repository_texts()
    if args.data.is_file():
        sources["locomo"] = locomo_texts(args.data)
    else:
        print(f"LoCoMo data not found at {args.data}: skipped", file=sys.stderr)
    figures: dict[str, dict[str, int]] = {}
    for source, texts in sources.items():
        kinds: Counter[str] = Counter()
        chars = 0
        for name, text in texts:
            chars += len(text)
            for start, end, kind in redactor._spans(text):  # where each redaction is
                kinds[kind] += 1
                if args.list:
                    context = text[max(0, start - 50) : start] + "«" + text[start:end] + "»"
                    context += text[end : end + 30]
                    print(f"{source}\t{name}\t{kind}\t" + context.replace("\n", "\\n"))
        figures[source] = {"texts": len(texts), "chars": chars, "redactions": sum(kinds.values())}
        figures[source].update({f"kind:{k}": n for k, n in sorted(kinds.items())})
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
