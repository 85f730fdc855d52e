"""Hygiene of the answer and of the calls' use: is the example *faithful*, not only clean.

Four registered hygiene checks (``curation.hygiene``), model-free, for any tool server:

- ``grounded_answer``: every value the answer states (a number, an id, a file name, an email,
  a date or time, a quoted string, a value the task asked the user to be told) appears in
  what the episode saw: a tool result, a user or system message, the arguments of a call that
  succeeded, or the offered tools' schemas. A value no tool returned is made up. A value the
  task asked to be told must appear in a tool result itself.
- ``outcome_consistent``: the answer does not say that nothing happened ("did not go
  through", "nothing was changed") when a write succeeded and no failure was left standing.
- ``no_redundant_call``: no successful call is repeated with the same arguments and the same
  result while no write ran in between; the repeat learned nothing. Results that differ only
  in their numbers count as the same: a clock read again tells the time again, and a task
  asks it once.
- ``answer_informs``: after the tools ran, the answer tells the user something they did not
  say themselves: an outcome ("deleted", "done", "could not"), or a value or word from a tool
  result. An answer that only echoes the request states no outcome, and one with a sentence
  that explains a tool in general ("This is a function that will delete ...", "This function
  returns the time in UTC by default") lectures instead of telling what happened, whatever
  outcome words the lecture holds.

Decisions:

- Numbers are compared by value (``12`` = ``12.0`` = ``12.00``; ``1,234.5`` = ``1234.5``), and
  the numbers of the corpus include every run of digits inside it (so ``11`` and ``2025`` of
  ``2025-06-11`` are grounded: a date may be re-written as "June 11, 2025") and the length of
  every list a tool returned (a count is a value a tool returned).
- A token holding digits is grounded when it appears verbatim (case-insensitive) or when every
  number in it is; a token without digits (``README.md``) must appear verbatim.
- Figures an answer derives (a sum of two prices) are not grounded: the check cannot tell a
  right sum from a made-up one, so such an example fails; docs/verification.md says so.
- Read or write comes from the cluster's tags when the verifier has them, else from the
  tool's name (``curation.digests.tool_access``: a name that says nothing is a write, which
  makes ``no_redundant_call`` lenient and ``outcome_consistent`` strict).
- The vocabulary of outcomes is English, as the rest of the product's answer checks are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Iterator, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from trajsynth.curation.digests import tool_access
from trajsynth.curation.hygiene import HygieneContext, corrected_by, hygiene_check, succeeded
from trajsynth.schemas import MessageRole, ToolAccess, ToolCallRecord, canonical_json

__all__ = ["answer_values", "corpus_numbers", "numbers_in"]

_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
# a token of the answer that may carry a value: letters, digits and the joiners of ids,
# paths, emails, dates and times
_TOKEN = re.compile(r"[\w$€£@%+:./\\#-]+")
_QUOTED = re.compile(r"\"([^\"\n]{1,120})\"|“([^”\n]{1,120})”|`([^`\n]{1,120})`")
_JOINED = re.compile(r"\w[._/@\\]\w")
_EDGE = ".,;:!?)(\"'`$€£#"
# prose that looks joined but states no value: e.g, i.e, a.m, U.S; and/or, read/write
_PROSE = re.compile(r"^(?:[A-Za-z]{1,2}\.)+[A-Za-z]{0,2}$|^[A-Za-z]+/[A-Za-z]+$")
# a numbered list's markers ("1. ", "2) ") count items of the answer itself, not values
_LIST_MARKER = re.compile(r"(?m)^[ \t]*\d{1,2}[.)][ \t]")
_CLOCK = re.compile(r"(?<!\d)([01]?\d|2[0-3]):[0-5]\d(?!\d)")
_ALWAYS = frozenset({Decimal(0), Decimal(1)})  # "1 passenger", "0 results": no claim of a tool
_WORD = re.compile(r"[a-z][a-z'-]{2,}")
_STOP = frozenset(
    """the and for you your that this with have has had was were are here what found there
    which from they them then than into over just only also been being will would could
    should can may might all any some our out not now new one two its it's let know please
    thanks thank sure okay yes need needs needed did does done about more most other such
    when where who whom why how very much many each both few those these their there's i'm
    i've i'll we're you're that's what's sorry help anything else""".split()  # noqa: SIM905
)  # words any answer says: no evidence that it reports a tool result
_OUTCOME = re.compile(
    r"\b(done|complete[ds]?|completed|success(ful(ly)?)?|succeeded|confirm(ed|s)?|booked|"
    r"deleted|removed|created|added|updated|changed|moved|sent|cancell?ed|saved|scheduled|"
    r"rescheduled|written|wrote|stored|inserted|recorded|renamed|replied|responded|accepted|"
    r"declined|refunded|paid|ordered|purchased|reserved|registered|finished|went through|"
    r"taken care|is now|are now|has been|have been|"
    r"yes|fail(ed|s|ure)?|error|unable|could ?n[o']t|can ?n[o']t|did ?n[o']t|not possible|"
    r"no (such|matching|results?)|nothing|none|empty)\b",
    re.IGNORECASE,
)
_CLAIMS_NOTHING = re.compile(
    r"\b(did ?n[o']t|does ?n[o']t|could ?n[o']t|was ?n[o']t able to|were ?n[o']t able to|"
    r"was unable to|were unable to|am unable to|unable to|failed to)\s+"
    r"(go through|complete|be completed|process|be processed|finish|do (that|this|it))\b|"
    r"\bnothing (was|has been|got|is) (changed|done|made|updated|saved|created|deleted|"
    r"booked|sent|processed)\b|"
    r"\bno changes? (was|were|has been|have been) made\b|"
    r"\b(the|your|this|that) (request|operation|change|booking|order|action) (failed|was "
    r"not (completed|processed|made))\b",
    re.IGNORECASE,
)


# --- the corpus: what the episode saw --------------------------------------------------------


def numbers_in(text: str) -> list[Decimal]:
    """Every number in ``text`` by value.

    >>> [str(n) for n in numbers_in("12.0 and 1,234.50 on 2025-06-11")]
    ['12', '1234.5', '2025', '6', '11']
    """
    out = []
    for match in _NUMBER.finditer(text):
        try:
            n = Decimal(match.group().replace(",", "")).normalize()
        except InvalidOperation:  # pragma: no cover - the pattern admits only numbers
            continue
        try:  # 12.0 -> 12
            out.append(n.quantize(Decimal(1)) if n == n.to_integral_value() else n)
        except InvalidOperation:  # past the context's precision (a fuzzed 60-digit run)
            out.append(n)
    return out


def _list_lengths(value: Any) -> Iterator[int]:
    if isinstance(value, list):
        yield len(value)
        for item in value:
            yield from _list_lengths(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _list_lengths(item)


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def corpus_numbers(texts: Sequence[str], results: Sequence[str]) -> set[Decimal]:
    """The numbers the episode saw: every number in ``texts`` and the length of every list a
    tool result (``results``) holds.

    >>> sorted(int(n) for n in corpus_numbers(["pick 2"], ['{"files": ["a", "b", "c"]}']))
    [2, 3]
    """
    found = {n for text in texts for n in numbers_in(text)}
    for text in texts:  # 14:30 may be told as 2:30 pm
        found |= {Decimal(int(m.group(1)) % 12 or 12) for m in _CLOCK.finditer(text)}
    for text in results:
        found |= {Decimal(n) for n in _list_lengths(_parsed(text))}
    return found


class Corpus:
    """What the answer may draw on, split by who said it (the user, or a tool)."""

    def __init__(self, ctx: HygieneContext) -> None:
        messages = ctx.trajectory.messages
        self.user = [m.content or "" for m in messages if m.role is MessageRole.USER]
        system = [m.content or "" for m in messages if m.role is MessageRole.SYSTEM]
        tool_messages = [m.content or "" for m in messages if m.role is MessageRole.TOOL]
        self.results = [c.observation for c in ctx.calls] + tool_messages
        arguments = [c.raw_arguments for c in ctx.calls if succeeded(c)]
        schemas = [json.dumps(dict(s), default=str) for s in ctx.schemas.values()]
        schemas.append(" ".join(ctx.schemas))  # the tools' names
        self.given = self.user + system + arguments + schemas
        self.text = "\n".join(self.results + self.given).casefold()
        # "New York" is said by "America/New_York"
        self.spaced_text = self.text.replace("_", " ")
        self.numbers = corpus_numbers(self.results + self.given, self.results)
        self.result_text = "\n".join(self.results).casefold()
        self.spaced_result_text = self.result_text.replace("_", " ")
        self.result_numbers = corpus_numbers(self.results, self.results)
        self.user_text = "\n".join(self.user).casefold()
        self.user_words = set(_WORD.findall(self.user_text))
        self.result_words = set(_WORD.findall(self.result_text))

    def holds(self, token: str, *, tools_only: bool = False) -> bool:
        """Whether ``token`` appears verbatim, or (holding digits) every number in it does."""
        text = self.result_text if tools_only else self.text
        numbers = self.result_numbers if tools_only else self.numbers
        spaced = self.spaced_result_text if tools_only else self.spaced_text
        if token.casefold() in text or token.casefold() in spaced:
            return True
        values = numbers_in(token)
        return bool(values) and all(_has_number(numbers, v) for v in values)

    def returned(self, token: str) -> bool:
        """Whether a tool result holds ``token``: verbatim, or every number in it, 0 and 1
        included (an asked "+0.0h" is a claim about what a tool returned)."""
        if token.casefold() in self.result_text:
            return True
        values = numbers_in(token)
        return bool(values) and all(_has_number(self.result_numbers, v, always=()) for v in values)


def _has_number(
    numbers: set[Decimal], value: Decimal, always: Collection[Decimal] = _ALWAYS
) -> bool:
    """``value`` is in ``numbers`` (or ``always``), or some number rounds to it (54.199 told
    as 54.20)."""
    if value in numbers or value in always:
        return True
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int) or exponent >= 0:
        return False
    step = Decimal(1).scaleb(exponent)
    return any(abs(n - value) < step and n.quantize(step) == value for n in numbers)


# --- the answer's values ---------------------------------------------------------------------


def answer_values(answer: str, asked: Sequence[str | int | float] = ()) -> list[str]:
    """The values an answer states: quoted strings, tokens holding a digit or joining words
    (ids, paths, file names, emails, dates, times, amounts), and the asked values it holds.

    >>> answer_values('Booked BK1007 for $276.12 on 2025-06-11; see "notes.txt" ok.')
    ['notes.txt', 'BK1007', '276.12', '2025-06-11', 'notes.txt']
    """
    values = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(answer)]
    for match in _TOKEN.finditer(_LIST_MARKER.sub(" ", answer)):
        token = match.group().strip(_EDGE)
        if not token or _PROSE.match(token):
            continue
        if any(ch.isdigit() for ch in token) or _JOINED.search(token):
            values.append(token)
    low = answer.casefold()
    values += [str(v) for v in asked if str(v).strip() and str(v).casefold() in low]
    return values


def _writes(ctx: HygieneContext) -> list[int]:
    return [
        i for i, c in enumerate(ctx.calls) if tool_access(c.tool, ctx.access) is ToolAccess.WRITE
    ]


# --- the checks ------------------------------------------------------------------------------


# a name of several capitalised words inside a sentence ("... in Japan's Eastern Standard
# Calendar (Yon)", a time bench answer): a proper name the episode has to have said
_NAME_RUN = re.compile(r"(?<=[a-z,;:(] )[A-Z][a-z]+(?: (?:of |de |the )?[A-Z][a-z]+)+")


def names_stated(answer: str) -> list[str]:
    """The proper names of several words that an answer states inside its sentences.

    >>> names_stated("It is 10:15. This is the time in Japan's Eastern Standard Calendar.")
    ['Eastern Standard Calendar']
    >>> names_stated("Ada Lovelace is deleted. The owner is Hannah Weber.")
    ['Hannah Weber']
    """
    return _NAME_RUN.findall(answer)


# a unit of measure right after a number, and the words that say it: a reading the result
# gave as a bare number ({"temperature": 33}) stated in degrees Celsius is a guess
_UNITS = {
    "degrees Celsius": (r"°\s?C\b|degrees? (?:C\b|celsius)|celsius", ("°c", "celsius")),
    "degrees Fahrenheit": (r"°\s?F\b|degrees? (?:F\b|fahrenheit)|fahrenheit", ("°f", "fahrenheit")),
    "kelvin": (r"kelvins?", ("kelvin",)),
    "kilometres": (r"km\b|kilomet(?:er|re)s?", ("km", "kilomet")),
    "miles": (r"mi\b|miles?|mph", ("mile", "mph")),
    "kilograms": (r"kg\b|kilograms?", ("kg", "kilogram")),
}
_UNIT_AFTER = {
    unit: re.compile(rf"\d\s?(?:{pattern})(?!\w)", re.IGNORECASE)
    for unit, (pattern, _) in _UNITS.items()
}


def units_stated(answer: str) -> list[str]:
    """The units of measure an answer puts after a number.

    >>> units_stated("It is 33°C, or 91 degrees Fahrenheit; 82% humid.")
    ['degrees Celsius', 'degrees Fahrenheit']
    """
    return [unit for unit, pattern in _UNIT_AFTER.items() if pattern.search(answer)]


@hygiene_check("grounded_answer")
def _grounded_answer(ctx: HygieneContext) -> tuple[bool, str]:
    values = answer_values(ctx.answer, ctx.asked_values) + names_stated(ctx.answer)
    units = units_stated(ctx.answer)
    if not values and not units:
        return True, "the answer states no value to ground"
    corpus = Corpus(ctx)
    loose = list(dict.fromkeys(v for v in values if not corpus.holds(v)))
    loose += [u for u in units if not any(word in corpus.text for word in _UNITS[u][1])]
    if loose:
        return False, f"the answer states value(s) nothing in the episode returned: {loose[:4]}"
    # a value the task asked to be told is information only a tool can give: the user's own
    # words ("09:15 Tokyo to Tokyo" holds the 0 of "+0.0h") do not ground it
    low = ctx.answer.casefold()
    asked = [str(v) for v in ctx.asked_values if str(v).strip() and str(v).casefold() in low]
    unreturned = list(dict.fromkeys(v for v in asked if not corpus.returned(v)))
    if unreturned:
        return False, f"the answer states asked value(s) no tool returned: {unreturned[:4]}"
    return True, f"{len(set(values))} value(s) stated, each found in the episode"


@hygiene_check("outcome_consistent")
def _outcome_consistent(ctx: HygieneContext) -> tuple[bool, str]:
    claim = _CLAIMS_NOTHING.search(ctx.answer)
    if claim is None:
        return True, "the answer claims no failure"
    calls = ctx.calls
    standing = [
        i for i, c in enumerate(calls) if not succeeded(c) and corrected_by(calls, i) is None
    ]
    done = [i for i in _writes(ctx) if succeeded(calls[i])]
    if done and not standing:
        names = sorted({calls[i].tool for i in done})
        return False, (
            f"the answer says {claim.group()!r}, yet write(s) {names} succeeded and no call "
            "failed unrecovered"
        )
    return True, f"the answer reports a failure ({claim.group()!r}) and the calls agree"


_DIGITS = re.compile(r"\d+")


def _same_call(a: ToolCallRecord, b: ToolCallRecord) -> bool:
    """The same tool, arguments and result; a result that differs only in its numbers (a
    clock read again: ``19:47:06`` then ``19:47:19``) is the same answer."""
    return (
        a.tool == b.tool
        and canonical_json(a.arguments) == canonical_json(b.arguments)
        and _DIGITS.sub("#", a.observation.strip()) == _DIGITS.sub("#", b.observation.strip())
    )


@hygiene_check("no_redundant_call")
def _no_redundant_call(ctx: HygieneContext) -> tuple[bool, str]:
    calls = ctx.calls
    writes = set(_writes(ctx))
    repeats: list[str] = []
    for j, later in enumerate(calls):
        if not succeeded(later):
            continue
        for i in range(j - 1, -1, -1):
            if succeeded(calls[i]) and _same_call(calls[i], later):
                repeats.append(f"#{j} repeats #{i} ({later.tool})")
                break
            if i in writes:
                break  # the state may have changed since: reading again is not redundant
    if repeats:
        return False, (
            "a successful call was repeated with the same arguments and result, nothing written "
            "in between: " + "; ".join(repeats[:3])
        )
    return True, "no call repeated without cause"


# a sentence that explains a tool in general ("This is a function that will delete all the
# entities in the given list."), the 135M model's answer after a write, instead of its outcome
_DESCRIBES_TOOL = re.compile(
    r"^\s*(?:this|it) is an? (?:\w+ )?(?:function|tool|method)\b"
    r"|\b(?:this|the|a) (?:function|tool|method)(?: [\"'`][^\"'`]{1,60}[\"'`])?"
    r" (?:will|would|can|returns?|is returning|takes|accepts|is used|allows|lets)\b",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"[^.!?\n]+")
# code talk: "the function", "each function", "functions", "the method"; an answer speaks of
# functions only in a coding episode (the user spoke of code, or a tool runs it), else it is
# the 135M model's lecture ("The memo is a list of functions, where each function returns ...")
_FUNCTION_TALK = re.compile(
    r"\b(?:the|this|that|each|every|a|an) (?:\w+ )?(?:function|method)s?\b|\bfunctions\b",
    re.IGNORECASE,
)
_USER_CODE_WORDS = re.compile(r"\b(?:function|method|code|class|script)s?\b", re.IGNORECASE)
_CODE_TOOL_WORDS = frozenset({"python", "code", "tests", "test", "script", "exec", "shell", "bash"})
_NAME_PARTS = re.compile(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])")


def _coding(ctx: HygieneContext, user_text: str) -> bool:
    """Whether the episode is about code: the user spoke of it, or an offered tool runs it."""
    return bool(_USER_CODE_WORDS.search(user_text)) or any(
        _CODE_TOOL_WORDS & {w.lower() for w in _NAME_PARTS.split(name)} for name in ctx.schemas
    )


def describes_tool(answer: str) -> bool:
    """A sentence of the answer explains a tool in general ("This function returns the current
    date and time in UTC by default ..."): the user asked for an outcome, and an example that
    teaches a model to lecture on its tools, often wrongly, is no example to train on.

    >>> describes_tool("This is a function that will delete all the entities in the list.")
    True
    >>> describes_tool("It is 20:24 in Tokyo. This function returns the time in UTC (UTC+08).")
    True
    >>> describes_tool('The function "create_table" is returning a table with that name.')
    True
    >>> describes_tool("Ada Lovelace is deleted: the tool returned a confirmation.")
    False
    """
    return any(_DESCRIBES_TOOL.search(s) for s in _SENTENCE.findall(answer))


def named_tool(answer: str, tools: Iterable[str]) -> str | None:
    """A tool the answer names by its identifier (``create_table``, ``get-sum``,
    ``readGraph``, or any name in quotes or backticks): an answer in plain words tells the user
    what happened, and one that speaks of the function tends to say what it does, often
    wrongly ('The function "create_table" returned a result set with the requested data
    type'). A name that is a plain word outside quotes ("echo", "add") is a word.

    >>> named_tool('The table exists. The function "create_table" returned a result set.',
    ...            ["create_table", "read_query"])
    'create_table'
    >>> named_tool("I will add it: the sum is 42.", ["add", "get-sum"]) is None
    True
    """
    for name in tools:
        plain = re.escape(name)
        if re.search(rf"[\"'`]{plain}[\"'`]", answer):
            return name
        if re.search(r"[_-]|[a-z][A-Z]", name) and re.search(
            rf"(?<![\w-]){plain}(?![\w-])", answer
        ):
            return name
    return None


@hygiene_check("answer_informs")
def _answer_informs(ctx: HygieneContext) -> tuple[bool, str]:
    calls = ctx.calls
    answer = ctx.answer
    if not answer.strip():
        return True, "no answer to read (``answered`` says so)"
    if not any(succeeded(c) for c in calls):
        return True, "no tool result to report"
    if describes_tool(answer):
        return False, "the answer explains a tool in general instead of telling what happened"
    corpus = Corpus(ctx)
    talk = _FUNCTION_TALK.search(answer)
    if talk and not _coding(ctx, corpus.user_text):
        return False, f"the answer speaks of code ({talk.group()!r}) the user never asked about"
    tool = named_tool(answer, ctx.schemas)
    if tool is not None:
        return False, f"the answer speaks of the tool {tool!r} instead of what happened"
    outcome = _OUTCOME.search(answer)
    if outcome:
        return True, f"the answer states an outcome ({outcome.group()!r})"
    for value in answer_values(answer, ctx.asked_values):
        if value.casefold() not in corpus.user_text and corpus.holds(value, tools_only=True):
            return True, f"the answer reports {value!r} from a tool result"
    for word in _WORD.findall(answer.casefold()):
        if word not in _STOP and word not in corpus.user_words and word in corpus.result_words:
            return True, f"the answer reports {word!r} from a tool result"
    return False, (
        "the answer only repeats what the user said: no outcome, no value from a tool result"
    )
