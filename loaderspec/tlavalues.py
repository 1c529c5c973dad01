"""TLA+ values as Python values and back: the one reader and writer of TLC's value syntax.

Owns both directions, and nothing else. ``encode`` writes a Python value as a TLA+ expression:
a trace reaches TLC as a literal in a generated module (the 2020 TLC jar has no ``Json``
module), and a counterexample is printed back in TLA+. ``parse`` reads a value as TLC prints it
(error traces, state-graph dumps). Mapping: ``bool`` <-> ``TRUE``/``FALSE``; ``int`` <-> numeral
(negative ones need ``Integers``); ``str`` <-> string literal; ``tuple`` (or ``list``) <->
sequence ``<<...>>``; ``frozenset`` <-> set ``{...}``; ``TlaRecord`` <-> ``[k |-> v]``;
``Function`` <-> ``(k :> v @@ ...)`` (needs ``TLC``); ``ModelValue`` <-> a bare name. A plain
``dict`` (a JSON object) is a record when its keys are identifiers and a function when they are
integers (JSON spells them as strings); ``None`` inside it leaves the field out, so the trace
spec asks ``"f" \\in DOMAIN r`` instead of comparing with a null of another type (TLC refuses to
compare a string with an integer). ``TlaRecord`` and ``Function`` are dicts, ``ModelValue`` a
str: code that reads parsed states needs no special case.
"""

from __future__ import annotations

import re
from typing import Any

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT = re.compile(r"-?[0-9]+\Z")
# An empty function: equal in TLC to <<>> and to every other empty function.
EMPTY_FUNCTION = "<<>>"


class NotEncodable(TypeError):
    """A value with no TLA+ spelling here (a float, a mixed-key dict, ...)."""


class TlaRecord(dict):
    """A TLA+ record ``[a |-> 1]``: fields are strings, in TLC's order."""


class Function(dict):
    """A TLA+ function printed as ``(0 :> a @@ 1 :> b)``."""


class ModelValue(str):
    """A model value or other bare name in a TLC value."""


