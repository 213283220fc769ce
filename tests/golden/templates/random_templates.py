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



# ---- a second generator: loops with break/continue/else, macros, set and filter blocks,
# slices, dict methods and more filters with arguments ------------------------------------

CONTEXT2 = {
    "messages": [{"role": "system", "content": "Sys é ß"}, {"role": "user", "content": " Hi {x} 'q' \"dq\" "},
                 {"role": "assistant", "content": "", "reasoning_content": "think\n",
                  "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"a": 1, "b": [1.5, None], "c": "é"}}}]},
                 {"role": "tool", "content": "{\"r\": 1}"}, {"role": "user", "content": "a\nb\n\n  c"}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "Does f.", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "description": "A"}, "b": {"type": "array"}},
        "required": ["a"]}}}],
    "n": 3, "f": 2.5, "big": 12345678901, "neg": -7, "s": "Hello World", "u": "ÉCOLE straße ǆ", "e": "", "z": None,
    "t": True, "l": [3, 1, 2], "ls": ["b", "A", "c"], "d": {"b": 1, "a": 2}, "nested": {"x": {"y": [1, {"z": "deep"}]}},
}

ATOMS2 = ["n", "f", "big", "neg", "s", "u", "e", "z", "t", "l", "ls", "d", "nested", "nested.x.y[1].z",
          "messages[-1].content", "messages[2].tool_calls[0].function.arguments", "tools[0].function.parameters",
          "messages[1]['content']", "'x'", "'%s|%d'", "'{}:{:>4}'", "3.0", "1e3", "0.1", "-0.0", "[1, 'a', none]",
          "{'k': [1, 2]}", "('a',)", "range(2, 7, 2)", "loop_var", "m.role", "m.content", "m"]
FILTERS2 = ["length", "upper", "lower", "title", "capitalize", "trim", "trim('H')", "string", "list", "first", "last",
            "join(', ')", "join('|', attribute='role')", "tojson", "tojson(indent=2)", "tojson(sort_keys=true)",
            "tojson(separators=(',', ':'))", "tojson(indent='\\t')", "default('D')", "default('D', true)", "int",
            "int(9)", "float", "abs", "round(1)", "round(0, 'floor')", "reverse | list", "sort | list",
            "sort(reverse=true)", "sort(attribute='role')", "unique | list", "items | list", "dictsort",
            "dictsort(by='value')", "replace('l', 'L')", "replace('', '-')", "map('upper') | list",
            "map(attribute='role') | list", "selectattr('role', 'equalto', 'user') | list",
            "rejectattr('content') | list", "select('string') | list", "reject('none') | list", "sum",
            "sum(attribute='a')", "max", "min", "batch(2) | list", "wordcount", "indent(2, true)",
            "indent(first=true, blank=true)", "count", "truncate(8, true, '~', 0)", "center(9)", "format('Z')",
            "string | length", "e", "safe", "first | string", "list | join", "dictsort(reverse=true) | first",
            "groupby('role') | list | length", "slice(2) | list", "attr('keys')"]
TESTS2 = ["defined", "none", "string", "number", "integer", "float", "mapping", "sequence", "iterable", "odd", "even",
          "true", "false", "boolean", "callable", "divisibleby(3)", "eq('x')", "ne 1", "lt 5", "ge 2",
          "in ['user', 'system']", "upper", "lower", "sameas none", "filter", "test"]
METHODS2 = ["strip()", "strip(' H')", "upper()", "lower()", "title()", "split()", "split(' ', 1)", "rsplit('o', 1)",
            "splitlines()", "startswith(('H', 'S'))", "endswith('d', 0, 5)", "replace('o', '0', 1)", "find('o', 5)",
            "rfind('l')", "index('H')", "count('l')", "format(1, 2)", "format(x=1)", "lstrip()", "rstrip('d')",
            "partition(' ')", "zfill(14)", "center(15, '*')", "ljust(13, '.')", "isalpha()", "isdigit()",
            "isspace()", "islower()", "isupper()", "join(['1', '2'])", "removeprefix('He')", "removesuffix('ld')",
            "swapcase()", "capitalize()", "casefold()"]
