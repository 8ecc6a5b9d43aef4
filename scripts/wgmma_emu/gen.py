#!/usr/bin/env python3
"""gen.py SRC OUT: the kernel source of the tree SRC, made host C++ for the emulator.

Copies SRC/cuda/*.cuh to OUT/ and SRC/cuda/sm90a/delta_rule_chunked_wg.cu to OUT/sm90a/ (the
kernel's "../x.cuh" includes still resolve), rewriting every inline asm statement into
tg_emu_asm(TEMPLATE, {outputs}, {inputs}) for emu_rt.cpp's PTX interpreter. The template keeps its
macro form, so the preprocessor builds the same string nvcc gets; line numbers stay the source's.
The kernel file is cut after its anonymous namespace (the host launch code needs the CUDA runtime).

Writes OUT/emu_config.h: TG_EMU_DELTA 1 where the kernel is template <bool DELTA> delta_wg_kernel
(GATED_LINEAR and GATED_DELTA), 0 where it is the plain GATED_LINEAR-only delta_wg_kernel of older
trees; any other template is refused."""
import os
import re
import sys

KERNEL = os.path.join('cuda', 'sm90a', 'delta_rule_chunked_wg.cu')


def split_top(s, sep):
    """s split at each sep outside parentheses, brackets, braces and string literals."""
    parts, cur, depth, in_str, i = [], '', 0, False, 0
    while i < len(s):
        ch = s[i]
        if in_str:
            cur += ch
            if ch == '\\':
                cur += s[i + 1]
                i += 1
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
            cur += ch
        elif ch in '([{':
            depth += 1
            cur += ch
        elif ch in ')]}':
            depth -= 1
            cur += ch
        elif ch == sep and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += ch
        i += 1
    parts.append(cur)
    return parts


def operands(section, kind):
    """'"=r"(x), "l"(y)' -> ['tg_emu_out("=r", x)', ...] (kind 'out' or 'in')."""
    if not section.strip():
        return []
    res = []
    for op in split_top(section, ','):
        m = re.match(r'\s*("[^"]*")\s*\((.*)\)\s*$', op, re.S)
        if not m:
            sys.exit('gen.py: cannot parse asm operand %r' % op)
        res.append('tg_emu_%s(%s, %s)' % (kind, m.group(1), m.group(2)))
    return res


def rewrite(text):
    """Every asm [volatile] (TEMPLATE : outputs : inputs : clobbers) as a tg_emu_asm call."""
    out, i = '', 0
    pat = re.compile(r'\basm\s*(volatile\s*)?\(')
    while True:
        m = pat.search(text, i)
        if not m:
            return out + text[i:]
        out += text[i:m.start()]
        j, depth, in_str = m.end(), 1, False  # j: past the closing parenthesis
        while depth:
            ch = text[j]
            if in_str:
                if ch == '\\':
                    j += 1
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch == '(':
                depth += 1
            elif ch == ')':
                depth -= 1
            j += 1
        secs = split_top(text[m.end():j - 1], ':')
        outs = operands(secs[1], 'out') if len(secs) > 1 else []
        ins = operands(secs[2], 'in') if len(secs) > 2 else []
        call = 'tg_emu_asm(%s, {%s}, {%s})' % (secs[0].strip(), ', '.join(outs), ', '.join(ins))
        out += call + '\n' * max(text[m.start():j].count('\n') - call.count('\n'), 0)
        i = j


def has_delta(kernel):
    """1 for template <bool DELTA> delta_wg_kernel, 0 for the plain one."""
    m = re.search(r'(template\s*<([^>]*)>\s*)?'
                  r'__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?delta_wg_kernel\s*\(', kernel)
    if not m:
        sys.exit('gen.py: no delta_wg_kernel definition found in ' + KERNEL)
    if m.group(1) and not re.fullmatch(r'\s*bool\s+DELTA\s*', m.group(2)):
        sys.exit('gen.py: unsupported delta_wg_kernel template <%s> in %s (known: <bool DELTA>, none)'
                 % (m.group(2).strip(), KERNEL))
    return 1 if m.group(1) else 0


def main():
    if len(sys.argv) != 3:
        sys.exit('usage: gen.py SRC OUT')
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(os.path.join(out, 'sm90a'), exist_ok=True)
    for f in sorted(os.listdir(os.path.join(src, 'cuda'))):
        if f.endswith('.cuh'):
            with open(os.path.join(src, 'cuda', f)) as fi, open(os.path.join(out, f), 'w') as fo:
                fo.write(rewrite(fi.read()))
    with open(os.path.join(src, KERNEL)) as f:
        kernel = f.read()
    cut = re.search(r'\n\}\s*//\s*namespace\s*\n\s*namespace tg_chunk\s*\{', kernel)
    if not cut:
        sys.exit('gen.py: the anonymous namespace before "namespace tg_chunk {" not found in ' + KERNEL)
    with open(os.path.join(out, 'sm90a', os.path.basename(KERNEL)), 'w') as f:
        f.write(rewrite(kernel[:cut.start()]) + '\n}  // namespace\n')
    delta = has_delta(kernel)
    with open(os.path.join(out, 'emu_config.h'), 'w') as f:
        f.write('// written by gen.py from %s\n#pragma once\n' % KERNEL)
        f.write('#define TG_EMU_DELTA %d  // %s\n' % (
            delta, 'delta_wg_kernel<DELTA>' if delta else 'delta_wg_kernel (GATED_LINEAR only)'))
    print('gen.py: %s -> %s (%s)' % (src, out, 'GATED_LINEAR, GATED_DELTA' if delta else 'GATED_LINEAR only'))


if __name__ == '__main__':
    main()
