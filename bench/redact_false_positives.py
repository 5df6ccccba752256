"""How often the redactor redacts ordinary text, and how often it catches a secret.

False positives: the repository's docs and source, LoCoMo, and real identifiers: package
names, ``name==version`` pins and release file names (``name-version.tar.gz``) from the package
lists of npm, PyPI, NuGet, Maven and Go modules, each also made into a memory key (is it refused
as a credential?). True positives: the red-team corpus of tests/adversarial_corpus.py (is every
secret gone?), and keys made from its provider tokens (refused?).

Every redaction it would make is listed with its context, by source, so each can be judged by
hand: ordinary prose (the LoCoMo conversations: long chats between two people) should lose
nothing; the docs and the tests hold secret-shaped examples on purpose. The LoCoMo data is read
at run time from ``../shared/data/locomo-dev.zip`` (or ``--data``), the package lists from
``--packages`` (a folder of ``*.tsv`` lists, first column the name, second the version); none
is copied here.

Run: ``python bench/redact_false_positives.py [--data PATH] [--packages DIR]
[--per-list N] [--list]``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import zipfile
from collections import Counter
from pathlib import Path

from sandbox_memory.redact import Redactor
from sandbox_memory.rules import key_problem

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "locomo-dev.zip"
DEFAULT_PACKAGES = Path("/work/.library/env/packages")
PER_LIST = 20_000
"""Packages taken from each list (evenly spread over it): enough for rates to a tenth of a
percent, a minute of scanning in all."""


def identifier_texts(folder: Path, per_list: int) -> dict[str, list[tuple[str, str]]]:
    """Package names, pins and release file names from each ``*.tsv`` list of ``folder``."""
    out: dict[str, list[tuple[str, str]]] = {"identifiers": []}
    for path in sorted(folder.glob("*.tsv")):
        rows = path.read_text(errors="replace").splitlines()[1:]
        step = max(1, len(rows) // per_list)
        for row in rows[::step][:per_list]:
            cells = row.split("\t")
            name = cells[0].strip()
            version = cells[1].strip().split()[0] if len(cells) > 1 and cells[1].strip() else ""
            if not name:
                continue
            out["identifiers"].append((f"{path.stem}:name", name))
            if version:
                out["identifiers"].append((f"{path.stem}:pin", f"{name}=={version}"))
                leaf = name.rsplit("/", 1)[-1].rsplit(":", 1)[-1]
                out["identifiers"].append((f"{path.stem}:file", f"{leaf}-{version}.tar.gz"))
    return out


def as_key(text: str) -> str:
    """``text`` as a memory key: lowercase ``a-z 0-9 . _ -``, at most 64 characters."""
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")[:64].strip("-._")


def key_rates(redactor: Redactor, identifiers: list[tuple[str, str]]) -> dict[str, object]:
    """Identifiers made into keys: how many are refused as credentials (false positives)."""
    keys = sorted({k for _, text in identifiers if (k := as_key(text))})
    refused = [k for k in keys if key_problem(k, redactor)]
    return {
        "keys": len(keys),
        "refused": len(refused),
        "rate": round(len(refused) / max(1, len(keys)), 5),
        "examples": refused[:12],
    }


def true_positives(redactor: Redactor) -> dict[str, object]:
    """The red-team corpus: cases with nothing of a secret left, and provider tokens made into
    keys that are refused."""
    sys.path.insert(0, str(REPO / "tests"))
    from adversarial_corpus import CASES, leaks

    leaked = [case.name for case in CASES if leaks(case, redactor.redact_text(case.text))]
    tokens = [s for case in CASES if case.cls == "provider" for s in case.secrets]
    keys = sorted({k for t in tokens if len(k := as_key(t)) >= 16})
    refused = [k for k in keys if key_problem(k, redactor)]
    return {
        "cases": len(CASES),
        "caught": len(CASES) - len(leaked),
        "rate": round((len(CASES) - len(leaked)) / len(CASES), 5),
        "missed": leaked[:12],
        "token_keys": len(keys),
        "token_keys_refused": len(refused),
        "token_key_rate": round(len(refused) / max(1, len(keys)), 5),
    }


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
    parser.add_argument("--packages", type=Path, default=DEFAULT_PACKAGES)
    parser.add_argument("--per-list", type=int, default=PER_LIST)
    parser.add_argument("--list", action="store_true", help="print every redaction")
    args = parser.parse_args()
    redactor = Redactor()
    sources = repository_texts()
    if args.data.is_file():
        sources["locomo"] = locomo_texts(args.data)
    else:
        print(f"LoCoMo data not found at {args.data}: skipped", file=sys.stderr)
    if args.packages.is_dir():
        sources.update(identifier_texts(args.packages, args.per_list))
    else:
        print(f"package lists not found at {args.packages}: skipped", file=sys.stderr)
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
    if "identifiers" in sources:
        texts = sources["identifiers"]
        touched = sum(1 for _, text in texts if redactor._spans(text))
        figures["identifiers"]["texts_redacted"] = touched
        figures["identifiers"]["rate"] = round(touched / max(1, len(texts)), 5)
        figures["identifier_keys"] = key_rates(redactor, texts)
    figures["true_positives"] = true_positives(redactor)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
