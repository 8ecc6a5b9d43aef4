"""Independent GGUF v3 reader; verifies exported files round-trip against the PyTorch checkpoints.

    python models/train/check_reader.py                        # both shipped models
    python models/train/check_reader.py MODEL.gguf CKPT.pt     # one pair

Checks: header, every key/value against the config, alignment of the data
section and of each tensor offset, tensor names / ne / type against the model's
tensor map, bit-exact tensor data, and that the PyTorch model rebuilt from the
GGUF alone produces the same logits as the checkpoint's model.
"""
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class _Buf:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def value(self, vtype):
        if vtype == 8:
            return self.string()
        if vtype == 9:
            etype, n = self.take("<I"), self.take("<Q")
            return [self.value(etype) for _ in range(n)]
        return self.take(_SCALARS[vtype])


def read_gguf(path):
    """Returns (kv dict {key: (type, value)}, tensors dict {name: (ne list, np.ndarray row-major)}, info)."""
    with open(path, "rb") as f:
        data = f.read()
    b = _Buf(data)
    assert data[:4] == b"GGUF", "bad magic"
    b.pos = 4
    version = b.take("<I")
    assert version == 3, f"version {version}"
    n_tensors, n_kv = b.take("<Q"), b.take("<Q")
    kv = {}
    for _ in range(n_kv):
        key = b.string()
        vtype = b.take("<I")
        assert key not in kv, f"duplicate key {key}"
        kv[key] = (vtype, b.value(vtype))
    align = kv.get("general.alignment", (4, 32))[1]
    infos = []
    for _ in range(n_tensors):
        name = b.string()
        n_dims = b.take("<I")
        ne = [b.take("<Q") for _ in range(n_dims)]
        ttype, off = b.take("<I"), b.take("<Q")
        assert ttype == 0, f"{name}: type {ttype} (expected F32)"
        assert off % align == 0, f"{name}: offset {off} not aligned"
        infos.append((name, ne, off))
    data_start = b.pos + (-b.pos) % align
    assert all(x == 0 for x in data[b.pos:data_start]), "non-zero header padding"
    tensors = {}
    for name, ne, off in infos:
        n = int(np.prod(ne))
        start = data_start + off
        assert start + 4 * n <= len(data), f"{name}: data out of file"
        arr = np.frombuffer(data, dtype="<f4", count=n, offset=start).reshape(list(reversed(ne)))
        assert name not in tensors, f"duplicate tensor {name}"
        tensors[name] = (ne, arr)
    return kv, tensors, {"version": version, "alignment": align, "data_start": data_start,
                         "order": [i[0] for i in infos], "size": len(data)}


def config_from_gguf(kv):
    from model import Config
    arch = kv["general.architecture"][1]
    a = arch
    g = lambda k: kv[f"{a}.{k}"][1]  # noqa: E731
    cfg = Config(arch="llama" if arch == "llama" else "hybrid",
                 vocab=g("vocab_size"), n_ctx=g("context_length"), n_embd=g("embedding_length"),
                 n_layer=g("block_count"), n_head=g("attention.head_count"),
                 n_head_kv=g("attention.head_count_kv"), n_ff=g("feed_forward_length"),
                 rope_base=g("rope.freq_base"), norm_eps=g("attention.layer_norm_rms_epsilon"))
    assert g("rope.dimension_count") == cfg.head_dim
    if arch == "tghybrid":
        cfg.full_attention_interval = g("full_attention_interval")
        cfg.ssm_hk, cfg.ssm_hv = g("ssm.head_count_k"), g("ssm.head_count_v")
        cfg.ssm_dk, cfg.ssm_dv = g("ssm.head_dim_k"), g("ssm.head_dim_v")
    else:
        assert arch == "llama", arch
    return cfg


def model_from_gguf(path):
    """Build the PyTorch reference model from a GGUF file alone."""
    import torch
    from model import Model
    from export_gguf import tensor_map
    kv, tensors, _ = read_gguf(path)
    cfg = config_from_gguf(kv)
    model = Model(cfg)
    sd = {k: torch.from_numpy(tensors[g][1].copy()) for g, k in tensor_map(cfg)}
    model.load_state_dict(sd)
    model.eval()
    return model