def string(text: str) -> str:
    """A TLA+ string literal (TLC knows the escapes \\" \\\\ \\n \\t)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\t", "\\t") + '"'


def encode(value: Any) -> str:
    """The TLA+ expression for ``value`` (see the module docstring).

    Raises:
        NotEncodable: a value outside the mapping.
    """
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, ModelValue):
        return str(value)
    if isinstance(value, str):
        return string(value)
    if isinstance(value, list | tuple):
        return "<<" + ", ".join(encode(v) for v in value) + ">>"
    if isinstance(value, frozenset | set):
        return "{" + ", ".join(sorted(encode(v) for v in value)) + "}"
    if isinstance(value, TlaRecord):
        return _record(value.items())
    if isinstance(value, Function):
        return _function(value.items())
    if isinstance(value, dict):
        return _encode_dict(value)
    raise NotEncodable(f"no TLA+ spelling for {type(value).__name__} {value!r}")


def _record(items: Any) -> str:
    return "[" + ", ".join(f"{k} |-> {encode(v)}" for k, v in items) + "]"


def _function(items: Any) -> str:
    pairs = list(items)
    if not pairs:
        return EMPTY_FUNCTION
    return "(" + " @@ ".join(f"{encode(k)} :> {encode(v)}" for k, v in pairs) + ")"


def _encode_dict(value: dict[Any, Any]) -> str:
    items = {k: v for k, v in value.items() if v is not None}
    keys = [str(k) for k in items]
    if keys and all(_INT.match(k) for k in keys):
        return _function(sorted((int(str(k)), v) for k, v in items.items()))
    if not items:
        return EMPTY_FUNCTION
    if all(_IDENT.match(k) for k in keys):
        return _record(items.items())
    raise NotEncodable(f"dict keys must be all identifiers or all integers: {sorted(keys)}")


class NotParsable(ValueError):
    """TLC printed a value this reader does not know (the message shows where)."""


_TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<int>-?\d+)|(?P<sym><<|>>|\|->|:>|@@|\.\.|[\[\](){},])'
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*))"
)


def parse(text: str) -> Any:
    """A value as TLC prints it, as Python: sequences -> tuples, records -> ``TlaRecord``,
    functions ``(k :> v @@ ...)`` -> ``Function``, sets -> frozensets, model values and other
    bare names -> ``ModelValue``.

    Raises:
        NotParsable: text outside that grammar.
    """
    tokens = _tokenize(text)
    value, pos = _parse_value(tokens, 0, text)
    if pos != len(tokens):
        raise NotParsable(f"trailing input after a value in {text!r}")
    return value


def as_function(value: Any) -> dict[Any, Any]:
    """A parsed TLA+ function as a dict from its domain. TLC prints a function whose domain is
    ``1 .. n`` as a sequence ``<<a, b>>`` (and an empty one as ``<<>>``): that parses as a
    tuple, whose entry ``k`` is the function's value at ``k + 1``.

    Raises:
        NotParsable: a value that is not a function (nor a sequence).
    """
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, (tuple, list)):
        return {k: v for k, v in enumerate(value, start=1)}
    raise NotParsable(f"not a function: {value!r}")


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise NotParsable(f"cannot read {text[pos : pos + 20]!r} in {text!r}")
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind)))
        pos = match.end()
    return tokens


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def _parse_value(tokens: list[tuple[str, str]], pos: int, text: str) -> tuple[Any, int]:
    if pos >= len(tokens):
        raise NotParsable(f"value expected at the end of {text!r}")
    kind, tok = tokens[pos]
    if kind == "str":
        body = tok[1:-1]
        return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m[1], m[1]), body), pos + 1
    if kind == "int":
        return int(tok), pos + 1
    if kind == "name":
        return {"TRUE": True, "FALSE": False}.get(tok, ModelValue(tok)), pos + 1
    if tok == "<<":
        items, pos = _parse_list(tokens, pos + 1, ">>", text)
        return tuple(items), pos
    if tok == "{":
        items, pos = _parse_list(tokens, pos + 1, "}", text)
        return frozenset(_hashable(i) for i in items), pos
    if tok == "[":
        return _parse_record(tokens, pos + 1, text)
    if tok == "(":
        return _parse_function(tokens, pos + 1, text)
    raise NotParsable(f"unexpected {tok!r} in {text!r}")


def _parse_list(
    tokens: list[tuple[str, str]], pos: int, close: str, text: str
) -> tuple[list[Any], int]:
    items: list[Any] = []
    if pos < len(tokens) and tokens[pos][1] == close:
        return items, pos + 1
    while True:
        value, pos = _parse_value(tokens, pos, text)
        items.append(value)
        if pos < len(tokens) and tokens[pos][1] == ",":
            pos += 1
            continue
        if pos < len(tokens) and tokens[pos][1] == close:
            return items, pos + 1
        raise NotParsable(f"expected ',' or {close!r} in {text!r}")


def _parse_record(tokens: list[tuple[str, str]], pos: int, text: str) -> tuple[Any, int]:
    record = TlaRecord()
    while True:
        if pos + 1 >= len(tokens) or tokens[pos][0] != "name" or tokens[pos + 1][1] != "|->":
            raise NotParsable(f"expected 'field |->' in {text!r}")
        name = tokens[pos][1]
        record[name], pos = _parse_value(tokens, pos + 2, text)
        if pos < len(tokens) and tokens[pos][1] == ",":
            pos += 1
            continue
        if pos < len(tokens) and tokens[pos][1] == "]":
            return record, pos + 1
        raise NotParsable(f"expected ',' or ']' in {text!r}")


def _parse_function(tokens: list[tuple[str, str]], pos: int, text: str) -> tuple[Any, int]:
    func = Function()
    while True:
        key, pos = _parse_value(tokens, pos, text)
        if pos >= len(tokens) or tokens[pos][1] != ":>":
            raise NotParsable(f"expected ':>' in {text!r}")
        func[_hashable(key)], pos = _parse_value(tokens, pos + 1, text)
        if pos < len(tokens) and tokens[pos][1] == "@@":
            pos += 1
            continue
        if pos < len(tokens) and tokens[pos][1] == ")":
            return func, pos + 1
        raise NotParsable(f"expected '@@' or ')' in {text!r}")
