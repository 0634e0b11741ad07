#!/usr/bin/env python3
"""A labelled 3-class corpus of short texts whose labels are learnable but not trivially so,
written SORTED BY LABEL (as many real CSVs are), for benches/finetune.sh.

Each text mixes words of its topic with words of another topic and shared filler; 8% of the
labels are flipped, so the best possible accuracy is about 92%.
With UNEVEN=1 (benches/padding_free.sh) the lengths are heavy-tailed from 5 to 200 words
(log-normal, median about 27 words), as tweets and reviews mixed are.
Usage: finetune_corpus.py OUT.csv [ROWS]"""
import math, os
import csv, random, sys

TOPICS = {
    "sport": "match goal team coach season league striker keeper referee stadium penalty score fans trophy".split(),
    "tech": "software chip laptop battery update server code network screen cloud app device startup data".split(),
    "food": "recipe sauce bake flavour kitchen dinner spice dessert menu chef oven bread cheese soup".split(),
}
FILLER = ("the a this that was is really quite very today yesterday people everyone new old good bad "
          "week again still never always more less long short").split()

UNEVEN = os.environ.get("UNEVEN") == "1"

def text(rng, label):
    names = list(TOPICS)
    other = rng.choice([n for n in names if n != label])
    filler = rng.randint(4, 16)
    if UNEVEN:
        filler = max(0, min(200, round(math.exp(rng.gauss(3.3, 0.9)))) - 5)
    words = (rng.sample(TOPICS[label], rng.randint(2, 4)) + rng.sample(TOPICS[other], rng.randint(0, 1))
             + [rng.choice(FILLER) for _ in range(filler)])
    rng.shuffle(words)
    return " ".join(words).capitalize() + "."

def main():
    out, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 6000
    rng = random.Random(7)
    rows = []
    for i in range(n):
        label = list(TOPICS)[i * 3 // n]          # sorted: all sport, then tech, then food
        shown = label if rng.random() > 0.08 else rng.choice([t for t in TOPICS if t != label])
        rows.append((f"t{i:06d}", text(rng, label), shown))
    rows.sort(key=lambda r: list(TOPICS).index(r[2]))
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "text", "label"])
        w.writerows(rows)

main()
