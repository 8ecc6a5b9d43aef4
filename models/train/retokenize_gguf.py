"""Rewrite a GGUF file's tokenizer keys, keeping every other key (in order)
and every tensor (infos and data bytes) exactly as they are.

    python3 models/train/retokenize_gguf.py IN.gguf OUT.gguf            # byte-level "gpt2" vocabulary
    python3 models/train/retokenize_gguf.py --legacy IN.gguf OUT.gguf   # the old "tinygml-bytes" keys

Used once to move the shipped models (trained with the old keys) to the
vocabulary llama.cpp reads (export_gguf.tokenizer_kvs, models/README.md);
standard library only. Tensor offsets are relative to the data section, so
they and the data bytes carry over unchanged; only the header grows.
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_gguf import ARRAY, STRING, UINT32, _str, _value, legacy_tokenizer_kvs, tokenizer_kvs  # noqa: E402

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class _Reader:
    def __init__(self, data):
        self.d, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.d, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.d[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def value(self, vtype):
        if vtype == STRING:
            return self.string()
        if vtype == ARRAY:
            etype, n = self.take("<I"), self.take("<Q")
            return (etype, [self.value(etype) for _ in range(n)])
        return self.take(_SCALAR[vtype])


def retokenize(src, dst, legacy=False):
    with open(src, "rb") as f:
        data = f.read()
    r = _Reader(data)
    assert data[:4] == b"GGUF" and struct.unpack_from("<I", data, 4)[0] == 3, "not a GGUF v3 file"
    r.pos = 8
    n_tensors, n_kv = r.take("<Q"), r.take("<Q")
    kvs = []
    for _ in range(n_kv):
        key = r.string()
        vtype = r.take("<I")
        kvs.append((key, vtype, r.value(vtype)))
    align = next((v for k, _, v in kvs if k == "general.alignment"), 32)
    infos_start = r.pos
    for _ in range(n_tensors):
        r.string()
        n_dims = r.take("<I")
        r.pos += 8 * n_dims + 4 + 8
    infos = data[infos_start:r.pos]
    data_start = r.pos + (-r.pos) % align

    kvs = [kv for kv in kvs if not kv[0].startswith("tokenizer.")]
    kvs += legacy_tokenizer_kvs() if legacy else tokenizer_kvs()
    header = bytearray(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, len(kvs)))
    for key, vtype, value in kvs:
        header += _str(key) + struct.pack("<I", vtype) + _value(vtype, value)
    header += infos
    header += b"\0" * ((-len(header)) % align)
    with open(dst, "wb") as f:
        f.write(header)
        f.write(data[data_start:])


def main():
    args = sys.argv[1:]
    legacy = "--legacy" in args
    args = [a for a in args if a != "--legacy"]
    if len(args) != 2:
        sys.exit("usage: retokenize_gguf.py [--legacy] IN.gguf OUT.gguf")
    retokenize(args[0], args[1], legacy)
    print("wrote", args[1])


if __name__ == "__main__":
    main()
