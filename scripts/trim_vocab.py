#!/usr/bin/env python3
"""Shrink one of llama.cpp's vocabulary-only GGUFs (models/ggml-vocab-*.gguf)
to what its test texts (the .inp file beside it) can reach, so that the
test vectors fit in the repo.

A BPE merge can only fire inside a word, so a merge whose two halves
joined are not a substring of some test text (spelled the way the
tokenizer spells words: GPT-2's byte map, or U+2581 for spaces) can never
fire on those texts; it is dropped. A normal token whose text is no such
substring can never be produced or looked up; its text is emptied (the
loaders name it `[EMPTY_<id>]`) and its score zeroed, so that every other
id stays the same. Control, user-defined, byte and unknown tokens stay
whole, and so does every other key except the chat templates.

This does not depend on how the texts are pre-tokenized, so it proves
nothing wrong for the tokenizer under test; check a trimmed file against
the reference with llama.cpp itself:

    llama-tokenize -m trimmed.gguf --vocab-only --ids --no-bos ... (same ids as .out)

usage: trim_vocab.py IN.gguf IN.gguf.inp OUT.gguf
"""
import sys

try:
    from gguf import GGUFReader, GGUFWriter, GGUFValueType as V
except ImportError as e:
    sys.exit(f"trim_vocab.py needs the gguf Python package: {e}")

NORMAL = 1


def gpt2_byte_map():
    """GPT-2's bytes_to_unicode."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, n = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(0x100 + n)
            n += 1
    return chars


def spelled_texts(model, texts):
    """The texts as the tokenizer's merges see them."""
    if model == "gemma4":
        return [t.replace(" ", "\u2581") for t in texts]
    if model == "gpt2":
        m = gpt2_byte_map()
        return ["".join(m[b] for b in t.encode("utf-8")) for t in texts]
    sys.exit(f"trim_vocab.py handles BPE vocabularies (gpt2, gemma4), not {model!r}")


def reachable_merge(merge, reachable):
    """Whether the merge's halves joined are reachable. Its halves part at
    the first space after the first character, as the loaders split them;
    a merge without one never applies."""
    pos = merge.find(" ", 1)
    return pos > 0 and reachable(merge[:pos] + merge[pos + 1 :])


def main():
    src, inp, out = sys.argv[1:4]
    sep = "\n__ggml_vocab_test__\n"
    texts = open(inp, encoding="utf-8").read()
    texts = texts[: -len(sep)].split(sep) if texts.endswith(sep) else texts.split(sep)

    r = GGUFReader(src)
    field = lambda k: r.fields[k].contents()
    model = field("tokenizer.ggml.model")
    spelled = "\x00".join(spelled_texts(model, texts))
    reachable = lambda s: s in spelled

    tokens = field("tokenizer.ggml.tokens")
    types = field("tokenizer.ggml.token_type")
    keep = [t != NORMAL or reachable(s) for s, t in zip(tokens, types)]
    new_tokens = [s if k else "" for s, k in zip(tokens, keep)]
    merges = [m for m in field("tokenizer.ggml.merges") if reachable_merge(m, reachable)]

    arch = field("general.architecture")
    w = GGUFWriter(out, arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key.startswith("tokenizer.chat_template"):
            continue
        value = f.contents()
        if key == "tokenizer.ggml.tokens":
            value = new_tokens
        elif key == "tokenizer.ggml.merges":
            value = merges
        elif key == "tokenizer.ggml.scores":
            value = [s if k else 0.0 for s, k in zip(value, keep)]
        vtype = f.types[0]
        sub = f.types[-1] if vtype == V.ARRAY else None
        w.add_key_value(key, value, vtype, sub_type=sub)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    print(f"{src}: kept {sum(keep)} of {len(tokens)} tokens, {len(merges)} of "
          f"{len(field('tokenizer.ggml.merges'))} merges", file=sys.stderr)


main()
