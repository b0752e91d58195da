"""Writes a trained model as a Hugging Face DeepSeek-V3 checkpoint directory (bf16),
its fp8 twin (F8_E4M3 weights with 128x128 weight_scale_inv blocks, as the V3 release
stores them), and for each a reference.json of golden logits and greedy continuations
computed by PyTorch with exactly the weights written."""
import copy
import json
import os
import struct

import numpy as np
import torch

import tokenizer as T

FP8_MAX = 448.0
BLOCK = 128


# ---- safetensors ----------------------------------------------------------------------

def write_safetensors(path, tensors):
    """tensors: [(name, dtype string, shape, raw bytes)] in the order written."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)


def bf16_round(t):
    """Round-to-nearest-even to bf16, returned as float32 (what the file will hold)."""
    return t.float().to(torch.bfloat16).float()


def bf16_bytes(t):
    return t.float().to(torch.bfloat16).view(torch.int16).numpy().tobytes()


# ---- e4m3 ---------------------------------------------------------------------------------

def _e4m3_table():
    """Value of every finite e4m3fn code 0..126 (positive half; 0x7f is NaN)."""
    vals = []
    for code in range(0x7f):
        e, m = code >> 3, code & 7
        vals.append(m / 8 * 2 ** -6 if e == 0 else (1 + m / 8) * 2 ** (e - 7))
    return np.array(vals, dtype=np.float64)


E4M3 = _e4m3_table()


def to_e4m3(x):
    """float32 array (|x| <= 448) -> uint8 codes, round to nearest, ties to even code."""
    a = np.abs(x.astype(np.float64))
    hi = np.clip(np.searchsorted(E4M3, a), 1, len(E4M3) - 1)
    lo = hi - 1
    dlo, dhi = a - E4M3[lo], E4M3[hi] - a
    code = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = np.where(a >= E4M3[-1], len(E4M3) - 1, code)
    return (code | np.where(x < 0, 0x80, 0)).astype(np.uint8)


def from_e4m3(codes):
    v = E4M3[codes & 0x7f]
    return np.where(codes & 0x80, -v, v).astype(np.float32)


def quantize_fp8(w):
    """w [rows, cols] float32 -> (codes uint8, scale_inv [ceil(rows/128), ceil(cols/128)] f32,
    dequantized float32)."""
    rows, cols = w.shape
    br, bc = -(-rows // BLOCK), -(-cols // BLOCK)
    codes = np.zeros((rows, cols), np.uint8)
    scale = np.zeros((br, bc), np.float32)
    deq = np.zeros((rows, cols), np.float32)
    for i in range(br):
        for j in range(bc):
            blk = w[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK]
            amax = float(np.abs(blk).max())
            s = np.float32(amax / FP8_MAX if amax > 0 else 1.0)
            c = to_e4m3((blk / s).astype(np.float32))
            codes[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = c
            scale[i, j] = s
            deq[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = from_e4m3(c) * s
    return codes, scale, deq


def is_fp8_linear(name, t):
    """The V3 release's fp8 tensors: every 2-D weight inside a layer except the router
    (and, in the MTP layer, the copies of the embedding and of lm_head, kept as the main
    model keeps them)."""
    return (t.dim() == 2 and name.startswith("model.layers.") and not name.endswith("mlp.gate.weight")
            and not name.endswith(".embed_tokens.weight") and not name.endswith(".shared_head.head.weight"))


# ---- state in checkpoint order ------------------------------------------------------------

def mtp_prefix(cfg):
    return f"model.layers.{cfg['num_hidden_layers']}."


def checkpoint_state(model):
    """{checkpoint name: float32 tensor} with the router's e_score_correction_bias
    included. The MTP layer (model.mtp) is written as layer num_hidden_layers with V3's
    names, with copies of the shared embedding and lm_head (embed_tokens,
    shared_head.head)."""
    sd = model.state_dict()
    out = {}
    pre = mtp_prefix(model.cfg)
    for k, v in sd.items():
        if k == "inv_freq":
            continue
        out[pre + k[4:] if k.startswith("mtp.") else k] = v.detach().float().clone()
    if model.mtp is not None:
        out[pre + "embed_tokens.weight"] = out["model.embed_tokens.weight"].clone()
        out[pre + "shared_head.head.weight"] = out["lm_head.weight"].clone()
    return out


def model_name(name, cfg):
    """The PyTorch parameter a checkpoint tensor loads into (None: a copy of a shared one)."""
    pre = mtp_prefix(cfg)
    if not name.startswith(pre):
        return name
    rest = name[len(pre):]
    if rest in ("embed_tokens.weight", "shared_head.head.weight"):
        return None
    return "mtp." + rest


def export_dir(model, tok, cfg, out, fp8):
    os.makedirs(out, exist_ok=True)
    state = checkpoint_state(model)
    tensors, exact = [], {}
    for name in sorted(state):
        t = state[name]
        if name.endswith("e_score_correction_bias"):
            tensors.append((name, "F32", t.shape, t.numpy().astype(np.float32).tobytes()))
            exact[name] = t
        elif fp8 and is_fp8_linear(name, t):
            codes, scale, deq = quantize_fp8(bf16_round(t).numpy())
            tensors.append((name, "F8_E4M3", t.shape, codes.tobytes()))
            tensors.append((name + "_scale_inv", "F32", scale.shape, scale.tobytes()))
            exact[name] = torch.from_numpy(deq)
        else:
            tensors.append((name, "BF16", t.shape, bf16_bytes(t)))
            exact[name] = bf16_round(t)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    c = dict(cfg)
    if fp8:
        c["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                    "quant_method": "fp8", "weight_block_size": [BLOCK, BLOCK]}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 0, "eos_token_id": 1, "do_sample": False}, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok.to_json(), f, indent=2, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(T.tokenizer_config(cfg["max_position_embeddings"]), f, indent=2, ensure_ascii=False)
        f.write("\n")
    # The model with exactly the weights written, in float32, for the reference.
    ref = copy.deepcopy(model).float()
    with torch.no_grad():
        sd = ref.state_dict()
        for name, t in exact.items():
            target = model_name(name, cfg)
            if target is None:  # the MTP layer's copy of the embedding or of lm_head
                shared = "model.embed_tokens.weight" if name.endswith("embed_tokens.weight") else "lm_head.weight"
                assert torch.equal(t, exact[shared]), name
                continue
            sd[target].copy_(t)
    ref.eval()
    return ref


# ---- golden reference ---------------------------------------------------------------------

TOPK = 8


def reference_prompts(prefix, test, tok):
    """Raw few-shot prompts, raw zero-shot prompts and chat prompts (ids)."""
    prompts = []
    for p in test[:4]:
        text = prefix + "Question: " + p.question + "\nAnswer:"
        prompts.append(("fewshot", text, tok.encode(text)))
    for p in test[4:7]:
        text = "Question: " + p.question
        prompts.append(("raw", text, tok.encode(text)))
    for p in test[7:9]:
        text = "Question: " + p.question  # the user turn of the chat template
        prompts.append(("chat", text, [0, 3] + tok.encode(text) + [4]))
    return prompts


def write_reference(ref, tok, prefix, test, out, max_new=128):
    stop = {1, tok.encode("\n\n")[0]}
    items = []
    with torch.no_grad():
        for kind, text, ids in reference_prompts(prefix, test, tok):
            # Prompt logits: every position, top-k.
            lg = ref(torch.tensor([ids]))[0].float()
            top = lg.topk(TOPK, dim=-1)
            gen, glog = [], []
            cur = list(ids)
            for _ in range(max_new):
                last = ref(torch.tensor([cur]))[0, -1].float()
                t = int(last.argmax())
                gen.append(t)
                glog.append(last)
                if t in stop:
                    break
                cur.append(t)
            gtop = [g.topk(TOPK) for g in glog]
            items.append({
                "kind": kind,
                "prompt_text": text,
                "prompt_ids": ids,
                "prompt_top_ids": top.indices.tolist(),
                "prompt_top_logits": [[round(v, 5) for v in row] for row in top.values.tolist()],
                "greedy_ids": gen,
                "greedy_text": tok.decode(gen),
                "greedy_top_ids": [g.indices.tolist() for g in gtop],
                "greedy_top_logits": [[round(v, 5) for v in g.values.tolist()] for g in gtop],
            })
    doc = {"note": "PyTorch (train) float32 forward of the weights in this directory: "
                   "top-k logits at every prompt position and the greedy continuation "
                   "with its top-k logits at each step (stops at EOS or a blank line)",
           "top_k": TOPK, "items": items}
    if ref.mtp is not None:
        doc["mtp_note"] = (
            "The MTP layer (model.layers.N, N = num_hidden_layers; one depth, as vLLM's "
            "deepseek_mtp.py): one entry per item, same order. tokens: the item's prompt ids "
            "followed by its greedy continuation ids (N tokens). rows[i] (i = 0..N-2): top-k "
            "float32 MTP logits at position i, from h_i (the main model's final hidden state "
            "after model.norm, with causal attention over tokens 0..i) and the next token "
            "tokens[i+1] (its embedding zeroed at position 0): x = eh_proj(cat(enorm(e), "
            "hnorm(h_i))), y = the MTP decoder block (rope at position i, causal attention over "
            "the MTP stream 0..i), logits = shared_head.head(shared_head.norm(y)), predicting "
            "tokens[i+2]")
        doc["mtp"] = mtp_reference(ref, items)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(doc, f)
        f.write("\n")


def mtp_reference(ref, items):
    out = []
    with torch.no_grad():
        for it in items:
            toks = list(it["prompt_ids"]) + list(it["greedy_ids"])
            ids = torch.tensor([toks])
            _, mtp = ref(ids[:, :-1], next_ids=ids[:, 1:])
            top = mtp[0].float().topk(TOPK, dim=-1)
            out.append({"tokens": toks, "rows": [
                {"ids": i, "logits": [round(v, 5) for v in l]}
                for i, l in zip(top.indices.tolist(), top.values.tolist())]})
    return out


def write_all(model, tok, cfg, out, prefix, test, say, reference=True):
    for fp8, d in ((False, out), (True, out.rstrip("/") + "-fp8")):
        ref = export_dir(model, tok, cfg, d, fp8)
        if reference:
            write_reference(ref, tok, prefix, test, d)
        size = os.path.getsize(os.path.join(d, "model.safetensors"))
        say(f"wrote {d} ({size} bytes of weights{', fp8' if fp8 else ', bf16'})")


# ---- reference for an existing export -------------------------------------------------------

class _Question:
    def __init__(self, question):
        self.question = question


def reference_for(d, task_dir, shots=2):
    """Writes d/reference.json for a directory written earlier (a periodic checkpoint):
    the model read back from d's own files, the prompts from the task files."""
    import load
    ref, _ = load.load_model(d)
    with open(os.path.join(d, "tokenizer.json")) as f:
        tj = json.load(f)
    tok = T.Tokenizer(tj["model"]["vocab"], [tuple(m.split(" ")) for m in tj["model"]["merges"]])

    def read(name):
        with open(os.path.join(task_dir, name)) as f:
            return [json.loads(line) for line in f if line.strip()]
    prefix = "".join(f"Question: {s['question']}\nAnswer: {s['answer']}\n\n"
                     for s in read("fewshot.jsonl")[:shots])
    test = [_Question(t["question"]) for t in read("test.jsonl")]
    write_reference(ref, tok, prefix, test, d)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="writes reference.json for checkpoint directories")
    ap.add_argument("--reference", nargs="+", required=True, help="directories written by export")
    ap.add_argument("--task", default=os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "tasks", "arith"))
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    for d in a.reference:
        reference_for(d, a.task)
        print(f"wrote {d}/reference.json")
