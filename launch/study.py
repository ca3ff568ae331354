#!/usr/bin/env python3
"""study.py - the linearization study in one command (launch/study.sh runs it; method: docs/quality.md).

For a teacher folder, a training text and a held-out text: the teacher's scores, then for each
configuration of retained softmax layers (none; a quarter, evenly spaced; half, every other layer;
half, chosen by `lizard distill --retain-by error`) stage 1 (`lizard distill`), `lizard eval`,
stage 2 (`lizard finetune`, where the build has it), `lizard eval`. Writes into --results:
study.jsonl (one row per configuration and stage), study.md (the table), study-ppl.svg and
study-passkey.svg; --update-docs copies them into docs/quality.md and docs/img/.
Python standard library only."""
import argparse
import datetime
import json
import lzma
import os
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import study_report  # noqa: E402  (beside this file)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line naming the fault, exit 2 (the project's rule for bad input)
        sys.stderr.write(f"launch/study.sh: error: {message}\n")
        sys.exit(2)


def parse_args(argv):
    ap = Parser(prog="launch/study.sh", description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", required=True, help="teacher model folder (HF layout, no lizard block)")
    ap.add_argument("--train", required=True, help="training text (.txt, or .txt.xz decompressed first) for both stages")
    ap.add_argument("--valid", required=True, help="held-out text: perplexity only, never trained on")
    ap.add_argument("--results", required=True, help="folder for models, logs and the results (created)")
    ap.add_argument("--lizard", default=os.environ.get("LIZARD", ""), help="the lizard binary (default $LIZARD, "
                    "then build/lizard, build-cpu/lizard, then lizard on PATH)")
    ap.add_argument("--device", default="cuda", choices=["cpu", "cuda"], help="where everything runs (cuda)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"], help="eval's CUDA dtype (bf16)")
    ap.add_argument("--stage1-tokens", type=int, default=10_000_000, help="stage-1 training tokens (10M)")
    ap.add_argument("--stage2-tokens", type=int, default=10_000_000, help="stage-2 training tokens (10M)")
    ap.add_argument("--seq-len", type=int, default=1024, help="training sequence length, both stages (1024)")
    ap.add_argument("--batch", type=int, default=8, help="sequences per step, both stages (8)")
    ap.add_argument("--stage2-lr", type=float, default=5e-4, help="stage 2's peak learning rate (5e-4)")
    ap.add_argument("--configs", default="", help="only these configurations, comma-separated (default all: "
                    "lizard-0,hybrid-25,hybrid-50-alt,hybrid-50-err)")
    ap.add_argument("--parallel", type=int, default=4, help="configurations trained at once on the device (4): a "
                    "small teacher leaves most of a GPU idle, so they share it")
    ap.add_argument("--stage1-args", default="", help="more `lizard distill` flags, e.g. '--feature-dim 32 --lr 3e-2'")
    ap.add_argument("--stage2-args", default="", help="more `lizard finetune` flags")
    ap.add_argument("--stage1-from", default="", help="reuse the stage-1 models NAME-s1 of an earlier study's "
                    "models folder (a longer or different stage 2 on the same stage 1)")
    ap.add_argument("--stage2-device", choices=["cpu", "cuda"], help="where stage 2 runs (default: --device)")
    ap.add_argument("--ppl-contexts", default="256,1024,4096", help="perplexity window lengths (256,1024,4096)")
    ap.add_argument("--passkey-contexts", default="256,512,1024,2048,4096,8192", help="passkey contexts")
    ap.add_argument("--trials", type=int, default=5, help="passkey trials per context (5)")
    ap.add_argument("--valid-bytes", type=int, default=0, help="measure the first N bytes of --valid, cut at a "
                    "line end (0: all)")
    ap.add_argument("--seed", type=int, default=0, help="stage 1's seed and the passkey seed (0)")
    ap.add_argument("--label", default="", help="what this run is, printed above the table (e.g. 'smoke run')")
    ap.add_argument("--update-docs", action="store_true", help="write the table and plots into docs/quality.md "
                    "(between its study markers) and docs/img/")
    ap.add_argument("--docs", default=os.path.join(os.path.dirname(HERE), "docs"), help="the docs folder "
                    "--update-docs writes (the repository's)")
    a = ap.parse_args(argv)
    for flag in ("stage1_tokens", "stage2_tokens", "seq_len", "batch", "trials", "parallel"):
        if getattr(a, flag) <= 0:
            ap.error(f"--{flag.replace('_', '-')} must be positive")
    for path, flag in ((a.teacher, "--teacher"), (a.train, "--train"), (a.valid, "--valid")):
        if not os.path.exists(path):
            ap.error(f"{flag} {path}: not found")
    if not os.path.isfile(os.path.join(a.teacher, "config.json")):
        ap.error(f"--teacher {a.teacher}: no config.json")
    return a


