"""Trains the embedded default model (DeepSeek-V3 architecture) on arithmetic word
problems, on CPU, deterministically for a seed, and writes the checkpoint.

    /usr/bin/python3 train/train.py --out models/default --steps 2000

Writes: OUT/config.json, model.safetensors (bf16), tokenizer.json,
tokenizer_config.json, generation_config.json, reference.json (golden logits and
greedy continuations), OUT-fp8/ (the same weights as F8_E4M3 with 128x128
weight_scale_inv, and its own reference.json), and a training log.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data as D  # noqa: E402
import model as M  # noqa: E402
import tokenizer as T  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASK_DIR = os.path.join(ROOT, "tasks", "arith")


def model_config(vocab_size, args):
    d = args.hidden
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": vocab_size,
        "hidden_size": d,
        "intermediate_size": args.ffn,
        "moe_intermediate_size": args.moe_ffn,
        "num_hidden_layers": args.layers,
        "num_attention_heads": args.heads,
        "num_key_value_heads": args.heads,
        "q_lora_rank": args.q_lora,
        "kv_lora_rank": args.kv_lora,
        "qk_nope_head_dim": args.nope,
        "qk_rope_head_dim": args.rope,
        "v_head_dim": args.nope,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "n_group": 4,
        "topk_group": 2,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": 163840,
        # DeepSeek-V3's own YaRN settings: 4096 original positions stretched 40x.
        "rope_scaling": {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                         "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "hidden_act": "silu",
        "attention_bias": False,
        "torch_dtype": "bfloat16",
    }


# ---- Task files -------------------------------------------------------------------------

def write_task(seed, n_test, n_fewshot):
    """tasks/arith/{test,fewshot}.jsonl (gsm8k fields question/answer), from their own seed."""
    rng = random.Random(seed)
    seen, test, fewshot = set(), [], []
    while len(fewshot) < n_fewshot:
        p = D.make_problem(rng, n_ops=1 + len(fewshot) % 2)
        if p.question not in seen:
            seen.add(p.question)
            fewshot.append(p)
    while len(test) < n_test:
        p = D.make_problem(rng)
        if p.question not in seen:
            seen.add(p.question)
            test.append(p)
    os.makedirs(TASK_DIR, exist_ok=True)
    for name, items in (("test.jsonl", test), ("fewshot.jsonl", fewshot)):
        with open(os.path.join(TASK_DIR, name), "w") as f:
            for p in items:
                f.write(json.dumps({"question": p.question, "answer": p.answer_text()}) + "\n")
    return test, fewshot, seen


def write_heldout(seed, n, exclude):
    """tasks/arith/test_heldout_names.jsonl: problems whose names, items, containers and
    friends are data.HELDOUT_* words only (never drawn in training)."""
    rng = random.Random(seed)
    pools = D.Pools(heldout=True)
    seen, out = set(exclude), []
    while len(out) < n:
        p = D.make_problem(rng, pools=pools)
        if p.question not in seen:
            seen.add(p.question)
            out.append(p)
    with open(os.path.join(TASK_DIR, "test_heldout_names.jsonl"), "w") as f:
        for p in out:
            f.write(json.dumps({"question": p.question, "answer": p.answer_text()}) + "\n")
    return out


def fewshot_prefix(fewshot):
    return "".join(D.problem_text(p) + "\n\n" for p in fewshot)


# ---- Batches ------------------------------------------------------------------------------

class Batcher:
    """Each step: a number of few-shot examples k drawn uniformly from 0..max_shots, and
    sequences of k+1 problems (about `problems` problems in all): raw problems joined by
    a blank line (the few-shot layout, after a BOS half the time), or a chat of k+1
    user/assistant turns. Names, items, containers and friends come from large pools
    (data.Pools). Loss only on what the model must produce: from the newline before
    "Answer:" (raw) or the assistant's text (chat) through the token after the final
    number."""

    def __init__(self, tok, seed, problems, max_shots, chat_share, exclude, drill_share=0.0):
        self.tok, self.rng = tok, random.Random(seed)
        self.drill_share = drill_share
        self.problems, self.max_shots, self.chat_share = problems, max_shots, chat_share
        self.exclude = exclude
        self.pools = D.Pools()
        self.nl2 = tok.encode("\n\n")

    def problem(self):
        while True:
            p = D.make_problem(self.rng, pools=self.pools)
            if p.question not in self.exclude:
                if self.drill_share and self.rng.random() < self.drill_share:
                    return D.drill(p)
                return p

    def sequence(self, n):
        ids, mask = [], []
        chat = self.rng.random() < self.chat_share
        if chat or self.rng.random() < 0.5:
            ids, mask = [0], [0]
        for _ in range(n):
            p = self.problem()
            if chat:
                q = ("Question: " if self.rng.random() < 0.7 else "") + p.question
                a_ids = self.tok.encode("Answer: " + p.answer_text()) + [1]
                q_ids = [3] + self.tok.encode(q) + [4]
            else:
                q_ids = (self.nl2 if len(ids) > 1 else []) + self.tok.encode("Question: " + p.question)
                a_ids = self.tok.encode("\nAnswer: " + p.answer_text())
            mask += [0] * len(q_ids) + [1] * len(a_ids)
            ids += q_ids + a_ids
        if not chat:
            ids.append(1)  # EOS after the last problem
            mask.append(1)
        return ids, mask

    def next(self):
        k = self.rng.randint(0, self.max_shots)
        n_seq = max(1, round(self.problems / (k + 1)))
        seqs = [self.sequence(k + 1) for _ in range(n_seq)]
        L = max(len(s) for s, _ in seqs)
        x = torch.full((n_seq, L), 2, dtype=torch.long)
        m = torch.zeros((n_seq, L), dtype=torch.bool)
        for i, (s, k_) in enumerate(seqs):
            x[i, :len(s)] = torch.tensor(s)
            m[i, :len(k_)] = torch.tensor(k_, dtype=torch.bool)
        # Raw problems: the blank line that follows an answer is also a target.
        nl2 = self.nl2[0]
        m |= (x == nl2) & torch.roll(m, 1, dims=1)
        return x, m


# ---- Evaluation ----------------------------------------------------------------------------

def autocast(args):
    """bf16 autocast (--dtype bf16) or a no-op context (fp32 training)."""
    import contextlib
    if args.dtype == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def teacher_forced_exact(model, tok, problems, prefix, args):
    """Share of problems whose every answer token (the working, '#### N' and the blank
    line after it) is the argmax given the gold prefix: exactly the problems greedy
    decoding answers in full."""
    model.eval()
    nl2 = tok.encode("\n\n")
    seqs = []
    for p in problems:
        prompt = tok.encode(prefix + "Question: " + p.question + "\nAnswer:")
        ans = tok.encode(" " + p.answer_text()) + nl2
        seqs.append((prompt, ans))
    ok = 0
    with torch.no_grad():
        for i in range(0, len(seqs), 32):
            chunk = seqs[i:i + 32]
            L = max(len(a) + len(b) for a, b in chunk)
            x = torch.full((len(chunk), L), 2, dtype=torch.long)
            for j, (a, b) in enumerate(chunk):
                x[j, :len(a) + len(b)] = torch.tensor(a + b)
            with autocast(args):
                pred = model(x).argmax(-1)
            for j, (a, b) in enumerate(chunk):
                got = pred[j, len(a) - 1:len(a) + len(b) - 1].tolist()
                ok += got == b
    model.train()
    return ok / len(seqs)


def greedy(model, ids, max_new, stop_ids):
    """Greedy continuation and each step's logits (no cache: recomputes the prefix)."""
    out, logits = [], []
    with torch.no_grad():
        cur = list(ids)
        for _ in range(max_new):
            lg = model(torch.tensor([cur]))[0, -1].float()
            t = int(lg.argmax())
            out.append(t)
            logits.append(lg)
            if t in stop_ids:
                break
            cur.append(t)
    return out, logits


