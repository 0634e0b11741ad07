"""Corpus shapes for benches/pipeline_shapes.sh: copies of a generated aclImdb tree's labelled
reviews (train and test, pos and neg), each rewritten one way, so the pipeline's speed against
the Python reference can be compared shape by shape on the same reviews:

  base    as generated
  ascii   no non-ASCII characters (NFKD, then only ASCII kept)
  html    dense markup: a <br /><br /> after every sentence, every 7th word in <i>…</i>,
          `&amp;`, `&#39;` and `&quot;` entities every few words
  short   the first two sentences of each review (tweet-sized; per-document costs dominate)
  long    each review three times over (long documents; truncation at 512 tokens)

Usage: pipeline_shapes.py SRC_ACLIMDB OUT_DIR  (writes OUT_DIR/SHAPE/aclImdb; existing ones kept)
"""
import os
import re
import sys
import unicodedata


def asciify(t):
    return "".join(c for c in unicodedata.normalize("NFKD", t) if ord(c) < 128)


def html_heavy(t):
    t = re.sub(r"\. ", ". <br /><br />", t)
    out = []
    for i, w in enumerate(t.split(" ")):
        if i % 7 == 3:
            w = f"<i>{w}</i>"
        if i % 11 == 5:
            w += " &amp;"
        if i % 13 == 2:
            w = w.replace("'", "&#39;") + " &quot;ok&quot;"
        out.append(w)
    return " ".join(out)


def short(t):
    return " ".join(re.split(r"(?<=[.!?]) ", t)[:2])


SHAPES = {"base": lambda t: t, "ascii": asciify, "html": html_heavy, "short": short, "long": lambda t: " ".join([t] * 3)}

src, out = sys.argv[1], sys.argv[2]
for name, rewrite in SHAPES.items():
    dst = os.path.join(out, name, "aclImdb")
    if os.path.isdir(dst):
        continue
    tmp = dst + ".tmp"
    for split in ("train", "test"):
        for label in ("pos", "neg"):
            d, o = os.path.join(src, split, label), os.path.join(tmp, split, label)
            os.makedirs(o)
            for fn in os.listdir(d):
                with open(os.path.join(d, fn), encoding="utf-8") as f:
                    text = f.read()
                with open(os.path.join(o, fn), "w", encoding="utf-8") as f:
                    f.write(rewrite(text))
    os.rename(tmp, dst)
