#!/usr/bin/env python3
"""Reads a bertpipe run's TensorBoard events with TensorBoard's own reader and checks they hold
exactly metrics.jsonl's scalars (train/<key> for log lines, eval/<name> for eval_<name>).
Usage: check_tensorboard.py OUTPUT_DIR   (needs the `tensorboard` package)"""
import glob, json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

out = sys.argv[1]
files = glob.glob(f"{out}/runs/events.out.tfevents.*")
assert len(files) == 1, files
acc = EventAccumulator(files[0], size_guidance={"scalars": 0})
acc.Reload()
want = {}
for line in open(f"{out}/metrics.jsonl"):
    r = json.loads(line)
    is_eval = any(k.startswith("eval_") for k in r)
    for k, v in r.items():
        if k == "step" or (k == "epoch" and is_eval) or not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        tag = f"eval/{k[5:]}" if k.startswith("eval_") else f"train/{k}"
        want.setdefault(tag, []).append((r["step"], float(v)))
tags = set(acc.Tags()["scalars"])
assert tags == set(want), f"tags differ: {sorted(tags ^ set(want))}"
for tag, points in want.items():
    got = [(e.step, e.value) for e in acc.Scalars(tag)]
    assert [s for s, _ in got] == [s for s, _ in points], tag
    for (_, a), (_, b) in zip(got, points):
        assert abs(a - b) <= 1e-6 * max(1.0, abs(b)), (tag, a, b)
print(f"tensorboard reads {len(tags)} scalar tags, {sum(map(len, want.values()))} points, equal to metrics.jsonl")