DICT_METHODS2 = ["get('a')", "get('zz', 'dflt')", "items() | list", "keys() | list", "values() | list", "copy()"]
BINOPS2 = BINOPS + ["<=", ">", "**"]
LOOPS2 = ["messages", "messages | selectattr('content')", "tools", "l", "d | dictsort", "range(3)", "ls | sort", "s",
          "messages if m is defined"]
LOOP_TAILS2 = ["{{ loop.first }}", "{{ loop.last }}", "{{ loop.length }}", "{{ loop.revindex }}",
               "{% if loop.index > 2 %}{% break %}{% endif %}", "{% if loop.first %}{% continue %}{% endif %}x",
               "{{ loop.cycle('a', 'b') }}"]
SLICES2 = ["1:", ":-1", "::-1", "-2:", "1:3", "::2", "5:", "-1"]
PRELUDE2 = ("{% macro mac(a, b=1, c='c') %}<{{ a }}|{{ b }}|{{ c }}>{% endmacro %}{% set m = messages[1] %}"
            "{% set loop_var = 0 %}")


class Gen2:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def expr(self, d=0):
        r = self.r
        c = r.random()
        if d > 3 or c < 0.28:
            return r.choice(ATOMS2)
        if c < 0.45:
            return f"({self.expr(d + 1)} {r.choice(BINOPS2)} {self.expr(d + 1)})"
        if c < 0.62:
            return f"({self.expr(d + 1)} | {r.choice(FILTERS2)})"
        if c < 0.70:
            return f"({self.expr(d + 1)} is {'not ' if r.random() < .3 else ''}{r.choice(TESTS2)})"
        if c < 0.80:
            return f"{r.choice(['s', 'u', 'e', 'm.content', 'messages[1].content', 'ls[0]'])}.{r.choice(METHODS2)}"
        if c < 0.85:
            target = r.choice(['d', 'nested', 'm', 'messages[2].tool_calls[0].function.arguments'])
            return f"{target}.{r.choice(DICT_METHODS2)}"
        if c < 0.90:
            return f"({self.expr(d + 1)} if {self.expr(d + 1)} else {self.expr(d + 1)})"
        if c < 0.94:
            return f"{r.choice(['s', 'u', 'l', 'ls', 'messages'])}[{r.choice(SLICES2)}]"
        if c < 0.97:
            return f"mac({self.expr(d + 1)}{r.choice(['', ', b=2', ', 3, 4', ', c=ex'])})"
        return f"not {self.expr(d + 1)}"

    def stmt(self, d=0):
        r = self.r
        c = r.random()
        if d > 2 or c < 0.3:
            return "{{ " + self.expr() + " }}" + r.choice(["", " ", "\n", "|", "\n  "])
        if c < 0.42:
            elif_ = ("{% elif " + self.expr() + " %}" + self.body(d + 1)) if r.random() < .3 else ""
            else_ = ("{% else %}" + self.body(d + 1)) if r.random() < .4 else ""
            return "{% if " + self.expr() + " %}" + self.body(d + 1) + elif_ + else_ + "{% endif %}"
        if c < 0.56:
            else_ = "{% else %}none" if r.random() < .3 else ""
            return ("{% for m in " + r.choice(LOOPS2) + " %}{% set loop_var = loop.index0 %}" + self.body(d + 1) +
                    r.choice(LOOP_TAILS2) + else_ + "{% endfor %}")
        if c < 0.64:
            return "{% set v = " + self.expr() + " %}{{ v }}"
        if c < 0.70:
            return "{% set blk %}" + self.body(d + 1) + "{% endset %}[{{ blk | trim }}]"
        if c < 0.75:
            return "{% filter upper %}" + self.body(d + 1) + "{% endfilter %}"
        if c < 0.82:
            return "{%- if " + self.expr() + " -%}\n    " + self.body(d + 1) + "\n  {%- endif %}\n"
        if c < 0.88:
            return "{# c #}\n  {% if true %}\n" + self.body(d + 1) + "\n  {% endif %}\n"
        return ("{% set ns = namespace(acc=[]) %}{% for m in messages %}{% set ns.acc = ns.acc + [" + self.expr() +
                "] %}{% endfor %}{{ ns.acc | length }}")

    def body(self, d):
        return "".join(self.stmt(d) for _ in range(self.r.randint(1, 3)))


def templates2(seed, count):
    g = Gen2(seed)
    return [PRELUDE2 + g.body(0) for _ in range(count)]
