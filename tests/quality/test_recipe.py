#!/usr/bin/env python3
"""test_recipe.py [RECIPE] - what can be checked of the teacher recipe without torch (ctest
quality.recipe): the quality scripts compile; the passkey wording of train_teacher.py equals
`lizard eval --passkey`'s (runtime/cli/eval_passkey.c); every passkey training document, built with a
stand-in tokenizer (one token per word or space), fits its length with the instruction, the needle and
the question whole."""
import os, py_compile, random, re, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
recipe = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "teacher-recipe", "train_teacher.py")
with tempfile.TemporaryDirectory() as tmp:
    for path in (recipe, os.path.join(HERE, "check_teacher.py")):
        py_compile.compile(path, cfile=os.path.join(tmp, "x.pyc"), doraise=True)

c = open(os.path.join(ROOT, "runtime", "cli", "eval_passkey.c")).read()
def c_string(name):
    body = re.search(r"static const char %s\[\] = ((?:\"[^\"]*\"\s*)+);" % name, c).group(1)
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', body)).encode().decode("unicode_escape")
src = open(recipe).read()
ns = {"random": random}
exec(src[src.index("INTRO = ("):src.index("def batch(ids, B, L, pk):")], ns)  # the passkey part alone
assert (ns["INTRO"], ns["FILL"], ns["QUESTION"]) == (c_string("intro"), c_string("filler"), c_string("question")), \
    "the recipe's passkey wording differs from eval_passkey.c's"
needle_c = re.search(r'"(The pass key is %d[^"]*)"', c).group(1).replace("%d", "{key}")
assert 'needle = f"' + needle_c + '"' in src, "the recipe's needle differs from eval_passkey.c's"


class Encoding:
    def __init__(self, ids):
        self.ids = ids


class WordTokenizer:  # about as many tokens per sentence as a 4,096-id BPE
    def encode(self, text, add_special_tokens=True):
        return Encoding(re.findall(r"\S+|\s", text))


ns.update(tok=WordTokenizer(), bos="<bos>", train_docs=["word " * 6000, "a short document"], random=random)
random.seed(7)
for n_tokens in (150, 300, 700, 1024):
    for _ in range(40):
        doc = ns["passkey_doc"](n_tokens)
        text = "".join(doc[1:])
        key = re.search(r"The pass key is (\d{5})\.", text)
        assert doc[0] == "<bos>" and len(doc) <= n_tokens - 1, (n_tokens, len(doc))
        assert text.startswith(ns["INTRO"]) and key and f"{key[1]} is the pass key." in text and \
            text.endswith(ns["QUESTION"] + f" {key[1]}."), (n_tokens, text[:120], text[-120:])
print("test_recipe: ok")
