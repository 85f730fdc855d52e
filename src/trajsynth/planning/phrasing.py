"""A request in the user's voice from a path over tools nobody here described (outside servers).

An outside server's descriptions are written for a model ("Create a new file or completely
overwrite an existing file..."), so its goals cannot be built from them. What every server
does give is each tool's name (a verb and a noun: ``write_file``, ``get_current_time``) and
its parameters' names; each value the user supplies is woven into a phrase its parameter's
name suggests (``source_timezone`` -> "from America/New_York", the ``path`` of
``write_file`` -> "the file docs/a.txt", ``content`` -> the thing written), and the request
names the outcome: "Write "hello" to the file docs/a.txt.", "What is the time difference
when I convert 09:15 from Asia/Tokyo to Australia/Sydney?".

Only the values the user must supply are stated: those of the calls the outcome depends on
(the writes, or the last read of a question, and every call they take a value from). A
value another call's result provides is something the assistant finds: it is named by what
it is ("the content of the file docs/meeting.txt") when the user said where it comes from,
and left out when the user did not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import Field

from trajsynth.mcp_servers.graph import singular
from trajsynth.mcp_servers.tags import READ_VERBS, WRITE_VERBS, name_tokens
from trajsynth.schemas import JsonValue, PlannedCall, Record, RefArg, SlotArg, ToolAccess, ToolSpec

__all__ = ["Clause", "Part", "clauses", "relevant_steps", "request"]

Role = Literal["object", "name", "source", "target", "place", "time", "match", "with"]

# the verb a name abbreviates, as a person says it
_VERB_WORDS = {
    "mv": "move", "rm": "remove", "cp": "copy", "mkdir": "create", "new": "create",
    "exec": "run", "checkout": "check out", "lookup": "look up", "rsvp": "answer",
}  # fmt: skip
# reads that look something up: their question is "what is the X of ..."; the other reads
# (convert, calculate, compare) are asked as "what is the X when I convert ..."
_LOOKUPS = frozenset(
    {
        "get", "list", "search", "find", "read", "fetch", "lookup", "query", "show",
        "describe", "view", "check", "browse", "inspect", "retrieve", "count", "stat", "status",
    }
)  # fmt: skip
# verbs whose thing goes "to" the named place (write "x" to the file, add "x" to the list)
_TO_VERBS = frozenset(
    {"write", "add", "append", "send", "post", "put", "save", "store", "upload", "insert", "push"}
)
_STOP = frozenset({"by", "for", "to", "from", "of", "all", "my", "a", "an", "the", "in", "on"})
_SOURCE = frozenset({"source", "src", "from", "origin", "old", "base"})
_TARGET = frozenset({"target", "dest", "destination", "to", "new", "head"})
_CONTENT = frozenset(
    {"content", "contents", "text", "body", "message", "data", "value", "note", "comment"}
)
_NAMING = frozenset(
    {"path", "file", "filename", "filepath", "dir", "directory", "folder", "uri", "url", "name",
     "names", "title", "key", "id", "ids", "paths", "repo", "repository", "branch"}
)  # fmt: skip
_PATHS = frozenset({"path", "paths", "file", "filename", "filepath", "dir", "directory", "folder"})
_MATCH = frozenset({"query", "q", "search", "keyword", "keywords", "term", "pattern", "regex"})
_PLACE = frozenset(
    {"timezone", "tz", "zone", "location", "city", "country", "region", "place", "locale"}
)
_TIME = frozenset({"time", "date", "datetime", "when", "day"})
_LABEL_KEYS = ("name", "title", "label", "entityname", "id")
# roles whose value, when another call gives it, is still said by what it is ("the content of
# the file a.txt", "that user", "in the source timezone"); a bare option ("with") is not
_REFERRED = frozenset({"object", "name", "source", "target", "place", "time"})


class Part(Record):
    """One argument of a call as the user would state it."""

    param: str
    role: Role
    slot: str | None = None  # the slot whose value this is
    ref: tuple[int, str] | None = None  # (step, field): a value another call's result gives


class Clause(Record):
    """One call the request is about: what it does, to what, with which of the user's values."""

    step: int
    verb: str  # "" when neither the name nor the description starts with a known verb
    noun: str
    words: str  # the tool's name in words, for the fallback ("toggle logging")
    access: ToolAccess
    parts: list[Part] = Field(default_factory=list)


def relevant_steps(steps: Sequence[PlannedCall], writes: set[int]) -> set[int]:
    """The writes (or, with none, the last call) and every call they take values from."""
    todo = sorted(writes) if writes else [len(steps) - 1]
    seen: set[int] = set()
    while todo:
        i = todo.pop()
        if i in seen or not 0 <= i < len(steps):
            continue
        seen.add(i)
        todo += [a.step for a in steps[i].args.values() if isinstance(a, RefArg)]
    return seen


