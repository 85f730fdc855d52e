"""The words of a blueprint: persona, goal and hidden info (docs/methods.md §3 steps 9-10).

The planner LLM writes them from the path and its slots (EnvFactory's calibrated refinement,
CoVe's fuzzification); its draft is parsed leniently (the first JSON object in the reply) and
checked without a model. When no draft passes, ``template_words`` writes short, explicit words
deterministically from the path, the slots and the question — the small default model often
cannot write valid JSON, and an explicit goal ("What is the price of the Vortex 600 Blender?")
is what a small policy can act on.

An outside server's descriptions are written for a model, not as requests: its template goal
is phrased from tool and parameter names instead (``planning.phrasing``), states only the
values the outcome depends on, and its words check also refuses a restated description, a
``label: value`` list and a goal of under five words.

Target modes are realised here where the words decide them: ``clarify_first`` keeps one
slot out of the goal (it sits only in hidden_info); ``recover_after_error`` has the user first
give a stale value, the correct one in hidden_info.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeGuard

from pydantic import Field

from trajsynth.curation.canon import is_identifier, parse_json_maybe
from trajsynth.mcp_servers.graph import singular
from trajsynth.mcp_servers.tags import READ_VERBS, WRITE_VERBS, name_tokens
from trajsynth.planning.gold import resolve_field
from trajsynth.planning.phrasing import Clause, clauses, relevant_steps, request
from trajsynth.planning.values import said_words
from trajsynth.schemas import (
    Domain,
    EnvState,
    GoldCall,
    JsonValue,
    Message,
    MessageRole,
    PlannedCall,
    ReasoningMode,
    Record,
    RefArg,
    SlotArg,
    ToolAccess,
    ToolCluster,
)

__all__ = [
    "Answer",
    "Words",
    "ambiguous_labels",
    "label_runs",
    "WordsSpec",
    "build_messages",
    "check_words",
    "parse_words",
    "pick_answer",
    "template_words",
    "words_spec",
]

# Observation fields a question most likely asks for, most telling first.
_SALIENT = (
    "total",
    "amount",
    "price",
    "balance",
    "cost",
    "fare",
    "fee",
    "stock",
    "count",
    "quantity",
    "status",
    "seats",
    "duration",
    "time",
    "date",
    "address",
    "result",
    "answer",
    "value",
)
_LABELS = ("name", "title", "label", "subject", "summary")
_STOP = frozenset({"by", "for", "to", "from", "of", "all", "my", "a", "an", "the", "in", "on"})
_IDENTITY = frozenset(
    {"email", "user_email", "customer_email", "username", "user_name", "phone", "account"}
)
# The domain catalog's default users, for a cluster that declares no facts of its own (an
# outside server); a bundled cluster's persona comes from its folder (``ToolCluster.facts``).
_PERSONAS: dict[str, str] = {  # Domain is a StrEnum: a plain domain string finds it
    Domain.RETAIL: "A shopper at an online store.",
    Domain.TRAVEL: "A traveller planning a trip.",
    Domain.FINANCE: "A bank customer managing their money.",
    Domain.PRODUCTIVITY: "A busy professional keeping their schedule in order.",
    Domain.DEVTOOLS: "A developer working on a small project.",
    Domain.DATA_SQL: "An analyst who needs numbers from a database.",
    Domain.FILESYSTEM: "Someone tidying up their files.",
    Domain.CODE: "A developer working on a small project.",
}
_MODE_SUFFIX = {
    ReasoningMode.VERIFY_AFTER_WRITE: " Please confirm that it went through.",
    ReasoningMode.EXPLORE_THEN_COMMIT: " Please look at what I have first.",
}


class Answer(Record):
    """What a read-only task asks for: a field of the final observation and its gold value."""

    field: str
    value: str | int | float
    subject: str | None = None


class Words(Record):
    persona: str
    goal: str
    hidden_info: dict[str, JsonValue] = Field(default_factory=dict)


class WordsSpec(Record):
    """Everything the words must convey or avoid, derived from the path and its gold run."""

    domain: str
    description: str = ""
    persona: str | None = None  # the cluster's own (DomainFacts); None: the domain's default
    mode: ReasoningMode
    steps: list[str]  # what each call does, in plain words (tool descriptions)
    actions: list[str] = Field(default_factory=list)  # each write, as an imperative
    # what the user knows: the path's slots, plus the entities the path picks from a list
    # (the product in the cart it removes), named so the user can say which one
    slots: dict[str, JsonValue]
    labels: dict[str, str] = Field(default_factory=dict)  # how the user names a slot
    hidden_slot: str | None = None  # clarify_first: stated only in hidden_info
    stale: dict[str, JsonValue] = Field(default_factory=dict)  # recover_after_error
    answer: Answer | None = None
    tool_names: list[str]
    noun: str | None = None  # what the last call is about ("cart"), for "the total of my cart"
    known_ids: list[str] = Field(default_factory=list)  # ids the user does not hold
    # an outside server's descriptions are written for a model, not as a user's requests
    outside: bool = False
    # outside servers: the calls the request is about, phrased from names (planning.phrasing),
    # and every tool's description, which a goal must not restate
    clauses: list[Clause] = Field(default_factory=list)
    descriptions: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# what the task asks


def _scalar(value: JsonValue) -> TypeGuard[str | int | float]:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _flat(values: Iterable[JsonValue]) -> list[JsonValue]:
    out: list[JsonValue] = []
    for v in values:
        out.extend(_flat(v) if isinstance(v, list) else [v])
    return out


def _text(value: JsonValue) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _informative(
    entity: Mapping[str, JsonValue], given: set[str], inputs: frozenset[str]
) -> list[str]:
    """Scalar fields that tell the user something: not ids, not echoes of the inputs."""
    return [
        k
        for k, v in entity.items()
        if _scalar(v)
        and not is_identifier(k)
        and k not in inputs
        and _text(v).casefold() not in given
        and not (isinstance(v, str) and not v.strip())
    ]


def _without_kind(record: Mapping[str, JsonValue], key: str) -> Mapping[str, JsonValue]:
    """A record without the field that only says what kind of record it is (``"type":
    "entity"`` in a list called ``entities``)."""
    kinds = {key.casefold(), singular(key.casefold())}
    return {k: v for k, v in record.items() if not (isinstance(v, str) and v.casefold() in kinds)}


def _names_given(item: JsonValue, given: set[str]) -> bool:
    """Whether a record's name (a label field) is a value the user gave."""
    return isinstance(item, Mapping) and any(
        isinstance(item.get(k), str) and str(item[k]).casefold() in given for k in _LABELS
    )


