"""Reference renderer for chat templates: Python Jinja2 set up as transformers sets it up for
apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
the {% generation %} tag of its AssistantTracker, tojson = json.dumps(ensure_ascii=False, ...),
globals raise_exception and strftime_now). Run with Debian's /usr/bin/python3 (python3-jinja2).

This file is written for rapid from transformers' documented behaviour; it holds no copied code.
"""
import datetime
import json

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateError(Exception):
    pass


class Generation(Extension):
    """{% generation %}...{% endgeneration %}: renders its body unchanged."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(now).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def compile(env, source):
    """Returns the compiled template, or ("error", message) when it does not compile."""
    try:
        return env.from_string(source)
    except Exception as e:
        return ("error", f"{type(e).__name__}: {e}")


def render(env, template, context):
    """template: a source string or compile()'s result. Returns ("ok", text) or ("error", msg)."""
    if isinstance(template, str):
        template = compile(env, template)
    if isinstance(template, tuple):
        return template
    try:
        return "ok", template.render(**context)
    except Exception as e:  # every Jinja2 or Python error counts as "the template raised"
        return "error", f"{type(e).__name__}: {e}"
