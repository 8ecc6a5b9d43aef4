#!/usr/bin/env python3
"""gen.py SRC OUT: the kernel source of the tree SRC, made host C++ for the emulator.

Copies SRC/cuda/*.cuh to OUT/, and SRC/cuda/sm90a/*.cuh, delta_rule_chunked_wg.cu and (where the
tree has it) delta_rule_chunked_wgb.cu to OUT/sm90a/ (the kernels' "../x.cuh" includes still
resolve), rewriting every inline asm statement into
tg_emu_asm(TEMPLATE, {outputs}, {inputs}) for emu_rt.cpp's PTX interpreter. The template keeps its
macro form, so the preprocessor builds the same string nvcc gets; line numbers stay the source's.
Each kernel file is cut after its anonymous namespace (the host launch code needs the CUDA runtime).
delta_wgb_kernel is looked for in delta_rule_chunked_wgb.cu, or in delta_rule_chunked_wg.cu on
trees from before the split; OUT/sm90a/delta_rule_chunked_wgb.cu is always written (empty where
the tree has no such file), so that emu_kernel.cpp can include it.

Writes OUT/emu_config.h: TG_EMU_DELTA 1 where the kernel is template <bool DELTA> delta_wg_kernel
(GATED_LINEAR and GATED_DELTA), 0 where it is the plain GATED_LINEAR-only delta_wg_kernel of older
trees; TG_EMU_WGB 0 (no delta_wgb_kernel, or TG_EMU_WGB=0 in the environment), 1 (the plain
GATED_LINEAR-only delta_wgb_kernel, shared memory kSmemB) or 2 (template <bool DELTA>
delta_wgb_kernel, both modes, kSmemB<DELTA>); any other template of either kernel is refused."""
import os
import re
import sys

KERNEL = os.path.join('cuda', 'sm90a', 'delta_rule_chunked_wg.cu')
KERNEL_B = os.path.join('cuda', 'sm90a', 'delta_rule_chunked_wgb.cu')


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


MACROS = {}  # function-like macros of the copied files: name -> (parameters, body)


def collect_macros(text):
    """Records every function-like #define NAME(params) body of text (continuation lines joined)."""
    for m in re.finditer(r'^[ \t]*#[ \t]*define[ \t]+(\w+)\(([^)]*)\)((?:[^\n]*\\\n)*[^\n]*)', text, re.M):
        params = [x.strip() for x in m.group(2).split(',') if x.strip()]
        MACROS[m.group(1)] = (params, m.group(3).replace('\\\n', ' ').strip())


def expand(section):
    """section with the function-like macros it calls expanded (operand lists such as TG_OUT8(d))."""
    for _ in range(32):
        m = None
        for mm in re.finditer(r'\b(\w+)\s*\(', section):
            if mm.group(1) in MACROS:
                m = mm
                break
        if not m:
            return section
        j, depth = m.end(), 1
        while depth:
            depth += {'(': 1, ')': -1}.get(section[j], 0)
            j += 1
        params, body = MACROS[m.group(1)]
        args = [a.strip() for a in split_top(section[m.end():j - 1], ',')]
        if len(args) != len(params):
            sys.exit('gen.py: macro %s called with %d arguments in an asm operand list' % (m.group(1), len(args)))
        for p, a in zip(params, args):
            body = re.sub(r'\b%s\b' % re.escape(p), lambda _m, a=a: a, body)
        section = section[:m.start()] + body + section[j:]
    sys.exit('gen.py: macro expansion does not end in an asm operand list')


def operands(section, kind):
    """'"=r"(x), "l"(y)' -> ['tg_emu_out("=r", x)', ...] (kind 'out' or 'in'); function-like
    macros of the copied files in the list are expanded first."""
    section = expand(section.replace('\\\n', ' '))
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
        tmpl = re.sub(r'^(?:\s|\\\n)+|(?:\s|\\\n)+$', '', secs[0])  # (line splices of a #define too)
        call = 'tg_emu_asm(%s, {%s}, {%s})' % (tmpl, ', '.join(outs), ', '.join(ins))
        # (the lines the statement took, as line splices: the statement may be inside a #define)
        out += call + '\\\n' * max(text[m.start():j].count('\n') - call.count('\n'), 0)
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


def has_wgb(kernel):
    """1 where the kernel file defines the plain __global__ delta_wgb_kernel(const chunk_args) (GATED_LINEAR
    only; shared memory kSmemB), 2 where it is template <bool DELTA> delta_wgb_kernel (both modes; shared
    memory kSmemB<DELTA>), 0 where it has none; any other template is refused. TG_EMU_WGB=0 in the
    environment turns it off (emu then reports it as not present)."""
    if os.environ.get('TG_EMU_WGB', '1') == '0':
        return 0
    m = re.search(r'(template\s*<([^>]*)>\s*)?__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?'
                  r'delta_wgb_kernel\s*\(\s*const\s+chunk_args\s+\w+\s*\)', kernel)
    if not m:
        if re.search(r'\bdelta_wgb_kernel\b', kernel):
            sys.exit('gen.py: delta_wgb_kernel in %s is not __global__ void delta_wgb_kernel(const chunk_args) '
                     '(plain or template <bool DELTA>)' % KERNEL_B)
        return 0
    if m.group(1):
        if not re.fullmatch(r'\s*bool\s+DELTA\s*', m.group(2)):
            sys.exit('gen.py: unsupported delta_wgb_kernel template <%s> in %s (known: <bool DELTA>, none)'
                     % (m.group(2).strip(), KERNEL_B))
        if not re.search(r'\bkSmemB\s*<', kernel):
            sys.exit('gen.py: template delta_wgb_kernel without kSmemB<DELTA> in ' + KERNEL_B)
        return 2
    if not re.search(r'\bkSmemB\b', kernel):
        sys.exit('gen.py: delta_wgb_kernel without kSmemB in ' + KERNEL_B)
    return 1


