#!/usr/bin/env python3
"""Few-shot greedy exact-match on tasks/arith through `latte generate` (one process per
problem; `latte eval` will replace this runner).

    python3 tools/eval_arith.py --model models/default [--mla-mode absorbed ...] [-j 4]

For each problem the prompt is the first --shots examples of fewshot.jsonl, each
"Question: ...\\nAnswer: ...\\n#### N" followed by a blank line, then
"Question: <question>\\nAnswer:"; latte generates greedily until a blank line, EOS or
--max-tokens, and the problem counts as correct when the number after the last "####"
equals the reference's. Prints one line per (model, mode): exact_match ± standard error.
"""
import argparse
import concurrent.futures
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def final_number(text):
    found = re.findall(r"####\s*(-?[0-9][0-9,]*)", text)
    return found[-1].replace(",", "") if found else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="append", required=True, help="model directory (repeatable)")
    ap.add_argument("--mla-mode", action="append", default=None,
                    help="absorbed, materialized, naive (repeatable; default: all three)")
    ap.add_argument("--latte", default=os.path.join(ROOT, "build", "latte"))
    ap.add_argument("--task", default=os.path.join(ROOT, "tasks", "arith"))
    ap.add_argument("--shots", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="first N problems only (0: all)")
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("-j", "--jobs", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="latte --threads per process")
    ap.add_argument("--json", default=None, help="append one JSON object per run to this file")
    ap.add_argument("--label", default=None, help="name shown instead of the model path")
    ap.add_argument("--patch-config", default=None,
                    help="JSON object merged into a copy of config.json (keys set to null are set to "
                         "null; a nested object replaces keys inside): runs a deliberately changed "
                         "model, e.g. '{\"rope_scaling\": {\"mscale\": 0, \"mscale_all_dim\": 0}}'")
    args = ap.parse_args()
    modes = args.mla_mode or ["absorbed", "materialized", "naive"]
    test = read_jsonl(os.path.join(args.task, "test.jsonl"))
    if args.limit:
        test = test[:args.limit]
    shots = read_jsonl(os.path.join(args.task, "fewshot.jsonl"))[:args.shots]
    prefix = "".join(f"Question: {s['question']}\nAnswer: {s['answer']}\n\n" for s in shots)

    tmp = None
    if args.patch_config:
        # A copy of each model directory: links to its files, a patched config.json.
        patch = json.loads(args.patch_config)
        tmp = tempfile.mkdtemp(prefix="latte-eval-")
        patched = []
        for i, model in enumerate(args.model):
            d = os.path.join(tmp, str(i))
            os.makedirs(d)
            for name in os.listdir(model):
                if name != "config.json":
                    os.symlink(os.path.abspath(os.path.join(model, name)), os.path.join(d, name))
            with open(os.path.join(model, "config.json")) as f:
                cfg = json.load(f)
            for k, v in patch.items():
                if isinstance(v, dict) and isinstance(cfg.get(k), dict):
                    cfg[k].update(v)
                else:
                    cfg[k] = v
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cfg, f, indent=2)
            patched.append(d)
        labels = [(args.label or os.path.relpath(m, ROOT)) + " patched " + args.patch_config for m in args.model]
        models = list(zip(patched, labels))
    else:
        models = [(m, args.label or os.path.relpath(m, ROOT)) for m in args.model]
    try:
        evaluate(args, modes, test, prefix, models)
    finally:
        if tmp:
            shutil.rmtree(tmp)


def run(args, prefix, model, mode, item):
    """(correct, generated text) for one problem through one `latte generate` process."""
    prompt = prefix + f"Question: {item['question']}\nAnswer:"
    cmd = [args.latte, "generate", "--model", model, "--prompt", prompt, "--temperature", "0",
           "--max-tokens", str(args.max_tokens), "--stop", "\n\n", "--mla-mode", mode,
           "--threads", str(args.threads), "--memory-gb", "0.5"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}...: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    got = final_number(r.stdout)
    return got is not None and got == final_number(item["answer"]), r.stdout


def evaluate(args, modes, test, prefix, models):
    for model, label in models:
        for mode in modes:
            with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                results = list(pool.map(lambda it: run(args, prefix, model, mode, it), test))
            n = len(results)
            k = sum(ok for ok, _ in results)
            p = k / n
            se = math.sqrt(p * (1 - p) / n)
            print(f"{label}\t{mode}\texact_match {p:.3f} ± {se:.3f}\t({k}/{n}, {args.shots}-shot, greedy)",
                  flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps({"model": label, "mla_mode": mode, "n": n, "correct": k,
                                        "exact_match": p, "stderr": se, "shots": args.shots,
                                        "wrong_examples": [o for ok, o in results if not ok][:3]}) + "\n")


if __name__ == "__main__":
    sys.exit(main())
