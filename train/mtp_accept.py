"""MTP top-1 acceptance of an exported model: the share of positions where the MTP
layer's top-1 at position i equals the main model's greedy token at position i+1 (the
draft a one-depth MTP speculative decoder would have accepted).

    /usr/bin/python3 train/mtp_accept.py models/default [--task tasks/arith/test_heldout_names.jsonl --n 100 --shots 2]

On the reference items (reference.json "mtp": prompt + the main model's greedy
continuation, positions whose next-next token is generated), and on task problems with
the gold answer as the continuation (teacher-forced: main argmax at i+1 vs MTP argmax at
i, over the answer's positions)."""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load  # noqa: E402
import tokenizer as T  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--task", action="append", default=[])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--shots", type=int, default=2)
    ap.add_argument("--fewshot", default=os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "tasks", "arith", "fewshot.jsonl"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    m, cfg = load.load_model(a.model)
    ref = json.load(open(os.path.join(a.model, "reference.json")))
    ok = tot = 0
    for item, mt in zip(ref["items"], ref["mtp"]):
        toks, n_prompt = mt["tokens"], len(item["prompt_ids"])
        for i, row in enumerate(mt["rows"]):
            if i + 2 >= n_prompt and i + 2 < len(toks):
                tot += 1
                ok += row["ids"][0] == toks[i + 2]
    print(f"{a.model}: reference items: MTP top-1 == main greedy next-next token at {ok}/{tot} = {ok / max(tot, 1):.3f}")
    tj = json.load(open(os.path.join(a.model, "tokenizer.json")))
    tok = T.Tokenizer(tj["model"]["vocab"], [tuple(x.split(" ")) for x in tj["model"]["merges"]])
    shots = [json.loads(line) for line in open(a.fewshot)][:a.shots]
    prefix = "".join(f"Question: {s['question']}\nAnswer: {s['answer']}\n\n" for s in shots)
    for task in a.task:
        probs = [json.loads(line) for line in open(task)][:a.n]
        ok = tot = 0
        with torch.no_grad():
            for p in probs:
                prompt = tok.encode(prefix + "Question: " + p["question"] + "\nAnswer:")
                toks = prompt + tok.encode(" " + p["answer"]) + tok.encode("\n\n")
                ids = torch.tensor([toks])
                main, mtp = m(ids[:, :-1], next_ids=ids[:, 1:])
                g, d = main[0].argmax(-1), mtp[0].argmax(-1)
                for i in range(len(prompt) - 2, len(toks) - 2):
                    tot += 1
                    ok += int(d[i]) == int(g[i + 1])
        print(f"{a.model}: {os.path.basename(task)} first {len(probs)}, {a.shots}-shot, gold answers: "
              f"MTP top-1 == main argmax at the next position {ok}/{tot} = {ok / max(tot, 1):.3f}")


if __name__ == "__main__":
    main()
