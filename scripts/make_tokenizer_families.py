#!/usr/bin/env python3
"""Tokenizers of the RoBERTa, ModernBERT and XLM-R shapes, and golden ids from HF for them.

No model hub is reachable here, so the three `tokenizer.json` files are trained on the bundled
sample with HF `tokenizers`, then given exactly the pipeline each family ships:

- roberta:    byte-level BPE, `<s> <pad> </s> <unk>` as ids 0-3 and `<mask>` (lstrip) last,
              RobertaProcessing (`<s> A </s>`, `<s> A </s></s> B </s>`), loaded as
              `RobertaTokenizer` (what `roberta-base`'s tokenizer_config names);
- modernbert: byte-level BPE after NFC (OLMo's, as ModernBERT-base), `[UNK] [CLS] [SEP] [PAD]
              [MASK]` appended after the merges' tokens, TemplateProcessing `[CLS] $A [SEP]` and
              `[CLS] $A [SEP] $B [SEP]` with every type id 0, `PreTrainedTokenizerFast`;
- xlmr:       SentencePiece Unigram (Metaspace `▁`, NMT + NFKC normaliser), `<s> <pad> </s>
              <unk>` first and `<mask>` last, `<s> A </s></s> B </s>` (XLM-R, also ALBERT's
              model kind).

Each goes to tests/fixtures/tokenizers/<family>/ with a tokenizer_config.json and
special_tokens_map.json, so `AutoTokenizer.from_pretrained(folder)` loads it as it would the
real checkpoint's folder. tests/fixtures/golden_tokenizers.json holds, per family, the ids of
`AutoTokenizer` for hard cases and sample reviews (without specials, with them, and as pairs
with their type ids), and the word ids of each token (the tokenizer's own word boundaries).

    python3 -m venv .venv && .venv/bin/pip install tokenizers transformers
    .venv/bin/python scripts/make_tokenizer_families.py            # golden ids only
    .venv/bin/python scripts/make_tokenizer_families.py --retrain  # the tokenizers too
"""
import argparse
import hashlib
import json
import pathlib
import sys

import tokenizers
import transformers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers, AddedToken

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_golden_tokens import HARD_CASES, sample_reviews  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
DIR = ROOT / "tests/fixtures/tokenizers"
OUT = ROOT / "tests/fixtures/golden_tokenizers.json"
VOCAB_SIZE = 2000

EXTRA_CASES = [
    "Hello world. Next sentence starts here!  Two spaces, then\nnewline.",
    "literal <s> and </s>, <mask>ed, <unk> <pad> and [MASK] [CLS] [SEP]",
    " leading space and trailing space ",
    "don't won't it's I'm we've they'll she'd",
    "numbers 1234567 and 3.14159 and 1,000,000",
]


def corpus():
    for folder in ["train/neg", "train/pos", "train/unsup", "test/neg", "test/pos"]:
        for p in sorted((ROOT / "data/aclImdb-sample" / folder).glob("*.txt")):
            yield p.read_text(encoding="utf-8")


def roberta():
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    t.train_from_iterator(corpus(), trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    t.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False, special=True)])
    t.post_processor = processors.RobertaProcessing(("</s>", t.token_to_id("</s>")), ("<s>", t.token_to_id("<s>")),
                                                    trim_offsets=True, add_prefix_space=False)
    config = {"tokenizer_class": "RobertaTokenizer", "model_max_length": 512, "add_prefix_space": False,
              "bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
              "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>"}
    return t, config


def modernbert():
    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(corpus(), trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=["<|endoftext|>", "<|padding|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    # ModernBERT appends its BERT-style specials after the OLMo vocabulary ([MASK] strips left).
    t.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in ["[UNK]", "[CLS]", "[SEP]", "[PAD]"]])
    t.add_special_tokens([AddedToken("[MASK]", lstrip=True, normalized=False, special=True)])
    cls, sep = t.token_to_id("[CLS]"), t.token_to_id("[SEP]")
    t.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192, "clean_up_tokenization_spaces": True,
              "model_input_names": ["input_ids", "attention_mask"],
              "cls_token": "[CLS]", "sep_token": "[SEP]", "unk_token": "[UNK]", "pad_token": "[PAD]",
              "mask_token": "[MASK]"}
    return t, config


