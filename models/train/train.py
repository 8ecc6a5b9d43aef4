"""Train a toy decoder on the associative-recall task and export it to GGUF.

    python models/train/train.py --arch llama  --steps 3000 --out models/llama-recall.gguf
    python models/train/train.py --arch hybrid --steps 3000 --out models/hybrid-recall.gguf
    (add --device cuda on a GPU machine)

Prints training loss, validation and held-out exact-match accuracy (greedy
decoding). Writes the GGUF file, a PyTorch checkpoint (--ckpt, default
models/train/ckpt/<name>.pt) and a small JSON with the run's results next to it.
Seeds are fixed (--seed); the data stream is deterministic.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import task  # noqa: E402
from model import Model, default_config, greedy_answers  # noqa: E402
from export_gguf import export_gguf  # noqa: E402

VALID_SEED = 777  # validation set used for early stopping (held-out set is not looked at)


def exact_match(model, samples):
    answers = greedy_answers(model, [p for p, _ in samples])
    return sum(int(a == ref) for a, (_, ref) in zip(answers, samples)) / len(samples)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", choices=["llama", "hybrid"], required=True)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--out", required=True, help="output .gguf path")
    ap.add_argument("--ckpt", default=None, help="checkpoint path (default models/train/ckpt/<name>.pt)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--stop-acc", type=float, default=1.0,
                    help="stop early once validation exact match reaches this (checked every --eval-every)")
    ap.add_argument("--train-min-pairs", type=int, default=1,
                    help="training prompts have train-min-pairs..8 pairs (easier prompts help learning); "
                         "held-out/validation prompts always have 4..8")
    ap.add_argument("--train-queries", type=int, default=4,
                    help="up to this many queries per training sequence (see task.TrainStream)")
    ap.add_argument("--copy-frac", type=float, default=0.5,
                    help="fraction of copy sequences in training batches (see task.TrainStream)")
    ap.add_argument("--loop", action="store_true", help="train the delta layers with the plain loop")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a model Config field, e.g. --set n_embd=128 (repeatable)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)

    cfg = default_config(args.arch)
    for kv in args.set:
        key, val = kv.split("=", 1)
        setattr(cfg, key, type(getattr(cfg, key))(val))
    model = Model(cfg).to(device)
    for blk in model.blocks:
        if not blk.is_attn:
            blk.mixer.parallel = not args.loop   # closed form while training; loop for eval/export
    n_params = sum(p.numel() for p in model.parameters())
    print(f"arch={cfg.arch} params={n_params} config={cfg.to_dict()}", flush=True)

    heldout = task.heldout_set(200)
    heldout_big = task.heldout_set(2000)          # first 200 are the same as `heldout`
    valid = task.heldout_set(500, seed=VALID_SEED)
    exclude = {p for p, _ in heldout_big} | {p for p, _ in valid}
    stream = task.TrainStream(seed=task.TRAIN_SEED + args.seed, exclude=exclude,
                              min_pairs=args.train_min_pairs, max_queries=args.train_queries,
                              copy_frac=args.copy_frac)

    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98))

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        frac = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))

    t0 = time.time()
    step, loss_avg = 0, None
    for step in range(args.steps):
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step)
        tokens, mask = stream.batch(args.batch)
        tokens = torch.from_numpy(tokens).to(device)
        mask = torch.from_numpy(mask).to(device)
        logits = model(tokens[:, :-1])
        nll = F.cross_entropy(logits.reshape(-1, cfg.vocab), tokens[:, 1:].reshape(-1), reduction="none")
        m = mask[:, :-1].reshape(-1)
        loss = (nll * m).sum() / m.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_avg = loss.item() if loss_avg is None else 0.95 * loss_avg + 0.05 * loss.item()
        if (step + 1) % 50 == 0:
            print(f"step {step + 1:5d}  loss {loss_avg:.4f}  lr {lr_at(step):.2e}  {time.time() - t0:6.1f}s", flush=True)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            model.eval()
            va = exact_match(model, valid)
            model.train()
            print(f"step {step + 1:5d}  valid exact match {va:.4f}", flush=True)
            if va >= args.stop_acc:
                print("validation target reached, stopping", flush=True)
                break
    train_s = time.time() - t0

    model.eval()
    for blk in model.blocks:            # final numbers with the reference (loop) recurrence
        if not blk.is_attn:
            blk.mixer.parallel = False
    acc200 = exact_match(model, heldout)
    acc2000 = exact_match(model, heldout_big)
    print(f"held-out exact match: {acc200:.4f} (200, tests/fixtures/recall_heldout.txt)  "
          f"{acc2000:.4f} (2000)  train time {train_s:.1f}s  steps {step + 1}", flush=True)

    name = os.path.splitext(os.path.basename(args.out))[0]
    ckpt = args.ckpt or os.path.join(os.path.dirname(os.path.abspath(__file__)), "ckpt", name + ".pt")
    os.makedirs(os.path.dirname(ckpt), exist_ok=True)
    model = model.cpu()
    torch.save({"config": cfg.to_dict(), "state_dict": model.state_dict()}, ckpt)
    export_gguf(model, args.out, name=name)
    results = {"name": name, "arch": cfg.arch, "config": cfg.to_dict(), "params": n_params,
               "steps": step + 1, "batch": args.batch, "lr": args.lr, "seed": args.seed,
               "device": args.device, "train_seconds": round(train_s, 1),
               "heldout200_exact_match": acc200, "heldout2000_exact_match": acc2000,
               "command": " ".join(sys.argv)}
    with open(os.path.splitext(ckpt)[0] + ".json", "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {args.out} and {ckpt}", flush=True)


if __name__ == "__main__":
    main()