def find_lizard(given):
    root = os.path.dirname(HERE)
    for path in [given] if given else [os.path.join(root, "build", "lizard"), os.path.join(root, "build-cpu", "lizard"),
                                       shutil.which("lizard") or ""]:
        if path and os.access(path, os.X_OK):
            return os.path.abspath(path)
    sys.stderr.write(f"launch/study.sh: error: --lizard {given or '(not given)'}: no lizard binary there "
                     "(give --lizard PATH or build one)\n")
    sys.exit(2)


def plain_text(src, dst, limit):
    """src (.xz or plain) as a plain file dst, cut to `limit` bytes at a line end when limit > 0."""
    opener = lzma.open if src.endswith(".xz") else open
    with opener(src, "rb") as f:
        data = f.read(limit + 1 if limit > 0 else -1)
    if 0 < limit < len(data):
        data = data[:data.rfind(b"\n", 0, limit) + 1 or limit]
    with open(dst, "wb") as f:
        f.write(data)
    return dst


class Study:
    def __init__(self, a, lizard):
        self.a, self.lizard = a, lizard
        self.res = os.path.abspath(a.results)
        for sub in ("models", "logs", "data"):
            os.makedirs(os.path.join(self.res, sub), exist_ok=True)
        self.rows_path = os.path.join(self.res, "study.jsonl")
        open(self.rows_path, "w").close()
        self.failed = 0
        self.lock = threading.Lock() # configurations run side by side: one writer of the rows at a time
        self.started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")

    def run(self, name, cmd):
        """Runs cmd with stdout and stderr in logs/NAME.{out,err}; (ok, seconds, stdout, last error line)."""
        t0 = time.time()
        with open(os.path.join(self.res, "logs", name + ".out"), "w") as out, \
                open(os.path.join(self.res, "logs", name + ".err"), "w") as err:
            rc = subprocess.run(cmd, stdout=out, stderr=err).returncode
        seconds = round(time.time() - t0, 2)
        stdout = open(os.path.join(self.res, "logs", name + ".out")).read()
        lines = [l for l in open(os.path.join(self.res, "logs", name + ".err")).read().splitlines() if l.strip()]
        why = "" if rc == 0 else (lines[-1] if lines else f"exit {rc}")
        print(f"study: {name}: {'done' if rc == 0 else 'FAILED: ' + why} ({seconds} s)", flush=True)
        return rc == 0, seconds, stdout, why

    def available(self, command):
        return subprocess.run([self.lizard, command, "--help"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0

    def emit(self, row):
        """Appends the row and redraws the table and plots, so that a run cut short leaves its results."""
        with self.lock:
            with open(self.rows_path, "a") as f:
                f.write(json.dumps(row) + "\n")
            self.failed += row["status"] not in ("ok", "not available")
            study_report.write_all(self.rows(), self.res, self.about())

    def rows(self):
        return [json.loads(l) for l in open(self.rows_path)]

    def ordered(self):
        """The rows in the table's order (configurations ran side by side), written back and redrawn."""
        names = ["teacher"] + [c[0] for c in self.configurations()]
        stages = ["teacher", "stage1", "stage2"]
        rows = sorted(self.rows(), key=lambda r: (names.index(r["config"]), stages.index(r["stage"])))
        with open(self.rows_path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        study_report.write_all(rows, self.res, self.about())
        return rows

    def evaluate(self, name, model, row, train_seconds):
        a = self.a
        cmd = [self.lizard, "eval", "--model", model, "--text", self.valid, "--ppl-context", a.ppl_contexts,
               "--passkey", "--contexts", a.passkey_contexts, "--trials", str(a.trials), "--seed", str(a.seed),
               "--json", "--allow-long-context", "--device", a.device]
        if a.device == "cuda":
            cmd += ["--dtype", a.dtype]
        ok, seconds, out, why = self.run(name + "-eval", cmd)
        row.update(seconds={"train": train_seconds, "eval": seconds}, model=os.path.relpath(model, self.res))
        if not ok:
            return self.emit(dict(row, status="failed: " + why))
        ev = json.loads(out)
        row.update(status="ok", softmax_layers=ev["softmax_layers"],
                   retained=len(ev["softmax_layers"]) / self.n_layers,
                   ppl={str(p["context"]): p["ppl"] for p in ev["perplexity"]},
                   ppl_tokens={str(p["context"]): p["tokens"] for p in ev["perplexity"]},
                   passkey={str(p["context"]): p["accuracy"] for p in ev["passkey"]}, passkey_trials=a.trials)
        self.emit(row)

    def configurations(self):
        """(name, target fraction, selection, distill flags)"""
        n = self.n_layers
        spaced = lambda k: ",".join(str(i * n // k) for i in range(k)) if k else "none"  # noqa: E731
        quarter, half = round(0.25 * n), round(0.5 * n)
        return [("lizard-0", 0.0, "none", ["--softmax-layers", "none"]),
                ("hybrid-25", 0.25, "evenly spaced", ["--softmax-layers", spaced(quarter)]),
                ("hybrid-50-alt", 0.5, "every other", ["--softmax-layers", spaced(half)]),
                ("hybrid-50-err", 0.5, "by error", ["--retain-fraction", "0.5", "--retain-by", "error"])]

    def main(self):
        a = self.a
        self.n_layers = json.load(open(os.path.join(a.teacher, "config.json")))["num_hidden_layers"]
        self.valid = plain_text(a.valid, os.path.join(self.res, "data", "valid.txt"), a.valid_bytes)
        train = a.train if not a.train.endswith(".xz") else plain_text(a.train, os.path.join(self.res, "data",
                                                                                              "train.txt"), 0)
        by_error = "--retain-by" in subprocess.run([self.lizard, "distill", "--help"], capture_output=True,
                                                   text=True).stdout
        stage2 = self.available("finetune")
        print(f"study: {self.n_layers} layers; --retain-by error {'available' if by_error else 'not available'}; "
              f"stage 2 (lizard finetune) {'available' if stage2 else 'not available'}", flush=True)
        base = {"teacher": os.path.abspath(a.teacher), "device": a.device}
        self.evaluate("teacher", os.path.abspath(a.teacher),
                      dict(base, config="teacher", target=1.0, selection="all", stage="teacher", tokens=0), 0)
        configs = self.configurations()
        if a.configs:
            wanted = a.configs.split(",")
            unknown = [w for w in wanted if w not in [c[0] for c in configs]]
            if unknown:
                sys.stderr.write(f"launch/study.sh: error: --configs: unknown configuration {unknown[0]}\n")
                return 2
            configs = [c for c in configs if c[0] in wanted]
        for first in range(0, len(configs), a.parallel):
            threads = [threading.Thread(target=self.configuration, args=(c, train, by_error, stage2, base))
                       for c in configs[first:first + a.parallel]]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        rows = self.ordered()
        if a.update_docs:
            study_report.update_docs(rows, self.res, a.docs, self.about())
        print(f"study: {len(rows)} rows in {self.rows_path}; {self.failed} failed", flush=True)
        return 1 if self.failed else 0

    def configuration(self, config, train, by_error, stage2, base):
        """One configuration: stage 1, its evaluation, stage 2, its evaluation."""
        a = self.a
        name, target, selection, flags = config
        row = dict(base, config=name, target=target, selection=selection)
        if selection == "by error" and not by_error:
            for stage in ("stage1", "stage2"):
                self.emit(dict(row, stage=stage, status="not available", why="lizard distill has no --retain-by"))
            return
        if a.stage1_from:
            s1 = os.path.join(os.path.abspath(a.stage1_from), name + "-s1")
            ok, secs, why = os.path.isfile(os.path.join(s1, "config.json")), 0, "no stage-1 model in " + s1
        else:
            s1 = os.path.join(self.res, "models", name + "-s1")
            shutil.rmtree(s1, ignore_errors=True)
            ok, secs, _, why = self.run(name + "-stage1", [
                self.lizard, "distill", "--teacher", a.teacher, "--data", train, "--out", s1, "--tokens",
                str(a.stage1_tokens), "--seq-len", str(a.seq_len), "--batch", str(a.batch), "--seed", str(a.seed),
                "--device", a.device, "--log", os.path.join(self.res, "logs", name + "-stage1.jsonl")] + flags +
                a.stage1_args.split())
        row1 = dict(row, stage="stage1", tokens=a.stage1_tokens)
        if ok:
            self.evaluate(name + "-stage1", s1, row1, secs)
        else:
            self.emit(dict(row1, status="failed: " + why))
        row2 = dict(row, stage="stage2", tokens=a.stage2_tokens)
        if not stage2:
            return self.emit(dict(row2, status="not available", why="this lizard has no finetune command"))
        if not ok:
            return self.emit(dict(row2, status="failed: no stage-1 model"))
        s2 = os.path.join(self.res, "models", name + "-s2")
        shutil.rmtree(s2, ignore_errors=True)
        ok, secs, _, why = self.run(name + "-stage2", [
            self.lizard, "finetune", "--model", s1, "--data", train, "--out", s2, "--tokens", str(a.stage2_tokens),
            "--seq-len", str(a.seq_len), "--batch", str(a.batch), "--lr", str(a.stage2_lr),
            "--device", a.stage2_device or a.device,
            "--log", os.path.join(self.res, "logs", name + "-stage2.jsonl")] + a.stage2_args.split())
        if ok:
            self.evaluate(name + "-stage2", s2, row2, secs)
        else:
            self.emit(dict(row2, status="failed: " + why))

    def about(self):
        a = self.a
        return (f"{a.label + ': ' if a.label else ''}teacher `{os.path.basename(os.path.normpath(a.teacher))}` "
                f"({self.n_layers} layers), {a.device}, {self.started}; training text `{os.path.basename(a.train)}`, "
                f"held-out `{os.path.basename(a.valid)}`" +
                (f" (first {a.valid_bytes} bytes)" if a.valid_bytes else "") +
                f"; stage 1 {a.stage1_tokens} tokens, stage 2 {a.stage2_tokens} tokens (lr {a.stage2_lr}), "
                f"{a.batch} sequences of {a.seq_len} a step; {a.parallel} configurations at once; "
                f"passkey {a.trials} trials per context" +
                (f"; stage 1 flags `{a.stage1_args}`" if a.stage1_args else "") +
                (f"; stage-1 models of `{a.stage1_from}`" if a.stage1_from else "") +
                (f"; stage 2 flags `{a.stage2_args}`" if a.stage2_args else ""))


if __name__ == "__main__":
    args = parse_args(sys.argv[1:])
    sys.exit(Study(args, find_lizard(args.lizard)).main())
