#!/usr/bin/env python3
"""gen.py SRC OUT: the chunk-parallel delta rule's kernels of the tree SRC, made host C++ for the emulator.

Copies SRC/cuda/*.cuh to OUT/ and SRC/cuda/sm90a/*.cuh to OUT/sm90a/, and three kernel files:
  cuda/delta_rule_chunked_phases.cu   (delta_gates_kernel; cut before run_phases: the host side)
  cuda/delta_rule_state_pass.cu       (delta_state128_kernel; cut before state_pass_kernel)
  cuda/sm90a/delta_rule_prep_wgb.cu   (delta_prep_wgb_kernel; cut before "namespace tg_chunk {")
rewriting every inline asm into tg_emu_asm(TEMPLATE, {outputs}, {inputs}) (the wgmma emulator's
rewrite, scripts/wgmma_emu/gen.py, imported from there), __CUDA_ARCH__ into TG_EMU_CUDA_ARCH (900,
emu_rt.h: bulk_copy.cuh's code is under #if __CUDA_ARCH__ >= 900) and the gates kernel's static
`__shared__ T name[..]..;` into a reference to the emulated shared window (tg_emu_static_sm).
Line numbers stay the source's."""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # (nothing written into scripts/wgmma_emu/)
sys.path.insert(0, os.path.join(HERE, '..', 'wgmma_emu'))
import gen as wg  # noqa: E402  (split_top, collect_macros, expand, rewrite)

PHASES = os.path.join('cuda', 'delta_rule_chunked_phases.cu')
STATE = os.path.join('cuda', 'delta_rule_state_pass.cu')
PREP = os.path.join('cuda', 'sm90a', 'delta_rule_prep_wgb.cu')


def fix(text):
    text = re.sub(r'\b__CUDA_ARCH__\b', 'TG_EMU_CUDA_ARCH', text)
    # a static __shared__ array: a reference into the emulated window (one such array a kernel)
    text = re.sub(r'\b__shared__\s+(\w+)\s+(\w+)((?:\[[^\]]+\])+)\s*;',
                  lambda m: 'auto &%s = *(%s (*)%s)(void *)tg_emu_static_sm;' % (m.group(2), m.group(1), m.group(3)), text)
    return wg.rewrite(text)


def cut(text, path, pattern):
    m = re.search(pattern, text)
    if not m:
        sys.exit('gen.py: cut point %r not found in %s' % (pattern, path))
    return text[:m.start()]


def main():
    if len(sys.argv) != 3:
        sys.exit('usage: gen.py SRC OUT')
    src, out = sys.argv[1], sys.argv[2]
    texts = wg.read_headers(src, out)
    kern = {}
    for p in (PHASES, STATE, PREP):
        with open(os.path.join(src, p)) as f:
            kern[p] = f.read()
    for t in list(texts.values()) + list(kern.values()):
        wg.collect_macros(t)
    for f, t in texts.items():
        with open(os.path.join(out, f), 'w') as fo:
            fo.write(fix(t))
    # the anonymous namespaces' ends: phases and the state pass have theirs inside namespace tg_chunk
    ph = cut(kern[PHASES], PHASES, r'\n\}\s*//\s*namespace\s*\n\s*tg_status\s+run_phases') + '\n}  // namespace\n}  // namespace tg_chunk\n'
    st = cut(kern[STATE], STATE, r'\n\}\s*//\s*namespace\s*\n\s*phase_fn\s+state_pass_kernel') + '\n}  // namespace\n}  // namespace tg_chunk\n'
    pr = cut(kern[PREP], PREP, r'\n\}\s*//\s*namespace\s*\n\s*namespace tg_chunk\s*\{') + '\n}  // namespace\n'
    for p, t in ((PHASES, ph), (STATE, st), (PREP, pr)):
        with open(os.path.join(out, os.path.relpath(p, 'cuda')), 'w') as f:
            f.write(fix(t))
    # compile-time facts of the tree (the patched trees' flags)
    ph_h = texts.get('delta_rule_phases.cuh', '')
    s2 = 1 if re.search(r'\bint\s+[^;]*\bs2\b', ph_h) else 0
    vd = 1 if re.search(r'state128_buf\s*\([^)]*\bbool\s+vd\b', ph_h) else 0
    ss = 1 if re.search(r'\bstate128_ssize\s*\(', ph_h) else 0
    with open(os.path.join(out, 'emu_config.h'), 'w') as f:
        f.write('// written by gen.py\n#pragma once\n#define TG_EMU_HAS_S2 %d  // phase_args has s2 (the state in two shared copies)\n' % s2)
        f.write('#define TG_EMU_HAS_VD %d  // state128_buf(.., vd): GATED_LINEAR fo reads v in the state pass, no U scratch\n' % vd)
        f.write('#define TG_EMU_HAS_SSIZE %d  // state128_ssize(BV, fo): the state copy\'s size (fo: transposed)\n' % ss)
    print('gen.py: %s -> %s (phase_args.s2: %s; vd: %s)' % (src, out, 'yes' if s2 else 'no', 'yes' if vd else 'no'))


if __name__ == '__main__':
    main()
