"""A CEL parser for pricing rendered expressions: the syntax tree cel-go builds, nothing evaluated.

The cost bound (:mod:`webhook.render.intree.runtimecost`) walks this tree the way cel-go's interpreter charges
a run (one node, one charge), so it needs the real structure of the expression: operator precedence,
macros (``has``, ``exists``, ``all``, ``exists_one``, ``map``, ``filter``), list, map and struct
literals. It also measures what cel-go's parser refuses: more than 100,000 code points, or nesting
deeper than its recursion limit (250). A syntax error is raised as :class:`CelSyntaxError` with the
position, so a renderer bug is reported, never priced as something else.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field

MAX_CODE_POINTS = 100_000
MAX_RECURSION_DEPTH = 250
MACROS = frozenset({"exists", "all", "exists_one", "map", "filter"})


class CelSyntaxError(ValueError):
    """The expression is not CEL this parser reads; the message names the position."""


@dataclass(frozen=True)
class Node:
    """``op``: ``const`` (value), ``ident`` (name), ``select`` (args[0], name), ``has`` (args[0] a select),
    ``index``, ``call`` (name, args; a method's receiver is args[0] with ``method`` set), ``list``,
    ``map`` (args alternate key, value), ``struct`` (name, args are the field values), ``and``, ``or``,
    ``cond``, ``comprehension`` (name: the macro, var, args: range, then the macro's arguments)."""

    op: str
    args: tuple[Node, ...] = ()
    name: str = ""
    value: object = None
    method: bool = False
    var: str = ""
    fields: tuple[str, ...] = field(default=())



_TOKEN = re.compile(
    r"""(?P<ws>\s+|//[^\n]*)
    |(?P<str>[rR]?[bB]?[rR]?('''(?:[^\\]|\\.)*?'''|\"\"\"(?:[^\\]|\\.)*?\"\"\"|'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"))
    |(?P<num>0[xX][0-9a-fA-F]+[uU]?|\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+[uU]?)
    |(?P<id>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<op>&&|\|\||==|!=|<=|>=|\.\?|[-+*/%!<>?:.,()\[\]{}])""",
    re.VERBOSE | re.DOTALL,
)


def _tokens(text: str) -> list[tuple[str, str, int]]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise CelSyntaxError(f"unexpected character {text[pos]!r} at offset {pos}")
        kind = m.lastgroup or "op"
        if kind != "ws":
            out.append((kind, m.group(kind), pos))
        pos = m.end()
    out.append(("end", "", pos))
    return out


def _string_value(token: str) -> str:
    """The literal's text; escapes counted as one character each (the length is what matters here)."""
    body = token.lstrip("rRbB")
    quote = 3 if body[:3] in ("'''", '"""') else 1
    inner = body[quote:-quote]
    if "r" in token[: len(token) - len(body)].lower():
        return inner
    return re.sub(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{3}|.)", "_", inner, flags=re.DOTALL)


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.nesting = 0

    def peek(self, ahead: int = 0) -> tuple[str, str, int]:
        return self.toks[min(self.i + ahead, len(self.toks) - 1)]

    def take(self, value: str | None = None) -> tuple[str, str, int]:
        tok = self.toks[self.i]
        if value is not None and tok[1] != value:
            raise CelSyntaxError(f"expected {value!r} at offset {tok[2]}, found {tok[1] or 'the end'!r}")
        self.i += 1
        return tok

    def at(self, *values: str) -> bool:
        kind, text, _ = self.peek()
        return kind in ("op", "id") and text in values

    def expr(self) -> Node:
        """cel-go's grammar rule ``expr``; its parser counts nesting per rule and refuses past 250 (a
        parenthesis, an argument, a list element or a ternary's else-branch each open one more)."""
        self.nesting += 1
        if self.nesting > MAX_RECURSION_DEPTH:
            raise CelSyntaxError(
                f"nested more than cel-go's parser recursion limit ({MAX_RECURSION_DEPTH}) at offset {self.peek()[2]}"
            )
        cond = self.disjunction()
        if self.at("?"):
            self.take()
            yes = self.disjunction()
            self.take(":")
            no = self.expr()
            cond = Node("cond", (cond, yes, no))
        self.nesting -= 1
        return cond

    def disjunction(self) -> Node:
        node = self.conjunction()
        while self.at("||"):
            self.take()
            node = Node("or", (node, self.conjunction()))
        return node

    def conjunction(self) -> Node:
        node = self.relation()
        while self.at("&&"):
            self.take()
            node = Node("and", (node, self.relation()))
        return node

    def relation(self) -> Node:
        node = self.addition()
        while self.at("<", "<=", ">", ">=", "==", "!=", "in"):
            op = self.take()[1]
            node = Node("call", (node, self.addition()), name=f"_{op}_")
        return node

    def addition(self) -> Node:
        node = self.multiplication()
        while self.at("+", "-"):
            op = self.take()[1]
            node = Node("call", (node, self.multiplication()), name=f"_{op}_")
        return node

    def multiplication(self) -> Node:
        node = self.unary()
        while self.at("*", "/", "%"):
            op = self.take()[1]
            node = Node("call", (node, self.unary()), name=f"_{op}_")
        return node

    def unary(self) -> Node:
        if self.at("!", "-"):
            op = self.take()[1]
            return Node("call", (self.unary(),), name=f"{op}_")
        return self.member()

    def member(self) -> Node:
        node = self.primary()
        while True:
            if self.at(".", ".?"):
                self.take()
                name = self.take()[1]
                if self.at("("):
                    args = self.arguments()
                    node = self.method(node, name, args)
                else:
                    node = Node("select", (node,), name=name)
            elif self.at("["):
                self.take()
                index = self.expr()
                self.take("]")
                node = Node("index", (node, index))
            elif self.at("{") and node.op in ("ident", "select") and self._qualified(node):
                node = self.struct(self._qualified(node))
            else:
                return node

    @staticmethod
    def _qualified(node: Node) -> str:
        if node.op == "ident":
            return node.name
        if node.op == "select" and node.args[0].op in ("ident", "select"):
            inner = _Parser._qualified(node.args[0])
            return f"{inner}.{node.name}" if inner else ""
        return ""

    def struct(self, name: str) -> Node:
        self.take("{")
        names, values = [], []
        while not self.at("}"):
            names.append(self.take()[1].lstrip("?"))
            self.take(":")
            values.append(self.expr())
            if not self.at("}"):
                self.take(",")
        self.take("}")
        return Node("struct", tuple(values), name=name, fields=tuple(names))

    def method(self, receiver: Node, name: str, args: list[Node]) -> Node:
        if name in MACROS and args and args[0].op == "ident":
            return Node("comprehension", (receiver, *args[1:]), name=name, var=args[0].name)
        return Node("call", (receiver, *args), name=name, method=True)

    def arguments(self) -> list[Node]:
        self.take("(")
        args = []
        while not self.at(")"):
            args.append(self.expr())
            if not self.at(")"):
                self.take(",")
        self.take(")")
        return args

    def primary(self) -> Node:
        kind, text, pos = self.peek()
        if kind == "str":
            self.take()
            return Node("const", value=_string_value(text))
        if kind == "num":
            self.take()
            return Node("const", value=int(text) if text.isdigit() else 0)  # the value of guards' bounds
        if kind == "id":
            self.take()
            if text in ("true", "false"):
                return Node("const", value=text == "true")
            if text == "null":
                return Node("const", value=None)
            if self.at("("):
                args = self.arguments()
                if text == "has":
                    if len(args) != 1 or args[0].op != "select":
                        raise CelSyntaxError(f"has() at offset {pos} takes one field selection")
                    return Node("has", (args[0],))
                return Node("call", tuple(args), name=text)
            return Node("ident", name=text)
        if text == ".":  # a leading-dot qualified name
            self.take()
            return Node("ident", name=self.take()[1])
        if text == "(":
            self.take()
            node = self.expr()
            self.take(")")
            return node
        if text == "[":
            self.take()
            items = []
            while not self.at("]"):
                self.at("?") and self.take()
                items.append(self.expr())
                if not self.at("]"):
                    self.take(",")
            self.take("]")
            return Node("list", tuple(items))
        if text == "{":
            self.take()
            items = []
            while not self.at("}"):
                self.at("?") and self.take()
                items.append(self.expr())
                self.take(":")
                items.append(self.expr())
                if not self.at("}"):
                    self.take(",")
            self.take("}")
            return Node("map", tuple(items))
        raise CelSyntaxError(f"unexpected {text or 'end of expression'!r} at offset {pos}")


def parse(text: str) -> Node:
    """The syntax tree of ``text``; :class:`CelSyntaxError` past cel-go's parser limits or on bad syntax."""
    if len(text) > MAX_CODE_POINTS:
        raise CelSyntaxError(f"{len(text):,} code points, more than cel-go's parser accepts ({MAX_CODE_POINTS:,})")
    parser = _Parser(text)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20 * MAX_RECURSION_DEPTH))  # ~10 Python frames per CEL nesting level
    try:
        node = parser.expr()
    finally:
        sys.setrecursionlimit(limit)
    kind, rest, pos = parser.peek()
    if kind != "end":
        raise CelSyntaxError(f"unexpected {rest!r} at offset {pos}")
    return node
