#!/usr/bin/env python3
"""Golden fixtures for the tokenizer test, made with HF `tokenizers` (run where it is installed):

  python3 scripts/golden/tokenizer_golden.py --tokenizer qwen3=DIR --tokenizer llama3_1=DIR \
      --prompts tests/golden/tokenizer/bench_prompts.json --out tests/golden/tokenizer

writes OUT/<name>.json: {"tokenizers_version", "encode": [{text, ids, ids_special}],
"decode": [{ids, skip, keep}], "fuzz": [{text, ids}]} where ids/ids_special are encode(text, add_special_tokens=False/
True) and skip/keep are decode(ids, skip_special_tokens=True/False)."""
import argparse
import json
import pathlib
import random

import tokenizers

CORPUS = [
    "", " ", "   ", "\n", "\t", "\n\n\n", " \t\n \r\n\t ", "\r\n", "a  b   c\t\t\td\n\n\ne",
    " " * 40 + "x", "x" + " " * 17, "\t\tindented\n    four\n        eight",
    "Hello world", "Hello, World! How are you today?", "hello" * 20, "a" * 100, "!" * 33,
    "=" * 64, "----- ***** _____",
    # contractions in various cases
    "I'm here, you're there, he's gone, it's fine, we've won, they'll come, she'd know.",
    "I'M HERE, YOU'RE THERE, HE'S GONE, WE'VE WON, THEY'LL COME, SHE'D KNOW, DON'T",
    "You'Re We'Ve They'Ll She'D It'S I'M can't won't", "'s 't 're 've 'm 'll 'd", "rock'n'roll",
    # digits
    "1234567890123456789", "3.14159265358979", "1,000,000 and 2024-12-01 at 13:45:07",
    "v1.2.3 x86_64 0x7fffABCD 1e-10", "００１２３", "٠١٢٣٤ ५६७",
    # scripts
    "你好，世界！今天天气很好。我们一起去公园散步吧。",
    "日本語のテキスト：こんにちは、カタカナ、ひらがな、漢字。",
    "한국어 텍스트입니다. 안녕하세요! 반갑습니다.",
    "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ελληνικά: Γειά σου Κόσμε. العربية: مرحبا بالعالم. עברית: שלום עולם.",
    "हिन्दी में पाठ। ภาษาไทย สวัสดีครับ",
    "Mixed: Hello 世界 мир こんにちは 안녕 123 ok!",
    # emoji
    "😀😃😄 👍🏽 ❤️ ✨", "👨‍👩‍👧‍👦 family, 👩🏻‍💻 coder, 🏳️‍🌈 flag", "🇺🇸🇯🇵🇩🇪 flags", "a😀b 😀 c",
    # NFC / NFD sensitive
    "e\u0301", "cafe\u0301 vs caf\u00e9", "\u0301abc", "A\u030a \u00c5 \u212b", "\u1100\u1161\u11a8",
    "ﬁ ligature and ｆｕｌｌ width", "\u00a0nbsp\u00a0\u3000ideographic\u2009thin",
    "Zalgo: Z\u0351\u036b\u0343a\u0310\u0312l\u0308g\u0301o\u033f",
    # code
    "def foo(x):\n    return x ** 2  # square\n\nprint(foo(3))\n",
    "int main(int argc, char** argv) {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 : 1;\n}\n",
    "const f = async () => { await fetch('/api?q=1&r=2'); };\n// TODO: handle errors\n",
    "<div class=\"x\">&nbsp;</div>\n<?php echo $a; ?>",
    "SELECT * FROM users WHERE id = 42;\n\n\n   -- comment",
    # literal special-token strings
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
    "x<|endoftext|>y", "<|im_start|><|im_start|>", "<|im_start", "<|im_end|> spaced <|im_end|>",
    "<think>\nhmm\n</think>\n\nanswer", "text <|eot_id|> more <|end_of_text|>",
    "<|reserved_special_token_5|> and <|fim_prefix|>", "<<|im_start|>>", "< |im_start| >",
]


