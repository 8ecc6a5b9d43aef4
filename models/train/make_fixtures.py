"""Write the logits fixtures and the held-out set the C++ tests are held to.

    python models/train/make_fixtures.py

The PyTorch model is rebuilt from the GGUF file alone (check_reader.model_from_gguf),
so the fixtures are exactly what the shipped file computes in float32.

Writes, in tests/fixtures/:
  <model>.seqs.bin   3 sequences of different lengths (each run on its own, positions 0..T-1)
  <model>.batch.bin  3 sequences of the same length (may be run as one batch, B = 3)
  <model>.hidden.bin residual stream after every block for sequence 0 of .seqs.bin (debug aid)
  recall_heldout.txt 200 lines "prompt<TAB>answer"

.bin format (all little-endian), see tests/fixtures/README.md:
  char[8]  magic "TGLOGIT1"
  u32      n_seq
  u32      n_vocab   (row width: n_vocab for logits, n_embd for hidden states)
  then n_seq records: u32 T, i32 tokens[T], f32 rows[T][n_vocab]
"""
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import task  # noqa: E402
from check_reader import model_from_gguf  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")


def write_bin(path, records, width):
    """records: list of (tokens list[int], rows np.ndarray [T, width] float32)."""
    with open(path, "wb") as f:
        f.write(b"TGLOGIT1" + struct.pack("<II", len(records), width))
        for toks, rows in records:
            rows = np.ascontiguousarray(rows, dtype="<f4")
            assert rows.shape == (len(toks), width)
            f.write(struct.pack("<I", len(toks)))
            f.write(np.asarray(toks, dtype="<i4").tobytes())
            f.write(rows.tobytes())


def read_bin(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"TGLOGIT1"
    n_seq, width = struct.unpack_from("<II", data, 8)
    pos, out = 16, []
    for _ in range(n_seq):
        (T,) = struct.unpack_from("<I", data, pos)
        pos += 4
        toks = np.frombuffer(data, "<i4", T, pos).tolist()
        pos += 4 * T
        rows = np.frombuffer(data, "<f4", T * width, pos).reshape(T, width)
        pos += 4 * T * width
        out.append((toks, rows))
    assert pos == len(data)
    return out, width


def fixture_sequences():
    """Fixed token sequences (same for both models)."""
    rng = np.random.default_rng(2024)
    # seqs: a short recall sample, a long recall sample, and arbitrary bytes (incl. BOS/EOS, >127)
    short = [task.BOS] + task.encode("b2:q7 h5:t1 ?h5=")                              # T = 17, prompt only
    p, a = "c3:w2 a7:p5 g1:s8 d4:u3 h8:q1 e2:v6 ?g1=", "s8"
    long_, _ = task.sample_tokens(p, a)                                                # T = 44, full sample
    rand = [task.BOS] + rng.integers(0, 258, size=25).tolist()                         # T = 26
    seqs = [short, rand, long_]
    # batch: three recall prompts with 5 pairs each, truncated/padded to the same length 32
    batch = []
    for p, a in task.heldout_set(400, seed=99)[:400]:
        toks, _ = task.sample_tokens(p, a)
        if len(toks) >= 32 and len(p.split(" ")) == 6:  # 5 pairs + the query
            batch.append(toks[:32])
        if len(batch) == 3:
            break
    assert len(batch) == 3
    return seqs, batch


@torch.no_grad()
def main():
    torch.set_num_threads(2)
    os.makedirs(FIX, exist_ok=True)
    seqs, batch = fixture_sequences()
    for name in ("llama-recall", "hybrid-recall"):
        model = model_from_gguf(os.path.join(ROOT, "models", name + ".gguf"))
        recs = []
        for s in seqs:
            logits, hidden = model(torch.tensor([s]), return_hidden=True)
            recs.append((s, logits[0].numpy()))
            if not recs[1:]:
                hid = [(s, h[0].numpy()) for h in hidden]
        write_bin(os.path.join(FIX, name + ".seqs.bin"), recs, model.cfg.vocab)
        logits_b = model(torch.tensor(batch))
        write_bin(os.path.join(FIX, name + ".batch.bin"),
                  [(s, logits_b[i].numpy()) for i, s in enumerate(batch)], model.cfg.vocab)
        write_bin(os.path.join(FIX, name + ".hidden.bin"), hid, model.cfg.n_embd)
        # consistency: batched == one at a time, prefix logits == full logits
        for i, s in enumerate(batch):
            one = model(torch.tensor([s]))[0]
            assert torch.allclose(one, logits_b[i], rtol=0, atol=1e-5)
            half = model(torch.tensor([s[:len(s) // 2]]))[0]
            assert torch.allclose(half, one[:len(s) // 2], rtol=0, atol=1e-5)
        back, _ = read_bin(os.path.join(FIX, name + ".seqs.bin"))
        assert [b[0] for b in back] == seqs
        print(f"{name}: seqs T={[len(s) for s in seqs]}, batch 3 x {len(batch[0])}")
    task.write_heldout(os.path.join(FIX, "recall_heldout.txt"), task.heldout_set(200))
    print("wrote", FIX)


if __name__ == "__main__":
    main()
