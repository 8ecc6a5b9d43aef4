"""Second, independent implementation of both families, written from models/README.md
in float64 numpy, decoding token by token with a KV cache and recurrent states
(the way the C++ engine runs). Checks the fixtures in tests/fixtures/.

    python models/train/numpy_ref.py

It reads only the GGUF file (tensor ne / keys as documented), never model.py, so
agreement shows that the README, the GGUF files and the fixtures describe the
same computation, and that token-by-token decoding with carried state matches
the full-sequence logits.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from check_reader import read_gguf  # noqa: E402
from make_fixtures import read_bin  # noqa: E402


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x) + eps) * w


def silu(z):
    return z / (1.0 + np.exp(-z))


def softplus(z):
    return np.log1p(np.exp(z)) if z < 20 else z


class NumpyModel:
    def __init__(self, path):
        kv, tensors, _ = read_gguf(path)
        self.arch = kv["general.architecture"][1]
        a = self.arch
        g = lambda k: kv[f"{a}.{k}"][1]  # noqa: E731
        self.C, self.L = g("embedding_length"), g("block_count")
        self.H, self.Hkv = g("attention.head_count"), g("attention.head_count_kv")
        self.D = self.C // self.H
        self.n_rot, self.base = g("rope.dimension_count"), float(g("rope.freq_base"))
        self.eps = float(g("attention.layer_norm_rms_epsilon"))
        self.interval = g("full_attention_interval") if a == "tghybrid" else 1
        if a == "tghybrid":
            self.Hk, self.Hv = g("ssm.head_count_k"), g("ssm.head_count_v")
            self.Dk, self.Dv = g("ssm.head_dim_k"), g("ssm.head_dim_v")
        # row-major arrays: a tensor with ne {in, out} is [out][in]
        self.t = {n: arr.astype(np.float64) for n, (ne, arr) in tensors.items()}

    def is_attn(self, il):
        return (il + 1) % self.interval == 0

    def rope(self, x, p):                     # x: [heads, D]
        y = x.copy()
        for i in range(self.n_rot // 2):
            th = p * self.base ** (-2.0 * i / self.n_rot)
            c, s = np.cos(th), np.sin(th)
            e, o = x[:, 2 * i], x[:, 2 * i + 1]
            y[:, 2 * i], y[:, 2 * i + 1] = e * c - o * s, e * s + o * c
        return y

    def reset(self):
        self.kcache = [[] for _ in range(self.L)]
        self.vcache = [[] for _ in range(self.L)]
        self.state = [np.zeros((self.Hv, self.Dk, self.Dv)) if not self.is_attn(il) else None
                      for il in range(self.L)] if self.arch == "tghybrid" else [None] * self.L
        self.pos = 0

    def step(self, tok):
        t, p = self.t, self.pos
        x = t["token_embd.weight"][tok].copy()
        for il in range(self.L):
            b = f"blk.{il}."
            h = rmsnorm(x, t[b + "attn_norm.weight"], self.eps)
            if self.is_attn(il):
                q = self.rope((t[b + "attn_q.weight"] @ h).reshape(self.H, self.D), p)
                k = self.rope((t[b + "attn_k.weight"] @ h).reshape(self.Hkv, self.D), p)
                v = (t[b + "attn_v.weight"] @ h).reshape(self.Hkv, self.D)
                self.kcache[il].append(k)
                self.vcache[il].append(v)
                K, V = np.stack(self.kcache[il]), np.stack(self.vcache[il])   # [p+1, Hkv, D]
                o = np.zeros((self.H, self.D))
                for hh in range(self.H):
                    gk = hh // (self.H // self.Hkv)
                    sc = K[:, gk] @ q[hh] / np.sqrt(self.D)
                    w = np.exp(sc - sc.max())
                    o[hh] = (w / w.sum()) @ V[:, gk]
                x = x + t[b + "attn_output.weight"] @ o.reshape(-1)
            else:
                q = (t[b + "ssm_q.weight"] @ h).reshape(self.Hk, self.Dk)
                k = (t[b + "ssm_k.weight"] @ h).reshape(self.Hk, self.Dk)
                v = (t[b + "ssm_v.weight"] @ h).reshape(self.Hv, self.Dv)
                q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6)
                k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
                beta = 1.0 / (1.0 + np.exp(-(t[b + "ssm_beta.weight"] @ h)))
                za = t[b + "ssm_alpha.weight"] @ h + t[b + "ssm_dt.bias"]
                g = -np.exp(t[b + "ssm_a"]) * np.array([softplus(z) for z in za])
                o = np.zeros((self.Hv, self.Dv))
                S = self.state[il]
                for hv in range(self.Hv):
                    hk = hv // (self.Hv // self.Hk)
                    S[hv] *= np.exp(g[hv])
                    u = beta[hv] * (v[hv] - S[hv].T @ k[hk])
                    S[hv] += np.outer(k[hk], u)
                    o[hv] = (S[hv].T @ q[hk]) / np.sqrt(self.Dk)
                x = x + t[b + "ssm_out.weight"] @ o.reshape(-1)
            h = rmsnorm(x, t[b + "ffn_norm.weight"], self.eps)
            x = x + t[b + "ffn_down.weight"] @ (silu(t[b + "ffn_gate.weight"] @ h) * (t[b + "ffn_up.weight"] @ h))
        self.pos += 1
        return t["output.weight"] @ rmsnorm(x, t["output_norm.weight"], self.eps)


def main():
    ok = True
    for name in ("llama-recall", "hybrid-recall"):
        m = NumpyModel(os.path.join(ROOT, "models", name + ".gguf"))
        for kind in ("seqs", "batch"):
            recs, _ = read_bin(os.path.join(ROOT, "tests", "fixtures", f"{name}.{kind}.bin"))
            for i, (toks, rows) in enumerate(recs):
                m.reset()
                out = np.stack([m.step(tk) for tk in toks])
                rel = np.linalg.norm(out - rows) / np.linalg.norm(out)
                mx = np.abs(out - rows).max()
                # float32 fixtures vs float64 here: the relative bound is the check;
                # the absolute one allows float32 drift on large logits of long sequences
                good = rel < 1e-5 and mx < 1e-3
                ok &= good
                print(f"{name} {kind}[{i}] T={len(toks)}: rel L2 {rel:.2e}, max abs {mx:.2e} {'ok' if good else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
