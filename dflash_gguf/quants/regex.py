"""llama-quantize's ``--tensor-type`` patterns: std::regex (ECMAScript grammar, libstdc++) as
Python bytes regexes, so a pattern matches here exactly the tensor names it matches there."""
from __future__ import annotations

import re

from ..errors import QuantizationError

# --- std::regex (ECMAScript, libstdc++) as Python bytes regexes ----------------------------------
# llama-quantize compiles each --tensor-type pattern with std::regex (ECMAScript grammar, char-wise,
# C locale) and std::regex_search-es the tensor name. Python's re differs in places (\a, \c, \0NN,
# [[:alpha:]], "[]", x{,3}, '.' and '$' at line ends, Unicode \w), so a pattern is translated token
# by token (libstdc++'s _Scanner) into a bytes pattern matched against the UTF-8 name.
_POSIX_CLASS = {
    b"alnum": rb"0-9A-Za-z", b"alpha": rb"A-Za-z", b"blank": rb" \t", b"cntrl": rb"\x00-\x1f\x7f",
    b"digit": rb"0-9", b"d": rb"0-9", b"graph": rb"\x21-\x7e", b"lower": rb"a-z", b"print": rb"\x20-\x7e",
    b"punct": rb"!-/:-@\[-`{-~", b"space": rb" \t\n\v\f\r", b"s": rb" \t\n\v\f\r", b"upper": rb"A-Z",
    b"xdigit": rb"0-9A-Fa-f", b"w": rb"0-9A-Za-z_",
}
_ESCAPE_TABLE = {b"0": rb"\x00", b"f": rb"\f", b"n": rb"\n", b"r": rb"\r", b"t": rb"\t", b"v": rb"\v"}
_INTERVAL = re.compile(rb"\{([0-9]+)(,([0-9]*))?\}")


def _bad(pattern: str, why: str) -> QuantizationError:
    return QuantizationError(f"--tensor-type pattern {pattern!r}: {why} (std::regex refuses it, and so does "
                             "llama-quantize)")


def _stacked(pattern: str) -> QuantizationError:
    return QuantizationError(f"--tensor-type pattern {pattern!r}: a quantifier right after a quantifier is not "
                             "supported here (Python's re refuses it; std::regex reads it its own way)")


def _escape(pattern: str, p: bytes, i: int, in_bracket: bool) -> tuple[bytes, int]:
    """_M_eat_escape_ecma at p[i] (after the backslash): (Python bytes regex, next index)."""
    if i >= len(p):
        raise _bad(pattern, "an escape at the end")
    c = p[i:i + 1]
    if c in _ESCAPE_TABLE or (c == b"b" and in_bracket):
        return (_ESCAPE_TABLE.get(c, rb"\x08")), i + 1
    if c in (b"b", b"B", b"d", b"D", b"s", b"S", b"w", b"W"):
        return b"\\" + c, i + 1
    if c == b"c":  # libstdc++ takes the next character itself
        if i + 1 >= len(p):
            raise _bad(pattern, "an invalid '\\cX' control character")
        return re.escape(p[i + 1:i + 2]), i + 2
    if c in (b"x", b"u"):
        n = 2 if c == b"x" else 4
        hexd = p[i + 1:i + 1 + n]
        if len(hexd) < n or not all(ch in b"0123456789abcdefABCDEF" for ch in hexd):
            raise _bad(pattern, f"an invalid '\\{c.decode()}' escape")
        return re.escape(bytes([int(hexd, 16) & 0xFF])), i + 1 + n
    if c.isdigit():
        j = i
        while j < len(p) and p[j:j + 1].isdigit():
            j += 1
        if in_bracket:
            raise _bad(pattern, "a back-reference in a bracket expression")
        return b"(?:\\" + p[i:j] + b")", j
    return re.escape(c), i + 1  # an identity escape: the character itself


def _bracket(pattern: str, p: bytes, i: int) -> tuple[bytes, int]:
    """A bracket expression from p[i] (after '['): (Python bytes regex, index after ']')."""
    neg = p[i:i + 1] == b"^"
    i += neg
    items: list[bytes] = []
    while True:
        if i >= len(p):
            raise _bad(pattern, "an unterminated '['")
        c = p[i:i + 1]
        if c == b"]":  # ECMAScript: "[]" matches nothing, "[^]" anything
            if not items:
                return (rb"[\x00-\xff]" if neg else rb"(?!)"), i + 1
            return b"[" + (b"^" if neg else b"") + b"".join(items) + b"]", i + 1
        if c == b"[" and p[i + 1:i + 2] in (b".", b":", b"="):
            kind = p[i + 1:i + 2]
            end = p.find(kind + b"]", i + 2)
            if end < 0:
                raise _bad(pattern, "an unterminated '[" + kind.decode() + "'")
            if kind != b":":
                raise QuantizationError(f"--tensor-type pattern {pattern!r}: collating elements and equivalence "
                                        "classes ([. .], [= =]) are not supported here")
            if p[i + 2:end] not in _POSIX_CLASS:
                raise _bad(pattern, f"an unknown class {p[i:end + 2].decode(errors='replace')!r}")
            items.append(_POSIX_CLASS[p[i + 2:end]])
            i = end + 2
        elif c == b"\\":
            item, i = _escape(pattern, p, i + 1, True)
            items.append(item)
        elif c == b"-":
            items.append(b"-")
            i += 1
        else:
            items.append(b"\\" + c if c in b"[]^\\" else c)
            i += 1


def ecmascript_regex(pattern: str) -> re.Pattern[bytes]:
    """``std::regex(pattern)`` (ECMAScript, libstdc++) as a Python regex over UTF-8 bytes, for
    ``.search(name.encode())`` (std::regex_search).

    Raises:
        QuantizationError: std::regex refuses the pattern (llama-quantize then fails), or it uses
            what this translation leaves out: collating elements and equivalence classes, a
            quantifier right after a quantifier other than the lazy ``?``.
    """
    p, i, out = pattern.encode("utf-8"), 0, []
    prev_quant = False
    while i < len(p):
        c = p[i:i + 1]
        quant = False
        if c == b"\\":
            tok, i = _escape(pattern, p, i + 1, False)
        elif c == b"[":
            tok, i = _bracket(pattern, p, i + 1)
        elif c == b"(":
            if p[i + 1:i + 2] == b"?":
                if p[i + 2:i + 3] not in (b":", b"=", b"!"):
                    raise _bad(pattern, "an invalid '(?...)' group")
                tok, i = p[i:i + 3], i + 3
            else:
                tok, i = c, i + 1
        elif c == b"{":
            if prev_quant:
                raise _stacked(pattern)
            m = _INTERVAL.match(p, i)
            if m is None or (m.group(3) and int(m.group(3)) < int(m.group(1))):
                raise _bad(pattern, "an invalid range in '{}'")
            tok, i, quant = m.group(0), m.end(), True
        elif c == b".":
            tok, i = rb"[^\n\r]", i + 1  # ECMAScript '.': any character but a line terminator (char-wise)
        elif c == b"$":
            tok, i = rb"\Z", i + 1
        elif c in (b"^", b"|", b")"):
            tok, i = c, i + 1
        elif c in (b"*", b"+", b"?"):
            if prev_quant and c != b"?":
                raise _stacked(pattern)
            tok, i, quant = c, i + 1, not prev_quant
        else:  # ']' and '}' are ordinary outside brackets and braces, as every other byte
            tok, i = re.escape(c), i + 1
        prev_quant = quant
        out.append(tok)
    try:
        return re.compile(b"".join(out))
    except re.error as exc:
        raise _bad(pattern, str(exc)) from None
