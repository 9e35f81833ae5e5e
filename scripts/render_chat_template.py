#!/usr/bin/env python3
"""Renders chat templates with Python jinja2 the way Hugging Face's
apply_chat_template does: the independent reference for smelt's chat
template tests.

Reads a JSON request on stdin and writes a JSON list of results, one per
case: {"ok": "<rendered>"} or {"error": "<message>"}.

Request:
  {"template": "<jinja source>"          (or "gguf": "<path>", whose
                                          tokenizer.chat_template is used),
   "cases": [{"messages": [...], "add_generation_prompt": bool,
              "bos_token": str, "eos_token": str,
              "tools": [...] (optional)}, ...]}

With "gguf", a case's bos_token/eos_token may be null: the model's own
token texts are used, read with the `gguf` package.

The environment: an ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks and loop controls; tojson = json.dumps(ensure_ascii=False);
raise_exception(msg); strftime_now(fmt) fixed at 2026-01-15.
"""

import datetime
import json
import sys

try:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit("render_chat_template.py needs jinja2: pip install -r scripts/requirements-test.txt")

REFERENCE_DATE = datetime.datetime(2026, 1, 15, tzinfo=datetime.timezone.utc)


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(fmt):
        return REFERENCE_DATE.strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def from_gguf(path):
    try:
        import gguf
    except ImportError:
        sys.exit("render_chat_template.py needs the gguf package: pip install -r scripts/requirements-test.txt")
    reader = gguf.GGUFReader(path)

    def field(key):
        f = reader.fields.get(key)
        return None if f is None else f.contents()

    tokens = field("tokenizer.ggml.tokens") or []

    def token(key):
        i = field(key)
        return tokens[i] if i is not None and i < len(tokens) else ""

    return (
        field("tokenizer.chat_template"),
        token("tokenizer.ggml.bos_token_id"),
        token("tokenizer.ggml.eos_token_id"),
    )


def main():
    request = json.load(sys.stdin)
    bos = eos = None
    if "gguf" in request:
        source, bos, eos = from_gguf(request["gguf"])
        if source is None:
            sys.exit(f"{request['gguf']} has no tokenizer.chat_template")
    else:
        source = request["template"]
    template = environment().from_string(source)
    results = []
    for case in request["cases"]:
        try:
            # `tools` is passed only when the case has it, so that templates
            # see it undefined otherwise.
            extra = {"tools": case["tools"]} if "tools" in case else {}
            text = template.render(
                messages=case["messages"],
                add_generation_prompt=case["add_generation_prompt"],
                bos_token=case["bos_token"] if case.get("bos_token") is not None else bos,
                eos_token=case["eos_token"] if case.get("eos_token") is not None else eos,
                **extra,
            )
            results.append({"ok": text})
        except Exception as e:  # any error is a raise, as in the references
            results.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(results, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
