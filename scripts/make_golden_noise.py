#!/usr/bin/env python3
"""Golden noise scores from the seed recipe's `calculate_noise_score`, for the `formula: recipe`
option of bertpipe's noise_score step.

The function is taken from the Python reference itself, ../shared/bench/py_imdb_pipeline.py
(its `noise`), not copied here, so the fixture cannot drift from it: sentence-length std over
re.split(r"[.!?]+"), [^\\w\\s] over all characters, all-caps segments over all segments,
weighted 0.4 / 0.3 / 0.3 without scaling. Writes tests/fixtures/golden_noise.json: hard cases
plus every review of the bundled sample, as read (bytes decoded as UTF-8 with replacement, no
newline translation), each with the recipe's components and score.

    .venv/bin/python scripts/make_golden_noise.py
"""
import json
import pathlib
import re

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/fixtures/golden_noise.json"
REFERENCE = ROOT.parent / "shared/bench/py_imdb_pipeline.py"


def reference_noise():
    """The reference's top-level `def noise(text):`, executed on its own (importing the file
    would run its main())."""
    lines = REFERENCE.read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("def noise("))
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i][0].isspace()), len(lines))
    scope = {"re": re, "np": np}
    exec("\n".join(lines[start:end]), scope)
    return scope["noise"]


def components(text):
    """The three terms `noise` weighs, computed as it computes them, for per-term checks."""
    sents = [s for s in re.split(r"[.!?]+", text) if s.strip()]
    lens = [len(s.split()) for s in sents]
    std = float(np.std(lens)) if len(lens) > 1 else 0.0
    pr = len(re.findall(r"[^\w\s]", text)) / len(text) if text else 0.0
    caps = sum(1 for s in sents if s.isupper() and len(s) > 5) / len(sents) if sents else 0.0
    return std, pr, caps


HARD_CASES = [
    "",
    "   ",
    "One sentence only",
    "THIS IS AWFUL!!! I HATED IT. really? ok...",
    "ÉCOLE FERMÉE. Ça va? ǅemal ǈudi. ΑΘΉΝΑ ΕΊΝΑΙ ΩΡΑΊΑ!",
    "snake_case and_under_scores, digits 123 ١٢٣ ½ Ⅻ.",
    "e\u0301te\u0301 cafe\u0301 — “quotes” ‘single’ … done",
    "tabs\tand\u00a0nbsp\u2003em space\x1cfile sep\x1dgroup. Next\u2028line!",
    "emoji 😀 and CJK 電影很好看。 math ∑ x² ≤ 10!",
    "<br /><br />HTML &amp; entities &lt;kept&gt; as text.",
    "?!.",
    "A. B. C. D. E.",
    "SHOUT SHOUT SHOUT. quiet. MIXED Case. ALLCAPS123 HERE!",
]


def main():
    cases = [{"id": f"hard:{i}", "text": t} for i, t in enumerate(HARD_CASES)]
    sample = ROOT / "data/aclImdb-sample"
    for path in sorted(sample.glob("*/*/*.txt")):
        text = path.read_bytes().decode("utf-8", errors="replace")
        cases.append({"id": str(path.relative_to(sample)), "text": text})
    noise = reference_noise()
    for c in cases:
        std, pr, caps = components(c["text"])
        score = noise(c["text"])
        # The terms must rebuild the reference's score, or they are not its terms.
        assert abs(0.4 * std + 0.3 * pr + 0.3 * caps - score) < 1e-12, (c["id"], score)
        c.update(sent_len_std=std, punct_ratio=pr, caps_ratio=caps, score=score)
    for c in cases:
        if not c["id"].startswith("hard:"):
            del c["text"]  # the test reads the sample's files itself
    lines = ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases)
    OUT.write_text('{"cases": [\n' + lines + "\n]}\n")
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
