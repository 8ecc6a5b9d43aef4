"""Reference PyTorch implementations of tinygml's two toy decoder families.

Float32, no biases (except the delta layers' per-head dt_bias), plain code.
The math is specified precisely in models/README.md; this file is its
executable form. Layout conventions: activations are [B, T, C] (PyTorch
row-major), i.e. ne = {C, T, B} in tinygml.

  llama  : tok_embd -> N x [x += Attn(RMSNorm(x)); x += SwiGLU(RMSNorm(x))]
           -> RMSNorm -> output head
  hybrid : same skeleton; layer i is an attention layer when
           (i + 1) % full_attention_interval == 0, otherwise a
           gated-delta-rule layer.
"""
import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    arch: str = "llama"          # "llama" | "hybrid"
    vocab: int = 258
    n_ctx: int = 128             # context_length written to GGUF
    n_embd: int = 64
    n_layer: int = 4
    n_head: int = 4              # attention query heads
    n_head_kv: int = 2           # attention key/value heads (GQA), divides n_head
    n_ff: int = 192              # SwiGLU hidden size
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    # hybrid only
    full_attention_interval: int = 4
    ssm_hk: int = 2              # delta-layer q/k heads
    ssm_hv: int = 4              # delta-layer value heads (multiple of ssm_hk)
    ssm_dk: int = 16             # q/k head dim
    ssm_dv: int = 16             # value head dim

    @property
    def head_dim(self):
        return self.n_embd // self.n_head

    def is_attention_layer(self, i):
        if self.arch == "llama":
            return True
        return (i + 1) % self.full_attention_interval == 0

    def to_dict(self):
        return asdict(self)


# ----------------------------------------------------------------------------
# building blocks

class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * w   (mean over the last dim)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_cos_sin(T, n_rot, base, device, offset=0):
    """cos, sin tables [T, n_rot/2] (float32) for positions offset..offset+T-1:
    angle[p, i] = p * base^(-2i/n_rot), computed in float64 then rounded to float32."""
    i = torch.arange(n_rot // 2, dtype=torch.float64)
    inv_freq = base ** (-2.0 * i / n_rot)
    p = torch.arange(offset, offset + T, dtype=torch.float64)
    ang = p[:, None] * inv_freq[None, :]
    return ang.cos().float().to(device), ang.sin().float().to(device)


def rope_interleaved(x, cos, sin):
    """x: [B, T, H, D] with D == n_rot; cos, sin: [T, D/2].
    Pair i is dims (2i, 2i+1):  (e, o) -> (e*c - o*s, e*s + o*c)."""
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    xe, xo = x[..., 0::2], x[..., 1::2]
    return torch.stack((xe * c - xo * s, xe * s + xo * c), dim=-1).flatten(-2)


def l2norm(x, eps=1e-6):
    """x / sqrt(sum(x^2) + eps) over the last dim."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def gated_delta_rule(q, k, v, g, beta, scale):
    """GATED_DELTA recurrence with LOG gate, state starting at zero (plain loop over T).
    q, k: [B, T, Hk, Dk]; v: [B, T, Hv, Dv]; g, beta: [B, T, Hv].
    Value head h reads q/k head h // (Hv // Hk). Per head, S is Dk x Dv:
        S = exp(g_t) * S
        u = beta_t * (v_t - S^T k_t)
        S = S + k_t u^T
        o_t = scale * S^T q_t
    Returns o: [B, T, Hv, Dv]."""
    B, T, Hk, Dk = q.shape
    Hv, Dv = v.shape[2], v.shape[3]
    rep = Hv // Hk
    q = q.repeat_interleave(rep, dim=2)
    k = k.repeat_interleave(rep, dim=2)
    S = q.new_zeros(B, Hv, Dk, Dv)
    out = []
    for t in range(T):
        S = S * g[:, t].exp()[:, :, None, None]
        kt = k[:, t]                                            # [B, Hv, Dk]
        Stk = (S * kt[..., None]).sum(-2)                        # S^T k: [B, Hv, Dv]
        u = beta[:, t][..., None] * (v[:, t] - Stk)              # [B, Hv, Dv]
        S = S + kt[..., None] * u[..., None, :]
        out.append(scale * (S * q[:, t][..., None]).sum(-2))     # S^T q: [B, Hv, Dv]
    return torch.stack(out, dim=1)


def gated_delta_rule_parallel(q, k, v, g, beta, scale):
    """Same result as gated_delta_rule (zero initial state), computed for the whole
    sequence at once; used only to speed up training (the loop is the reference).

    With G_t = sum_{s<=t} g_s and D[t,s] = exp(G_t - G_s) for s <= t, unrolling the
    recurrence gives S_t = sum_{s<=t} D[t,s] k_s u_s^T and
        u_t = beta_t * (v_t - sum_{s<t} D[t,s] (k_t . k_s) u_s)
    i.e. (I + diag(beta) L) U = diag(beta) V with L strictly lower triangular,
    L[t,s] = D[t,s] (k_t . k_s); then o_t = scale * sum_{s<=t} D[t,s] (q_t . k_s) u_s."""
    B, T, Hk, Dk = q.shape
    Hv = v.shape[2]
    rep = Hv // Hk
    q = q.repeat_interleave(rep, dim=2).transpose(1, 2)            # [B, Hv, T, Dk]
    k = k.repeat_interleave(rep, dim=2).transpose(1, 2)
    v = v.transpose(1, 2)                                          # [B, Hv, T, Dv]
    G = g.transpose(1, 2).cumsum(-1)                               # [B, Hv, T]
    lower = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    diff = (G[..., :, None] - G[..., None, :]).masked_fill(~lower, float("-inf"))
    Dm = diff.exp()                                                # [B, Hv, T, T], 0 above diagonal
    b = beta.transpose(1, 2)[..., None]                            # [B, Hv, T, 1]
    strict = torch.ones(T, T, dtype=torch.bool, device=q.device).tril(-1)
    Lm = (Dm * (k @ k.transpose(-1, -2))).masked_fill(~strict, 0.0)
    A = torch.eye(T, device=q.device, dtype=q.dtype) + b * Lm
    U = torch.linalg.solve_triangular(A, b * v, upper=False, unitriangular=True)
    o = scale * ((Dm * (q @ k.transpose(-1, -2))) @ U)             # [B, Hv, T, Dv]
    return o.transpose(1, 2)


# ----------------------------------------------------------------------------
# layers

class Attention(nn.Module):
    """Causal softmax attention with interleaved RoPE on q and k, GQA."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        D = cfg.head_dim
        self.wq = nn.Linear(cfg.n_embd, cfg.n_head * D, bias=False)
        self.wk = nn.Linear(cfg.n_embd, cfg.n_head_kv * D, bias=False)
        self.wv = nn.Linear(cfg.n_embd, cfg.n_head_kv * D, bias=False)
        self.wo = nn.Linear(cfg.n_head * D, cfg.n_embd, bias=False)

    def forward(self, x, cos, sin):
        cfg = self.cfg
        B, T, _ = x.shape
        H, Hkv, D = cfg.n_head, cfg.n_head_kv, cfg.head_dim
        q = rope_interleaved(self.wq(x).view(B, T, H, D), cos, sin)
        k = rope_interleaved(self.wk(x).view(B, T, Hkv, D), cos, sin)
        v = self.wv(x).view(B, T, Hkv, D)
        rep = H // Hkv                      # query head h uses kv head h // rep
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)   # [B, H, T, D]
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D))
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        o = scores.softmax(-1) @ v                                           # [B, H, T, D]
        return self.wo(o.transpose(1, 2).reshape(B, T, H * D))


