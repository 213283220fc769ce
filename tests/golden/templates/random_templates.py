"""Deterministic random templates for differential testing against Python Jinja2.

Each template combines expressions over a small context (operators, filters, tests, str and
dict methods, conditionals, loops, namespaces, whitespace control). golden.py renders them
with rapid and with the reference; the same seed always gives the same templates.
"""
import random

CONTEXT = {
    "messages": [{"role": "system", "content": "Sys é"}, {"role": "user", "content": " Hi {x} "},
                 {"role": "assistant", "content": None,
                  "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1, "b": [1.5, None]}}}]},
                 {"role": "user", "content": "a\nb"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "n": 3, "f": 2.5, "s": "Hello World", "e": "", "z": None, "t": True, "l": [3, 1, 2], "d": {"b": 1, "a": 2},
}

ATOMS = ["n", "f", "s", "e", "z", "t", "l", "d", "messages", "tools", "messages[0]", "messages[1].content",
         "messages[2].tool_calls", "1", "0", "-2", "2.5", "'ab'", "''", "'A b'", "none", "true", "false", "[1, 2]",
         "[]", "{'k': 'v'}", "(1, 2)", "undefined_x", "messages[0].role", "d.a", "l[0]", "s[1:4]", "l[::-1]",
         "messages | length", "range(3)"]
BINOPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">=", "in", "not in", "and", "or"]
FILTERS = ["length", "upper", "lower", "trim", "string", "list", "first", "last", "join(',')", "tojson",
           "tojson(indent=2)", "default('D')", "int", "float", "abs", "round", "reverse", "sort", "unique", "items",
           "dictsort", "title", "capitalize", "replace('l', 'L')", "map('string')", "select", "reject",
           "selectattr('role')", "map(attribute='role')", "sum", "max", "min", "batch(2)", "wordcount", "indent(2)",
           "count", "safe", "e", "truncate(5)", "center(7)", "list | length"]
TESTS = ["defined", "none", "string", "number", "integer", "float", "mapping", "sequence", "iterable", "odd", "even",
         "true", "false", "boolean", "callable", "divisibleby 2", "eq 1", "in [1, 'ab']", "undefined", "lower", "upper"]
METHODS = ["strip()", "upper()", "split()", "split(' ')", "startswith('H')", "endswith('d')", "replace('o', '0')",
           "find('o')", "lstrip('H')", "title()", "get('a')", "items()", "keys()", "values()", "count('l')",
           "format(1)", "rsplit(' ', 1)"]
LOOPS = ["messages", "l", "d", "s", "range(3)", "tools", "z", "undefined_x", "l | select", "d.items()"]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def expr(self, d=0):
        r = self.r
        c = r.random()
        if d > 3 or c < 0.3:
            return r.choice(ATOMS)
        if c < 0.5:
            return f"({self.expr(d + 1)} {r.choice(BINOPS)} {self.expr(d + 1)})"
        if c < 0.65:
            return f"({self.expr(d + 1)} | {r.choice(FILTERS)})"
        if c < 0.75:
            return f"({self.expr(d + 1)} is {'not ' if r.random() < .3 else ''}{r.choice(TESTS)})"
        if c < 0.85:
            return f"{r.choice(['s', 'd', 'messages[0].content', 'e', 'messages[1].content'])}.{r.choice(METHODS)}"
        if c < 0.92:
            return f"({self.expr(d + 1)} if {self.expr(d + 1)} else {self.expr(d + 1)})"
        return f"not {self.expr(d + 1)}"

    def stmt(self, d=0):
        r = self.r
        c = r.random()
        if d > 2 or c < 0.35:
            return "{{ " + self.expr() + " }}" + r.choice(["", " ", "\n", "|"])
        if c < 0.5:
            other = "{% else %}" + self.body(d + 1) if r.random() < .5 else ""
            return "{% if " + self.expr() + " %}" + self.body(d + 1) + other + "{% endif %}"
        if c < 0.65:
            return ("{% for x in " + r.choice(LOOPS) + " %}" + self.body(d + 1) +
                    "{{ loop.index }}{% endfor %}")
        if c < 0.75:
            return "{% set v = " + self.expr() + " %}{{ v }}"
        if c < 0.85:
            return "{%- if " + self.expr() + " -%}\n  " + self.body(d + 1) + "\n{%- endif %}\n"
        return ("{% set ns = namespace(a=" + self.expr() + ") %}{% for m in messages %}"
                "{% set ns.a = ns.a ~ m.role %}{% endfor %}{{ ns.a }}")

    def body(self, d):
        return "".join(self.stmt(d) for _ in range(self.r.randint(1, 3)))


def templates(seed, count):
    g = Gen(seed)
    return [g.body(0) for _ in range(count)]
