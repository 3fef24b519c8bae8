"""Reading a config.pbtxt as protobuf's text format does, without Triton's message classes.

`sluice triton check` runs where tritonclient (which carries `model_config_pb2`) may not be
installed, yet must read a config the way Triton will: a `#` inside a quoted string is part of
the string, not a comment, and a string's escapes (`\\"`, octal bytes such as `\\303\\250`
for "è") stand for the characters Triton sees. So this reads the whole message into nested
dicts, field by field, with no knowledge of which fields exist; the checker asks for the few
it needs.
"""

from __future__ import annotations

import re
from typing import Any

Message = dict[str, list[Any]]  # a field's values in order; a nested message is a Message


class TextFormatError(ValueError):
    """The text is not protobuf text format."""


_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<word>[A-Za-z0-9_.+\-]+)
  | (?P<punct>[{}\[\]<>:,;])
    """,
    re.VERBOSE,
)
_SIMPLE_ESCAPES = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, "?": 63, "'": 39, '"': 34}
_CLOSE = {"{": "}", "<": ">"}


def unescape(literal: str) -> str:
    """A quoted string literal's value: C escapes as protobuf's text format reads them
    (`\\n`, `\\"`, octal `\\ooo` and hex `\\xhh` bytes, `\\uXXXX`), the bytes read as UTF-8."""
    body = literal[1:-1]
    out = bytearray()
    i = 0
    while i < len(body):
        char = body[i]
        if char != "\\":
            out += char.encode("utf-8")
            i += 1
            continue
        i += 1
        if i >= len(body):
            raise TextFormatError("a string ends in a lone backslash")
        esc = body[i]
        if esc in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[esc])
            i += 1
        elif esc in "01234567":
            digits = re.match(r"[0-7]{1,3}", body[i:])
            assert digits is not None
            out.append(int(digits.group(), 8) & 0xFF)
            i += len(digits.group())
        elif esc in "xX":
            digits = re.match(r"[0-9a-fA-F]{1,2}", body[i + 1 :])
            if digits is None:
                raise TextFormatError("a \\x escape without hex digits")
            out.append(int(digits.group(), 16))
            i += 1 + len(digits.group())
        elif esc in "uU":
            width = 4 if esc == "u" else 8
            code = body[i + 1 : i + 1 + width]
            if not re.fullmatch(rf"[0-9a-fA-F]{{{width}}}", code) or int(code, 16) > 0x10FFFF:
                raise TextFormatError(f"a \\{esc} escape needs {width} hex digits naming a character")
            out += chr(int(code, 16)).encode("utf-8", errors="surrogatepass")
            i += 1 + width
        else:
            raise TextFormatError(f"unknown escape \\{esc} in a string")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise TextFormatError("a string is not UTF-8 once its escapes are read") from None


def _tokens(text: str) -> list[tuple[str, str]]:
    out = []
    at = 0
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None:
            raise TextFormatError(f"unexpected {text[at]!r} at character {at}")
        kind = match.lastgroup or ""
        if kind not in ("space", "comment"):
            out.append((kind, match.group()))
        at = match.end()
    return out


class _Reader:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        if self.at >= len(self.tokens):
            raise TextFormatError("the text ends inside a message or list")
        token = self.tokens[self.at]
        self.at += 1
        return token

    def message(self, close: str | None) -> Message:
        fields: Message = {}
        while True:
            token = self.peek()
            if token is None:
                if close is not None:
                    raise TextFormatError(f"a message is never closed with '{close}'")
                return fields
            if token == close:
                self.at += 1
                return fields
            kind, name = self.take()
            if kind != "word":
                raise TextFormatError(f"expected a field name, found {name!r}")
            colon = self.peek() == ":"
            if colon:
                self.at += 1
            fields.setdefault(name, []).extend(self.values(colon))
            if self.peek() in (",", ";"):
                self.at += 1

    def values(self, colon: bool) -> list[Any]:
        token = self.peek()
        if token == "[":
            self.at += 1
            out: list[Any] = []
            if self.peek() == "]":
                self.at += 1
                return out
            while True:
                out.append(self.value(colon))
                _, sep = self.take()
                if sep == "]":
                    return out
                if sep != ",":
                    raise TextFormatError(f"expected ',' or ']' in a list, found {sep!r}")
        return [self.value(colon)]

    def value(self, colon: bool) -> Any:
        kind, token = self.take()
        if token in _CLOSE:
            return self.message(_CLOSE[token])
        if not colon:
            raise TextFormatError(f"expected ':' before the value {token!r}")
        if kind == "string":
            parts = [unescape(token)]
            while self.at < len(self.tokens) and self.tokens[self.at][0] == "string":  # "a" "b" is "ab"
                parts.append(unescape(self.take()[1]))
            return "".join(parts)
        if kind == "word":
            return token
        raise TextFormatError(f"unexpected {token!r} where a value belongs")


def parse(text: str) -> Message:
    """The message `text` spells, as nested dicts of each field's values (a scalar keeps its
    spelling, a string its value); TextFormatError when it is not text format."""
    return _Reader(text).message(None)
