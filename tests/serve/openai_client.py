#!/usr/bin/env python3
"""Drives a running `smelt serve` (SmolLM2-135M Q4_1) with the real openai
Python client, streaming and not.

References, none produced by smelt:
- llama.cpp's greedy continuations (testdata/reference/smollm2-135m-q4_1-greedy.json):
  /v1/completions at temperature 0 must reproduce each case's clear prefix;
- Python jinja2's render of the model's own chat template (read with the gguf
  package): /v1/chat/completions must answer exactly what /v1/completions
  answers for that rendered prompt.

Usage: openai_client.py BASE_URL MODEL.gguf REFERENCE.json
"""

import json
import os
import sys

try:
    import openai
except ImportError:
    sys.exit("openai_client.py needs the openai package: pip install -r scripts/requirements-test.txt")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import render_chat_template  # noqa: E402

passed = 0
failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}: {detail}", file=sys.stderr)


def main():
    base_url, model_path, reference_path = sys.argv[1:4]
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused", timeout=120, max_retries=0)

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

    # Errors reach the client as OpenAI errors.
    try:
        client.chat.completions.create(model=model, messages=messages, temperature=5)
        check("bad temperature raises", False)
    except openai.BadRequestError as e:
        check("bad temperature raises", e.status_code == 400 and "temperature" in str(e), e)

    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
