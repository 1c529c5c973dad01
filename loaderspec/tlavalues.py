"""Python values (as read from JSON trace records) written as TLA+ expressions TLC can read.

The 2020 TLC jar has no ``Json`` module, so a trace reaches TLC as a literal in a generated
module; this module owns the spelling of that literal and nothing else. Mapping: ``bool`` ->
``TRUE``/``FALSE``; ``int`` -> numeral (negative ones need ``Integers``); ``str`` -> a string
literal; ``list``/``tuple`` -> a sequence ``<<...>>``; ``dict`` with identifier keys -> a record
``[k |-> v]``; ``dict`` with integer keys (JSON spells them as strings) -> a function
``(k :> v) @@ ...`` (needs ``TLC``); ``None`` inside a record -> the field is left out, so the
trace spec asks ``"f" \\in DOMAIN r`` instead of comparing with a null of another type (TLC
refuses to compare a string with an integer).
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
    if isinstance(value, str):
        return string(value)
    if isinstance(value, list | tuple):
        return "<<" + ", ".join(encode(v) for v in value) + ">>"
    if isinstance(value, dict):
        return _encode_dict(value)
    raise NotEncodable(f"no TLA+ spelling for {type(value).__name__} {value!r}")


def _encode_dict(value: dict[Any, Any]) -> str:
    items = {k: v for k, v in value.items() if v is not None}
    keys = [str(k) for k in items]
    if keys and all(_INT.match(k) for k in keys):
        pairs = sorted((int(str(k)), v) for k, v in items.items())
        return "(" + " @@ ".join(f"({k} :> {encode(v)})" for k, v in pairs) + ")"
    if not items:
        return EMPTY_FUNCTION
    if all(_IDENT.match(k) for k in keys):
        return "[" + ", ".join(f"{k} |-> {encode(v)}" for k, v in items.items()) + "]"
    raise NotEncodable(f"dict keys must be all identifiers or all integers: {sorted(keys)}")


class NotParsable(ValueError):
    """TLC printed a value this reader does not know (the message shows where)."""


_TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<int>-?\d+)|(?P<sym><<|>>|\|->|:>|@@|\.\.|[\[\](){},])'
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*))"
)


def parse(text: str) -> Any:
    """A value as TLC prints it, as Python: sequences -> tuples, records -> dicts with str keys,
    functions ``(k :> v @@ ...)`` -> dicts, sets -> frozensets, model values -> their name.

    Raises:
        NotParsable: text outside that grammar.
    """
    tokens = _tokenize(text)
    value, pos = _parse_value(tokens, 0, text)
    if pos != len(tokens):
        raise NotParsable(f"trailing input after a value in {text!r}")
    return value


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
        return {"TRUE": True, "FALSE": False}.get(tok, tok), pos + 1
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
    record: dict[str, Any] = {}
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
    func: dict[Any, Any] = {}
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
