"""Privacy between people sharing one agent: what a person says about themselves stays theirs.

A run for a person (``for_person``, ``Memory(person=...)``) may carry their self-statements:
"I prefer short answers", "I'm allergic to nuts", "my daughter starts school on Monday". Any
engine may repeat them where everyone reads: a shared fact quoting the whole message, the
rollout summary, the raw notes. Whatever an engine proposes, phase 1 applies these rules in
code before anything is stored:

- a shared entry (no person) has the person's self-statements cut out of its content; one that
  is nothing but self-statements becomes that person's private entry;
- the rollout summary and the raw notes (files every run can open) lose them too: a line
  that said nothing else is dropped;
- a shared key loses the words that only the self-statements had ("...-invoice-py-prefer"),
  and is named from its shared content when no word is left;
- the rollout's slug (the summary's file name, listed in ``MEMORY.md``, ``memory_summary.md``,
  the raw notes and ``phase_two_selection.json``) keeps only words of the shared summary; when
  none is left it is the neutral ``rollout``.

What is cut is a *clause* of the person's own message, in the first person, that is about the
person rather than the work (:func:`about_the_person`):

- a clause with a personal marker is always theirs: preferences ("I prefer", "I'd like short
  answers", "ich mag", "je préfère", "我更喜欢"), identity ("my name is", "I'm a vegetarian", "I
  live in"), health ("allergic", "my doctor"), contacts ("my phone number", "email me"), family
  and home, money, leave and holidays, even inside a request or a question;
- a first-person clause about the work stays shared: it names a work thing (a test, the
  parser, a file, a branch, an error, code in backticks, ``invoice.py``) or reports a work
  action on one ("I ran the tests", "I fixed it", "I think the bug is in X", "ich habe die
  Tests laufen lassen", "j'ai corrigé le parseur", "我修复了解析器");
- any other first-person statement ("I'm tired", "I have two cats") is taken as theirs: when in
  doubt, memory keeps it private. Requests and questions without a personal marker stay.

A sentence mixing both is cut at its clause boundaries (a comma, a semicolon or a conjunction
before a new first-person subject or a work subject): "I ran the tests, and I prefer short
answers." keeps "I ran the tests." Markers are kept for English, German, French and Chinese.
A run without a person has no one to keep things private for; nothing is changed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .engines.base import Candidate
from .engines.conversation import content_words, is_request
from .engines.transcript import item_text

# ---------------------------------------------------------------- vocabulary

_FIRST_PERSON_WORDS = frozenset(
    """i me my mine myself
    ich mich mir mein meine meinen meinem meiner meines
    je moi mon ma mes""".split()
)
"""First-person singular words of English, German and French (``I'm`` is ``i`` + ``m``)."""

_ELIDED_FIRST_PERSON_RE = re.compile(r"\b[jm]'\w")
"""French ``j'ai``, ``m'appelle``."""

_FIRST_PERSON_CJK = ("我",)
"""First person in Chinese (``我``, also in ``我的``)."""

_CONNECTORS = (
    "and also|and|but|so|because|since|while|whereas|although|though|plus|also|"
    "und|aber|denn|weil|obwohl|sondern|"
    "et|mais|car|donc|puisque|parce que|alors que|bien que|"
    "但是|但|不过|可是|而且|并且|因为|所以|另外|顺便说一下|顺便"
)
"""Words that join two clauses; a boundary is only cut before a new subject (see below)."""

_PERSONAL = [
    # preferences and tastes
    r"prefer\w*|favou?rite|\blove[sd]?\b|\bhate[sd]?\b|dislike|\benjoy|\badore|can't stand",
    r"\b(?:i|i'd|i would|i do|i really|i don't|i do not)\s+(?:really\s+)?like\b|\bi'?d rather",
    r"\bi'm a fan|\bi am a fan",
    # identity, home, background
    r"\bmy name\b|\bi'?m called\b|\bcall me\b|\bi(?:'m| am) (?:a|an) (?!bit\b|little\b|lot\b|few\b)",
    r"\bi live\b|\bi(?:'m| am) from\b|\bi come from\b|\bi was born\b|\byears old\b|\bbirthday",
    r"\bmy (?:home(?! (?:dir|directory|folder|page)\b)|house|flat|apartment|address|age)\b",
    r"\bmy (?:religion|faith|partner|family|health)\b|zip code|post(?:al )?code",
    r"vegetarian|\bvegan|religio|\bpray|\bchurch|\bmosque|\bvote[sd]?\b|\bpolitic",
    # health
    r"allerg|diabet|asthma|pregnan|\bsick\b|\bill\b|\b(?:my|a|the) doctor\b|doctor's|dentist",
    r"medication|medicine|\bpills?\b|therap|\bdiagnosed\b|surgery|hospital|disabilit",
    r"depress|anxiety|migraine|injur|headache|insulin|health (?:issue|problem|condition)",
    # contacts
    r"\bmy (?:phone|mobile|cell|number|e-?mail|address|contact)|phone number|e-?mail me",
    r"reach me|text me|contact me|whatsapp|linkedin|\w@\w+\.\w",
    # family, friends, pets
    r"\bwife\b|husband|\bmy partner\b|boyfriend|girlfriend|daughter|\bsons?\b|\bkids?\b",
    r"\b(?:my|our) (?:child|children|family|cats?|dogs?|pets?)\b|\bbaby\b|\bmom\b|\bmum\b",
    r"\b(?:mother|father|dad|parents|sister|brother)\b|\bfriends?\b|wedding|married|divorc",
    # time off, money, body and free time
    r"vacation|holiday|\bday off\b|\bon leave\b|parental leave|\bweekend",
    r"salary|\bmy bank|credit card|\brent\b|mortgage|marathon|workout|\byoga\b|hiking|\bhike\b",
    r"\bi(?:'m| am) (?:so |really |very )?(?:tired|hungry|sleepy|exhausted)\b",
    # German
    r"bevorzug|\bmag\b|\bmöchte lieber|\blieber\b|\bliebe\b|\bhasse\b",
    r"allergisch|allergie|\bkrank|\barzt|ärztin|schwanger|medikament|krankenhaus",
    r"\bmeine frau\b|\bmein mann\b|tochter|\bsohn\b|\bkinder\b|\bmutter\b|\bvater\b",
    r"\beltern\b|familie|freundin|\bfreund\b|\bhund\b|\bkatze\b|urlaub|geburtstag",
    r"\bjahre alt\b|\bich wohne\b|\bich heiße\b|\bich komme aus\b|(?:telefon|handy)nummer",
    r"\bmeine (?:nummer|adresse|e-mail)\b|gehalt|vegetarier|veganer|\bich bin müde\b",
    # French
    r"préf[eè]r|\baime\b|\baimes\b|\badore\b|déteste|allergique",
    r"malade|médecin|docteur|enceinte|médicament|hôpital|\bma femme\b|\bmon mari\b",
    r"\bma fille\b|\bmon fils\b|\bmes enfants\b|\bma mère\b|\bmon père\b|\bmes parents\b",
    r"\bma famille\b|\bmon ami|\bmon chien\b|\bmon chat\b|vacances|anniversaire",
    r"\bj'ai \d+ ans\b|\bj'habite\b|\bje m'appelle\b|\bmon (?:numéro|téléphone|adresse)\b",
    r"courriel|salaire|végétarien|végane|\bje suis fatigué",
    # Chinese
    r"喜欢|偏好|讨厌|过敏|生病|医生|糖尿病|怀孕|吃药|医院|妻子|老婆|丈夫|老公|女儿|儿子",
    r"孩子|妈妈|母亲|爸爸|父亲|父母|家人|朋友|我的狗|我的猫|度假|假期|休假|生日|\d+岁",
    r"住在|我叫|我的电话|电话号码|我的手机|手机号|我的邮箱|我的地址|住址|工资|素食|累了",
]
"""What makes a first-person clause about the person, in any of the four languages."""

_WORK_NOUNS = [
    r"\btests?\b|\btesting\b|\btest suite|\bbugs?\b|\bparser|\blexer|\bcode\b|\bfiles?\b",
    r"\bfunctions?\b|\bmethods?\b|\bclass(?:es)?\b|\bmodules?\b|\bpackages?\b|\bbuilds?\b",
    r"\bci\b|\bpipelines?\b|\bbranch|\bcommits?\b|\bprs?\b|pull request|\bmerge",
    r"\berrors?\b|exception|traceback|stack trace|\blogs?\b|\brepo|\bservers?\b",
    r"database|\bdb\b|\bquer(?:y|ies)\b|\bapi\b|endpoint|\bdeploy|\breleases?\b",
    r"\bversions?\b|\bconfig|\bscripts?\b|\bcommands?\b|\bpatch|\bdiff\b|\bissues?\b",
    r"\btickets?\b|\bfeatures?\b|\bservices?\b|container|docker|dependenc|librar",
    r"migration|schema|\btables?\b|\bcolumns?\b|variable|\blines?\b|regression|fixture",
    r"benchmark|\bcrash|\bfail|segfault|timeout|\bcache|staging|production|\bprod\b",
    r"cluster|workflow|\bci jobs?\b|\bcompiler|\bthe (?:app|site|page|job|check|run)\b",
    r"\bloops?\b|\bretr(?:y|ies)\b|\brequests?\b|\bresponses?\b|\bfields?\b|argument",
    r"parameter|\bflags?\b|\boptions?\b|\bsettings?\b|\bimports?\b|\boutput|\binput",
    r"\bprocess(?:es)?\b|\bthreads?\b|memory leak|handler|\bhooks?\b|\broutes?\b",
    r"template|\blayout|\bcss\b|\bhtml\b|\bjson\b|\byaml\b|\bsql\b|\bregex|\bindex",
    # German
    r"\bfehler|datei|funktion|\bmodul|\bdatenbank|abfrage|\bskript|\bbefehl|konfiguration",
    r"absturz|\bdienst|\bpaket|\btabelle|\bspalte|\bzeile",
    # French
    r"\bbogue|\berreur|\bparseur|\bfichier|\bfonction|\bbranche|\bserveur|base de données",
    r"requête|\bcommande|\bjournal|\bdépôt|déploiement|fonctionnalité|\bpaquet|\bcolonne",
    r"\bligne|plantage",
    # Chinese
    r"测试|错误|报错|缺陷|解析器|代码|文件|函数|模块|构建|分支|提交|流水线|服务器|数据库",
    r"查询|脚本|命令|版本|配置|日志|仓库|部署|发布|工单|功能|依赖|迁移|崩溃",
]
"""Things of the work: a first-person clause naming one is about the work (unless personal)."""

_CODE_RE = re.compile(r"`[^`]+`|\b[\w-]+\.[a-z]{1,5}\b|\w+_\w+|\b[a-z]+[A-Z]\w*|\w+\(\)|\w/\w")
"""Code in a sentence: backticks, ``invoice.py``, ``snake_case``, ``camelCase``, ``f()``, paths."""

_WORK_VERBS = re.compile(
    r"\b(?:ran|run|running|fixed|fixing|tried|trying|changed|tested|reproduced|found|saw|"
    r"noticed|checked|deployed|pushed|merged|updated|added|removed|deleted|wrote|rewrote|"
    r"refactored|renamed|moved|installed|upgraded|downgraded|built|compiled|debugged|traced|"
    r"profiled|measured|reverted|committed|filed|reported|restarted|rebooted|configured|"
    r"enabled|disabled|patched|bisected|cloned|pulled|rebased|looked into)\b"
    r"(?:\s+\w+){0,4}?\s+(?:it|that|this|them|those|these|everything|both|again|already)\b"
    r"|ausgeführt|laufen lassen|getestet|behoben|repariert|gefixt|geändert|probiert|versucht"
    r"|\bes\s+(?:erneut\s+)?(?:getestet|geprüft)"
    r"|corrigé|réparé|testé|lancé|exécuté|essayé|modifié|vérifié|déployé"
    r"|运行|跑了|修复|修好|改了|修改|试了|尝试|检查了|部署了|推送|合并了|更新了|回滚",
    re.IGNORECASE,
)
"""A work action on something already named (``I fixed it``, ``I tried that again``)."""

_REQUEST_RE = re.compile(
    r"\b(?:like|want|need)s?\s+(?:you|u)\b|\bdass (?:du|sie|ihr)\b|\bque (?:tu|vous)\b|请|帮我",
    re.IGNORECASE,
)
"""A first-person request to the agent (``I'd like you to``, ``ich möchte, dass du``)."""

_PERSONAL_RE = re.compile("|".join(f"(?:{p})" for p in _PERSONAL), re.IGNORECASE)
_WORK_RE = re.compile("|".join(f"(?:{p})" for p in _WORK_NOUNS), re.IGNORECASE)
_WORD_RE = re.compile(r"\w+", re.UNICODE)

_SENTENCE_RE = re.compile(r"[^\n]+?(?:[.!?]+(?=\s|$)|[。！？]+|$)", re.MULTILINE)
"""A sentence: up to a ``.``/``!``/``?`` before a space or the end (``invoice.py`` stays whole),
a Chinese full stop, or the line's end."""

_SUBJECT_START = (
    r"(?:i\b|i'|my\b|me\b|ich\b|mein|mir\b|mich\b|je\b|j'|mon\b|ma\b|mes\b|moi\b|我"
    r"|(?:the|this|that|our|its|der|die|das|le|la|les|l')?\s*(?=" + "|".join(_WORK_NOUNS) + r"))"
)
_BOUNDARY_RE = re.compile(
    r"(?:\s*[,;:，；]\s*(?:(?:" + _CONNECTORS + r")\s*)?|\s+(?:" + _CONNECTORS + r")\s+)"
    r"(?=" + _SUBJECT_START + ")",
    re.IGNORECASE,
)
"""Where a sentence divides into clauses: a comma, semicolon or conjunction before a new
subject (first person, or a work thing like "the tests")."""

_OPINION_RE = re.compile(
    r"\s*(?:i|ich|je|j'|我)\s*(?:really\s+|do\s+)?(?:think|believe|guess|suspect|assume|reckon|"
    r"bet|glaube|denke|vermute|pense|crois|suppose|觉得|认为|猜)\w*\s*$",
    re.IGNORECASE,
)
"""A clause that is only "I think" ("ich glaube", "je pense"): it belongs to what follows."""

_LEFTOVER_RE = re.compile(r"""(?:""|''|``|\(\s*\)|\[\s*\]|\s+(?=[.,;:!?]))""")
_CITATION_RE = re.compile(r"\[[^\]\n]{1,80}\]")
_LINE_LABEL_RE = re.compile(r"^\s*(?:[-*]\s+)?(?:[\w .'-]{1,40}:)?\s*")


# ------------------------------------------------------------- classification


def sentences(text: str) -> list[str]:
    """``text`` split into sentences, whitespace collapsed."""

    found = [" ".join(m.group(0).split()) for m in _SENTENCE_RE.finditer(text)]
    return [s for s in found if s]


def clauses(sentence: str) -> list[str]:
    """``sentence`` cut at its clause boundaries (see :data:`_BOUNDARY_RE`), connectors and
    commas left out."""

    parts: list[str] = []
    start = 0
    for match in _BOUNDARY_RE.finditer(sentence):
        if match.start() > start and not _OPINION_RE.match(sentence[start : match.start()]):
            parts.append(sentence[start : match.start()])
            start = match.end()
    parts.append(sentence[start:])
    return [p.strip(" ,;:，；") for p in parts if p.strip(" ,;:，；")]


def in_first_person(clause: str) -> bool:
    low = clause.lower().replace("\u2019", "'")
    if any(mark in low for mark in _FIRST_PERSON_CJK) or _ELIDED_FIRST_PERSON_RE.search(low):
        return True
    return any(w in _FIRST_PERSON_WORDS for w in _WORD_RE.findall(low))


def about_the_person(clause: str) -> bool:
    """Whether a first-person ``clause`` is about its speaker rather than the work (see the
    module's rules): personal markers first, then work things and actions, then privacy."""

    text = clause.replace("\u2019", "'")
    if not in_first_person(text):
        return False
    # "I'd like you to ..." asks for work; the "like" in it is no preference.
    if _PERSONAL_RE.search(_REQUEST_RE.sub(" ", text)):
        return True
    question = text.rstrip().endswith(("?", "？"))
    if question or _REQUEST_RE.search(text) or is_request(text):
        return False
    return not (_WORK_RE.search(text) or _CODE_RE.search(text) or _WORK_VERBS.search(text))


def run_person(segments: Iterable[Mapping[str, Any]]) -> str | None:
    """The person the newest segment that names one was for."""

    person: str | None = None
    for seg in segments:
        if isinstance(seg.get("person"), str) and seg["person"]:
            person = seg["person"]
    return person


def personal_clauses(text: str) -> list[str]:
    """The clauses of ``text`` (a person's message) that are about the person."""

    found: list[str] = []
    for sentence in sentences(text):
        parts = clauses(sentence)
        for i, clause in enumerate(parts):
            if i == len(parts) - 1 and sentence.endswith(("?", "？")) and not clause.endswith("?"):
                clause += "?"  # the question mark belongs to the last clause only
            if about_the_person(clause):
                found.append(clause.rstrip("?？"))
    return found


def self_statements(segments: Iterable[Mapping[str, Any]]) -> list[str]:
    """What the person of each segment said about themselves (clauses), longest first."""

    found: dict[str, None] = {}
    for seg in segments:
        if not seg.get("person"):
            continue
        for item in seg.get("input") or []:
            if not isinstance(item, dict) or item.get("role") != "user":
                continue
            if item.get("type") not in (None, "message"):
                continue
            for clause in personal_clauses(item_text(item)):
                found.setdefault(clause.rstrip(".!。！ "), None)
    return sorted(found, key=len, reverse=True)


# --------------------------------------------------------------------- cutting

_JOIN = (
    r"(?:[ \t]*[,;，；][ \t]*(?:(?:"
    + _CONNECTORS
    + r")[ \t]*)?|[ \t]+(?:"
    + _CONNECTORS
    + r")[ \t]+)"
)


def _cut(text: str, statement: str) -> str:
    words = statement.split()
    if not words:
        return text
    body = r"[ \t]+".join(re.escape(w) for w in words)
    flags = re.IGNORECASE
    # After another clause of the same sentence: the joint goes with it.
    out = re.sub(r"(?<=[^\s.!?。！？])" + _JOIN + body, "", text, flags=flags)
    # Before another clause: the joint goes, and what follows starts the sentence.
    out = re.sub(
        r"(?:(?<=^)|(?<=[\s.!?。！？]))" + body + _JOIN + r"(\w)",
        lambda m: m.group(1).upper(),
        out,
        flags=flags | re.MULTILINE,
    )
    # On its own: a whole sentence (its full stop goes too).
    return re.sub(body + r"[ \t]*[.!?。！？]?", " ", out, flags=flags)


def without_statements(text: str, statements: list[str]) -> str:
    """``text`` with every statement cut out (whitespace and case may differ), with the comma
    or conjunction that joined it to the rest of its sentence."""

    out = text
    for statement in statements:
        out = _cut(out, statement)
    if out == text:
        return text
    out = _LEFTOVER_RE.sub("", out)
    return re.sub(r"[ \t]{2,}", " ", out).strip()


def says_something(text: str) -> bool:
    """Whether ``text`` still names something once labels and citations are set aside."""

    body = _LINE_LABEL_RE.sub("", _CITATION_RE.sub(" ", text), count=1)
    return len(content_words(body)) >= 2 or len(re.findall(r"[\u4e00-\u9fff]", body)) >= 4


def shared_slug(slug: str, statements: list[str], shared: str, *, strict: bool = False) -> str:
    """``slug`` without the words only the statements had (not in ``shared``, the text kept);
    ``""`` when no word is left (never the slug as it was: that would be all private words).

    ``strict``: keep only the words ``shared`` holds, so that a paraphrase of a self-statement
    ("nut-allergy" for "I'm allergic to peanuts") is dropped too. A name every run reads (the
    rollout summary's file name) is made this way in a run for a person."""

    if not statements and not strict:
        return slug
    private = {w.lower().strip(".,;:!?'\"") for s in statements for w in s.split()}
    kept = {w.lower() for w in re.findall(r"[A-Za-z0-9]+", shared)}

    def keep(part: str) -> bool:
        if strict:
            words = re.findall(r"[a-z0-9]+", part.lower())
            return bool(words) and all(w in kept for w in words)
        return part not in private or part in kept

    return "-".join(p for p in slug.split("-") if p and keep(p))


NEUTRAL_KEY_WORDS = 4
"""Words of a shared entry's content that name it when every word of its key was private."""


def _key_from(content: str) -> str:
    words = [w.lower() for w in re.findall(r"[A-Za-z0-9]+", content)]
    return "-".join(words[:NEUTRAL_KEY_WORDS])[:64].strip("-") or "shared-note"


def keep_private(candidates: list[Candidate], statements: list[str]) -> list[Candidate]:
    """Shared candidates without the person's self-statements; those made only of them become
    the person's own (``personal``). Preferences are the person's already."""

    if not statements:
        return candidates
    kept: list[Candidate] = []
    for cand in candidates:
        if cand.action == "forget" or cand.kind == "preference" or cand.personal:
            kept.append(cand)
            continue
        content = without_statements(cand.content, statements)
        if content != cand.content and not says_something(content):
            kept.append(cand.model_copy(update={"personal": True}))
            continue
        key = shared_slug(cand.key, statements, content) or _key_from(content)
        kept.append(cand.model_copy(update={"content": content, "key": key}))
    return kept


def shared_text(text: str, statements: list[str]) -> str:
    """A rollout summary or raw notes without the self-statements; emptied lines dropped."""

    if not statements:
        return text
    lines: list[str] = []
    for line in text.splitlines():
        cleaned = without_statements(line, statements)
        if cleaned != line and not says_something(cleaned):
            continue
        lines.append(cleaned)
    return "\n".join(lines)