def _verb(spec: ToolSpec) -> str:
    tokens = name_tokens(spec.name)
    known = READ_VERBS | WRITE_VERBS | set(_VERB_WORDS)
    for token in tokens:
        if token in known:
            return _VERB_WORDS.get(token, token)
    first = re.match(r"\s*([A-Za-z]+)", spec.description)
    if first:
        word = first.group(1).casefold()
        for form in (word, word.removesuffix("s")):  # "Toggles ..." -> toggle
            if form in known:
                return _VERB_WORDS.get(form) or form
    return ""


# words a tool's name uses for its own output, not for a thing of the user's: server-everything's
# get-structured-content gave "the temperature of the structured content in Chicago"
_OUTPUT_WORDS = frozenset(
    {"structured", "content", "data", "result", "output", "response", "payload", "raw", "json"}
)


def _noun(spec: ToolSpec) -> str:
    verbs = READ_VERBS | WRITE_VERBS | set(_VERB_WORDS)
    tokens = [t for t in name_tokens(spec.name) if t not in verbs and t not in _STOP]
    if not tokens or set(tokens) <= _OUTPUT_WORDS:
        return ""
    return " ".join([*tokens[:-1], singular(tokens[-1])])


def _role(param: str, noun: str) -> Role:
    tokens = name_tokens(param)
    if not tokens:
        return "with"
    head, last = tokens[0], tokens[-1]
    if len(tokens) > 1 and head in _SOURCE:
        return "source"
    if len(tokens) > 1 and head in _TARGET:
        return "target"
    if head in {"destination", "dest"}:
        return "target"
    if noun and singular("".join(tokens)) in {noun.replace(" ", ""), noun.split()[-1]}:
        return "object"
    if last in _CONTENT or head in _CONTENT:
        return "object"
    if last in _NAMING or (noun and head == noun.split()[-1]):
        return "name"
    if last in _MATCH or head in _MATCH:
        return "match"
    if last in _PLACE:
        return "place"
    if last in _TIME:
        return "time"
    return "with"


