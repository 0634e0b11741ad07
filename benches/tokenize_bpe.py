#!/usr/bin/env python3
"""Reference for benches/tokenize_bpe.sh: HF `tokenizers` on the same reviews, as a Python user
would run it — read every review of ACLIMDB/{train,test}/{neg,pos}, then one `encode_batch`
(Rust, all cores) without specials. Prints the seconds of each part and the token count.

    tokenize_bpe.py ACLIMDB_DIR TOKENIZER_JSON
"""
import pathlib
import sys
import time

from tokenizers import Tokenizer

root, path = pathlib.Path(sys.argv[1]), sys.argv[2]
t0 = time.perf_counter()
texts = [p.read_text(encoding="utf-8", errors="replace")
         for split in ["train", "test"] for label in ["neg", "pos"]
         for p in sorted((root / split / label).glob("*.txt"))]
t1 = time.perf_counter()
tok = Tokenizer.from_file(path)
encodings = tok.encode_batch(texts, add_special_tokens=False)
t2 = time.perf_counter()
print(f"read {t1 - t0:.3f} encode_batch {t2 - t1:.3f} docs {len(texts)} tokens {sum(len(e.ids) for e in encodings)}")