def _salient_key(key: str) -> int | None:
    name = "_".join(name_tokens(key))
    for rank, word in enumerate(_SALIENT):
        if (name == word or name.endswith("_" + word)) and not is_identifier(name):
            return rank
    return None


def _aggregate(
    items: list[Mapping[str, JsonValue]], given: set[str], noun: str | None
) -> Answer | None:
    """A question over several results: the lowest of a telling number, else how many."""
    numeric = [
        k
        for k, v in items[0].items()
        if isinstance(v, int | float) and not isinstance(v, bool) and not is_identifier(k)
    ]
    shared = [k for k in numeric if all(isinstance(it.get(k), int | float) for it in items)]
    ranked = sorted((r, k) for k in shared if (r := _salient_key(k)) is not None)
    if ranked:
        key = ranked[0][1]
        low = min(float(v) for it in items if isinstance(v := it.get(key), int | float))
        value: int | float = (
            int(low) if low.is_integer() and isinstance(items[0][key], int) else low
        )
        return Answer(field=f"lowest {_words(key)}", value=value)
    if str(len(items)) in given:
        return None
    return Answer(field=f"number of {noun}s" if noun else "number of results", value=len(items))


def pick_answer(
    calls: Sequence[GoldCall],
    slots: Mapping[str, JsonValue],
    inputs: Iterable[str] = (),
) -> Answer | None:
    """The question a read-only task asks about its last observation (docs/methods.md §4,
    ``answer_contains``: "the value(s) the question asks for").

    The observation's entity is the object itself, or — when the object only wraps one list
    (search results) — the list item that matches a slot; the answer is its most telling field
    (total, price, status...) that is neither an id nor an echo of the inputs (``inputs``: the
    tool's parameter names). Several results that no slot singles out (none matches one, or
    several do) give "the lowest price" (or how many there are).

    >>> call = GoldCall(tool="search_products", arguments={"query": "Aurora lamp"},
    ...     observation={"products": [{"product_id": "P1", "name": "Aurora lamp", "price": 39.5}]})
    >>> pick_answer([call], {"query": "Aurora lamp"})
    Answer(field='price', value=39.5, subject='Aurora lamp')
    """
    if not calls:
        return None
    last = calls[-1]
    names = frozenset(inputs)
    given = {_text(v).casefold() for v in _flat([*slots.values(), *last.arguments.values()])}
    value = parse_json_maybe(last.observation)
    entity: Mapping[str, JsonValue] | None = None
    items: list[Mapping[str, JsonValue]] | None = None
    if isinstance(value, Mapping):
        lists = {
            str(k): v
            for k, v in value.items()
            if isinstance(v, list) and v and isinstance(v[0], dict)
        }
        named = [k for k, rows in lists.items() if any(_names_given(r, given) for r in rows)]
        # one list of records; or of several (server-memory's entities and relations), the
        # one holding the record the user named
        key = next(iter(lists)) if len(lists) == 1 else named[0] if len(named) == 1 else None
        if key is not None and not _informative(value, given, names):
            items = [_without_kind(v, key) for v in lists[key] if isinstance(v, Mapping)]
        else:
            entity = value
    elif isinstance(value, list):
        items = [v for v in value if isinstance(v, Mapping)]
    if items is not None:
        hits = [
            it
            for it in items
            if any(isinstance(v, str) and v.casefold() in given for v in it.values())
        ]
        # one item singled out by what the user said; several that all match it (a day's
        # events, each carrying the date asked) single nothing out, so they are counted or
        # ranked like an unfiltered list instead of answered by whichever came first
        if len(hits) == 1 or (not hits and len(items) == 1):
            entity = (hits or items)[0]
        elif items:
            return _aggregate(list(hits or items), given, _tool_noun(last.tool))
    if entity is None:
        return None
    subject = next(
        (str(entity[k]) for k in _LABELS if isinstance(entity.get(k), str) and entity[k]), None
    )
    candidates: list[tuple[int, int, str]] = []
    for order, key in enumerate(_informative(entity, given, names)):
        v = entity[key]
        in_subject = (
            bool(subject) and key not in _LABELS and str(v).casefold() in str(subject).casefold()
        )
        if isinstance(v, str) and (len(v) > 60 or in_subject):
            continue
        rank = _salient_key(key)
        if rank is None:
            rank = len(_SALIENT) + (1 if key in _LABELS else 0)  # a name only as a last resort
        candidates.append((rank, order, key))
    if not candidates:
        return None
    _, _, key = min(candidates)
    answer = entity[key]
    assert _scalar(answer)  # _informative keeps scalar fields only
    if key in _LABELS:
        subject = None  # the question asks for the name itself
    return Answer(field=key, value=_without_echo(answer, given), subject=subject)


