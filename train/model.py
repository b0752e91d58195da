"""DeepSeek-V3 in PyTorch, as its Hugging Face checkpoint defines it: MLA with q_lora,
YaRN rope (interleaved pairs), a dense first layer then MoE layers (sigmoid scores,
e_score_correction_bias, group-limited top-k, a shared expert). Parameter names are the
checkpoint's tensor names, so export is a rename-free dump.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def yarn_mscale(factor, mscale):
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def rope_inv_freq(cfg):
    """Per-pair angular frequency (dim/2 values) and the cos/sin magnitude."""
    dim, theta = cfg["qk_rope_head_dim"], cfg["rope_theta"]
    inv = [1.0 / theta ** (2 * i / dim) for i in range(dim // 2)]
    y = cfg.get("rope_scaling")
    if not y:
        return torch.tensor(inv, dtype=torch.float64), 1.0

    def corr(rot):
        return dim * math.log(y["original_max_position_embeddings"] / (rot * 2 * math.pi)) / (
            2 * math.log(theta))

    low = max(math.floor(corr(y["beta_fast"])), 0)
    high = min(math.ceil(corr(y["beta_slow"])), dim - 1)
    if low == high:
        high += 0.001
    out = []
    for i, f in enumerate(inv):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        keep = 1.0 - ramp
        out.append(f / y["factor"] * (1 - keep) + f * keep)
    mag = yarn_mscale(y["factor"], y["mscale"]) / yarn_mscale(y["factor"], y["mscale_all_dim"])
    return torch.tensor(out, dtype=torch.float64), mag


def softmax_scale(cfg):
    s = 1.0 / math.sqrt(cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"])
    y = cfg.get("rope_scaling")
    if y:
        m = yarn_mscale(y["factor"], y["mscale_all_dim"])
        s *= m * m
    return s


def apply_rope(x, cos, sin):
    """Rotates consecutive pairs (x[2i], x[2i+1]); x [..., S, H?, dim], cos/sin [S, dim/2]."""
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * xf).to(x.dtype)


class Mlp(nn.Module):
    def __init__(self, d, width):
        super().__init__()
        self.gate_proj = nn.Linear(d, width, bias=False)
        self.up_proj = nn.Linear(d, width, bias=False)
        self.down_proj = nn.Linear(width, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Gate(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.weight = nn.Parameter(torch.empty(cfg["n_routed_experts"], cfg["hidden_size"]))
        self.register_buffer("e_score_correction_bias", torch.zeros(cfg["n_routed_experts"]))

    def forward(self, x):
        c = self.cfg
        E, G, k = c["n_routed_experts"], c["n_group"], c["num_experts_per_tok"]
        scores = torch.sigmoid(F.linear(x.float(), self.weight.float()))  # [T, E]
        choice = scores.detach() + self.e_score_correction_bias
        group = choice.view(-1, G, E // G).topk(2, dim=-1).values.sum(-1)  # [T, G]
        keep_groups = group.topk(c["topk_group"], dim=-1).indices
        mask = torch.zeros_like(group).scatter_(1, keep_groups, 1.0)
        mask = mask.unsqueeze(-1).expand(-1, G, E // G).reshape(-1, E)
        choice = choice.masked_fill(mask == 0, float("-inf"))
        idx = choice.topk(k, dim=-1).indices  # [T, k]
        w = scores.gather(1, idx)
        if c["norm_topk_prob"] and k > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return idx, w * c["routed_scaling_factor"]


class Moe(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["hidden_size"]
        self.cfg = cfg
        self.gate = Gate(cfg)
        self.experts = nn.ModuleList(
            [Mlp(d, cfg["moe_intermediate_size"]) for _ in range(cfg["n_routed_experts"])])
        self.shared_experts = Mlp(d, cfg["n_shared_experts"] * cfg["moe_intermediate_size"])
        self.last_load = None

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        idx, w = self.gate(x)
        out = self.shared_experts(x)
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=len(self.experts))
        self.last_load = counts.detach()
        token_of = order // idx.shape[1]
        weight_of = w.reshape(-1)[order]
        start = 0
        for e, n in enumerate(counts.tolist()):
            if n == 0:
                continue
            rows = token_of[start:start + n]
            y = self.experts[e](x[rows]) * weight_of[start:start + n, None].to(x.dtype)
            out = out.index_add(0, rows, y.to(out.dtype))
            start += n
        return out.reshape(shape)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, H = cfg["hidden_size"], cfg["num_attention_heads"]
        self.cfg = cfg
        self.H, self.dn, self.dr, self.dv = H, cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        self.dc = cfg["kv_lora_rank"]
        self.q_a_proj = nn.Linear(d, cfg["q_lora_rank"], bias=False)
        self.q_a_layernorm = RMSNorm(cfg["q_lora_rank"], cfg["rms_norm_eps"])
        self.q_b_proj = nn.Linear(cfg["q_lora_rank"], H * (self.dn + self.dr), bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(d, self.dc + self.dr, bias=False)
        self.kv_a_layernorm = RMSNorm(self.dc, cfg["rms_norm_eps"])
        self.kv_b_proj = nn.Linear(self.dc, H * (self.dn + self.dv), bias=False)
        self.o_proj = nn.Linear(H * self.dv, d, bias=False)
        self.scale = softmax_scale(cfg)

    def forward(self, x, cos, sin, mask):
        B, S, _ = x.shape
        H, dn, dr, dv = self.H, self.dn, self.dr, self.dv
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(B, S, H, dn + dr)
        q_nope, q_pe = q[..., :dn], q[..., dn:]
        kv = self.kv_a_proj_with_mqa(x)
        c_kv, k_pe = kv[..., :self.dc], kv[..., self.dc:]
        kvb = self.kv_b_proj(self.kv_a_layernorm(c_kv)).view(B, S, H, dn + dv)
        k_nope, v = kvb[..., :dn], kvb[..., dn:]
        q_pe = apply_rope(q_pe, cos[:, None, :], sin[:, None, :])
        k_pe = apply_rope(k_pe, cos, sin)  # [B, S, dr]: one rope key for all heads
        qh = torch.cat((q_nope, q_pe), -1).transpose(1, 2)  # [B, H, S, dn+dr]
        kh = torch.cat((k_nope, k_pe[:, :, None, :].expand(B, S, H, dr)), -1).transpose(1, 2)
        att = torch.matmul(qh, kh.transpose(-1, -2)) * self.scale
        att = att.masked_fill(mask, float("-inf"))
        att = torch.softmax(att.float(), dim=-1).to(v.dtype)
        o = torch.matmul(att, v.transpose(1, 2))  # [B, H, S, dv]
        return self.o_proj(o.transpose(1, 2).reshape(B, S, H * dv))


class Layer(nn.Module):
    def __init__(self, cfg, i):
        super().__init__()
        d = cfg["hidden_size"]
        self.input_layernorm = RMSNorm(d, cfg["rms_norm_eps"])
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(d, cfg["rms_norm_eps"])
        if i >= cfg["first_k_dense_replace"] and i % cfg["moe_layer_freq"] == 0:
            self.mlp = Moe(cfg)
        else:
            self.mlp = Mlp(d, cfg["intermediate_size"])

    def forward(self, h, cos, sin, mask):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class SharedHead(nn.Module):
    """V3's shared_head: the MTP layer's final norm; its head is the main lm_head
    (shared in training, written as a copy)."""

    def __init__(self, cfg):
        super().__init__()
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class MtpLayer(Layer):
    """DeepSeek-V3's multi-token-prediction module (one depth), as vLLM's deepseek_mtp.py
    computes it: at position i, from the main model's final hidden state h_i (after
    model.norm) and the embedding e of the NEXT token t_{i+1} (zero at position 0),
        x = eh_proj(cat(enorm(e), hnorm(h_i)));  y = block(x)  (a MoE decoder layer)
        logits_i = lm_head(shared_head.norm(y)), predicting t_{i+2}.
    The embedding and the head are the main model's (shared); export writes copies."""

    def __init__(self, cfg):
        super().__init__(cfg, cfg["num_hidden_layers"])
        d = cfg["hidden_size"]
        self.enorm = RMSNorm(d, cfg["rms_norm_eps"])
        self.hnorm = RMSNorm(d, cfg["rms_norm_eps"])
        self.eh_proj = nn.Linear(2 * d, d, bias=False)
        self.shared_head = SharedHead(cfg)


