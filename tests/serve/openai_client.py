#!/usr/bin/env python3
"""Drives a running `smelt serve` (SmolLM2-135M Q4_1) with the real openai
Python client, streaming and not.

References, none produced by smelt:
- llama.cpp's greedy continuations (testdata/reference/smollm2-135m-q4_1-greedy.json):
  /v1/completions at temperature 0 must reproduce each case's clear prefix;
- Python jinja2's render of the model's own chat template (read with the gguf
  package): /v1/chat/completions must answer exactly what /v1/completions
  answers for that rendered prompt.

- `smelt run --logprobs 5` on the same prompt: the log-probabilities the
  server reports must be its own (the model's), token for token;
- the schema itself: `response_format` with a JSON schema must give output
  that parses and validates in 20 sampled runs at temperature 1, and a
  GBNF `grammar` output in its language;
- logit_bias: +100 makes the runner-up token win, -100 bans the winner.

Usage: openai_client.py BASE_URL MODEL.gguf REFERENCE.json SMELT_BINARY
"""

import json
import os
import subprocess
import sys

from checks import Checks, openai_client, require_openai

openai = require_openai("openai_client.py")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import render_chat_template  # noqa: E402

check = Checks()


def main():
    base_url, model_path, reference_path, smelt = sys.argv[1:5]
    client = openai_client(openai, base_url, timeout=120)

    models = client.models.list().data
    check("models", len(models) == 1, models)
    model = models[0].id

    # Completions against llama.cpp's greedy outputs.
    cases = json.load(open(reference_path))["cases"][:4]
    for i, case in enumerate(cases):
        n = case["clear_prefix_len"]
        want = case["clear_prefix_text"]
        r = client.completions.create(model=model, prompt=case["prompt"], max_tokens=n, temperature=0)
        c = r.choices[0]
        check(f"completion {i} text", c.text == want, f"{c.text!r} != {want!r}")
        check(f"completion {i} finish", c.finish_reason == "length", c.finish_reason)
        check(f"completion {i} usage", (r.usage.prompt_tokens, r.usage.completion_tokens)
              == (len(case["prompt_ids"]), n), r.usage)
        check(f"completion {i} total", r.usage.total_tokens == r.usage.prompt_tokens + n, r.usage)

        chunks = list(client.completions.create(
            model=model, prompt=case["prompt"], max_tokens=n, temperature=0, stream=True))
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        check(f"streamed completion {i} text", text == want, f"{text!r} != {want!r}")
        check(f"streamed completion {i} finish", chunks[-1].choices[0].finish_reason == "length",
              chunks[-1])
        check(f"streamed completion {i} ids", len({ch.id for ch in chunks}) == 1)

    # Chat: the server's template render must be jinja2's.
    _, bos, eos = render_chat_template.from_gguf(model_path)
    source = render_chat_template.from_gguf(model_path)[0]
    template = render_chat_template.environment().from_string(source)
    messages = [
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "What is the capital of France? Answer in one sentence."},
    ]
    prompt = template.render(messages=messages, add_generation_prompt=True, bos_token=bos, eos_token=eos)
    want = client.completions.create(model=model, prompt=prompt, max_tokens=24, temperature=0)
    got = client.chat.completions.create(model=model, messages=messages, max_tokens=24, temperature=0)
    msg = got.choices[0].message
    check("chat role", msg.role == "assistant", msg)
    check("chat text", msg.content == want.choices[0].text, f"{msg.content!r} != {want.choices[0].text!r}")
    check("chat text is not empty", len(msg.content.strip()) > 0, msg.content)
    check("chat finish", got.choices[0].finish_reason == want.choices[0].finish_reason,
          (got.choices[0].finish_reason, want.choices[0].finish_reason))
    check("chat usage", got.usage.prompt_tokens == want.usage.prompt_tokens
          and got.usage.completion_tokens == want.usage.completion_tokens, (got.usage, want.usage))

    # Streaming chat with usage: the role first, the same text, the finish
    # reason, then a usage chunk with no choices.
    chunks = list(client.chat.completions.create(
        model=model, messages=messages, max_tokens=24, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    check("stream role", chunks[0].choices[0].delta.role == "assistant", chunks[0])
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    check("stream text", text == msg.content, f"{text!r} != {msg.content!r}")
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    check("stream finish", finishes == [got.choices[0].finish_reason], finishes)
    check("stream usage", chunks[-1].choices == [] and chunks[-1].usage is not None
          and chunks[-1].usage.completion_tokens == got.usage.completion_tokens, chunks[-1])
    check("stream ids", len({ch.id for ch in chunks}) == 1)

    # A stop string cuts the text before it, with finish_reason "stop".
    words = msg.content.split()
    if len(words) >= 3:
        stop = " " + words[2]
        r = client.chat.completions.create(model=model, messages=messages, max_tokens=24,
                                           temperature=0, stop=[stop])
        cut = msg.content[: msg.content.find(stop)]
        check("stop text", r.choices[0].message.content == cut, (r.choices[0].message.content, cut))
        check("stop finish", r.choices[0].finish_reason == "stop", r.choices[0].finish_reason)
    else:
        check("stop needs a longer answer", False, msg.content)

    # Seeded sampling repeats; penalties are accepted.
    kw = dict(model=model, messages=messages, max_tokens=12, temperature=1.0, top_p=0.9, seed=42,
              presence_penalty=0.5, frequency_penalty=0.5)
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    check("seed repeats", a == b, (a, b))

    check_logprobs(client, model, smelt, model_path, prompt, messages)
    check_logit_bias(client, model, smelt, model_path, messages)
    check_structured_output(client, model)

    # Errors reach the client as OpenAI errors.
    try:
        client.chat.completions.create(model=model, messages=messages, temperature=5)
        check("bad temperature raises", False)
    except openai.BadRequestError as e:
        check("bad temperature raises", e.status_code == 400 and "temperature" in str(e), e)

    check.finish()


def run_logprobs(smelt, model_path, prompt, n):
    """`smelt run --logprobs 5` greedy on `prompt`: one dict per token."""
    out = subprocess.run([smelt, "run", "-m", model_path, "-p", prompt, "-n", str(n), "--temp", "0",
                          "--logprobs", "5"], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return [json.loads(line) for line in out.stderr.splitlines() if line.startswith("{")]


def same_logprobs(name, got, want):
    """Token for token: the same token, log-probability and alternatives."""
    check(f"{name} token count", len(got) == len(want), (len(got), len(want)))
    worst = 0.0
    for g, w in zip(got, want):
        check(f"{name} token", g["token"] == w["token"], (g, w))
        check(f"{name} alternatives", [t["token"] for t in g["top"]] == [t["token"] for t in w["top_logprobs"]],
              (g["top"], w["top_logprobs"]))
        pairs = [(g["logprob"], w["logprob"])] + [(a["logprob"], b["logprob"])
                                                  for a, b in zip(g["top"], w["top_logprobs"])]
        worst = max([worst] + [abs(a - b) for a, b in pairs])
    check(f"{name} values equal smelt run's", worst == 0.0, f"largest difference {worst}")


def check_logprobs(client, model, smelt, model_path, chat_prompt, messages):
    # Completions: logprobs=5 alternatives per token.
    text = "The capital of France is"
    want = run_logprobs(smelt, model_path, text, 8)
    r = client.completions.create(model=model, prompt=text, max_tokens=8, temperature=0, logprobs=5)
    lp = r.choices[0].logprobs
    got = [{"token": t, "logprob": l, "top": [{"token": k, "logprob": v} for k, v in top.items()]}
           for t, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs)]
    same_logprobs("completion logprobs", got, want)
    check("completion text_offset", lp.text_offset[0] == 0 and len(lp.text_offset) == len(lp.tokens), lp.text_offset)

    # Chat: logprobs=True, top_logprobs=5, streamed and not.
    want = run_logprobs(smelt, model_path, chat_prompt, 8)
    r = client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=0,
                                       logprobs=True, top_logprobs=5)
    content = r.choices[0].logprobs.content
    got = [{"token": c.token, "logprob": c.logprob, "top": [{"token": t.token, "logprob": t.logprob}
                                                           for t in c.top_logprobs]} for c in content]
    same_logprobs("chat logprobs", got, want)
    check("chat logprobs bytes", all(bytes(c.bytes).decode("utf-8", "replace") == c.token for c in content), content)
    chunks = list(client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=0,
                                                 logprobs=True, top_logprobs=5, stream=True))
    streamed = [c for ch in chunks if ch.choices and ch.choices[0].logprobs
                for c in ch.choices[0].logprobs.content]
    check("streamed chat logprobs", [(c.token, c.logprob) for c in streamed]
          == [(c.token, c.logprob) for c in content], (streamed, content))


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"enum": ["Paris", "Rome", "Oslo"]},
        "likes_tea": {"type": "boolean"},
    },
    "required": ["name", "age", "city", "likes_tea"],
    "additionalProperties": False,
}