# a listing's type tag at the start of a line (server-filesystem's ``[DIR] docs``)
_LINE_TAG = re.compile(r"(?m)^[ \t]*\[[A-Z]{2,10}\][ \t]*(?=\S)")


def _without_echo(value: str | int | float, given: set[str]) -> str | int | float:
    r"""A text answer without a header that echoes the request's own value (server-filesystem's
    ``read_multiple_files`` answers ``docs/groceries.txt:\nmilk ...``) and without a listing's
    type tags (``[DIR] docs``): the user asked for the content, and an answer that states it
    without the file's name or the tool's markup answers them.

    >>> _without_echo("docs/a.txt:\nmilk\neggs\n", {"docs/a.txt"})
    'milk\neggs'
    >>> _without_echo("[DIR] docs\n[FILE] notes.txt", set())
    'docs\nnotes.txt'
    >>> _without_echo("Paris: 12 degrees", {"london"})
    'Paris: 12 degrees'
    """
    if not isinstance(value, str):
        return value
    for echoed in sorted(given, key=len, reverse=True):
        head, rest = value[: len(echoed)], value[len(echoed) :].lstrip(" \t")
        if echoed and head.casefold() == echoed and rest.startswith(":") and rest[1:].strip():
            value = rest[1:].strip()
            break
    return _LINE_TAG.sub("", value)


def _first_clause(description: str) -> str:
    clause = re.split(r"[.;:\n]", description.strip(), maxsplit=1)[0].strip()
    return clause


def _as_user(text: str) -> str:
    """A tool description in the user's voice: "the customer's cart" -> "my cart"."""
    out = text[:1].lower() + text[1:]
    for old, new in (
        ("the customer's", "my"),
        ("a customer's", "my"),
        ("the user's", "my"),
        ("the customer", "me"),
        ("a customer", "me"),
    ):
        out = out.replace(old, new)
    return out


def _id_values(value: JsonValue, key: str | None = None) -> list[str]:
    if isinstance(value, Mapping):
        return [s for k, v in value.items() for s in _id_values(v, str(k))]
    if isinstance(value, list):
        return [s for v in value for s in _id_values(v, key)]
    if _scalar(value) and key is not None and is_identifier(key):
        return [str(value)]
    return []


def stale_value(value: JsonValue, taken: set[str]) -> JsonValue | None:
    """A plausible outdated value the user might first give: a nearby number that is not a
    real value (``taken``), an old email domain; None when nothing plausible exists.

    >>> stale_value("#W1005", {"#W1005", "#W1004"})
    '#W1006'
    >>> stale_value("mia.k@example.com", set())
    'mia.k@old-example.com'
    """
    if isinstance(value, str):
        if "@" in value:
            local, _, domain = value.partition("@")
            return f"{local}@old-{domain}"
        match = re.search(r"(\d+)(\D*)$", value)
        if match:
            digits, tail = match.group(1), match.group(2)
            head = value[: match.start(1)]
            for step in (1, -1, 2, -2, 3, -3, 10, -10, 100):
                n = int(digits) + step
                if n < 0:
                    continue
                candidate = f"{head}{str(n).zfill(len(digits))}{tail}"
                if candidate not in taken:
                    return candidate
    return None


def _column_values(state: EnvState | None, source: str | None) -> set[str]:
    """The values ``source`` ("table.column") holds in ``state`` (none known without one)."""
    if state is None or not source or "." not in source:
        return set()
    table, column = source.split(".", 1)
    return {str(r.get(column)) for r in state.tables.get(table, []) if r.get(column) is not None}


def words_spec(
    cluster: ToolCluster,
    mode: ReasoningMode,
    steps: Sequence[PlannedCall],
    slots: Mapping[str, JsonValue],
    calls: Sequence[GoldCall],
    answer: Answer | None,
    *,
    initial_state: EnvState | None = None,
    slot_sources: Mapping[str, str] | None = None,
) -> WordsSpec:
    """What the words of this blueprint must say and avoid (docs/methods.md §3 steps 9-10)."""
    specs = {t.name: t for t in cluster.tools}
    described = []
    for step in steps:
        clause = _first_clause(specs[step.tool].description) or " ".join(name_tokens(step.tool))
        described.append(_as_user(clause))
    actions: list[str] = []
    for step in steps:
        if specs[step.tool].access is not ToolAccess.WRITE:
            continue
        clause = _first_clause(specs[step.tool].description)
        if not clause or _tool_names_in(clause, cluster.tool_names):
            clause = " ".join(name_tokens(step.tool))
        if _as_user(clause) not in actions:
            actions.append(_as_user(clause))
    writes = {i for i, s in enumerate(steps) if specs[s.tool].access is ToolAccess.WRITE}
    relevant = relevant_steps(steps, writes)
    facts, fact_labels, raw, fact_args = _selection_facts(steps, calls, slots, relevant)
    outside = cluster.source == "outside"
    if outside:
        # the user states what the outcome depends on, not the arguments of a read the
        # outcome does not use (a search before the write, a listing after it)
        used = {a.name for i in relevant for a in steps[i].args.values() if isinstance(a, SlotArg)}
        slots = {n: v for n, v in slots.items() if n in used}
    known = {**dict(slots), **facts}
    labels = {name: _slot_label(name, steps, cluster) for name in slots} | fact_labels
    slot_values = {_text(v) for v in _flat(known.values())}
    ids = {
        s
        for call in calls
        for s in _id_values(call.observation) + _id_values(call.arguments)
        if len(s) >= 3 and s not in slot_values and s not in raw
    }
    hidden = stale_slot = None
    stale: dict[str, JsonValue] = {}
    if slots and mode is ReasoningMode.CLARIFY_FIRST:
        hidden = _pick_slot(slots)
    if slots and mode is ReasoningMode.RECOVER_AFTER_ERROR:
        stale_slot = _pick_slot(slots, prefer_ids=True)
        taken = _column_values(initial_state, (slot_sources or {}).get(stale_slot))
        taken |= {_text(slots[stale_slot])}
        old = stale_value(slots[stale_slot], taken)
        if old is not None:
            stale[stale_slot] = old
    return WordsSpec(
        domain=str(cluster.domain),
        description=cluster.description,
        persona=cluster.facts.persona if cluster.facts is not None else None,
        mode=mode,
        steps=described,
        actions=actions,
        slots=known,
        labels=labels,
        hidden_slot=hidden,
        stale=stale,
        answer=answer,
        tool_names=cluster.tool_names,
        noun=_owned_noun(steps[-1].tool) if steps else None,
        known_ids=sorted(ids),
        outside=outside,
        clauses=clauses(steps, specs, relevant, known, fact_args) if outside else [],
        descriptions=[t.description for t in cluster.tools if t.description] if outside else [],
    )