# ---- Training ------------------------------------------------------------------------------

def train(args):
    D.LIMITS.update(mul_max=args.mul_max, div_max=args.div_max)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    test, fewshot, exclude = write_task(args.task_seed, args.n_test, args.n_fewshot)
    heldout = write_heldout(args.task_seed + 1, args.n_heldout, exclude)
    # The tokenizer: BPE merges from a corpus of the task's text (its own seed).
    rng = random.Random(args.seed + 1)
    corpus = []
    for _ in range(20000):
        p = D.make_problem(rng)
        corpus += [D.problem_text(p), p.question]
        if args.drill_share:
            corpus += [D.problem_text(D.drill(p)), D.drill(p).question]
    corpus += ["\n\n".join(corpus[:3]), T.BOS + T.USER + "Question: x" + T.ASSISTANT + "y" + T.EOS]
    tok = T.train_bpe(corpus)
    cfg = model_config(tok.size, args)
    cfg["num_nextn_predict_layers"] = 1
    model = M.DeepseekV3(cfg)
    gen = torch.Generator().manual_seed(args.seed)
    model.init_weights(gen)
    if args.init_from:
        # Warm start: the main model's weights from an earlier export (args.init_from, read
        # back in float32); the MTP block starts as a copy of the last main layer, its
        # enorm/hnorm/eh_proj/shared_head as initialised above.
        import load
        prev, prev_cfg = load.load_model(args.init_from)
        for key in ("hidden_size", "intermediate_size", "moe_intermediate_size",
                    "num_hidden_layers", "vocab_size", "kv_lora_rank", "q_lora_rank"):
            assert prev_cfg[key] == cfg[key], key
        psd = {k: v for k, v in prev.state_dict().items() if not k.startswith("mtp.")}
        missing = model.load_state_dict(psd, strict=False).missing_keys
        assert all(k.startswith("mtp.") for k in missing), missing
        last = prev.model.layers[cfg["num_hidden_layers"] - 1].state_dict()
        mtp_sd = model.mtp.state_dict()
        with torch.no_grad():
            for k, v in last.items():
                mtp_sd[k].copy_(v)
    n_params = sum(p.numel() for p in model.parameters())
    log = open(args.log, "w") if args.log else None

    def say(msg):
        print(msg, flush=True)
        if log:
            log.write(msg + "\n")
            log.flush()

    say(f"# {' '.join(sys.argv)}")
    say(f"params {n_params} vocab {tok.size} threads {args.threads} dtype {args.dtype} "
        f"torch {torch.__version__}")
    groups = []
    for mtp in (False, True):
        named = [(n, p) for n, p in model.named_parameters() if n.startswith("mtp.") == mtp]
        mult = args.mtp_lr_mult if mtp else 1.0
        groups += [{"params": [p for n, p in named if p.dim() >= 2 and "embed" not in n],
                    "weight_decay": args.wd, "lr_mult": mult},
                   {"params": [p for n, p in named if not (p.dim() >= 2 and "embed" not in n)],
                    "weight_decay": 0.0, "lr_mult": mult}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.98), eps=1e-8)
    batcher = Batcher(tok, args.seed + 2, args.problems, args.max_shots, args.chat_share,
                      exclude, args.drill_share)
    prefix = fewshot_prefix(fewshot[:args.shots])
    eval_shots = [int(v) for v in args.eval_shots.split(",")]
    t0 = time.time()
    moe = model.moe_layers()
    loss_avg = None
    for step in range(1, args.steps + 1):
        if step <= args.warmup:
            lr = args.lr * step / args.warmup
        else:
            prog = (step - args.warmup) / max(1, args.steps - args.warmup)
            if args.time_budget:  # the schedule runs on whichever ends first
                if time.time() - t0 >= args.time_budget:
                    say(f"time budget of {args.time_budget:.0f}s spent before step {step}")
                    break
                prog = max(prog, (time.time() - t0) / args.time_budget)
            prog = min(prog, 1.0)
            lr = args.lr * (args.min_lr + (1 - args.min_lr) * 0.5 * (1 + math.cos(math.pi * prog)))
        for g in opt.param_groups:
            g["lr"] = lr * g["lr_mult"]
        x, m = batcher.next()
        with autocast(args):
            logits, mtp = model(x[:, :-1], next_ids=x[:, 1:])
        target = x[:, 1:].masked_fill(~m[:, 1:], -100)
        loss_main = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                    target.reshape(-1), ignore_index=-100)
        # MTP: position i predicts t_{i+2}, where t_{i+2} exists and the main loss is taken.
        mtp_target = x[:, 2:].masked_fill(~(m[:, 1:-1] & m[:, 2:]), -100)
        loss_mtp = F.cross_entropy(mtp[:, :-1].float().reshape(-1, mtp.shape[-1]),
                                   mtp_target.reshape(-1), ignore_index=-100)
        loss = loss_main + args.mtp_weight * loss_mtp
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        # DeepSeek-V3's auxiliary-loss-free balancing: nudge each expert's bias
        # toward the mean load.
        with torch.no_grad():
            for layer in moe:
                load = layer.last_load.float()
                layer.gate.e_score_correction_bias += args.bias_rate * torch.sign(load.mean() - load)
        cur = (loss_main.item(), loss_mtp.item())
        loss_avg = cur if loss_avg is None else tuple(0.95 * a + 0.05 * c for a, c in zip(loss_avg, cur))
        if step % args.log_every == 0:
            say(f"step {step} loss {loss_avg[0]:.4f} mtp {loss_avg[1]:.4f} lr {lr:.2e} "
                f"tokens {x.numel()} elapsed {time.time() - t0:.0f}s")
        if args.eval_every and (step % args.eval_every == 0 or step == args.steps):
            accs = []
            for name, probs in (("test", test), ("heldout", heldout)):
                for k in eval_shots:
                    acc = teacher_forced_exact(model, tok, probs[:args.eval_n],
                                               fewshot_prefix(fewshot[:k]), args)
                    accs.append(f"{name}/{k} {acc:.3f}")
            say(f"eval step {step} exact {' '.join(accs)} (n={args.eval_n}, teacher-forced) "
                f"elapsed {time.time() - t0:.0f}s")
        if args.out and args.export_every and step % args.export_every == 0 and step < args.steps:
            # A checkpoint of the run so far (overwritten by the final one).
            import export
            # Weights only: the golden reference (float32 greedy continuations, slow on
            # this BLAS) is written for the final export, or afterwards by
            # `export.py --reference DIR` for a checkpoint that is to be kept.
            export.write_all(model, tok, cfg, args.out, prefix, test, say, reference=False)
            say(f"exported step {step} elapsed {time.time() - t0:.0f}s")
    else:
        step += 1
    say(f"trained {step - 1} steps in {time.time() - t0:.0f}s")
    if step - 1 < args.steps and args.eval_every:
        accs = []
        for name, probs in (("test", test), ("heldout", heldout)):
            for k in eval_shots:
                acc = teacher_forced_exact(model, tok, probs[:args.eval_n], fewshot_prefix(fewshot[:k]), args)
                accs.append(f"{name}/{k} {acc:.3f}")
        say(f"eval step {step - 1} exact {' '.join(accs)} (n={args.eval_n}, teacher-forced) "
            f"elapsed {time.time() - t0:.0f}s")
    return model, tok, cfg, test, fewshot, say


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--task-seed", type=int, default=20261201)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="bf16",
                    help="training arithmetic: float32, or bf16 autocast (the export is bf16 either way)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--problems", type=int, default=27,
                    help="problems per step (the batch holds round(problems / (k+1)) sequences of k+1)")
    ap.add_argument("--max-shots", type=int, default=8,
                    help="few-shot examples per sequence: uniform in 0..max-shots")
    ap.add_argument("--init-from", default=None,
                    help="an exported model directory to start the main model from (warm start)")
    ap.add_argument("--time-budget", type=float, default=0,
                    help="seconds: the lr schedule runs on max(step, time) progress and stops at 1")
    ap.add_argument("--mtp-lr-mult", type=float, default=1.0,
                    help="the MTP layer's learning rate relative to --lr")
    ap.add_argument("--mtp-weight", type=float, default=0.3, help="DeepSeek-V3's MTP lambda")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--wd", type=float, default=0.05)
    ap.add_argument("--bias-rate", type=float, default=1e-3)
    ap.add_argument("--chat-share", type=float, default=0.15)
    ap.add_argument("--mul-max", type=int, default=999, help="largest larger factor of a product")
    ap.add_argument("--div-max", type=int, default=999, help="largest quotient")
    ap.add_argument("--drill-share", type=float, default=0.0,
                    help="share of training problems asked as bare arithmetic (same working)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--moe-ffn", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--q-lora", type=int, default=96)
    ap.add_argument("--kv-lora", type=int, default=64)
    ap.add_argument("--nope", type=int, default=32)
    ap.add_argument("--rope", type=int, default=16)
    ap.add_argument("--n-test", type=int, default=600)
    ap.add_argument("--n-fewshot", type=int, default=8)
    ap.add_argument("--shots", type=int, default=2)
    ap.add_argument("--eval-n", type=int, default=200)
    ap.add_argument("--eval-shots", default="0,2,5")
    ap.add_argument("--n-heldout", type=int, default=500)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--log", default=None)
    ap.add_argument("--export-every", type=int, default=0)
    args = ap.parse_args()
    if args.out:
        args.out = os.path.abspath(args.out)
    model, tok, cfg, test, fewshot, say = train(args)
    if args.out:
        import export
        export.write_all(model, tok, cfg, args.out, fewshot_prefix(fewshot[:args.shots]), test, say)


if __name__ == "__main__":
    main()
