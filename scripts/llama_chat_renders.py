#!/usr/bin/env python3
"""Write testdata/chat-templates/llama-cpp-builtins.json: conversations
rendered by llama.cpp's built-in chat templates (llama_chat_apply_template),
the reference for smelt's built-ins of the same names
(crates/smelt/tests/chat_builtin.rs).

LLAMA_CHAT_APPLY names the small program scripts/llama_chat_apply.c builds
against a llama.cpp build (its header says how):

    LLAMA_CHAT_APPLY=/tmp/llama_chat_apply python3 scripts/llama_chat_renders.py \\
        > testdata/chat-templates/llama-cpp-builtins.json

llama.cpp's built-ins take no BOS or EOS text: they write none, except the
Mistral ones, which end answers with "</s>". Each case records the
bos_token/eos_token a Jinja template must be given to render the same.
"""
import json
import os
import subprocess
import sys

PROGRAM = os.environ.get("LLAMA_CHAT_APPLY")
if not PROGRAM:
    sys.exit("set LLAMA_CHAT_APPLY to the built scripts/llama_chat_apply.c")

TEMPLATES = [
    "chatml",
    "llama3",
    "gemma",
    "phi3",
    "phi4",
    "mistral-v1",
    "mistral-v3",
    "mistral-v3-tekken",
    "mistral-v7",
    "mistral-v7-tekken",
]

CONVERSATIONS = [
    # llama.cpp's own test conversation (tests/test-chat-template.cpp).
    [
        {"role": "system", "content": "You are a helpful assistant"},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there"},
        {"role": "user", "content": "Who are you"},
        {"role": "assistant", "content": "   I am an assistant   "},
        {"role": "user", "content": "Another question"},
    ],
    [{"role": "user", "content": "Hello!"}],
    [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?\nOne word."},
    ],
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name a colour."},
    ],
    [
        {"role": "user", "content": "  padded\t\n"},
        {"role": "assistant", "content": "\n\nquotes \" ' \\ {{ not jinja }} {% raw %}"},
        {"role": "user", "content": "Ünïcödé ✓ 日本語 🦀"},
    ],
    [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Bonjour"},
    ],
]


def render(name, messages, add_assistant):
    stdin = b"".join(m[k].encode() + b"\0" for m in messages for k in ("role", "content"))
    out = subprocess.run([PROGRAM, name, "1" if add_assistant else "0"], input=stdin, capture_output=True)
    if out.returncode != 0:
        sys.exit(f"{name}: {out.stderr.decode()}")
    return out.stdout.decode()


def main():
    cases = []
    for name in TEMPLATES:
        eos = "</s>" if name.startswith("mistral") else ""
        for messages in CONVERSATIONS:
            for add_assistant in (True, False):
                cases.append(
                    {
                        "template": name,
                        "messages": messages,
                        "add_generation_prompt": add_assistant,
                        "bos_token": "",
                        "eos_token": eos,
                        "expected": render(name, messages, add_assistant),
                    }
                )
    json.dump(
        {
            "source": "llama.cpp 0c1e570 (llama-cpp-python 0.3.36), llama_chat_apply_template;"
            " made by scripts/llama_chat_renders.py",
            "cases": cases,
        },
        sys.stdout,
        ensure_ascii=False,
        indent=1,
    )
    print()


main()