_FREE_TEXT = frozenset({"query", "q", "search", "keyword", "keywords", "text", "term"})


def _tool_noun(tool: str) -> str | None:
    nouns = [t for t in name_tokens(tool) if t not in READ_VERBS | WRITE_VERBS | _STOP]
    return singular(nouns[-1]) if nouns else None


def _owned_noun(tool: str) -> str:
    noun = _tool_noun(tool)
    return "account" if noun in (None, "user", "customer", "email", "account") else noun


def _slot_label(name: str, steps: Sequence[PlannedCall], cluster: ToolCluster) -> str:
    """How the user names a slot: a search text by what it searches ("product"); a
    parameter that several calls of the path take from the user by what each call is about
    ("path of the file" and "path of the directory", not "path 2"), without naming a tool."""
    bound = [
        (step, param)
        for step in steps
        for param, arg in step.args.items()
        if isinstance(arg, SlotArg) and arg.name == name
    ]
    if name in _FREE_TEXT:
        for step, _ in bound:
            if noun := _tool_noun(step.tool):
                return noun
    if bound:
        step, param = bound[0]
        nouns = [
            _tool_noun(s.tool)
            for s in steps
            if isinstance(s.args.get(param), SlotArg)  # the user gives it to this call too
        ]
        noun = _tool_noun(step.tool)
        if len(nouns) > 1 and noun and nouns.count(noun) == 1:
            return f"{_words(param)} of the {noun}"
        verb = name_tokens(step.tool)[0]
        if len(nouns) > 1 and verb in READ_VERBS | WRITE_VERBS:
            # two calls about one kind of thing (read one file, write another): the verb
            # says which value is which ("path to read", "path to write")
            return f"{_words(param)} to {verb}"
    return _words(name)


def _selection_facts(
    steps: Sequence[PlannedCall],
    calls: Sequence[GoldCall],
    slots: Mapping[str, JsonValue],
    relevant: set[int],
) -> tuple[dict[str, JsonValue], dict[str, str], set[str], dict[tuple[int, str], str]]:
    """Entities the path picks from a list (``items[0].product_id``), as facts the user knows.

    An entity with a name is known by it ("product: Red Ceramic Mug"); one without is known by
    the value itself (the user knows their order id), which is then no leak. Returns the facts,
    their labels, the raw values and the (step, parameter) each fact fills."""
    facts: dict[str, JsonValue] = {}
    filled: dict[tuple[int, str], str] = {}
    labels: dict[str, str] = {}
    raw: set[str] = set()
    known = {_text(v).casefold() for v in _flat(slots.values())}
    for i, step in enumerate(steps):
        if i not in relevant:
            continue
        for arg, binding in step.args.items():
            if not isinstance(binding, RefArg) or "[" not in binding.field:
                continue
            if binding.step >= len(calls):
                continue
            observation = parse_json_maybe(calls[binding.step].observation)
            parent = binding.field.rsplit(".", 1)[0] if "." in binding.field else ""
            try:
                value = resolve_field(observation, binding.field)
                entity = resolve_field(observation, parent) if parent else None
            except KeyError:
                continue
            label = None
            if isinstance(entity, Mapping) and is_identifier(arg):
                label = next((entity[k] for k in _LABELS if isinstance(entity.get(k), str)), None)
            base = arg[:-4] if arg.endswith("_ids") else arg[:-3] if arg.endswith("_id") else arg
            if label is not None:
                if str(label).casefold() in known:
                    continue
                key, fact = base or arg, label
            else:
                if _text(value).casefold() in known:
                    continue
                key, fact = arg, value
                raw.update(_text(v) for v in _flat([value]))
            while key in slots or key in facts:
                key += "_"
            facts[key] = fact
            filled[(i, arg)] = key
            labels[key] = _words(base or arg)
            known.add(_text(fact).casefold())
    return facts, labels, raw, filled


