#!/usr/bin/env python3
"""word_text.py SEED WORDS OUT - a fixed English-like text for the CLI tests (not the repository's docs,
which change): WORDS words drawn by a seeded generator from a small vocabulary, a full stop every so often."""
import random, sys

seed, n, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(seed)
words = ("the lizard sat on a warm stone and watched the slow river turn under an old bridge while green "
         "insects hid in dry sand near the bright morning sun").split()
text = [rng.choice(words) + ("." if rng.random() < 0.08 else "") for _ in range(n)]
open(out, "w").write(" ".join(text) + ".\n")
