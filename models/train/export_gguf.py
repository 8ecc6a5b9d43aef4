"""Write a trained model as a GGUF v3 file (all tensors F32), with plain struct packing.

    python models/train/export_gguf.py models/train/ckpt/llama-recall.pt models/llama-recall.gguf

Layout written (all little-endian):
    "GGUF" u32 version=3  u64 n_tensors  u64 n_kv
    n_kv x  { string key, u32 value_type, value }
    n_tensors x { string name, u32 n_dims, u64 ne[n_dims] (innermost first),
                  u32 ggml_type (F32 = 0), u64 offset (relative to data section, multiple of 32) }
    zero padding up to a multiple of general.alignment (32) -> data section
    tensor data, each tensor starting at its offset (zero padding between tensors)
    string = u64 byte length + UTF-8 bytes (no terminator)
    array  = u32 element type + u64 count + elements
Key names and tensor names are listed in models/README.md.
"""
import os
import struct
import sys

# GGUF value types
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
GGML_TYPE_F32 = 0
ALIGNMENT = 32

_SCALAR_FMT = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
               FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, value):
    if vtype == STRING:
        return _str(value)
    if vtype == ARRAY:
        etype, items = value
        out = struct.pack("<IQ", etype, len(items))
        return out + b"".join(_value(etype, it) for it in items)
    return struct.pack(_SCALAR_FMT[vtype], value)


def write_gguf(path, kvs, tensors):
    """kvs: list of (key, value_type, value) (ARRAY value = (elem_type, list));
    tensors: list of (name, np.ndarray float32 in PyTorch row-major layout).
    A row-major array of shape (d_{n-1}, ..., d_0) is stored with ne = {d_0, ..., d_{n-1}}."""
    import numpy as np
    kvs = list(kvs)
    if not any(k == "general.alignment" for k, _, _ in kvs):
        kvs.append(("general.alignment", UINT32, ALIGNMENT))
    header = bytearray()
    header += b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, vtype, value in kvs:
        header += _str(key) + struct.pack("<I", vtype) + _value(vtype, value)

    datas, offset = [], 0
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr, dtype="<f4")
        ne = list(reversed(arr.shape))
        header += _str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        header += struct.pack("<IQ", GGML_TYPE_F32, offset)
        raw = arr.tobytes()
        datas.append((offset, raw))
        offset += len(raw)
        offset += (-offset) % ALIGNMENT

    with open(path, "wb") as f:
        f.write(header)
        f.write(b"\0" * ((-len(header)) % ALIGNMENT))
        pos = 0
        for off, raw in datas:
            f.write(b"\0" * (off - pos))
            f.write(raw)
            pos = off + len(raw)
        f.write(b"\0" * ((-pos) % ALIGNMENT))


def gguf_arch(cfg):
    return "llama" if cfg.arch == "llama" else "tghybrid"


def model_kvs(cfg, name):
    a = gguf_arch(cfg)
    kvs = [
        ("general.architecture", STRING, a),
        ("general.name", STRING, name),
        ("general.alignment", UINT32, ALIGNMENT),
        ("general.file_type", UINT32, 0),                       # all F32
        (f"{a}.context_length", UINT32, cfg.n_ctx),
        (f"{a}.embedding_length", UINT32, cfg.n_embd),
        (f"{a}.block_count", UINT32, cfg.n_layer),
        (f"{a}.feed_forward_length", UINT32, cfg.n_ff),
        (f"{a}.attention.head_count", UINT32, cfg.n_head),
        (f"{a}.attention.head_count_kv", UINT32, cfg.n_head_kv),
        (f"{a}.attention.key_length", UINT32, cfg.head_dim),
        (f"{a}.attention.value_length", UINT32, cfg.head_dim),
        (f"{a}.rope.dimension_count", UINT32, cfg.head_dim),
        (f"{a}.rope.freq_base", FLOAT32, cfg.rope_base),
        (f"{a}.attention.layer_norm_rms_epsilon", FLOAT32, cfg.norm_eps),
        (f"{a}.vocab_size", UINT32, cfg.vocab),
    ]
    if cfg.arch == "hybrid":
        kvs += [
            (f"{a}.full_attention_interval", UINT32, cfg.full_attention_interval),
            (f"{a}.ssm.head_count_k", UINT32, cfg.ssm_hk),
            (f"{a}.ssm.head_count_v", UINT32, cfg.ssm_hv),
            (f"{a}.ssm.head_dim_k", UINT32, cfg.ssm_dk),
            (f"{a}.ssm.head_dim_v", UINT32, cfg.ssm_dv),
        ]
    return kvs + tokenizer_kvs()