def has_seg(kernel):
    """1 where the kernel file has GATED_LINEAR's segment kernels, template <int SEG>
    delta_wgb_seg_kernel(const chunk_args) (SEG 1 the segments' states, 2 the outputs), else 0."""
    return 1 if re.search(r'template\s*<\s*int\s+SEG\s*>\s*__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?'
                          r'delta_wgb_seg_kernel\s*\(\s*const\s+chunk_args\s+\w+\s*\)', kernel) else 0


def cut_anon(text, path):
    """The file up to the end of its anonymous namespace (before "namespace tg_chunk {")."""
    cut = re.search(r'\n\}\s*//\s*namespace\s*\n\s*namespace tg_chunk\s*\{', text)
    if not cut:
        sys.exit('gen.py: the anonymous namespace before "namespace tg_chunk {" not found in ' + path)
    return text[:cut.start()]


def read_headers(src, out):
    """The tree's cuda/*.cuh and cuda/sm90a/*.cuh: output path (relative to OUT) -> text; OUT/sm90a made."""
    os.makedirs(os.path.join(out, 'sm90a'), exist_ok=True)
    texts = {}
    for sub in ('', 'sm90a'):
        d = os.path.join(src, 'cuda', sub)
        for f in sorted(os.listdir(d)):
            if f.endswith('.cuh'):
                with open(os.path.join(d, f)) as fi:
                    texts[os.path.join(sub, f)] = fi.read()
    return texts


def main():
    if len(sys.argv) != 3:
        sys.exit('usage: gen.py SRC OUT')
    src, out = sys.argv[1], sys.argv[2]
    texts = read_headers(src, out)
    with open(os.path.join(src, KERNEL)) as f:
        kernel = f.read()
    kernel_b = ''
    if os.path.exists(os.path.join(src, KERNEL_B)):
        with open(os.path.join(src, KERNEL_B)) as f:
            kernel_b = f.read()
    for t in list(texts.values()) + [kernel, kernel_b]:
        collect_macros(t)
    for f, t in texts.items():
        with open(os.path.join(out, f), 'w') as fo:
            fo.write(rewrite(t))
    head = cut_anon(kernel, KERNEL)
    with open(os.path.join(out, 'sm90a', os.path.basename(KERNEL)), 'w') as f:
        f.write(rewrite(head) + '\n}  // namespace\n')
    head_b = cut_anon(kernel_b, KERNEL_B) if kernel_b else ''
    delta = has_delta(kernel)
    wgb = has_wgb(head_b if head_b else head)
    seg = has_seg(head_b) if wgb == 2 else 0
    # the BF16 kernels that copy gate arrays made beforehand (chunk_args::G): delta_wgb_pre_kernel<DELTA> and
    # delta_wgb_segpre_kernel<SEG>
    pre_g = 1 if wgb == 2 and seg and re.search(r'\bdelta_wgb_pre_kernel\b', head_b) and re.search(r'\bdelta_wgb_segpre_kernel\b', head_b) else 0
    with open(os.path.join(out, 'sm90a', os.path.basename(KERNEL_B)), 'w') as f:
        f.write(rewrite(head_b) + '\n}  // namespace\n' if head_b and wgb else '// (not in this tree, or left out)\n')
    with open(os.path.join(out, 'emu_config.h'), 'w') as f:
        f.write('// written by gen.py from %s\n#pragma once\n' % KERNEL)
        f.write('#define TG_EMU_DELTA %d  // %s\n' % (
            delta, 'delta_wg_kernel<DELTA>' if delta else 'delta_wg_kernel (GATED_LINEAR only)'))
        f.write('#define TG_EMU_WGB %d  // %s\n' % (wgb, {
            0: 'no delta_wgb_kernel',
            1: 'delta_wgb_kernel (GATED_LINEAR, BF16 q/k/v; shared memory kSmemB)',
            2: 'delta_wgb_kernel<DELTA> (GATED_LINEAR and GATED_DELTA, BF16 q/k/v; shared memory kSmemB<DELTA>)'}[wgb]))
        f.write('#define TG_EMU_SEG %d  // %s\n' % (seg, 'delta_wgb_seg_kernel<SEG> (GATED_LINEAR\'s segments)' if seg else 'no segment kernels'))
        f.write('#define TG_EMU_G %d  // %s\n' % (pre_g, 'delta_wgb_pre_kernel<DELTA>, delta_wgb_segpre_kernel<SEG> (gate arrays from a.G)' if pre_g
                                                  else 'no kernels with gate arrays made beforehand'))
    print('gen.py: %s -> %s (%s%s)' % (src, out, 'GATED_LINEAR, GATED_DELTA' if delta else 'GATED_LINEAR only',
                                       {0: '', 1: '; delta_wgb_kernel', 2: '; delta_wgb_kernel<DELTA>'}[wgb] +
                                       ('; delta_wgb_seg_kernel<SEG>' if seg else '') + ('; gate arrays beforehand' if pre_g else '')))


if __name__ == '__main__':
    main()