# Random strings from pieces chosen to hit the regex's edges: every kind of whitespace (U+0085,
# U+180E, U+FEFF, U+3000 ...), contractions in odd cases, combining marks, special-token fragments.
FUZZ_POOL = (
    list("abcXYZ") + ["hello", "World", "ÉCOLE", "straße", "ſ", "İ", "ﬁ"] + list("你好世界日本語한국어") +
    ["Привет", "мир", "αβγ", "مرحبا", "שלום", "हिन्दी", "ไทย"] + list("0123456789") + ["１２", "٣٤", "Ⅻ", "½"] +
    [" ", "  ", "\t", "\n", "\r\n", "\r", "\u0085", "\u00a0", "\u3000", "\u2028", "\u2009", "\u200b",
     "\ufeff", "\u180e", "\x0b", "\x0c", "\x1c"] +
    ["'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'d", "'D", "'ſ",
     "’s", "'"] +
    ["😀", "👍🏽", "👨‍👩‍👧", "🇺🇸", "❤️", "\u200d", "\ufe0f"] +
    ["e\u0301", "\u0301", "\u0308", "A\u030a", "\u1100\u1161", "\u11a8"] +
    list("!@#$%^&*()[]{}<>|/\\.,;:?-_=+~`\"") +
    ["<|im_start|>", "<|im_end|>", "<|eot_id|>", "<|begin_of_text|>", "<|", "|>", "<think>", "</think>",
     "<|endoftext|>", "...", "->", "==", "//", "/*", "*/", "::", "0x1F", "1e9", "3.14"])


def fuzz_corpus(n):
    rnd = random.Random(7)
    return ["".join(rnd.choice(FUZZ_POOL) for _ in range(rnd.randint(1, 12))) for _ in range(n)]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def decode_cases(tok, encoded):
    b2u = bytes_to_unicode()
    byte_id = {b: tok.token_to_id(c) for b, c in b2u.items()}
    specials = [t for t in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>",
                            "<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>")
                if tok.token_to_id(t) is not None]
    sid = [tok.token_to_id(t) for t in specials]
    cases = [e["ids_special"] for e in encoded if e["ids_special"]]
    # broken and interrupted UTF-8 built from single-byte tokens
    emoji = [byte_id[b] for b in "😀".encode()]
    cases += [
        emoji[:1], emoji[:2], emoji[:3], emoji[:2] + [byte_id[ord("a")]],
        [byte_id[0xFF], byte_id[0x80], byte_id[ord("x")]],
        emoji[:1] + sid[:1] + emoji[1:], emoji[:2] + sid[-1:] + emoji[2:] + sid[:1],
        [byte_id[0xED], byte_id[0xA0], byte_id[0x80]],  # a surrogate is invalid
        [byte_id[0xE4], byte_id[0xBD]] + [byte_id[0xE5], byte_id[0xA5], byte_id[0xBD]],
        sid + sid[::-1], [],
    ]
    # truncations of a multi-token encoding of multibyte text at every length
    ids = tok.encode("日本😀é한", add_special_tokens=False).ids
    cases += [ids[:k] for k in range(1, len(ids) + 1)]
    out = []
    for ids in cases:
        out.append({"ids": ids, "skip": tok.decode(ids, skip_special_tokens=True),
                    "keep": tok.decode(ids, skip_special_tokens=False)})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", action="append", required=True, help="NAME=DIR")
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fuzz", type=int, default=2000, help="number of random strings")
    args = ap.parse_args()
    prompts = json.loads(pathlib.Path(args.prompts).read_text())
    texts = CORPUS + [prompts["code"][0], prompts["chinese"][0]]
    for spec in args.tokenizer:
        name, directory = spec.split("=", 1)
        tok = tokenizers.Tokenizer.from_file(str(pathlib.Path(directory) / "tokenizer.json"))
        encoded = [{"text": t,
                    "ids": tok.encode(t, add_special_tokens=False).ids,
                    "ids_special": tok.encode(t, add_special_tokens=True).ids} for t in texts]
        fuzz = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids}
                for t in fuzz_corpus(args.fuzz)]
        golden = {"tokenizers_version": tokenizers.__version__, "encode": encoded,
                  "decode": decode_cases(tok, encoded), "fuzz": fuzz}
        path = pathlib.Path(args.out) / f"{name}.json"
        path.write_text(json.dumps(golden, ensure_ascii=False) + "\n")
        print(path, len(encoded), "encode cases", len(golden["decode"]), "decode cases")


if __name__ == "__main__":
    main()
