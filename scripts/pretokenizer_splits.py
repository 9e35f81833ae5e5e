#!/usr/bin/env python3
"""Write testdata/tokenizer/pre-splits.json: every `tokenizer.ggml.pre` name
llama.cpp accepts, the flags it sets, and the words its regex list cuts a
set of texts into, computed with Python's `regex` module.

Nothing here comes from smelt. The names, flags and regex lists are read
mechanically from llama.cpp's own source (src/llama-vocab.cpp: the name
checks in `llama_vocab::impl::load` and the `regex_exprs` of each
`LLAMA_VOCAB_PRE_TYPE_*` in `llm_tokenizer_bpe`), and the regexes run in
another engine, the way llama.cpp's `unicode_regex_split` applies them:
each regex of a list cuts every piece the previous ones left into matches
and the gaps between them, and sees only its piece.

What llama.cpp does that a plain regex run would not, reproduced here:
  - ECMAScript classes: `\\d` is [0-9]; `$` is the end of the piece.
  - A regex that names no `\\p{..}` class runs on the text with non-ASCII
    whitespace turned into U+000B (std::wregex's `\\s` is ASCII-only), so
    a literal range that spans U+3000 does not match it.
  - It reads every letter subcategory (`\\p{Lu}`, `\\p{Ll}`, ...) as `\\p{L}`.
  - A few regexes are markers for hand-written matchers in unicode.cpp;
    the regex each matcher implements is given in CUSTOM below.

    pip install regex
    LLAMA_CPP_SRC=/path/to/llama.cpp python3 scripts/pretokenizer_splits.py \\
        > testdata/tokenizer/pre-splits.json
"""
import json
import os
import re
import sys

import regex

SRC = os.environ.get("LLAMA_CPP_SRC")
if not SRC:
    sys.exit("set LLAMA_CPP_SRC to a llama.cpp source tree")
VOCAB_CPP = open(os.path.join(SRC, "src", "llama-vocab.cpp"), encoding="utf-8").read()
INP_DIR = os.path.join(SRC, "models")

CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
# unicode_cpt_is_han's ranges.
HAN = (
    r"[\u4E00-\u9FFF\u3400-\u4DBF\U00020000-\U0002A6DF\U0002A700-\U0002B73F"
    r"\U0002B740-\U0002B81F\U0002B820-\U0002CEAF\U0002CEB0-\U0002EBEF"
    r"\uF900-\uFAFF\U0002F800-\U0002FA1F]"
)
# Digit runs cut into threes from the right (the remainder first); the
# matcher leaves what precedes a run in one piece with its first group.
DIGIT_GROUPS = r"\P{N}*\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))"
# The marker regexes of unicode_regex_split_custom whose matcher is not the
# regex itself, and the regex each matcher implements.
CUSTOM = {
    # Kimi K2: Han runs, then letter runs that exclude Han (no case, no
    # marks: the matcher tests only "is a letter"), contractions, 1-3
    # digits, then Llama 3's rules.
    r"\p{Han}+": HAN + r"+|[^\r\n\p{L}\p{N}]?(?:(?!" + HAN + r")\p{L})+" + CONTRACTIONS
    + r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"\p{AFMoE_digits}": DIGIT_GROUPS,
    # tokenizer.json's "\d{1,3}(?=(?:\d{3})*\b)", which llama.cpp runs
    # through the AFMoE digit matcher.
    r"\d{1,3}(?=(?:\d{3})*\b)": DIGIT_GROUPS,
}