class DeltaNet(nn.Module):
    """Gated-delta-rule token mixer (Qwen3-Next in spirit, without conv / output gate)."""

    parallel = False  # training speed-up: closed-form evaluation (same math), see gated_delta_rule_parallel

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        C, Hk, Hv, Dk, Dv = cfg.n_embd, cfg.ssm_hk, cfg.ssm_hv, cfg.ssm_dk, cfg.ssm_dv
        assert Hv % Hk == 0
        self.wq = nn.Linear(C, Hk * Dk, bias=False)
        self.wk = nn.Linear(C, Hk * Dk, bias=False)
        self.wv = nn.Linear(C, Hv * Dv, bias=False)
        self.wb = nn.Linear(C, Hv, bias=False)      # beta projection  (ssm_beta)
        self.wa = nn.Linear(C, Hv, bias=False)      # gate projection  (ssm_alpha)
        self.A_log = nn.Parameter(torch.zeros(Hv))  # ssm_a
        self.dt_bias = nn.Parameter(torch.zeros(Hv))  # ssm_dt.bias
        self.wo = nn.Linear(Hv * Dv, C, bias=False)

    def forward(self, x):
        cfg = self.cfg
        B, T, _ = x.shape
        Hk, Hv, Dk, Dv = cfg.ssm_hk, cfg.ssm_hv, cfg.ssm_dk, cfg.ssm_dv
        q = l2norm(self.wq(x).view(B, T, Hk, Dk))
        k = l2norm(self.wk(x).view(B, T, Hk, Dk))
        v = self.wv(x).view(B, T, Hv, Dv)
        beta = torch.sigmoid(self.wb(x))                                    # [B, T, Hv]
        g = -self.A_log.exp() * F.softplus(self.wa(x) + self.dt_bias)       # [B, T, Hv]
        rule = gated_delta_rule_parallel if self.parallel else gated_delta_rule
        o = rule(q, k, v, g, beta, scale=1.0 / math.sqrt(Dk))               # [B, T, Hv, Dv]
        return self.wo(o.reshape(B, T, Hv * Dv))