def _pick_slot(slots: Mapping[str, JsonValue], *, prefer_ids: bool = False) -> str:
    """The slot to hold back (or to state stale): an id or identity first. A slot whose value
    another slot repeats is taken only when every value repeats: the goal that states the
    other slot would state it too (mcp-server-time: timezone and source_timezone, both
    America/New_York), and the words could never pass their check."""
    counts = Counter(_text(v) for v in slots.values())
    unique = {n: v for n, v in slots.items() if counts[_text(v)] == 1}
    slots = unique or slots
    names = list(slots)
    scalar = [n for n in names if _scalar(slots[n])]
    identity = [n for n in scalar if n in _IDENTITY]
    ids = [n for n in scalar if is_identifier(n)]
    order = (ids + identity) if prefer_ids else (identity + ids)
    return (order or scalar or names)[0]


# ---------------------------------------------------------------------------------------------
# the LLM's draft


def build_messages(system_prompt: str, prompt_template: str, spec: WordsSpec) -> list[Message]:
    """The planner's request. ``prompt_template`` takes ``{description}``, ``{steps}``,
    ``{facts}``, ``{question}`` and ``{mode}`` (str.format fields)."""
    facts = "\n".join(
        f"- {name} ({spec.labels.get(name, _words(name))}): {_text(value)}"
        for name, value in spec.slots.items()
    )
    question = ""
    if spec.answer is not None:
        about = f" of {spec.answer.subject}" if spec.answer.subject else ""
        question = f"The user wants to know the {_words(spec.answer.field)}{about}.\n"
    mode = ""
    if spec.hidden_slot:
        mode = (
            f"Leave {spec.hidden_slot} out of the goal; put it only in hidden_info "
            "(the user says it when asked).\n"
        )
    for name, old in spec.stale.items():
        mode += (
            f"In the goal the user first gives an outdated {name}: {_text(old)}. "
            f"Put the correct {name} in hidden_info.\n"
        )
    if spec.mode is ReasoningMode.VERIFY_AFTER_WRITE:
        mode += "The user wants the assistant to confirm the change.\n"
    steps = spec.steps
    if spec.outside and spec.clauses:
        # an outside server's descriptions are written for a model: a draft shown them
        # restates them, so it is shown the request in plain words to say in its own
        steps = [template_words(spec).goal]
        mode += "Say it in your own words: no 'name: value' lists, no tool descriptions.\n"
    user = prompt_template.format(
        description=spec.description or spec.domain,
        steps="\n".join(f"- {s}" for s in steps),
        facts=facts or "- (none)",
        question=question,
        mode=mode,
    )
    return [
        Message(role=MessageRole.SYSTEM, content=system_prompt),
        Message(role=MessageRole.USER, content=user),
    ]


def _first_object(text: str) -> dict | None:
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _default_persona(spec: WordsSpec) -> str:
    return spec.persona or _PERSONAS.get(spec.domain, "A user of the service.")


def parse_words(text: str | None, spec: WordsSpec) -> Words | None:
    """The first JSON object in the reply as words, or None when there is none with a goal.

    Keys are matched case-insensitively. ``hidden_info`` entries are kept only for slots
    (matched by name or by value) and always carry the slot's true value; a missing persona
    gets the cluster's persona (or the domain's default).

    >>> s = WordsSpec(domain="retail", mode="direct_execute", steps=[], slots={"email": "a@x.io"},
    ...     tool_names=[])
    >>> parse_words('Sure! {"goal": "Help", "hidden_info": {"Email": "a@x.io"}} done', s)
    Words(persona='A shopper at an online store.', goal='Help', hidden_info={'email': 'a@x.io'})
    """
    data = _first_object(text or "")
    if data is None:
        return None
    fields = {str(k).strip().lower().replace(" ", "_"): v for k, v in data.items()}
    goal = fields.get("goal")
    if not isinstance(goal, str) or not goal.strip():
        return None
    persona = fields.get("persona")
    if not isinstance(persona, str) or not persona.strip():
        persona = _default_persona(spec)
    raw_hidden = fields.get("hidden_info", fields.get("hidden", {}))
    hidden: dict[str, JsonValue] = {}
    if isinstance(raw_hidden, Mapping):
        by_value = {_text(v).casefold(): k for k, v in spec.slots.items()}
        for key, value in raw_hidden.items():
            name = str(key).strip()
            slot = next((s for s in spec.slots if s.lower() == name.lower()), None)
            if slot is None and value is not None:
                slot = by_value.get(_text(value).casefold())
            if slot is not None:
                hidden[slot] = spec.slots[slot]
    return Words(persona=persona.strip(), goal=goal.strip(), hidden_info=hidden)


# ---------------------------------------------------------------------------------------------
# checks (no LLM)


def _words(name: str) -> str:
    return " ".join(name_tokens(name))


def _norm(text: str) -> str:
    return " ".join(re.split(r"[^a-z0-9@#.\-]+", text.casefold())).strip()


def _tool_names_in(text: str, tool_names: Iterable[str]) -> list[str]:
    """Tool identifiers written as such (``add_to_cart``, ``addToCart``) in ``text``."""
    found = []
    for name in tool_names:
        if len(name_tokens(name)) < 2:
            continue  # a one-word name ("search") is an ordinary word
        if re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text, re.I):
            found.append(name)
    return found


def _states(text: str, value: JsonValue) -> bool:
    """Whether ``text`` states ``value`` (every item of a list; numbers formatting-insensitive)."""
    if isinstance(value, list):
        return bool(value) and all(_states(text, v) for v in value)
    if isinstance(value, bool):
        return True  # a yes/no choice is phrased, not quoted
    if isinstance(value, Mapping):
        # an object is stated by its values ("the entity Ann (entity type person)"), not
        # by its keys; an empty field says nothing
        shown = [v for v in value.values() if v not in ("", None, [], {})]
        return all(_states(text, v) for v in shown)
    if isinstance(value, int | float):
        numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", text.replace(",", ""))]
        return any(abs(n - float(value)) <= 1e-6 * max(1.0, abs(float(value))) for n in numbers)
    return _norm(str(value)) in _norm(text) if str(value).strip() else True


