#!/usr/bin/env python3
"""Drives `smelt serve --pooling mean` (SmolLM2-135M Q4_1) with the real
openai Python client's embeddings API.

Reference, not produced by smelt: llama.cpp's `llama-embedding` vectors
(testdata/embeddings/smollm2-135m-q4_1.json, mean pooling, L2-normalized):
each of smelt's must have cosine similarity above 0.999 with llama.cpp's.

Also: every input shape OpenAI allows (string, strings, token ids, arrays of
ids) gives the same vectors, floats and base64 alike; usage counts the
prompt tokens; bad requests get OpenAI-shaped 4xx errors.

Usage: embeddings_client.py BASE_URL REFERENCE.json
"""

import base64
import json
import math
import struct
import sys

from checks import Checks, openai_client, require_openai

openai = require_openai("embeddings_client.py")

check = Checks()


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def max_diff(a, b):
    return max(abs(x - y) for x, y in zip(a, b))


def error_of(call):
    """The openai client's exception for a call that must fail, or None."""
    try:
        call()
    except openai.APIStatusError as e:
        return e
    return None


def main():
    base_url, reference_path = sys.argv[1:3]
    client = openai_client(openai, base_url, timeout=120)
    model = client.models.list().data[0].id
    ref = json.load(open(reference_path, encoding="utf-8"))
    texts, expected = ref["texts"], ref["mean"]

    # Floats, one request for all texts, against llama.cpp.
    r = client.embeddings.create(model=model, input=texts, encoding_format="float")
    got = [d.embedding for d in sorted(r.data, key=lambda d: d.index)]
    check("count", len(got) == len(texts), len(got))
    check("dims", all(len(v) == len(expected[0]) for v in got), [len(v) for v in got])
    worst_cos = min(cosine(a, b) for a, b in zip(got, expected))
    worst_diff = max(max_diff(a, b) for a, b in zip(got, expected))
    print(f"mean pooling vs llama-embedding: min cosine {worst_cos:.7f}, max |diff| {worst_diff:.2e}")
    check("cosine vs llama.cpp", worst_cos > 0.999, worst_cos)
    check("unit length", all(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5 for v in got))
    check("usage", r.usage.prompt_tokens == sum(ref["prompt_tokens"]), r.usage)
    check("usage total", r.usage.total_tokens == r.usage.prompt_tokens, r.usage)
    check("model", r.model == model, r.model)

    # The client's default asks for base64 and decodes it itself.
    r64 = client.embeddings.create(model=model, input=texts)
    check("base64 decoded", [d.embedding for d in r64.data] == got)
    raw = client.embeddings.with_raw_response.create(model=model, input=texts[0], encoding_format="base64")
    b64 = json.loads(raw.text)["data"][0]["embedding"]
    data = base64.b64decode(b64)
    floats = list(struct.unpack(f"<{len(data) // 4}f", data))
    check("base64 little-endian f32", floats == got[0], floats[:4])

    # One string, token ids and arrays of them give the same vectors.
    one = client.embeddings.create(model=model, input=texts[1], encoding_format="float")
    check("single string", one.data[0].embedding == got[1])
    ids = [[504, 2365, 6354, 16438, 27003, 690, 260, 23790, 2767, 30]]
    by_ids = client.embeddings.create(model=model, input=ids[0], encoding_format="float")
    check("token ids", by_ids.data[0].embedding == got[1] and by_ids.usage.prompt_tokens == 10)
    by_lists = client.embeddings.create(model=model, input=ids + ids, encoding_format="float")
    check("arrays of ids", [d.embedding for d in by_lists.data] == [got[1], got[1]])

    # Errors in OpenAI's shape.
    e = error_of(lambda: client.embeddings.create(model=model, input=[]))
    check("empty list 400", e is not None and e.status_code == 400, e)
    e = error_of(lambda: client.embeddings.create(model=model, input=""))
    check("empty text 400", e is not None and e.status_code == 400 and "empty" in str(e), e)
    e = error_of(lambda: client.embeddings.create(model=model, input="word " * 400))
    check(
        "too long 400",
        e is not None and e.status_code == 400 and e.code == "context_length_exceeded" and "context" in str(e),
        e,
    )
    e = error_of(lambda: client.embeddings.create(model="no-such-model", input="x"))
    check("unknown model 404", e is not None and e.status_code == 404, e)
    e = error_of(lambda: client.embeddings.create(model=model, input=[10**9]))
    check("bad token id 400", e is not None and e.status_code == 400 and "vocabulary" in str(e), e)
    e = error_of(lambda: client.embeddings.create(model=model, input="x", dimensions=7))
    check("dimensions 400", e is not None and e.status_code == 400, e)
    e = error_of(lambda: client.embeddings.create(model=model, input="x", encoding_format="int8"))
    check("encoding_format 400", e is not None and e.status_code == 400, e)

    # A generation after the embeddings still answers (slots freed).
    c = client.completions.create(model=model, prompt="The capital of France is", max_tokens=3, temperature=0)
    check("completion after", len(c.choices[0].text) > 0, c)

    check.finish()


if __name__ == "__main__":
    main()
