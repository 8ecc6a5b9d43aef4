#!/usr/bin/env python3
"""fla_delta.py - fla's Triton chunk kernels at tinygml-bench's delta_rule rows.

Times chunk_gated_delta_rule (GATED_DELTA: log gates, l2norm in the kernel,
F32 initial and final state) and chunk_simple_gla (GATED_LINEAR: log gates,
no state) from the PyPI wheels fla-core / flash-linear-attention at the
shapes of bench.cu's rows gdn.prefill, gdn.prefill.bf16, gla.prefill,
gdn.long, gdn.x32.bf16 and gla.x32.bf16, bf16 and f32 inputs, so that one GPU
run prints both columns.
TFLOP/s uses bench.cu's count of the chunked algorithm (delta_chunked_flops).

Usage: python3 bench/fla_delta.py [out.json] [--ours tinygml-bench.json]
       [--rows ID,ID] [--dtypes bf16,f32]
(needs torch, triton, fla). With --ours, also prints tinygml's rows of that
run beside fla's (the same shapes; fla with bf16 and with f32 inputs).
--rows and --dtypes time only those (each kernel's first call compiles and
autotunes for minutes: a device call with little time left picks one).
gla.prefill.bf16 is gla.prefill's shape with bf16 inputs, beside tinygml's
BF16 row of that name.
"""
import json
import math
import sys

import torch
import triton.testing

from fla.ops import chunk_gated_delta_rule, chunk_simple_gla


def chunked_flops(B, T, H, D, delta):
    # bench.cu delta_chunked_flops: keep the two in step
    C, n = 64.0, math.ceil(T / 64.0)
    per = 2 * (2 * C * C * D) + 2 * (2 * C * D * D)
    if delta:
        per += 3 * (2 * C * C * D) + 2 * C * D * D + C * C * C / 3
    return per * n * B * H


def inputs(B, T, H, D, dtype, gen):
    def rnd(*shape, lo=-1.0, hi=1.0, dt=dtype):
        return (torch.rand(*shape, device="cuda", generator=gen, dtype=torch.float32) * (hi - lo) + lo).to(dt)

    q, k, v = rnd(B, T, H, D), rnd(B, T, H, D), rnd(B, T, H, D)
    g = rnd(B, T, H, lo=-0.1, hi=0.0, dt=torch.float32)
    beta = rnd(B, T, H, lo=0.0, hi=1.0, dt=dtype)
    return q, k, v, g, beta


def time_us(fn):
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3


def side_by_side(ours_path, rows):
    with open(ours_path) as f:
        ours = {r["id"]: r for r in json.load(f)["rows"]}
    print(f"\n{'id':18s} {'tinygml us':>11s} {'TFLOP/s':>8s}   {'fla bf16 us':>11s} {'TFLOP/s':>8s}   "
          f"{'fla f32 us':>10s} {'TFLOP/s':>8s}   variant")
    for rid in dict.fromkeys(r["id"] for r in rows):
        o = ours.get(rid)
        f = {r["inputs"]: r for r in rows if r["id"] == rid}
        cell = lambda r: f"{r['us']:11.1f} {r['tflops']:8.1f}" if r else f"{'-':>11s} {'-':>8s}"
        mine = f"{o['us_judged']:11.1f} {o['tflops']:8.1f}" if o else f"{'-':>11s} {'-':>8s}"
        print(f"{rid:18s} {mine}   {cell(f.get('bf16'))}   {cell(f.get('f32'))}   {o['variant'] if o else ''}")


def main():
    args = sys.argv[1:]
    ours = None
    if "--ours" in args:
        i = args.index("--ours")
        ours = args[i + 1]
        del args[i:i + 2]
    def opt(name):
        if name not in args:
            return None
        i = args.index(name)
        v = args[i + 1].split(",")
        del args[i:i + 2]
        return v
    only_rows, only_dtypes = opt("--rows"), opt("--dtypes")
    out = args[0] if args else "fla_delta.json"
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    rows = []
    cases = [
        ("gdn.prefill", 8, 2048, 16, 128, True),
        ("gdn.prefill.bf16", 8, 2048, 16, 128, True),
        ("gla.prefill", 8, 2048, 16, 128, False),
        ("gla.prefill.bf16", 8, 2048, 16, 128, False),
        ("gdn.long", 1, 16384, 16, 128, True),
        ("gdn.x32.bf16", 2, 8192, 16, 128, True),
        ("gla.x32.bf16", 2, 8192, 16, 128, False),
    ]
    seen = {}  # (shape, delta, dtype) -> row: gdn.prefill and gdn.prefill.bf16 share fla's runs
    for rid, B, T, H, D, delta in cases:
        if only_rows and rid not in only_rows:
            continue
        for dtype in (torch.bfloat16, torch.float32):
            if only_dtypes and ("bf16" if dtype == torch.bfloat16 else "f32") not in only_dtypes:
                continue
            if rid == "gla.prefill.bf16" and dtype != torch.bfloat16:
                continue
            key = (B, T, H, D, delta, dtype)
            if key in seen:
                rows.append(dict(seen[key], id=rid))
                continue
            # the first call of each kernel compiles and autotunes it (minutes in all, once per machine)
            print(f"{rid}: {dtype} ...", flush=True)
            q, k, v, g, beta = inputs(B, T, H, D, dtype, gen)
            scale = 1.0 / math.sqrt(D)
            with torch.inference_mode():
                if delta:
                    h0 = (torch.rand(B, H, D, D, device="cuda", generator=gen) * 0.2 - 0.1).float()

                    def fn():
                        return chunk_gated_delta_rule(q, k, v, g, beta, scale=scale, initial_state=h0,
                                                      output_final_state=True, use_qk_l2norm_in_kernel=True)
                else:

                    def fn():
                        return chunk_simple_gla(q, k, v, g=g, scale=scale)

                o = fn()[0]
                finite = bool(torch.isfinite(o.float()).all())
                us = time_us(fn)
            fl = chunked_flops(B, T, H, D, delta)
            name = "chunk_gated_delta_rule" if delta else "chunk_simple_gla"
            dt = "bf16" if dtype == torch.bfloat16 else "f32"
            rows.append({"id": rid, "fla": name, "inputs": dt, "shape": f"B{B} T{T} H{H} D{D}",
                         "us": round(us, 2), "tflops": round(fl / (us * 1e-6) / 1e12, 2), "finite": finite})
            seen[key] = rows[-1]
            with open(out, "w") as f:  # partial results survive a time limit
                json.dump({"rows": rows, "partial": True}, f, indent=2)
            print(f"{rid:18s} fla {name:24s} {dt:5s} B{B} T{T} H{H} D{D}  {us:9.1f} us  "
                  f"{fl / (us * 1e-6) / 1e12:6.1f} TFLOP/s{'' if finite else '  NON-FINITE'}", flush=True)
            del q, k, v, g, beta
            torch.cuda.empty_cache()
    import fla
    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "triton": triton.__version__, "fla": getattr(fla, "__version__", "?"), "rows": rows}
    with open(out, "w") as f:
        json.dump(doc, f, indent=2)
    print("wrote", out)
    if ours:
        side_by_side(ours, rows)


if __name__ == "__main__":
    main()
