"""PyTorch eager baseline for bench/models.sh: the same GGUF weights, rebuilt
with the reference model (models/train/model.py), on the GPU when present.

    python3 bench/torch_models.py [OUT.json]

Prompt tokens/s: one forward over the prompt (batch 1 and 16). Generation
tokens/s: greedy, 32 new tokens; the reference model has no KV cache or
recurrent-state carry, so each step re-runs the whole prefix, as a plain
eager implementation does.
"""
import json
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "models", "train"))
from check_reader import model_from_gguf  # noqa: E402

N_GEN = 32


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def main():
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_num_threads(2)
    with open(os.path.join(ROOT, "tests", "fixtures", "recall_heldout.txt")) as f:
        prompt = f.readline().split("\t")[0]
    base = [256] + list(prompt.encode())
    rows = []
    print(f"{'model':22s} {'dev':5s} {'batch':>5s} {'prompt tok/s':>14s} {'gen tok/s':>14s}")
    for name in ("llama-recall", "hybrid-recall"):
        m = model_from_gguf(os.path.join(ROOT, "models", name + ".gguf")).to(dev)
        for B in (1, 16):
            toks = torch.tensor([base] * B, device=dev)
            with torch.no_grad():
                for _ in range(3):
                    m(toks)
                times = []
                for _ in range(10):
                    sync(dev)
                    t0 = time.perf_counter()
                    m(toks)
                    sync(dev)
                    times.append(time.perf_counter() - t0)
                pp = B * len(base) / statistics.median(times)
                seq = toks
                sync(dev)
                t0 = time.perf_counter()
                for _ in range(N_GEN):
                    nxt = m(seq)[:, -1].argmax(-1, keepdim=True)
                    seq = torch.cat([seq, nxt], 1)
                sync(dev)
                tg = B * N_GEN / (time.perf_counter() - t0)
            print(f"{name + '.gguf':22s} {dev:5s} {B:5d} {pp:14.1f} {tg:14.1f}")
            rows.append({"model": name + ".gguf", "device": dev, "batch": B, "impl": "pytorch-eager",
                         "prompt_tokens_per_s": pp, "gen_tokens_per_s": tg})
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "bench", "torch_models.json")
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
