#!/usr/bin/env python3
"""A tool-call round trip with the real openai Python client against a
running `smelt serve`: the model is asked to call a tool (tool_choice
"required", so even a small model calls it, in its template's format),
the call comes back as OpenAI `tool_calls`, the tool's result goes back as
a `role: tool` message, and the model answers in text. Streaming and not.

Usage: tools_client.py BASE_URL [BANNED_IDS]

BANNED_IDS (comma-separated token ids) get a logit_bias of -100 in the
answer turn: a small model in a foreign template may end its answer at
once, and banning its end tokens shows that the text still comes back as
text, not as a call.
"""

import json
import sys

from checks import Checks, openai_client, require_openai

openai = require_openai("tools_client.py")

check = Checks()


TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 30}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}, {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time in a time zone",
        "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]},
    },
}]


def streamed(chunks):
    """(content, tool calls as dicts, finish reason) from a chat stream."""
    content, calls, finish = "", {}, None
    for ch in chunks:
        if not ch.choices:
            continue
        c = ch.choices[0]
        content += c.delta.content or ""
        for tc in c.delta.tool_calls or []:
            call = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += tc.id or ""
            if tc.function:
                call["name"] += tc.function.name or ""
                call["arguments"] += tc.function.arguments or ""
        finish = c.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish


def round_trip(client, model, stream, banned):
    tag = "streamed" if stream else "whole"
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    kw = dict(model=model, messages=messages, tools=TOOLS, tool_choice="required", max_tokens=60, temperature=0)
    if stream:
        content, calls, finish = streamed(client.chat.completions.create(stream=True, **kw))
    else:
        r = client.chat.completions.create(**kw)
        msg = r.choices[0].message
        content, finish = msg.content, r.choices[0].finish_reason
        calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                 for c in msg.tool_calls or []]
    check(f"{tag}: one call", len(calls) == 1, (content, calls))
    check(f"{tag}: finish_reason tool_calls", finish == "tool_calls", finish)
    if not calls:
        return
    call = calls[0]
    check(f"{tag}: a known tool", call["name"] in ("get_weather", "get_time"), call)
    args = json.loads(call["arguments"])
    check(f"{tag}: arguments match the tool's schema",
          (call["name"] == "get_weather" and isinstance(args.get("city"), str))
          or (call["name"] == "get_time" and args.get("zone") in ("UTC", "CET")), args)
    check(f"{tag}: an id", len(call["id"]) == 9 and call["id"].isalnum(), call["id"])

    # The result goes back; the model answers in words.
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call["id"], "type": "function",
             "function": {"name": call["name"], "arguments": call["arguments"]}}]},
        {"role": "tool", "tool_call_id": call["id"], "content": json.dumps({"result": "sunny, 24 C"})},
    ]
    kw = dict(model=model, messages=messages, tools=TOOLS, max_tokens=40, temperature=0)
    if banned:
        kw["logit_bias"] = {str(t): -100 for t in banned}
    if stream:
        content, calls, finish = streamed(client.chat.completions.create(stream=True, **kw))
    else:
        r = client.chat.completions.create(**kw)
        content, calls, finish = r.choices[0].message.content, r.choices[0].message.tool_calls or [], \
            r.choices[0].finish_reason
    check(f"{tag}: an answer after the tool's result", bool(content and content.strip()) and not calls,
          (content, calls, finish))


def main():
    base_url = sys.argv[1]
    banned = [int(t) for t in sys.argv[2].split(",")] if len(sys.argv) > 2 else []
    client = openai_client(openai, base_url, timeout=300)
    model = client.models.list().data[0].id
    for stream in (False, True):
        round_trip(client, model, stream, banned)
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                       tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}})
        check("unknown tool_choice raises", False)
    except openai.BadRequestError as e:
        check("unknown tool_choice raises", "tool_choice" in str(e), e)
    check.finish()


if __name__ == "__main__":
    main()