def _answer_given(goal: str, value: str | int | float, slots: Mapping[str, JsonValue]) -> bool:
    """Whether the goal states the answer; small integers and slot values do not count."""
    if any(_text(v).casefold() == _text(value).casefold() for v in _flat(slots.values())):
        return False
    if isinstance(value, str):
        return len(value.strip()) >= 3 and _states(goal, value)
    if isinstance(value, int) and abs(value) < 10:
        return False
    return _states(goal, value)


def check_words(words: Words, spec: WordsSpec) -> list[str]:
    """Problems with the words, as ``code: detail`` (docs/methods.md §3 step 10); empty = fit.

    - ``tool_name``: the goal or persona names a tool;
    - ``leakage``: it quotes an id the user would not know (not a slot), or the answer itself;
    - ``over_specification``: it names two or more tools' actions (a step list, not a request);
    - ``unsolvable``: a slot is neither stated in the goal nor in hidden_info;
    - ``mode``: the target mode is not realised (clarify_first: the held-back slot is in the
      goal or missing from hidden_info; recover_after_error: the stale value is not given);
    - ``ambiguous``: two values under one label;
    - ``too_short``, and on outside clusters ``restates_description``, ``label_list`` and a
      one-word ``tool_name`` written as code (``_not_a_request``);
    - on outside clusters, when nothing else is wrong, ``not_a_request``: the goal asks for
      nothing (``_asks_nothing``).
    """
    text = f"{words.goal}\n{words.persona}"
    issues: list[str] = []
    if len(words.goal.strip()) < 8:
        issues.append("unsolvable: the goal is empty")
    issues += [f"tool_name: {n}" for n in _tool_names_in(text, spec.tool_names)]
    for value in spec.known_ids:
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(value)}(?![A-Za-z0-9])", text):
            issues.append(f"leakage: id {value}")
    if spec.answer is not None and _answer_given(words.goal, spec.answer.value, spec.slots):
        issues.append(f"leakage: the goal gives away the answer {spec.answer.value!r}")
    phrases = [n for n in spec.tool_names if len(name_tokens(n)) >= 2]
    named = [n for n in phrases if f" {_words(n)} " in f" {_norm(words.goal)} "]
    if len(named) >= 2:
        issues.append(f"over_specification: names {', '.join(named)}")
    for name, value in spec.slots.items():
        if name == spec.hidden_slot or name in spec.stale:
            continue
        if not _states(words.goal, value) and name not in words.hidden_info:
            issues.append(f"unsolvable: {name} is neither in the goal nor in hidden_info")
    if spec.hidden_slot is not None:
        value = spec.slots[spec.hidden_slot]
        if _states(words.goal, value) and not isinstance(value, bool):
            issues.append(f"mode: clarify_first, but {spec.hidden_slot} is in the goal")
        if spec.hidden_slot not in words.hidden_info:
            issues.append(f"unsolvable: {spec.hidden_slot} is held back but not in hidden_info")
    for name, old in spec.stale.items():
        if not _states(words.goal, old):
            issues.append(f"mode: recover_after_error, but the goal lacks the stale {name}")
        if name not in words.hidden_info:
            issues.append(f"unsolvable: the correct {name} is not in hidden_info")
    issues += ambiguous_labels(words.goal) + _not_a_request(words.goal, spec)
    if spec.outside and not issues:  # the last resort, for a goal the checks let through
        issues = _asks_nothing(words.goal, spec)
    return issues


# a value stated under a label, as the template and most drafts write it ("path: README.md"):
# the label follows the sentence's colon, a semicolon or an opening parenthesis
_LABELLED = re.compile(
    r"(?:[:;(]\s+|\()([A-Za-z][A-Za-z0-9 ]{0,40}?):\s+(\"[^\"]*\"|[^;).]+(?:\.\w[^;).]*)*)"
)


def ambiguous_labels(goal: str) -> list[str]:
    """``ambiguous: ...`` when the goal states two different values under one label
    ("path: README.md; path: data/sales.csv"): the user does not say which value is which
    (read from one file, write the other), so no assistant can tell what is asked.

    >>> ambiguous_labels("Please create a file: path: README.md; path: data/sales.csv.")
    ["ambiguous: 'path' labels 2 values (README.md, data/sales.csv)"]
    >>> ambiguous_labels("Please copy a file: path to read: README.md; path to write: b.md.")
    []
    """
    seen: dict[str, list[str]] = {}
    for label, value in _LABELLED.findall(goal):
        value = value.strip().rstrip(".")
        values = seen.setdefault(label.strip().casefold(), [])
        if value not in values:
            values.append(value)
    return [
        f"ambiguous: {label!r} labels {len(values)} values ({', '.join(values)})"
        for label, values in seen.items()
        if len(values) > 1
    ]


_MIN_GOAL_WORDS = 5
_RESTATED_RUN = 6  # consecutive words of a tool's description
_RESTATED_SHARE = 0.4  # of the word trigrams of a description's first sentence
# "word: value;" - a value under a label, a list of them is a form, not a request
_LABEL = re.compile(r"(?<![\w:/])[A-Za-z][\w' ]{0,40}:\s+\S")


def _tokens(text: str) -> list[str]:
    return [w.casefold() for w in re.findall(r"[\w'-]+", text)]


