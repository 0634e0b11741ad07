"""Near-dedup against the planted truth and against an independent implementation.

    python benches/near_dedup_reference.py CORPUS.jsonl BERTPIPE_OUT

CORPUS.jsonl is examples/gen_near_dups.rs's output (planted copies carry `copy_of` and
`changed`); BERTPIPE_OUT the output of a pipeline with `near_dedup` (its `_rejects/`). Runs
`datasketch` (MinHash, 112 permutations, MinHashLSH with bertpipe's 14 x 8 bands) over the same
5-word shingles with the same rule (in input order, a document whose best verified candidate
has estimated Jaccard >= 0.8 is rejected; the others are indexed), then scores both against
exact Jaccard similarity: precision (the found pairs at exact Jaccard >= 0.8, and >= 0.7) and
recall (planted copies whose source was kept, by exact similarity), and their agreement.
"""
import glob
import html
import json
import re
import sys
import time
import unicodedata

import pyarrow.parquet as pq
from datasketch import MinHash, MinHashLSH

WORD = re.compile(r"[^\W_]+")


def clean(text):
    # What the benchmark pipeline's html_strip / unicode_normalize do to the words.
    text = re.sub(r"<[^>]*>", " ", text)
    return unicodedata.normalize("NFKC", html.unescape(text))


def shingles(text, n=5):
    w = WORD.findall(clean(text).lower())
    if not w:
        return set()
    n = min(n, len(w))
    return {" ".join(w[i:i + n]) for i in range(len(w) - n + 1)}


def jaccard(a, b):
    return len(a & b) / len(a | b) if (a or b) else 1.0


def main(corpus, out):
    docs = [json.loads(line) for line in open(corpus)]
    sets = {d["id"]: shingles(d["text"]) for d in docs}

    ours = {}
    for f in sorted(glob.glob(f"{out}/_rejects/*.parquet")):
        t = pq.read_table(f, columns=["id", "reason"]).to_pylist()
        for r in t:
            if r["reason"].startswith("near_duplicate_of:"):
                ours[r["id"]] = r["reason"][len("near_duplicate_of:"):].rsplit(" (similarity ", 1)[0]
            elif r["reason"].startswith("duplicate_of:"):
                ours[r["id"]] = r["reason"][len("duplicate_of:"):]

    t0 = time.perf_counter()
    lsh = MinHashLSH(threshold=0.8, num_perm=112, params=(14, 8))
    kept = {}
    theirs = {}
    for d in docs:
        s = sets[d["id"]]
        if not s:
            continue
        m = MinHash(num_perm=112, seed=1)
        m.update_batch([x.encode() for x in s])
        best = None
        for c in lsh.query(m):
            j = m.jaccard(kept[c])
            if j >= 0.8 and (best is None or j > best[1]):
                best = (c, j)
        if best:
            theirs[d["id"]] = best[0]
        else:
            lsh.insert(d["id"], m)
            kept[d["id"]] = m
    ds_seconds = time.perf_counter() - t0

    def score(name, found):
        exact = [jaccard(sets[a], sets[b]) for a, b in found.items()]
        p8 = sum(j >= 0.8 for j in exact) / max(len(exact), 1)
        p7 = sum(j >= 0.7 for j in exact) / max(len(exact), 1)
        buckets = {"[0.8,0.9)": [0, 0], ">=0.9": [0, 0], "[0.6,0.8)": [0, 0], "<0.6": [0, 0]}
        for d in docs:
            src = d.get("copy_of")
            if src is None or src in found:
                continue
            j = jaccard(sets[d["id"]], sets[src])
            k = ">=0.9" if j >= 0.9 else "[0.8,0.9)" if j >= 0.8 else "[0.6,0.8)" if j >= 0.6 else "<0.6"
            buckets[k][0] += 1
            buckets[k][1] += d["id"] in found
        rec = "  ".join(f"{k} {f}/{n} ({100 * f / max(n, 1):.1f}%)" for k, (n, f) in buckets.items())
        print(f"{name:<11} {len(found):6d} pairs  precision {100 * p8:5.1f}% at exact J >= 0.8, {100 * p7:5.1f}% at >= 0.7")
        print(f"{'':<11} planted copies found, by exact J to their kept source: {rec}")

    print(f"== {len(docs)} documents, {sum('copy_of' in d for d in docs)} planted copies")
    score("bertpipe", ours)
    score("datasketch", theirs)
    a, b = set(ours), set(theirs)
    print(f"agreement: {len(a & b)} rejected by both, {len(a - b)} by bertpipe only, {len(b - a)} by datasketch only"
          f" (Jaccard of the rejected sets {len(a & b) / max(len(a | b), 1):.4f}); datasketch took {ds_seconds:.1f}s")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