def clauses(
    steps: Sequence[PlannedCall],
    specs: Mapping[str, ToolSpec],
    relevant: set[int],
    slots: Mapping[str, JsonValue],
    facts: Mapping[tuple[int, str], str] | None = None,
) -> list[Clause]:
    """The relevant calls as clauses; each part holds a slot the user states (``slots``), a
    fact the user knows about a value picked from a list (``facts``: (step, param) -> slot
    name) or a reference to another relevant call's result."""
    out: list[Clause] = []
    for i in sorted(relevant):
        spec = specs[steps[i].tool]
        noun = _noun(spec)
        parts: list[Part] = []
        for param, arg in steps[i].args.items():
            role = _role(param, noun)
            if (i, param) in (facts or {}):
                parts.append(Part(param=param, role=role, slot=(facts or {})[(i, param)]))
            elif isinstance(arg, SlotArg) and arg.name in slots:
                parts.append(Part(param=param, role=role, slot=arg.name))
            elif isinstance(arg, RefArg) and arg.step in relevant and role in _REFERRED:
                parts.append(Part(param=param, role=role, ref=(arg.step, arg.field)))
        out.append(
            Clause(
                step=i,
                verb=_verb(spec),
                noun=noun,
                words=" ".join(name_tokens(spec.name)),
                access=spec.access,
                parts=parts,
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# rendering


def _words(name: str) -> str:
    return " ".join(name_tokens(name))


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False) if re.search(r"\s", text.strip()) else text


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _value(value: JsonValue) -> str:
    """A value as a person writes it: text of several words in quotes, a list as "a, b and c",
    an object by its name with its other fields in brackets (no "key: value" labels)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return _quoted(value)
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list):
        shown = [_value(v) for v in value if v not in ("", None, [], {})]
        return _and(shown) if shown else "nothing"
    if isinstance(value, Mapping):
        keys = {str(k).casefold().replace("_", ""): str(k) for k in value}
        label = next((keys[k] for k in _LABEL_KEYS if k in keys), None)
        rest = [
            f"{_words(str(k))} {_value(v)}"
            for k, v in value.items()
            if k != label and v not in ("", None, [], {})
        ]
        head = _value(value[label]) if label is not None else ""
        if not rest:
            return head or "nothing"
        return f"{head} ({', '.join(rest)})" if head else ", ".join(rest)
    return "nothing"


def _plural(value: JsonValue, noun: str) -> str:
    if not (isinstance(value, list) and len(value) > 1 and noun):
        return noun
    if noun.endswith("y") and noun[-2:-1] not in set("aeiou"):
        return noun[:-1] + "ies"
    return noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s")


def _thing(part: Part, clause: Clause, value: JsonValue | None) -> str:
    """What a naming value is: "the file docs/a.txt", "the entity "Ann"", "a file"; one
    another call's result gives is "that user" (``user_id``)."""
    noun = clause.noun.split()[-1] if clause.noun else ""
    if part.ref is not None:
        own = [t for t in name_tokens(part.param) if t not in _NAMING]
        return f"that {' '.join(own) or noun or 'one'}"
    if name_tokens(part.param)[-1] in _PATHS:
        kinds = {"file", "directory", "folder", "dir"}
        if noun not in kinds:
            sample = value[0] if isinstance(value, list) and value else value
            noun = "file" if re.search(r"\.\w{1,5}$", str(sample)) else "folder"
    noun = noun or _words(part.param)
    if value is None:
        return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"
    if value in (".", "./"):  # "the directory ." reads as a typo
        return f"the top {noun} ({value})"
    return f"the {_plural(value, noun)} {_value(value)}"


class _Render:
    def __init__(self, clauses: Sequence[Clause], values: Mapping[str, JsonValue]) -> None:
        self.by_step = {c.step: c for c in clauses}
        self.values = values
        self.used: set[int] = set()  # calls already named as where a value comes from

    def value(self, part: Part) -> JsonValue | None:
        return self.values.get(part.slot) if part.slot is not None else None

    def source(self, part: Part) -> str | None:
        """A value another call gives: "the content of the file docs/a.txt"."""
        if part.ref is None:
            return None
        step, field = part.ref
        tokens = [t for t in re.split(r"[.\[\]]", field) if t and not t.isdigit()]
        what = _words(tokens[-1]) if tokens else "result"
        origin = self.by_step.get(step)
        if origin is None:
            return None
        return f"the {what} of {self.subject(origin)}"

    def subject(self, clause: Clause) -> str:
        names = [p for p in clause.parts if p.role == "name" and self.value(p) is not None]
        if names:
            return _thing(names[0], clause, self.value(names[0]))
        refs = [p for p in clause.parts if p.role == "name" and p.ref is not None]
        if refs:
            return _thing(refs[0], clause, None)
        return f"the {clause.noun or clause.words}"

    def modifiers(self, clause: Clause, skip: set[str]) -> list[str]:
        out: list[str] = []
        operands: list[str] = []  # values of parameters whose names say nothing (a, b, x)
        for part in clause.parts:
            value = self.value(part)
            if part.param in skip or (part.role in {"object", "name"} and value is None):
                continue
            if value is None:
                if part.ref is None:
                    continue
                # a value the earlier call gives, named by its field ("source.timezone")
                field = [t for t in re.split(r"[.\[\]]", part.ref[1]) if t and not t.isdigit()]
                said = " ".join(_words(t) for t in field or [part.param])
                shown = f"the {said}" if len(field) > 1 else f"that {said}"
            else:
                shown = _value(value)
            if part.role == "source":
                out.append(f"from {shown}")
            elif part.role == "target":
                out.append(f"to {shown}")
            elif part.role == "place":
                out.append(f"in {shown}")
            elif part.role == "time":
                out.append(f"on {shown}" if re.match(r"\d{4}-", str(value)) else f"at {shown}")
            elif part.role == "match" and clause.access is ToolAccess.READ:
                out.append(f"matching {shown}")
            elif part.role == "name":
                out.append(f"for {_thing(part, clause, value)}")
            elif isinstance(value, bool):
                out.append(f"with {_words(part.param)} {'on' if value else 'off'}")
            elif len(part.param) <= 2:  # server-everything's get-sum(a, b): "the sum of 1 and 1"
                operands.append(shown)
            else:
                out.append(f"with the {_words(part.param)} {shown}")
        if operands:
            out.insert(0, f"of {_and(operands)}")
        return out

    def action(self, clause: Clause) -> str:
        """A write (or a read asked as an action) in the imperative, without "please"."""
        if not clause.verb:  # no verb to build on: the tool's name, then every value
            return " ".join([f"help me with the {clause.words}", *self.modifiers(clause, set())])
        objects = [p for p in clause.parts if p.role == "object"]
        names = [
            p for p in clause.parts if p.role == "name" and (p.ref or self.value(p) is not None)
        ] or [p for p in clause.parts if p.role == "name"]
        skip: set[str] = set()
        obj = ""
        for part in objects:
            value = self.value(part)
            said = self.source(part) if part.ref else None
            if value is not None:
                shown = _value(value)
                if _role(part.param, "") != "object" and clause.noun:
                    # the thing the tool is about ("entities"), not its content
                    shown = f"the {_plural(value, clause.noun)} {shown}"
                obj, skip = shown, skip | {part.param}
                break
            if said:
                obj, skip = said, skip | {part.param}
                self.used.add(part.ref[0] if part.ref else -1)
                break
        where = ""
        if names:
            first = names[0]
            value = self.value(first)
            thing = _thing(first, clause, value)
            skip.add(first.param)
            if obj:
                prep = "to" if clause.verb in _TO_VERBS else "in"
                where = f" {prep} {thing}"
            else:
                obj = thing
        elif not obj:
            has_ends = {p.role for p in clause.parts} & {"source", "target"}
            loose = [p for p in clause.parts if p.role in {"time", "with"} and self.value(p)]
            if has_ends and loose:  # "convert 09:15 from A to B": the value is the object
                obj = _value(self.value(loose[0]))
                skip.add(loose[0].param)
            else:
                obj = f"the {clause.noun}" if clause.noun else ""
        tail = self.modifiers(clause, skip)
        return " ".join(w for w in [clause.verb, obj + where, *tail] if w)

    def question(self, clause: Clause, field: str) -> str:
        """The question a read-only task asks about its last call; one whose value the user
        holds back says whose it is ("What is the datetime in my timezone?")."""
        asked = self._question(clause, field)
        if len(re.findall(r"[\w'/-]+", asked)) >= 5:
            return asked
        held = [p for p in clause.parts if self.value(p) is None and p.ref is None]
        if not held:
            return asked
        part = held[0]
        prep = {"source": "from", "target": "to", "place": "in", "time": "at"}.get(part.role, "for")
        return f"{asked[:-1]} {prep} my {_words(part.param)}?"

    def _question(self, clause: Clause, field: str) -> str:
        if clause.verb and clause.verb not in _LOOKUPS:
            what = (
                f"How many {field[len('number of ') :]} do I get"
                if field.startswith("number of ")
                else f"What is the {field}"
            )
            return f"{what} when I {self.action(clause)}?"
        names = [
            p for p in clause.parts if p.role == "name" and (p.ref or self.value(p) is not None)
        ]
        objects = [p for p in clause.parts if p.role == "object" and self.value(p) is not None]
        skip: set[str] = set()
        about = ""
        if names:
            about = f" of {_thing(names[0], clause, self.value(names[0]))}"
            skip.add(names[0].param)
        elif objects:
            about = f" of the {clause.noun or 'request'} {_value(self.value(objects[0]))}"
            skip.add(objects[0].param)
        elif clause.noun and not _overlaps(field, clause.noun):
            about = f" of the {clause.noun}"
        tail = " ".join(self.modifiers(clause, skip))
        if field.startswith("number of "):
            head = f"How many {field[len('number of ') :]} are there"
        else:
            head = f"What is the {field}"
        return " ".join(w for w in [head + about, tail] if w) + "?"


def _overlaps(field: str, noun: str) -> bool:
    """Whether the question's field already says what the tool is about ("datetime" and
    "current time"): "the datetime of the current time" says it twice."""
    said = field.replace(" ", "").casefold()
    return any(w in said for w in noun.split() if len(w) >= 3)


def request(
    clauses: Sequence[Clause],
    values: Mapping[str, JsonValue],
    question: str | None,
) -> str:
    """The request: "Please <write>, then <write>." for a task that changes something, else
    the question ``question`` (a field's name in words) about the last call. ``values`` are
    the slots the goal states (a held-back slot is absent: its thing is "a file")."""
    render = _Render(clauses, values)
    if not clauses:
        return f"What is the {question}?" if question else "Please help me with my request."
    writes = [c for c in clauses if c.access is ToolAccess.WRITE]
    if question is not None and not writes:
        asked = render.question(clauses[-1], question)
        before = _lead(render, clauses[:-1])
        return f"After you {_and(before)}, {asked[0].lower()}{asked[1:]}" if before else asked
    acted = writes or clauses[-1:]
    actions = [render.action(c) for c in acted]
    # a read the writes take a value from, not yet named as where that value comes from,
    # whose own values the user states ("search the folder docs matching *.txt"); never the
    # read that is itself the action (a one-read task said it twice)
    steps = {c.step for c in acted}
    reads = [c for c in clauses if c.access is not ToolAccess.WRITE and c.step not in steps]
    before = _lead(render, reads)
    said = ", then ".join([*before, *actions])
    if len(re.findall(r"[\w'-]+", said)) < 4:  # "Please toggle the logging." reads curt
        return f"I would like you to {said}."
    return f"Please {said}."


def _lead(render: _Render, reads: Sequence[Clause]) -> list[str]:
    return [
        render.action(c)
        for c in reads
        if c.step not in render.used and any(render.value(p) is not None for p in c.parts)
    ]