def _leaves(value: JsonValue) -> list[str]:
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _leaves(v)]
    if isinstance(value, list):
        return [s for v in value for s in _leaves(v)]
    return [_text(value)] if _scalar(value) else []


def _without_values(goal: str, spec: WordsSpec) -> str:
    """The goal less the values it states: a value is the user's (a file's text may well
    quote a description), the words around it are the goal's own."""
    values = sorted(
        {v for v in _leaves([*spec.slots.values(), *spec.stale.values()]) if len(v) >= 3},
        key=len,
        reverse=True,
    )
    for value in values:
        goal = goal.replace(value, " … ")  # still a value, with no words of its own
    return goal


def _restated(goal: str, spec: WordsSpec) -> list[str]:
    said = _tokens(_without_values(goal, spec))
    runs = {" ".join(said[i : i + _RESTATED_RUN]) for i in range(len(said) - _RESTATED_RUN + 1)}
    grams = {tuple(said[i : i + 3]) for i in range(len(said) - 2)}
    for description in [*spec.descriptions, *spec.steps]:
        tokens = _tokens(description)
        for i in range(len(tokens) - _RESTATED_RUN + 1):
            run = " ".join(tokens[i : i + _RESTATED_RUN])
            if run in runs:
                return [f"restates_description: {run!r}"]
        first = _tokens(_first_clause(description))
        own = {tuple(first[i : i + 3]) for i in range(len(first) - 2)}
        if len(first) >= 5 and len(own & grams) >= _RESTATED_SHARE * len(own):
            return [f"restates_description: {' '.join(first)!r}"]
    return []


def label_runs(goal: str) -> list[str]:
    """``label_list: ...`` when two or more pieces of the goal (split at ``;``, ``,`` and
    "and") each state a value under a label ("path: docs/a.txt; content: hi", "timezone:
    Asia/Tokyo and time: 09:15"): a form filled in, not a request.

    >>> label_runs("Please write it: path: docs/a.txt; content: hi.")
    ["label_list: 2 'label: value' pieces (path, content)"]
    >>> label_runs("Meet at 10:30 and bring the notes: the ones from Monday.")
    []
    """
    pieces = [p for p in re.split(r";|,\s|\sand\s", goal) if _LABEL.search(p)]
    if len(pieces) < 2:
        return []
    # each piece's label: the words before its last "label: " colon, back to the previous colon
    colons = [[m.start() for m in re.finditer(r"(?<=[\w'\"]):\s+\S", p)] for p in pieces]
    heads = [re.split(r"[:(]", p[: c[-1]])[-1] for p, c in zip(pieces, colons, strict=True) if c]
    labels = [" ".join(head.split()[-4:]) for head in heads]
    return [f"label_list: {len(pieces)} 'label: value' pieces ({', '.join(labels)})"]


def _code_names(goal: str, tool_names: Iterable[str]) -> list[str]:
    """One-word tool names written as code (`echo`, ``echo(``); two-word ones are
    ``_tool_names_in``'s, and a one-word name in prose ("search") is an ordinary word."""
    return [
        f"tool_name: {n}"
        for n in tool_names
        if len(name_tokens(n)) < 2
        and re.search(rf"`{re.escape(n)}`|(?<![\w-]){re.escape(n)}\(", goal, re.I)
    ]


def _not_a_request(goal: str, spec: WordsSpec) -> list[str]:
    """A goal no person would write (outside servers, whose descriptions are written for a
    model): fewer than five words ("mcp-eval"), a tool's description restated (six words in a
    row of one, or most of its first sentence's word trigrams, the values the goal states
    left out), a list of ``label: value`` pieces, a tool's name written as code, words about
    the user or to the assistant ("Your user wants ...", "Here is how you can respond").

    >>> s = WordsSpec(domain="other", mode="direct_execute", slots={}, tool_names=["mv"],
    ...     steps=["This tool belongs to the Gorilla file system. It moves a file."],
    ...     outside=True)
    >>> _not_a_request("mcp-eval", s)
    ['too_short: 1 words (a request needs at least 5)']
    >>> _not_a_request("Please this tool belongs to the Gorilla file system: notes", s)[0][:20]
    'restates_description'
    >>> _not_a_request("Please move the file a.txt into the folder old.", s)
    []
    >>> _not_a_request("Your user wants to know the temperature in Chicago.", s)
    ["not_the_users_voice: 'Your user'"]
    """
    issues: list[str] = []
    words = re.findall(r"[\w'-]+", goal)
    least = _MIN_GOAL_WORDS if spec.outside else 3
    if len(words) < least:
        issues.append(f"too_short: {len(words)} words (a request needs at least {least})")
    if spec.outside:
        own = _without_values(goal, spec)  # a value's own colons are no labels
        issues += _restated(goal, spec) + label_runs(own) + _code_names(goal, spec.tool_names)
        if spoken := _ABOUT_THE_USER.search(own):
            issues.append(f"not_the_users_voice: {spoken.group(0)!r}")
        issues += _off_topic(goal, spec)
    return issues


# what a request sounds like: a question, a polite ask, a want, or an order
_ASKS = re.compile(
    r"\?|\b(?:please|pls|could you|can you|would you|will you|i(?:'d| would) like|i want"
    r"|i need|i'm looking|help me|let me know|tell me|show me|make sure)\b",
    re.IGNORECASE,
)
# verbs a request may open with, ordering the assistant; the task's own verbs count too
_ORDERS = frozenset(
    {"add", "append", "book", "cancel", "change", "check", "convert", "copy", "create",
     "delete", "find", "get", "give", "list", "look", "make", "move", "open", "put", "read",
     "record", "remove", "rename", "save", "search", "send", "set", "show", "store", "tell",
     "update", "write"}
)  # fmt: skip