def xlmr():
    t = Tokenizer(models.Unigram())
    t.normalizer = normalizers.Sequence([normalizers.Nmt(), normalizers.NFKC(),
                                         normalizers.Replace(tokenizers.Regex(" {2,}"), " ")])
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    t.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    t.train_from_iterator(corpus(), trainers.UnigramTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=specials, unk_token="<unk>", show_progress=False))
    t.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False, special=True)])
    bos, eos = t.token_to_id("<s>"), t.token_to_id("</s>")
    t.post_processor = processors.TemplateProcessing(
        single="<s>:0 $A:0 </s>:0", pair="<s>:0 $A:0 </s>:0 </s>:0 $B:0 </s>:0",
        special_tokens=[("<s>", bos), ("</s>", eos)])
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 512,
              "model_input_names": ["input_ids", "attention_mask"],
              "bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
              "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>"}
    return t, config


FAMILIES = {"roberta": roberta, "modernbert": modernbert, "xlmr": xlmr}


def retrain():
    for name, build in FAMILIES.items():
        t, config = build()
        d = DIR / name
        d.mkdir(parents=True, exist_ok=True)
        t.save(str(d / "tokenizer.json"))
        (d / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
        specials = {k: v for k, v in config.items() if k.endswith("_token")}
        (d / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n")
        print(f"wrote {d} ({t.get_vocab_size()} tokens)")


def golden():
    texts = HARD_CASES + EXTRA_CASES + sample_reviews(4)
    out = {"generator": "scripts/make_tokenizer_families.py", "tokenizers_version": tokenizers.__version__,
           "transformers_version": transformers.__version__, "families": {}}
    for name in FAMILIES:
        d = DIR / name
        tok = transformers.AutoTokenizer.from_pretrained(str(d))
        cases = []
        for i, text in enumerate(texts):
            plain = tok(text, add_special_tokens=False)
            pair_b = texts[(i + 1) % len(texts)]
            pair = tok(text, pair_b, return_token_type_ids=True)
            cases.append({
                "text": text,
                "ids": plain["input_ids"],
                "word_ids": plain.word_ids(),
                "with_specials": tok(text)["input_ids"],
                "pair_ids": pair["input_ids"],
                "pair_type_ids": pair["token_type_ids"],
            })
        out["families"][name] = {
            "tokenizer": f"tests/fixtures/tokenizers/{name}/tokenizer.json",
            "tokenizer_sha256": hashlib.sha256((d / "tokenizer.json").read_bytes()).hexdigest(),
            "class": type(tok).__name__,
            "model_input_names": tok.model_input_names,
            "specials": {k: tok.convert_tokens_to_ids(getattr(tok, k)) for k in
                         ["cls_token", "sep_token", "pad_token", "unk_token", "mask_token"]},
            "cases": cases,
        }
    lines = []
    for name, fam in out["families"].items():
        head = {k: v for k, v in fam.items() if k != "cases"}
        body = ",\n".join(json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in fam["cases"])
        lines.append(f'"{name}": ' + json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [\n' + body + "\n]}")
    top = {k: v for k, v in out.items() if k != "families"}
    text = json.dumps(top, ensure_ascii=False)[:-1] + ', "families": {\n' + ",\n".join(lines) + "\n}}\n"
    json.loads(text)
    OUT.write_text(text, encoding="utf-8")
    counts = ", ".join(f"{n} {len(f['cases'])} cases" for n, f in out["families"].items())
    print(f"wrote {OUT}: {counts}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--retrain", action="store_true", help="train the three tokenizers again")
    args = ap.parse_args()
    if args.retrain:
        retrain()
    golden()


if __name__ == "__main__":
    main()