def c_string(body):
    """The value of a C string literal's body."""
    out, i = [], 0
    escapes = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "'": "'"}
    while i < len(body):
        c = body[i]
        if c == "\\":
            out.append(escapes[body[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def literals(code):
    """The string literals of C++ code, comments dropped."""
    code = re.sub(r"//[^\n]*", "", code)
    return [c_string(m) for m in re.findall(r'"((?:[^"\\]|\\.)*)"', code)]


def pre_type_lists():
    """LLAMA_VOCAB_PRE_TYPE_* -> (regex list, byte_encode), from the
    llm_tokenizer_bpe constructor's switch."""
    start = VOCAB_CPP.index("llm_tokenizer_bpe(const llama_vocab & vocab)")
    body = VOCAB_CPP[start : VOCAB_CPP.index("std::vector<std::string> regex_exprs;", start)]
    lists = {}
    # Each group: its case labels, then a body up to `break;`.
    for group in re.finditer(r"((?:\s*(?:case LLAMA_VOCAB_PRE_TYPE_\w+|default):)+)(.*?)break;", body, re.S):
        labels = re.findall(r"LLAMA_VOCAB_PRE_TYPE_(\w+)|(default)", group.group(1))
        block = group.group(2)
        exprs = literals(block[block.index("regex_exprs") : block.index("};")])
        byte_encode = "byte_encode = false" not in block
        for named, default in labels:
            lists[named or "DEFAULT"] = (exprs, byte_encode)
    return lists


def names():
    """tokenizer.ggml.pre name -> its type and flags, from load()."""
    start = VOCAB_CPP.index('tokenizer_pre == "default"')
    end = VOCAB_CPP.index("unknown pre-tokenizer type", start)
    out = {}
    # Each branch: `(tokenizer_pre == "a" || ...) { ... }`.
    for cond, block in re.findall(r"\(((?:\s*tokenizer_pre == \"[^\"]+\"\s*\|*)+)\)\s*\{(.*?)\}", VOCAB_CPP[start:end], re.S):
        pre_type = re.search(r"pre_type = LLAMA_VOCAB_PRE_TYPE_(\w+);", block).group(1)
        flags = {
            "type": pre_type,
            "clean_spaces": "clean_spaces = false" not in block,
            "ignore_merges": "ignore_merges = true" in block,
            "add_bos": "add_bos = true" in block,
            "escape_whitespaces": "escape_whitespaces = true" in block,
            "no_default_bos": "special_bos_id = LLAMA_TOKEN_NULL" in block,
        }
        for name in re.findall(r'"([^"]+)"', cond):
            out[name] = flags
    return out


def python_regex(expr):
    """llama.cpp's regex as the `regex` module must see it."""
    if expr in CUSTOM:
        return CUSTOM[expr]
    if r"\p{" in expr:
        expr = regex.sub(r"\\p\{L[ultmo]\}", r"\\p{L}", expr)
    expr = expr.replace(r"\d", "[0-9]")
    if expr.endswith("$"):
        expr = expr[:-1] + r"\Z"
    return expr


# Unicode's White_Space beyond ASCII.
WIDE_WHITESPACE = "\x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"


def split(text, exprs):
    """Word lengths in code points."""
    lens = [len(text)] if text else []
    wide = "".join("\x0b" if c in WIDE_WHITESPACE else c for c in text)
    for expr in exprs:
        rx = regex.compile(python_regex(expr))
        seen = text if r"\p{" in expr else wide
        out, start = [], 0
        for n in lens:
            piece, done = seen[start : start + n], 0
            for m in rx.finditer(piece):
                if m.start() > done:
                    out.append(m.start() - done)
                if m.end() > m.start():
                    out.append(m.end() - m.start())
                done = m.end()
            if done < n:
                out.append(n - done)
            start += n
        lens = out
    return lens


def vocab_texts():
    """The texts of llama.cpp's vocabulary test vectors (qwen35's .inp holds
    the common set and four more)."""
    inp = open(os.path.join(INP_DIR, "ggml-vocab-qwen35.gguf.inp"), encoding="utf-8").read()
    sep = "\n__ggml_vocab_test__\n"
    return inp[: -len(sep)].split(sep)


# Texts that reach what the vectors' texts do not: digit grouping, case
# changes inside words, scripts with their own rules, symbols, marks, long
# whitespace runs, the Chameleon markers.
EXTRA_TEXTS = [
    "1234567 12 123456 1234 ½⅓ ٣٤٥٦٧ 3.14159 0x1F",
    "HelloWorld camelCase ALLCAPS McDonald's ÜberGroß ΣΙΣΥΦΟΣ ĲssEL",
    "中文汉字かなカナ한국어ㄱㄴ ㄅㄆ，。！“引号”…——〔括号〕︰",
    "<sentinel:12> IMGIMGABZ tab\there  two  spaces    four",
    "a~b $x+y <= z^2 | `code` @user #tag 50% &amp; {}[]\\/",
    "line1\r\nline2\n\n\nline3 \n\t x\r\r\n/path/to\n/z",
    "e\u0301 a\u0308 ก่าน नमस्ते ছোট্ট తెలుగు",
    "I'M YOU'RE they'LL don't we'D Bob's İstanbul'da Ankara'nın",
    "word \u00a0 \u3000 word\u2028next\u0085end",
    " " * 20 + "x" + "\t" * 9 + "y" + " " * 600 + "z",
    "こんにちは世界123 𠀋𪚲 豈更",
]


def main():
    lists = pre_type_lists()
    named = names()
    named["default"] = {
        "type": "DEFAULT",
        "clean_spaces": True,
        "ignore_merges": False,
        "add_bos": False,
        "escape_whitespaces": False,
        "no_default_bos": False,
    }
    texts = vocab_texts() + EXTRA_TEXTS
    used = sorted({f["type"] for f in named.values()})
    for f in named.values():
        f["byte_encode"] = lists[f["type"]][1]
    json.dump(
        {
            "source": "llama.cpp 0c1e570 (llama-cpp-python 0.3.36), src/llama-vocab.cpp;"
            " made by scripts/pretokenizer_splits.py",
            "texts": texts,
            "names": dict(sorted(named.items())),
            "splits": {t: [split(text, lists[t][0]) for text in texts] for t in used},
        },
        sys.stdout,
        ensure_ascii=False,
        indent=None,
        separators=(",", ":"),
    )
    print()
    print(f"{len(named)} names, {len(used)} regex lists, {len(texts)} texts", file=sys.stderr)


main()