def _asks_nothing(goal: str, spec: WordsSpec) -> list[str]:
    """A goal that asks for nothing: no question, no please, no want, and no order to open it
    ("The Business Insights from the MCP server database are available at ...", a SmolLM2
    draft that restated the value it was given).

    >>> s = WordsSpec(domain="other", mode="direct_execute", slots={}, tool_names=[],
    ...     steps=[], outside=True)
    >>> _asks_nothing("The insights of the database are available at mcp.sqlite.", s)
    ['not_a_request: the goal states something and asks for nothing']
    >>> _asks_nothing("Append the insight that orders doubled in March.", s)
    []
    """
    if _ASKS.search(goal):
        return []
    first = re.findall(r"[A-Za-z']+", goal.lower())[:1]
    verbs = _ORDERS | {c.verb.split()[0].lower() for c in spec.clauses if c.verb.strip()}
    if first and first[0] in verbs:
        return []
    return ["not_a_request: the goal states something and asks for nothing"]


def _off_topic(goal: str, spec: WordsSpec) -> list[str]:
    """A goal that names none of what its calls do or are about (their verbs and nouns, the
    answer's field) and none of the user's values: words on another subject ("This is an
    unexpected and unhelpful piece of code ...", a bench draft of SmolLM2's)."""
    if not spec.clauses:
        return []
    named = [f"{c.verb} {c.noun} {c.words}" for c in spec.clauses]
    if spec.answer is not None:
        named.append(spec.answer.field.replace("_", " "))
    if said_words([goal]) & said_words(named) or any(
        _states(goal, v) for v in _flat(spec.slots.values())
    ):
        return []
    return ["off_topic: names nothing the task's calls do or are about"]


# a draft that speaks of the user or coaches the assistant is a prompt, not the user's request
# ("find the user with the email ..." names a record, and stays)
_ABOUT_THE_USER = re.compile(
    r"\byour (?:user|customer)\b"
    r"|\b(?:the|a|this) (?:user|customer) (?:wants|needs|would like|asks|is asking|requests)\b"
    r"|\bthe assistant\b|\byou can respond\b|\bhere is how\b",
    re.IGNORECASE,
)


# ---------------------------------------------------------------------------------------------
# the deterministic fallback


def _shown(value: JsonValue) -> str:
    """A value as the template states it: text of several words in quotes, so where it ends
    is plain (``content: "Wrote notes.txt".`` - without them a model copies the period)."""
    if isinstance(value, str) and re.search(r"\s", value.strip()):
        return json.dumps(value, ensure_ascii=False)
    return _text(value)


def _phrase(name: str, value: JsonValue, labels: Mapping[str, str] | None = None) -> str:
    shown = ", ".join(_shown(v) for v in value) if isinstance(value, list) else _shown(value)
    return f"{(labels or {}).get(name) or _words(name)}: {shown}"


def template_words(spec: WordsSpec) -> Words:
    """Short, explicit words built from the path, the slots and the question.

    >>> s = WordsSpec(domain="retail", mode="direct_execute", steps=["search the catalogue"],
    ...     slots={"query": "Vortex 600 Blender"}, tool_names=["search_products"],
    ...     answer=Answer(field="price", value=79.99, subject="Vortex 600 Blender"))
    >>> template_words(s).goal
    'What is the price of Vortex 600 Blender?'
    """
    persona = _default_persona(spec)
    hidden: dict[str, JsonValue] = {}
    stated: dict[str, JsonValue] = {}
    for name, value in spec.slots.items():
        if name == spec.hidden_slot:
            hidden[name] = value
        elif name in spec.stale:
            hidden[name] = value
            stated[name] = spec.stale[name]
        else:
            stated[name] = value
    if spec.outside and spec.clauses:
        question = _words(spec.answer.field) if spec.answer is not None else None
        sentence = request(spec.clauses, stated, question)
        if question is None:
            sentence += _MODE_SUFFIX.get(spec.mode, "")
        return Words(persona=persona, goal=sentence, hidden_info=hidden)
    intro = [
        f"My {_words(n)} is {_text(v)}." for n, v in stated.items() if n in _IDENTITY and _scalar(v)
    ]
    rest = {n: v for n, v in stated.items() if not (n in _IDENTITY and _scalar(v))}
    if spec.answer is not None:
        field = _words(spec.answer.field)
        subject = spec.answer.subject
        named = [
            n for n, v in rest.items() if subject and _text(v).casefold() == subject.casefold()
        ]
        if subject and named:
            rest.pop(named[0])
            ask = f"What is the {field} of {subject}"
        elif rest:
            ask = f"What is the {field} for " + " and ".join(
                _phrase(n, v, spec.labels) for n, v in rest.items()
            )
            rest = {}
        else:
            ask = f"What is the {field}" + (f" of my {spec.noun}" if intro and spec.noun else "")
        sentence = ask + "?"
        if rest:
            sentence += " (" + "; ".join(_phrase(n, v, spec.labels) for n, v in rest.items()) + ")"
    else:
        actions = spec.actions or spec.steps[-1:] or ["help me"]
        sentence = "Please " + ", then ".join(actions)
        if rest:
            sentence += ": " + "; ".join(_phrase(n, v, spec.labels) for n, v in rest.items())
        sentence += "."
        sentence += _MODE_SUFFIX.get(spec.mode, "")
    goal = " ".join([*intro, sentence])
    return Words(persona=persona, goal=goal, hidden_info=hidden)
