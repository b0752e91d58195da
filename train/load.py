"""Reads a checkpoint directory written by export.py back into the PyTorch model
(float32, dequantizing fp8 blocks), for checks against latte."""
import json
import os
import struct

import numpy as np
import torch

import export as E
import model as M


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        raw = data[a:b]
        if h["dtype"] == "BF16":
            t = torch.from_numpy(np.frombuffer(raw, np.int16).copy()).view(torch.bfloat16).float()
        elif h["dtype"] == "F32":
            t = torch.from_numpy(np.frombuffer(raw, np.float32).copy())
        elif h["dtype"] == "F8_E4M3":
            t = torch.from_numpy(np.frombuffer(raw, np.uint8).copy())
        else:
            raise ValueError(h["dtype"])
        out[name] = (h["dtype"], t.reshape(h["shape"]))
    return out


def load_model(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    m = M.DeepseekV3(cfg)
    tensors = read_safetensors(os.path.join(d, "model.safetensors"))
    sd = m.state_dict()
    with torch.no_grad():
        for name, (dtype, t) in tensors.items():
            if name.endswith("_scale_inv"):
                continue
            if dtype == "F8_E4M3":
                scale = tensors[name + "_scale_inv"][1].numpy()
                codes = t.numpy()
                deq = E.from_e4m3(codes)
                deq *= np.repeat(np.repeat(scale, E.BLOCK, 0), E.BLOCK, 1)[:codes.shape[0], :codes.shape[1]]
                t = torch.from_numpy(deq)
            target = E.model_name(name, cfg)
            if target is None:  # the MTP layer's copy of the embedding or lm_head
                continue
            sd[target].copy_(t)
    m.eval()
    return m, cfg
