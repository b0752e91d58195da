#!/usr/bin/env python3
"""fp8 vs bf16 KV cache: relative RMS of the logits, as docs/benchmarks.md reports it.

Runs `latte generate --prompt-ids ... --logits-out` twice on one model (--kv-cache-dtype
bf16, then fp8) with the same random prompt and greedy decoding, and compares the logits
rows both runs computed on the same tokens: every prompt row, and the decode rows up to
the first generated token where the two runs differ (after it they see different text).

    python3 bench/kv_fp8_logits.py --latte build/latte --model DIR [--prompt-len 512] [--gen 64]
"""
import argparse
import random
import subprocess
import sys
import tempfile

import numpy as np


def run(latte, model, ids, gen, dtype, out, extra):
    cmd = [latte, "generate", "--model", model, "--prompt-ids", ",".join(map(str, ids)),
           "--max-tokens", str(gen), "--kv-cache-dtype", dtype, "--logits-out", out] + extra
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd[:4])} ... failed: {done.stderr.strip()}")
    # generate --prompt-ids prints the generated ids, comma-separated, on stdout.
    return [int(t) for t in done.stdout.replace(",", " ").split()]


def rel_rms(a, b):
    return float(np.sqrt(np.sum((a - b) ** 2) / np.sum(b ** 2)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--latte", default="build/latte")
    p.add_argument("--model", required=True)
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--gen", type=int, default=64)
    p.add_argument("--vocab", type=int, required=True, help="config.json's vocab_size (prompt ids are drawn below it)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("extra", nargs="*", help="more latte generate flags (e.g. --mla-mode materialized)")
    a = p.parse_args()
    rng = random.Random(a.seed)
    ids = [rng.randrange(2, a.vocab) for _ in range(a.prompt_len)]
    with tempfile.TemporaryDirectory() as tmp:
        tok_bf16 = run(a.latte, a.model, ids, a.gen, "bf16", f"{tmp}/bf16.npy", a.extra)
        tok_fp8 = run(a.latte, a.model, ids, a.gen, "fp8", f"{tmp}/fp8.npy", a.extra)
        bf16 = np.load(f"{tmp}/bf16.npy").astype(np.float64)
        fp8 = np.load(f"{tmp}/fp8.npy").astype(np.float64)
    same = 0
    while same < min(len(tok_bf16), len(tok_fp8)) and tok_bf16[same] == tok_fp8[same]:
        same += 1
    rows = a.prompt_len + same  # rows [0, P + same) saw the same tokens
    rows = min(rows, bf16.shape[0], fp8.shape[0])
    prompt = rel_rms(fp8[: a.prompt_len], bf16[: a.prompt_len])
    decode = rel_rms(fp8[a.prompt_len : rows], bf16[a.prompt_len : rows]) if rows > a.prompt_len else float("nan")
    argmax = float(np.mean(np.argmax(fp8[:rows], axis=1) == np.argmax(bf16[:rows], axis=1)))
    print(f"model {a.model}: prompt {a.prompt_len}, greedy tokens equal for {same} of {len(tok_bf16)}")
    print(f"fp8 vs bf16 KV logits relative RMS: prompt rows {prompt:.2e}, decode rows {decode:.2e}; "
          f"argmax agreement {argmax:.3f} over {rows} rows")


if __name__ == "__main__":
    main()
