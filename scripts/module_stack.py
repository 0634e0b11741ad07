#!/usr/bin/env python3
"""The crate's top-level modules as a stack: each module with the modules it imports (`crate::`
paths outside `#[cfg(test)]`), printed bottom-up by floor. Exits 1, naming the circle, when two
modules reach each other, so CI keeps the data half a one-way stack (issue 22).
    python3 scripts/module_stack.py [SRC]"""
import os, re, sys
from collections import defaultdict

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
src = os.path.normpath(src)
tops = {f[:-3] if f.endswith(".rs") else f for f in os.listdir(src)} - {"lib", "main"}
imports = defaultdict(set)
for folder, _, files in os.walk(src):
    for name in files:
        if not name.endswith(".rs"):
            continue
        path = os.path.join(folder, name)
        top = os.path.relpath(path, src).split(os.sep)[0].removesuffix(".rs")
        if top in ("lib", "main"):
            continue
        text = open(path, encoding="utf-8").read().split("#[cfg(test)]")[0]
        used = set(re.findall(r"crate::([a-z_][a-z0-9_]*)", text))
        for group in re.findall(r"use crate::\{([^;]*)\};", text, re.S):
            used |= set(re.findall(r"(?:^|,)\s*([a-z_][a-z0-9_]*)", group))
        imports[top] |= {m for m in used if m in tops and m != top}

floor, placed, left = {}, set(), set(tops)
level = 0
while left:
    ready = {m for m in left if imports[m] <= placed}
    if not ready:
        # What is left holds a circle: walk imports until a module repeats.
        start = min(left)
        seen, m = [start], start
        while True:
            m = min(imports[m] & left)
            if m in seen:
                cycle = seen[seen.index(m):] + [m]
                print("import circle: " + " -> ".join(cycle))
                sys.exit(1)
            seen.append(m)
    for m in ready:
        floor[m] = level
    placed |= ready
    left -= ready
    level += 1

for m in sorted(tops, key=lambda m: (floor[m], m)):
    below = ", ".join(sorted(imports[m])) or "-"
    print(f"{floor[m]:>2}  {m:<10} imports {below}")
print(f"{len(tops)} modules on {level} floors, no import circle")
