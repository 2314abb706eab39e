"""The reference renderer: Python's jinja2 set up exactly as Hugging Face transformers sets it up
for chat templates (transformers/utils/chat_template_utils.py, _compile_jinja_template and
render_jinja_template), with one change: strftime_now reads a fixed clock so that expected
outputs are reproducible (the C engine takes the same instant through ob_tmpl_opts.now).

  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                extensions=[<generation tag>, jinja2.ext.loopcontrols])
  filters["tojson"]  = json.dumps(x, ensure_ascii=False, indent=None, separators=None,
                                  sort_keys=False)
  globals["raise_exception"], globals["strftime_now"]
  render(messages=..., tools=... or None, documents=None, add_generation_prompt=...,
         **special_tokens_map, **kwargs)
"""
import json
from datetime import datetime, timezone

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

# 2024-07-26 12:00:00 UTC; the C tests pass the same value as ob_tmpl_opts.now
FIXED_NOW = 1721995200


class GenerationTag(jinja2.ext.Extension):
    """transformers' {% generation %} ... {% endgeneration %}: renders its body (the tracking
    of assistant token indices does not change the text)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_render_body")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format):
    return datetime.fromtimestamp(FIXED_NOW, timezone.utc).replace(tzinfo=None).strftime(format)


def make_env():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def render(source, variables):
    """Returns {"ok": True, "text": ...} or {"ok": False, "error": ..., "raise": msg|None}."""
    env = make_env()
    try:
        text = env.from_string(source).render(**variables)
        text.encode("utf-8")  # lone surrogates cannot be written out
        return {"ok": True, "text": text}
    except jinja2.exceptions.TemplateSyntaxError as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e}", "raise": None}
    except Exception as e:  # noqa: BLE001 -- any failure is an expected failure for the engine
        raised = str(e) if type(e) is jinja2.exceptions.TemplateError else None
        return {"ok": False, "error": f"{type(e).__name__}: {e}", "raise": raised}


def chat_variables(special, conversation):
    """The keyword arguments transformers' apply_chat_template passes to render()."""
    v = dict(special)
    v.update(conversation.get("vars", {}))
    v["messages"] = conversation["messages"]
    v["tools"] = conversation.get("tools")
    v["documents"] = None
    v["add_generation_prompt"] = conversation.get("add_generation_prompt", True)
    return v