class SwiGLU(nn.Module):
    """down( silu(gate x) * (up x) ),  silu(z) = z * sigmoid(z)."""

    def __init__(self, cfg):
        super().__init__()
        self.w_gate = nn.Linear(cfg.n_embd, cfg.n_ff, bias=False)
        self.w_up = nn.Linear(cfg.n_embd, cfg.n_ff, bias=False)
        self.w_down = nn.Linear(cfg.n_ff, cfg.n_embd, bias=False)

    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.is_attn = cfg.is_attention_layer(layer)
        self.attn_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.mixer = Attention(cfg) if self.is_attn else DeltaNet(cfg)
        self.ffn_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.ffn = SwiGLU(cfg)

    def forward(self, x, cos, sin):
        h = self.attn_norm(x)
        x = x + (self.mixer(h, cos, sin) if self.is_attn else self.mixer(h))
        return x + self.ffn(self.ffn_norm(x))


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.arch in ("llama", "hybrid")
        assert cfg.n_head % cfg.n_head_kv == 0 and cfg.head_dim % 2 == 0
        self.cfg = cfg
        self.tok_embd = nn.Embedding(cfg.vocab, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layer))
        self.output_norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.output = nn.Linear(cfg.n_embd, cfg.vocab, bias=False)
        self.reset_parameters()

    def reset_parameters(self):
        for name, p in self.named_parameters():
            if name.endswith("A_log"):
                # decay rates A in [1, 16] (as in Mamba2 / GDN init)
                nn.init.uniform_(p, 1.0, 16.0)
                with torch.no_grad():
                    p.copy_(p.log())
            elif name.endswith("dt_bias"):
                # softplus(dt_bias) = dt, dt log-uniform in [1e-3, 1e-1]
                with torch.no_grad():
                    dt = torch.exp(torch.empty_like(p).uniform_(math.log(1e-3), math.log(1e-1)))
                    p.copy_(dt + torch.log(-torch.expm1(-dt)))
            elif name.endswith("norm.weight"):
                nn.init.ones_(p)
            elif p.dim() == 2:
                # std 1/sqrt(fan_in); the embedding table (fan_in = one-hot) gets std 1
                fan_in = 1 if name == "tok_embd.weight" else p.shape[1]
                nn.init.normal_(p, std=fan_in ** -0.5)
        # residual output projections scaled down with depth
        for b in self.blocks:
            for w in (b.mixer.wo.weight, b.ffn.w_down.weight):
                nn.init.normal_(w, std=(w.shape[1] * 2 * self.cfg.n_layer) ** -0.5)

    def forward(self, tokens, return_hidden=False):
        """tokens: [B, T] int64, positions 0..T-1. Returns logits [B, T, vocab]
        (and, with return_hidden, the residual stream after each block)."""
        B, T = tokens.shape
        cos, sin = rope_cos_sin(T, self.cfg.head_dim, self.cfg.rope_base, tokens.device)
        x = self.tok_embd(tokens)
        hidden = []
        for b in self.blocks:
            x = b(x, cos, sin)
            hidden.append(x)
        logits = self.output(self.output_norm(x))
        return (logits, hidden) if return_hidden else logits


def default_config(arch):
    if arch == "llama":
        return Config(arch="llama")
    if arch == "hybrid":
        return Config(arch="hybrid")
    raise ValueError(arch)


@torch.no_grad()
def greedy_answers(model, prompts, max_new=4, batch_size=256):
    """Greedy-decode each prompt (str, without BOS) until EOS or max_new tokens.
    Returns the decoded answers (str; None when no EOS was produced).
    Prompts of equal token length are decoded together (no padding needed)."""
    from task import BOS, EOS, encode
    device = next(model.parameters()).device
    enc = [[BOS] + encode(p) for p in prompts]
    results = [None] * len(prompts)
    by_len = {}
    for i, e in enumerate(enc):
        by_len.setdefault(len(e), []).append(i)
    for _, idx_all in sorted(by_len.items()):
        for s in range(0, len(idx_all), batch_size):
            idx = idx_all[s:s + batch_size]
            toks = torch.tensor([enc[i] for i in idx], dtype=torch.long, device=device)
            gen = []
            for _ in range(max_new):
                nxt = model(toks)[:, -1].argmax(-1)
                gen.append(nxt)
                toks = torch.cat([toks, nxt[:, None]], dim=1)
            gen = torch.stack(gen, 1).tolist()
            for j, i in enumerate(idx):
                g = gen[j]
                if EOS in g:
                    g = g[:g.index(EOS)]
                    results[i] = bytes(t if t < 256 else 0 for t in g).decode("latin-1")
    return results