def gpt2_byte_chars():
    """GPT-2's byte-to-unicode table: byte b -> the one character standing for it.
    Printable Latin-1 bytes stand for themselves; the other 68 (controls, space,
    DEL, NBSP, soft hyphen) map to U+0100 onwards in byte order."""
    keep = list(range(0x21, 0x7f)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return [table[b] for b in range(256)]


BOS_TEXT, EOS_TEXT = "<s>", "</s>"
TOKEN_NORMAL, TOKEN_CONTROL = 1, 3  # llama.cpp's token types


def tokenizer_kvs():
    """The byte-level vocabulary as llama.cpp reads it: a "gpt2" (BPE) model with
    the 256 byte tokens (id = byte, text = GPT-2's character for it), no merges,
    so every byte is one token, and BOS 256 / EOS 257 as control tokens."""
    tokens = gpt2_byte_chars() + [BOS_TEXT, EOS_TEXT]
    types = [TOKEN_NORMAL] * 256 + [TOKEN_CONTROL, TOKEN_CONTROL]
    return [
        ("tokenizer.ggml.model", STRING, "gpt2"),
        ("tokenizer.ggml.pre", STRING, "gpt-2"),  # llama.cpp's name for the GPT-2 pre-tokenizer
        ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
        ("tokenizer.ggml.token_type", ARRAY, (INT32, types)),
        ("tokenizer.ggml.merges", ARRAY, (STRING, [])),
        ("tokenizer.ggml.bos_token_id", UINT32, 256),
        ("tokenizer.ggml.eos_token_id", UINT32, 257),
        ("tokenizer.ggml.add_bos_token", BOOL, True),
        ("tokenizer.ggml.add_eos_token", BOOL, False),
    ]


def legacy_tokenizer_kvs():
    """The keys files had before (tinygml still reads them; llama.cpp does not)."""
    return [
        ("tokenizer.ggml.model", STRING, "tinygml-bytes"),
        ("tokenizer.ggml.bos_token_id", UINT32, 256),
        ("tokenizer.ggml.eos_token_id", UINT32, 257),
    ]


def tensor_map(cfg):
    """[(gguf tensor name, PyTorch state_dict key)] in file order."""
    m = [("token_embd.weight", "tok_embd.weight")]
    for i in range(cfg.n_layer):
        p, b = f"blocks.{i}.", f"blk.{i}."
        m.append((b + "attn_norm.weight", p + "attn_norm.weight"))
        if cfg.is_attention_layer(i):
            m += [(b + "attn_q.weight", p + "mixer.wq.weight"),
                  (b + "attn_k.weight", p + "mixer.wk.weight"),
                  (b + "attn_v.weight", p + "mixer.wv.weight"),
                  (b + "attn_output.weight", p + "mixer.wo.weight")]
        else:
            m += [(b + "ssm_q.weight", p + "mixer.wq.weight"),
                  (b + "ssm_k.weight", p + "mixer.wk.weight"),
                  (b + "ssm_v.weight", p + "mixer.wv.weight"),
                  (b + "ssm_beta.weight", p + "mixer.wb.weight"),
                  (b + "ssm_alpha.weight", p + "mixer.wa.weight"),
                  (b + "ssm_a", p + "mixer.A_log"),
                  (b + "ssm_dt.bias", p + "mixer.dt_bias"),
                  (b + "ssm_out.weight", p + "mixer.wo.weight")]
        m += [(b + "ffn_norm.weight", p + "ffn_norm.weight"),
              (b + "ffn_gate.weight", p + "ffn.w_gate.weight"),
              (b + "ffn_up.weight", p + "ffn.w_up.weight"),
              (b + "ffn_down.weight", p + "ffn.w_down.weight")]
    m += [("output_norm.weight", "output_norm.weight"), ("output.weight", "output.weight")]
    return m


def export_gguf(model, path, name):
    cfg = model.cfg
    sd = {k: v.detach().cpu().float().numpy() for k, v in model.state_dict().items()}
    names = tensor_map(cfg)
    assert sorted(k for _, k in names) == sorted(sd), "tensor map does not cover the state dict"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_gguf(path, model_kvs(cfg, name), [(g, sd[k]) for g, k in names])


def main():
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from model import Config, Model
    if len(sys.argv) != 3:
        sys.exit("usage: export_gguf.py CHECKPOINT.pt OUT.gguf")
    ck = torch.load(sys.argv[1], map_location="cpu")
    model = Model(Config(**ck["config"]))
    model.load_state_dict(ck["state_dict"])
    export_gguf(model, sys.argv[2], os.path.splitext(os.path.basename(sys.argv[2]))[0])
    print("wrote", sys.argv[2])


if __name__ == "__main__":
    main()