class Inner(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([Layer(cfg, i) for i in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class DeepseekV3(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Inner(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        inv, mag = rope_inv_freq(cfg)
        self.register_buffer("inv_freq", inv, persistent=False)
        self.rope_magnitude = mag
        self.mtp = MtpLayer(cfg) if cfg.get("num_nextn_predict_layers", 0) else None

    def init_weights(self, gen):
        L = self.cfg["num_hidden_layers"]
        for name, p in self.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                nn.init.ones_(p)
            elif name.endswith("embed_tokens.weight"):
                with torch.no_grad():
                    p.normal_(0, 1.0, generator=gen)
            else:
                std = 1.0 / math.sqrt(p.shape[1])
                if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                    std /= math.sqrt(2 * L)
                with torch.no_grad():
                    p.normal_(0, std, generator=gen)

    def rope(self, S, offset=0):
        pos = torch.arange(offset, offset + S, dtype=torch.float64)
        ang = pos[:, None] * self.inv_freq[None, :]
        return ((torch.cos(ang) * self.rope_magnitude).float(),
                (torch.sin(ang) * self.rope_magnitude).float())

    def forward(self, ids, next_ids=None):
        """Main logits [B, S, V]; with next_ids ([B, S]: the token after each position,
        t_{i+1}) also the MTP layer's logits [B, S, V] (position i predicts t_{i+2})."""
        B, S = ids.shape
        cos, sin = self.rope(S)
        mask = torch.ones(S, S, dtype=torch.bool).triu(1)
        h = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            h = layer(h, cos, sin, mask)
        h = self.model.norm(h)
        logits = self.lm_head(h)
        if next_ids is None:
            return logits
        return logits, self.mtp_logits(h, next_ids, cos, sin, mask)

    def mtp_logits(self, h, next_ids, cos, sin, mask):
        """h: the main model's final hidden states after model.norm [B, S, d]."""
        m = self.mtp
        e = self.model.embed_tokens(next_ids)
        e = torch.cat((torch.zeros_like(e[:, :1]), e[:, 1:]), 1)  # vLLM: zero at position 0
        x = m.eh_proj(torch.cat((m.enorm(e), m.hnorm(h)), -1))
        y = m(x, cos, sin, mask)
        return self.lm_head(m.shared_head.norm(y))

    def moe_layers(self):
        layers = list(self.model.layers) + ([self.mtp] if self.mtp is not None else [])
        return [l.mlp for l in layers if isinstance(l.mlp, Moe)]