def check(gguf_path, ckpt_path):
    import torch
    from model import Config, Model
    from export_gguf import tensor_map, model_kvs, gguf_arch
    ck = torch.load(ckpt_path, map_location="cpu")
    cfg = Config(**ck["config"])
    sd = ck["state_dict"]
    kv, tensors, info = read_gguf(gguf_path)

    name = os.path.splitext(os.path.basename(gguf_path))[0]
    expect = model_kvs(cfg, name)
    assert set(kv) == {k for k, _, _ in expect}, f"key set differs: {set(kv) ^ {k for k, _, _ in expect}}"
    for key, vtype, value in expect:
        t, v = kv[key]
        assert t == vtype, f"{key}: type {t} != {vtype}"
        if vtype == 6:
            assert v == np.float32(value), f"{key}: {v} != {value}"
        elif key != "general.name":
            assert v == value, f"{key}: {v} != {value}"
    assert kv["general.architecture"][1] == gguf_arch(cfg)

    tmap = tensor_map(cfg)
    assert info["order"] == [g for g, _ in tmap], "tensor order/name mismatch"
    assert set(sd) == {k for _, k in tmap}
    for g, k in tmap:
        ne, arr = tensors[g]
        ref = sd[k].numpy()
        assert ne == list(reversed(ref.shape)), f"{g}: ne {ne} vs torch shape {tuple(ref.shape)}"
        assert np.array_equal(arr, ref), f"{g}: data differs"
    # ne spot checks from the spec
    assert tensors["token_embd.weight"][0] == [cfg.n_embd, cfg.vocab]
    assert tensors["output.weight"][0] == [cfg.n_embd, cfg.vocab]
    assert tensors["blk.0.ffn_gate.weight"][0] == [cfg.n_embd, cfg.n_ff]
    assert tensors["blk.0.ffn_down.weight"][0] == [cfg.n_ff, cfg.n_embd]
    if cfg.arch == "hybrid":
        assert tensors["blk.0.ssm_beta.weight"][0] == [cfg.n_embd, cfg.ssm_hv]
        assert tensors["blk.0.ssm_alpha.weight"][0] == [cfg.n_embd, cfg.ssm_hv]
        assert tensors["blk.0.ssm_a"][0] == [cfg.ssm_hv]
        assert tensors["blk.0.ssm_dt.bias"][0] == [cfg.ssm_hv]
        assert tensors["blk.0.ssm_q.weight"][0] == [cfg.n_embd, cfg.ssm_hk * cfg.ssm_dk]
        assert tensors["blk.0.ssm_v.weight"][0] == [cfg.n_embd, cfg.ssm_hv * cfg.ssm_dv]
        assert tensors["blk.0.ssm_out.weight"][0] == [cfg.ssm_hv * cfg.ssm_dv, cfg.n_embd]

    # same logits from the GGUF-rebuilt model and the checkpoint model
    m1 = Model(cfg)
    m1.load_state_dict(sd)
    m1.eval()
    m2 = model_from_gguf(gguf_path)
    assert m2.cfg == cfg, f"config from GGUF differs: {m2.cfg} vs {cfg}"
    toks = torch.randint(0, cfg.vocab, (2, 33), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(m1(toks), m2(toks)), "logits differ"
    print(f"OK {gguf_path}: {len(tensors)} tensors, {len(kv)} keys, {info['size']} bytes, "
          f"data at {info['data_start']}, arch {kv['general.architecture'][1]}")


def main():
    import torch
    torch.set_num_threads(2)
    if len(sys.argv) == 3:
        check(sys.argv[1], sys.argv[2])
    else:
        for n in ("llama-recall", "hybrid-recall"):
            check(os.path.join(ROOT, "models", n + ".gguf"), os.path.join(HERE, "ckpt", n + ".pt"))


if __name__ == "__main__":
    main()