def valid_person(v):
    """The schema's rules, checked by hand (no jsonschema package needed)."""
    return (isinstance(v, dict) and list(v) == ["name", "age", "city", "likes_tea"]
            and isinstance(v["name"], str) and 1 <= len(v["name"]) <= 20
            and isinstance(v["age"], int) and not isinstance(v["age"], bool) and 0 <= v["age"] <= 120
            and v["city"] in ("Paris", "Rome", "Oslo") and isinstance(v["likes_tea"], bool))


def check_structured_output(client, model):
    messages = [{"role": "user", "content": "Describe a person as JSON."}]
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    bad = []
    for seed in range(20):
        r = client.chat.completions.create(model=model, messages=messages, max_tokens=120, temperature=1.0,
                                           seed=seed, response_format=fmt)
        text = r.choices[0].message.content
        try:
            ok = valid_person(json.loads(text)) and r.choices[0].finish_reason == "stop"
        except ValueError:
            ok = False
        if not ok:
            bad.append((seed, text, r.choices[0].finish_reason))
    check("json_schema: 20 sampled runs at temperature 1 validate", not bad, bad)

    chunks = list(client.chat.completions.create(model=model, messages=messages, max_tokens=120,
                                                 temperature=1.0, seed=3, response_format=fmt, stream=True))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    check("json_schema streamed", valid_person(json.loads(text)), text)

    r = client.chat.completions.create(model=model, messages=messages, max_tokens=200, temperature=0,
                                       response_format={"type": "json_object"})
    text = r.choices[0].message.content
    try:
        check("json_object", isinstance(json.loads(text), dict), text)
    except ValueError:
        check("json_object", r.choices[0].finish_reason == "length" and text.startswith("{"), text)

    r = client.completions.create(model=model, prompt="Is the sky blue? Answer:", max_tokens=10, temperature=1.0,
                                  seed=1, extra_body={"grammar": 'root ::= " " ("yes" | "no") "."'})
    check("GBNF grammar", r.choices[0].text in (" yes.", " no."), r.choices[0].text)
    try:
        client.completions.create(model=model, prompt="x", max_tokens=1, extra_body={"grammar": "root ::= ("})
        check("bad GBNF raises", False)
    except openai.BadRequestError as e:
        check("bad GBNF raises", "grammar" in str(e), e)


