#!/usr/bin/env python3
"""Greedy tokens from the same prompt ids in three places: latte on a Hugging Face model
directory, latte on GGUF files written from it (by llama.cpp's own convert_hf_to_gguf.py
and llama-quantize: ../shared/peers/llamacpp/convert.sh), and llama.cpp on those files
(through node-llama-cpp, tests/llamacpp: `npm ci --omit=optional --ignore-scripts` there).

    bench/gguf-same-tokens.py LATTE MODEL_DIR STEPS FILE.gguf...

The prompts are three questions tokenized by the directory's tokenizer, after id 0 (BOS):
every engine reads the same ids (a GGUF's own pre-tokenizer may split text otherwise).
Prints each prompt's tokens and, per file, whether latte and llama.cpp give the same; at
the step where llama.cpp parts from the directory, and at the step where latte and
llama.cpp part from each other on the file, llama.cpp's top-3 log-probabilities there, to
tell a near tie from a real difference. Exit status 0 when every run equals the directory's.
"""
import json
import os
import subprocess
import sys

PROMPTS = [
    "Question: Tom has 25 apples. He buys 17 more apples. How many apples does Tom have now?\nAnswer:",
    "Question: Zoe has 9 books. She loses 4 of them. How many books does she have left?\nAnswer:",
    "Question: A baker makes 12 cakes each day. How many cakes does he make in 5 days?\nAnswer:",
]
NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "llamacpp")


def latte_greedy(latte, model, prompt, steps):
    out = subprocess.run([latte, "generate", "--model", model, "--prompt-ids", ",".join(map(str, prompt)),
                          "--max-tokens", str(steps)], capture_output=True, text=True, check=True)
    return [int(x) for x in out.stdout.strip().splitlines()[-1].split(",")]


def llama_greedy(model, prompt, steps):
    request = json.dumps({"model": model, "prompt": prompt, "steps": steps, "top": 3})
    out = subprocess.run(["node", "llamacpp_reference.mjs"], cwd=NODE_DIR, input=request + "\n",
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[0])["steps"]


def main():
    latte, model_dir, steps, ggufs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    texts = "".join(json.dumps(t) + "\n" for t in PROMPTS)
    tokenized = subprocess.run([latte, "tokenize", "--model", model_dir], input=texts, capture_output=True,
                               text=True, check=True).stdout.splitlines()
    same = True
    for i, line in enumerate(tokenized):
        prompt = [0] + json.loads(line)
        want = latte_greedy(latte, model_dir, prompt, steps)
        print(f"prompt {i} ({len(prompt)} ids), latte on the directory: {want}")
        for gguf in ggufs:
            got = latte_greedy(latte, gguf, prompt, steps)
            llama = llama_greedy(gguf, prompt, steps)
            llama_ids = [s["token"] for s in llama]
            note = ""
            if llama_ids != want:
                at = next(k for k in range(steps) if llama_ids[k] != want[k])
                top = ", ".join(f"{t} {lp:.3f}" for t, lp in llama[at]["top"])
                note = f" (parts at step {at}: llama.cpp's top 3 there: {top})"
            if llama_ids != got:  # the two engines on the same file, after the same tokens
                at = next(k for k in range(steps) if llama_ids[k] != got[k])
                top = ", ".join(f"{t} {lp:.3f}" for t, lp in llama[at]["top"])
                note += f" (latte parts from llama.cpp at step {at} with {got[at]}: llama.cpp's top 3 there: {top})"
            print(f"  {os.path.basename(gguf)}: latte {'same' if got == want else got}, "
                  f"llama.cpp {'same' if llama_ids == want else llama_ids}{note}")
            same &= got == want and llama_ids == want
    print("all the same" if same else "not all the same")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