def token_id(smelt, model_path, text):
    """The id of `text`, which must be one token of the model's."""
    out = subprocess.run([smelt, "tokenize", "-m", model_path, "--text", text],
                         capture_output=True, text=True, timeout=60)
    ids = out.stdout.split()
    if len(ids) != 1:
        raise RuntimeError(f"{text!r} is not one token: {ids} {out.stderr}")
    return int(ids[0])


def check_logit_bias(client, model, smelt, model_path, messages):
    first = client.chat.completions.create(model=model, messages=messages, max_tokens=1, temperature=0,
                                           logprobs=True, top_logprobs=2).choices[0].logprobs.content[0]
    second = first.top_logprobs[1].token
    # +100 makes the runner-up win; -100 bans the winner.
    r = client.chat.completions.create(model=model, messages=messages, max_tokens=1, temperature=0,
                                       logit_bias={str(token_id(smelt, model_path, second)): 100})
    check("logit_bias +100 forces a token", r.choices[0].message.content == second,
          (r.choices[0].message.content, second))
    r = client.chat.completions.create(model=model, messages=messages, max_tokens=1, temperature=0,
                                       logit_bias={str(token_id(smelt, model_path, first.token)): -100})
    check("logit_bias -100 bans a token", r.choices[0].message.content != first.token,
          (r.choices[0].message.content, first.token))
    try:
        client.chat.completions.create(model=model, messages=messages, max_tokens=1,
                                       logit_bias={"99999999": 1})
        check("bad logit_bias raises", False)
    except openai.BadRequestError as e:
        check("bad logit_bias raises", "logit_bias" in str(e), e)


if __name__ == "__main__":
    main()
