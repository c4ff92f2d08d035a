#!/usr/bin/env python3
"""Where a decode step's routing time goes: the block kernel's phase probe.

Compiles the block-per-token routing kernel with NVRTC (memra's own
options) twice: once with -DMEMRA_ROUTE_PROBE, where lane 0 of each warp of
block 0 records the SM clock at each phase boundary (the MEMRA_PROBE marks in
route_block.cu), and once as shipped. For each configuration it prints the
clock at every mark, cycles from the first warp's entry, for warp 0 and for
the slowest warp (a barrier's wait shows in the slowest arrival), and
the per-node time of a 32-node CUDA graph of the shipped kernel with and
without the tables, beside an empty kernel's. It needs only the driver and
NVRTC (ctypes), not the library. The module's text is the build's own (the
embedded source a meson build writes, BUILD/kernels_src/kernel_src_<module>.c,
whose #line markers name each file), so the file list is meson.build's
alone; a variant of the source (--src DIR, a copy of kernels_src/ with one
change) replaces each file by DIR's copy, measured against the shipped one in
the same process:

    python3 benchmarks/route_probe.py [--build DIR] [--src DIR ...] [--spec-src DIR ...]
                                      [--json FILE]
                                      [--prefill N [--rounds R] [--grid-div D] | --batch N,N,...]

(--spec-src: the same, compiled once per configuration with its spec as
constants; benchmarks/probe_variants.sh makes variants from patch files.)

The numbers are a probe, not the benchmark of record (memra bench --route).
"""
import argparse
import ctypes
import glob
import json
import os
import re
import statistics
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JIT_OPTIONS = ["--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true"]
PARAM_BYTES = 296  # src/route/route_abi.h's MEMRA_ROUTE_PARAM_BYTES
TEAM_THREADS = 128  # abi.h's MEMRA_ROUTE_TEAM_THREADS

# abi.h's launch flags.
# (tests/check_probe_constants.py holds each to abi.h.)
F_SIGMOID, F_RENORM, F_GROUP_MAX, F_NO_TABLES, F_FEW_LANES, F_LAYOUT, F_BIAS = 1, 4, 32, 64, 512, 1024, 2048

def read_configs():
    """src/route/route_families.h's rows, the list every routing benchmark
    shares: (name, n_expert, n_group, topk_group, top_k, sigmoid+bias,
    renormalize, scale). The rows' last two columns (the route cases' test
    inputs) are not the spec: read and dropped."""
    text = open(os.path.join(HERE, "..", "src", "route", "route_families.h")).read()
    rows = re.findall(r'X\("([^"]+)", (\d+), (\d+), (\d+), (\d+), ([01]), ([0-9.]+)f, [01], [01]\)',
                      text)
    if not rows:
        raise RuntimeError("no rows in src/route/route_families.h")
    return [(n, int(E), int(NG), int(TG), int(K), sig == "1", True, float(sc))
            for n, E, K, NG, TG, sig, sc in rows]


CONFIGS = read_configs()

cu = ctypes.CDLL("libcuda.so.1")


def ck(r, what):
    if r != 0:
        s = ctypes.c_char_p()
        cu.cuGetErrorString(r, ctypes.byref(s))
        raise RuntimeError("%s: %d %s" % (what, r, s.value))


def load_nvrtc():
    names = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    for n in names:
        try:
            return ctypes.CDLL(n)
        except OSError:
            pass
    for pat in ["/usr/local/cuda*/lib64/libnvrtc.so*", "/usr/lib/x86_64-linux-gnu/libnvrtc.so*"]:
        for p in sorted(glob.glob(pat)):
            try:
                return ctypes.CDLL(p)
            except OSError:
                pass
    try:
        import nvidia.cuda_nvrtc  # noqa: F401  (PyTorch's wheel)
        for p in glob.glob(os.path.join(os.path.dirname(nvidia.cuda_nvrtc.__file__), "lib", "libnvrtc.so*")):
            return ctypes.CDLL(p)
    except ImportError:
        pass
    raise RuntimeError("no NVRTC found")


nvrtc = load_nvrtc()


def module_text(build, module, src_dir=None):
    """A module's source as the library embeds it (the build's generated C
    array), each file after its #line marker replaced by src_dir's copy when
    given."""
    path = os.path.join(build, "kernels_src", "kernel_src_%s.c" % module)
    body = open(path).read()
    data = bytes(int(x, 16) for x in re.findall(r"0x([0-9a-f]{2})", body.split("{", 1)[1]))
    text = data.rstrip(b"\0").decode()
    if not src_dir:
        return text
    parts = re.split(r'(#line 1 "[^"]+"\n)', text)
    out = parts[0]
    for marker, part in zip(parts[1::2], parts[2::2]):
        name = re.match(r'#line 1 "([^"]+)"', marker).group(1)
        alt = os.path.join(src_dir, name)
        if os.path.exists(alt):  # as embed_source.py adds it
            part = open(alt).read()
            part += "" if part.endswith("\n") else "\n"
        out += marker + part
    return out


def probe_marks(text):
    """The MEMRA_PROBE marks' names by number, as the kernel's source names
    them (route_block.cu), and the clocks a warp's row holds
    (MEMRA_PROBE_ROW): the marks of the source compiled."""
    marks = {}
    for i, name in re.findall(r'MEMRA_PROBE\((\d+), "([^"]+)"\)', text):
        if marks.setdefault(int(i), name) != name:
            raise RuntimeError("mark %s named twice: %s, %s" % (i, marks[int(i)], name))
    last = re.search(r"#define MEMRA_PROBE_LAST (\d+)", text)
    if not marks or not last or max(marks) != int(last.group(1)):
        raise RuntimeError("the probe's marks: none, or the last is not MEMRA_PROBE_LAST")
    row = re.search(r"#define MEMRA_PROBE_ROW (\d+)", text)
    if not row:
        raise RuntimeError("no MEMRA_PROBE_ROW in the source")
    return [marks.get(i, "") for i in range(max(marks) + 1)], int(row.group(1))


def compile_block(build, src_dir, arch, defines, module="route_block",
                  kernel="memra_route_block_kernel", text=None):
    """The module's source (`text`, or read as module_text reads it) compiled
    with `defines` ahead of it and loaded: its module, kernel, and an empty
    kernel."""
    if text is None:
        text = module_text(build, module, src_dir)
    src = "".join("#define %s\n" % d for d in defines) + text
    src += 'extern "C" __global__ void memra_probe_empty_kernel() {}\n'
    prog = ctypes.c_void_p()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"route.cu", 0, None, None) == 0
    # MEMRA_PROBE_CUBINS=DIR (benchmarks/ncu_source.sh): each module built
    # with -lineinfo (the same SASS: a line table beside it) and its CUBIN
    # kept in DIR, so a profile's per-instruction counts can be read back
    # onto the source lines (benchmarks/ncu_lines.py).
    keep = os.environ.get("MEMRA_PROBE_CUBINS")
    extra = ["-lineinfo"] if keep else []
    opts = [o.encode() for o in JIT_OPTIONS + extra + ["--gpu-architecture=sm_%d" % arch]]
    r = nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    n = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    if r != 0:
        raise RuntimeError("NVRTC: " + log.value.decode())
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(n))
    cubin = ctypes.create_string_buffer(n.value)
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    if keep:
        n_kept = len(glob.glob(os.path.join(keep, "*.cubin")))
        # a new file only: never through a link or over a file already there
        fd = os.open(os.path.join(keep, "%02d-%s.cubin" % (n_kept, kernel)),
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(cubin.raw)
    mod = ctypes.c_void_p()
    ck(cu.cuModuleLoadData(ctypes.byref(mod), cubin), "cuModuleLoadData")
    fn, empty = ctypes.c_void_p(), ctypes.c_void_p()
    ck(cu.cuModuleGetFunction(ctypes.byref(fn), mod, kernel.encode()), "get kernel")
    ck(cu.cuModuleGetFunction(ctypes.byref(empty), mod, b"memra_probe_empty_kernel"), "get empty")
    return mod, fn, empty


def alloc(nbytes, data=None):
    p = ctypes.c_uint64()
    ck(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(max(nbytes, 4))), "cuMemAlloc")
    if data is not None:
        ck(cu.cuMemcpyHtoD_v2(p, data, ctypes.c_size_t(nbytes)), "cuMemcpyHtoD")
    else:
        ck(cu.cuMemsetD8_v2(p, ctypes.c_ubyte(0), ctypes.c_size_t(max(nbytes, 4))), "cuMemsetD8")
    return p.value



# The library built beside the module texts, for what it answers on the host
# (the layout's sizes), so that the probe sizes its buffers as memra does.
LIB_PATH = None


def layout_sizes(n_pairs, n_expert, block_size):
    """memra_layout_sizes: (sorted_len, n_blocks) for n_pairs pairs."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from memra._lib import LayoutSpec  # the package's memra_layout_spec, not a copy
    lib = ctypes.CDLL(LIB_PATH)
    spec = LayoutSpec(n_expert=n_expert, block_size=block_size)
    sorted_len, n_blocks = ctypes.c_uint64(), ctypes.c_uint64()
    st = lib.memra_layout_sizes(ctypes.c_uint32(n_pairs), ctypes.byref(spec),
                                ctypes.byref(sorted_len), ctypes.byref(n_blocks))
    assert st == 0, "memra_layout_sizes: status %d" % st
    return sorted_len.value, n_blocks.value

class Layer:
    """One configuration's device buffers and parameter block (src/route/route_abi.h)."""

    def __init__(self, cfg, seed, n_tokens=1):
        name, E, G, TG, K, sig, renorm, scale = cfg
        import random
        rnd = random.Random(seed)
        f32 = lambda vals: struct.pack("<%df" % len(vals), *vals)
        self.E, self.K, self.T = E, K, n_tokens
        if n_tokens == 1:
            self.logits = alloc(4 * E, f32([rnd.uniform(-4, 4) for _ in range(E)]))
        else:  # random logits in [-4, 4): one token's worth, repeated with a shift
            import array
            one = [rnd.uniform(-4, 4) for _ in range(E + 64)]
            v = array.array("f")
            for t in range(n_tokens):
                v.extend(one[t % 64:t % 64 + E])
            data = (ctypes.c_char * (len(v) * 4)).from_buffer(v)
            self.logits = alloc(len(v) * 4, data)
        self.bias = alloc(4 * E, f32([rnd.uniform(-0.1, 0.1) for _ in range(E)])) if sig else 0
        self.planes = alloc(12 * E, f32([rnd.uniform(0.5, 2) for _ in range(3 * E)]))
        # the outputs and their bytes a pair: sel, selw, three pointers, three scales
        self.outs = [(alloc(per * K * n_tokens), per * K * n_tokens) for per in (4, 4, 24, 12)]
        (self.sel, _), (self.selw, _), (self.ptrs, _), (self.scl, _) = self.outs
        self.faults = alloc(20)  # abi.h: MEMRA_FAULT_WORDS x 4 bytes
        # memra_route_flags' rule: vLLM's group scoring (the library's
        # default) is the best expert of a group without a bias
        self.flags = (F_SIGMOID | F_BIAS if sig else F_GROUP_MAX) | (F_RENORM if renorm else 0)
        self.n_group, self.topk_group, self.scale = G, TG, scale
        # The fused layout's outputs (block size 16, the library's sizes)
        # and its ticket (one block: never counted, but it must be there).
        self.bs = 16
        self.sorted_len, self.n_blocks = layout_sizes(K * n_tokens, E, self.bs)
        self.lay = [alloc(4 * self.sorted_len), alloc(4 * self.n_blocks), alloc(4), alloc(4)]

    def params(self, tables, layout=False, few_lanes=False):
        flags = (self.flags | (0 if tables else F_NO_TABLES) | (F_FEW_LANES if few_lanes else 0) |
                 (F_LAYOUT if layout else 0))
        E4 = 4 * self.E
        # 18 addresses (the map and the real-token count 0), 8 counts and
        # flags, 2 floats, then the fused layout's parameters (none: zeros)
        b = struct.pack("<18Q", self.logits, self.bias, self.planes, self.planes + E4,
                        self.planes + 2 * E4, 1 << 40, 2 << 40, 3 << 40, 5 << 32, 5 << 32, 5 << 32,
                        self.sel, self.selw, self.ptrs, self.scl, self.faults, 0, 0)
        b += struct.pack("<8I2f", self.T, self.E, self.K, self.n_group, self.topk_group, flags, 0, 0,
                         self.scale, 0.0)
        if layout:  # kernels_src/layout_params.h's memra_layout_params
            sorted_ids, expert_ids, n_post_pad, ticket = self.lay
            b += struct.pack("<10Q8I", sorted_ids, expert_ids, n_post_pad, 0, 0, 0, 0, 0, ticket, 0,
                             self.E, self.bs, self.sorted_len, self.n_blocks, 0, 0, 0, 0)
        b += bytes(PARAM_BYTES - len(b))
        assert len(b) == PARAM_BYTES
        return ctypes.create_string_buffer(b, PARAM_BYTES)


def clear_outputs(layer):
    for p, n in layer.outs:
        ck(cu.cuMemsetD8_v2(ctypes.c_uint64(p), ctypes.c_ubyte(0xA5), ctypes.c_size_t(n)),
           "clear outputs")


def read_outputs(layer, stream):
    """The outputs' bytes (sel, selw, the pointer and scale tables) once the
    stream is done."""
    ck(cu.cuStreamSynchronize(stream), "sync")
    got = b""
    for p, n in layer.outs:
        buf = ctypes.create_string_buffer(n)
        ck(cu.cuMemcpyDtoH_v2(buf, ctypes.c_uint64(p), ctypes.c_size_t(len(buf))), "read outputs")
        got += buf.raw
    return got


def outputs(fn, layer, stream):
    """One fused launch's bytes, from outputs cleared first: every variant is
    held to the shipped kernel's."""
    clear_outputs(layer)
    launch(fn, (layer.E + 31) // 32 * 32, stream, layer.params(True))
    return read_outputs(layer, stream)


def launch(fn, threads, stream, param_buf, grid=1):
    size = ctypes.c_size_t(PARAM_BYTES)
    extra = (ctypes.c_void_p * 5)(1, ctypes.cast(param_buf, ctypes.c_void_p),
                                  2, ctypes.cast(ctypes.pointer(size), ctypes.c_void_p), 0)
    ck(cu.cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, 0, stream, None, extra), "cuLaunchKernel")


def launch_empty(fn, stream):
    ck(cu.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, None, None), "cuLaunchKernel empty")


def graph_node_us(stream, body, nodes=32, reps=15, per=10):
    g, ge = ctypes.c_void_p(), ctypes.c_void_p()
    ck(cu.cuStreamBeginCapture_v2(stream, 0), "begin capture")
    for _ in range(nodes):
        body()
    ck(cu.cuStreamEndCapture(stream, ctypes.byref(g)), "end capture")
    ck(cu.cuGraphInstantiateWithFlags(ctypes.byref(ge), g, ctypes.c_uint64(0)), "instantiate")
    e0, e1 = ctypes.c_void_p(), ctypes.c_void_p()
    ck(cu.cuEventCreate(ctypes.byref(e0), 0), "event")
    ck(cu.cuEventCreate(ctypes.byref(e1), 0), "event")
    for _ in range(10):
        ck(cu.cuGraphLaunch(ge, stream), "graph launch")
    v = []
    for _ in range(reps):
        ck(cu.cuEventRecord(e0, stream), "record")
        for _ in range(per):
            ck(cu.cuGraphLaunch(ge, stream), "graph launch")
        ck(cu.cuEventRecord(e1, stream), "record")
        ck(cu.cuEventSynchronize(e1), "sync")
        ms = ctypes.c_float()
        ck(cu.cuEventElapsedTime_v2(ctypes.byref(ms), e0, e1), "elapsed")
        v.append(ms.value * 1e3 / per / nodes)
    cu.cuGraphExecDestroy(ge)
    cu.cuGraphDestroy(g)
    return sorted(v)[len(v) // 2]


def probe(mod, fn, layer, stream, tables, marks, layout=False):
    """Each mark's clock, from the earliest warp's entry: warp 0's and the
    slowest warp's (a barrier's wait shows in the slowest arrival only);
    with the fused layout, its marks too."""
    clk = ctypes.c_uint64()
    size = ctypes.c_size_t()
    ck(cu.cuModuleGetGlobal_v2(ctypes.byref(clk), ctypes.byref(size), mod, b"memra_route_probe_clk"),
       "probe buffer")
    buf = layer.params(tables, layout)
    names, row = marks
    nw = (layer.E + 31) // 32
    best = None
    for _ in range(20):  # the fastest of 20: a warm, uncontended run
        ck(cu.cuMemsetD8_v2(clk, ctypes.c_ubyte(0), size), "clear probe")
        launch(fn, nw * 32, stream, buf)
        ck(cu.cuStreamSynchronize(stream), "sync")
        raw = (ctypes.c_uint64 * (size.value // 8))()
        ck(cu.cuMemcpyDtoH_v2(raw, clk, size.value), "read probe")
        rows = [list(raw[w * row:(w + 1) * row]) for w in range(nw)]
        # warp 0's last mark reached (the layout's are past the routing's)
        last = max(i for i in range(len(names)) if rows[0][i])
        t0 = min(r[0] for r in rows)
        if best is None or rows[0][last] - t0 < best[0][0][last] - best[1]:
            best = (rows, t0)
    rows, t0 = best
    last = max(i for i in range(len(names)) if rows[0][i])
    # slots 14, 15 of warp 0: the global timer (ns) at the first and last mark
    ns_per_cycle = (rows[0][15] - rows[0][14]) / max(1, rows[0][last] - rows[0][0])
    out = []
    for i, m in enumerate(names):
        seen = [(r[i] - t0, w) for w, r in enumerate(rows) if r[i]]
        if not seen:
            continue
        w0 = rows[0][i] - t0 if rows[0][i] else None
        slow, sw = max(seen)
        out.append((m, w0, slow, sw, slow * ns_per_cycle))
    return out, ns_per_cycle


def team_module(E, sigmoid):
    """The team kernel memra takes for n_expert (src/route/route_abi.h's
    memra_route_team_m): its module and entry point."""
    per = (E + 31) // 32
    m = 1 if per <= 1 else 4 if per <= 4 else 8 if per <= 8 else 16
    kind = "sig" if sigmoid and m > 1 else "warp"
    return "route_%s%d" % (kind, m), "memra_route_%s%d_kernel" % (kind, m), m


def spec_defines(layer, laid=False):
    """The defines that compile a layer's spec in as constants
    (route_common.cuh's MEMRA_ROUTE_SPEC_CONSTANTS); `laid`: the build for
    launches with the fused layout (MEMRA_ROUTE_FLAG_LAYOUT), as the library
    keeps one apart (a build without it holds no layout code)."""
    return ["MEMRA_SPEC_E %d" % layer.E, "MEMRA_SPEC_NG %d" % layer.n_group,
            "MEMRA_SPEC_TG %d" % layer.topk_group, "MEMRA_SPEC_K %d" % layer.K,
            "MEMRA_SPEC_FLAGS %du" % (layer.flags | (F_LAYOUT if laid else 0))]


def team_lanes(text, cfg, m, few=True):
    """The lanes a token takes in the team kernel of this source: 32 (M > 1),
    or the power of two at or above n_expert; launched in its throughput form
    (`few`, MEMRA_ROUTE_FLAG_FEW_LANES), a source that gives a lane several
    experts (abi.h's MEMRA_ROUTE_TEAM_V) takes fewer for one group, and at
    least top_k rounded up to a power of two (abi.h's MEMRA_ROUTE_TEAM_LANES)."""
    E, n_group, K = cfg[1], cfg[2], cfg[4]
    if m > 1:
        return 32
    P = 1
    while P < E:
        P *= 2
    v = re.search(r"#define MEMRA_ROUTE_TEAM_V (\d+)", text)
    if few and v and n_group == 1:
        k = 1
        while k < K:
            k *= 2
        return min(P, max(P // int(v.group(1)), k))
    return P


def prefill(build, arch, stream, n_tokens, srcs, configs, reps, results, rounds=1, grid_div=1):
    """The team kernel (memra's prefill choice) over n_tokens, for each
    configuration, as shipped and as each variant of srcs ((dir, spec)
    pairs, as main's): the median of `reps` launches timed with events (the
    logits stay in L2 after the first, unlike bench_peers' flushed ones: an
    A/B, not the benchmark of record), and every variant's output bytes
    held to the shipped kernel's. With `rounds` > 1 the variants take turns,
    `reps` launches each a round, and each reports the median of its
    rounds' medians: the card's clock drifts by a few percent over a call,
    which one variant's launches after another's would read as a
    difference between them. `grid_div` divides every launch's grid (a
    variant whose warps loop over tokens covers the batch with fewer blocks;
    the shipped kernel then leaves tokens unrouted, and its outputs differ).
    The launches (rounds of 1) are the ones an
    `ncu --kernel-name regex:memra_route_` run reads its counters from.
    Returns the variants whose outputs differ."""
    e0, e1 = ctypes.c_void_p(), ctypes.c_void_p()
    ck(cu.cuEventCreate(ctypes.byref(e0), 0), "event")
    ck(cu.cuEventCreate(ctypes.byref(e1), 0), "event")
    layers = {cfg[0]: Layer(cfg, 7 + i, n_tokens) for i, cfg in enumerate(CONFIGS) if cfg in configs}
    runs = []  # (tag, cfg, kernel, fn, buf, grid)
    for src, spec in srcs:
        tag = variant_tag(src, spec)
        src = None if src == "shipped" else src
        for cfg in configs:
            layer = layers[cfg[0]]
            module, kernel, m = team_module(cfg[1], cfg[5])
            text = module_text(build, module, src)
            _, fn, _ = compile_block(build, src, arch, spec_defines(layer) if spec else [], module,
                                     kernel, text)
            buf = layer.params(True, few_lanes=True)  # the throughput form, as memra's prefill
            grid = (n_tokens * team_lanes(text, cfg, m) + TEAM_THREADS - 1) // TEAM_THREADS
            grid = max(1, (grid + grid_div - 1) // grid_div)
            runs.append((tag, cfg, kernel, fn, buf, grid))

    def timed(fn, buf, grid):
        times = []
        for _ in range(reps):
            ck(cu.cuEventRecord(e0, stream), "record")
            launch(fn, TEAM_THREADS, stream, buf, grid)
            ck(cu.cuEventRecord(e1, stream), "record")
            ck(cu.cuEventSynchronize(e1), "sync")
            ms = ctypes.c_float()
            ck(cu.cuEventElapsedTime_v2(ctypes.byref(ms), e0, e1), "elapsed")
            times.append(ms.value * 1e3)
        return statistics.median(times)

    medians = {}
    for _ in range(max(1, rounds)):
        for cfg in configs:
            for tag, c, kernel, fn, buf, grid in runs:
                if c is cfg:
                    medians.setdefault((tag, cfg[0]), []).append(timed(fn, buf, grid))
    reference, differ, shown = {}, [], set()
    for tag, cfg, kernel, fn, buf, grid in runs:
        if tag not in shown:
            shown.add(tag)
            res = results[tag] = {}
            print("\n== %s: the team kernel over %d tokens, median of %d launches%s"
                  % (tag, n_tokens, reps, " a round, median of %d rounds" % rounds
                     if rounds > 1 else ""))
        layer = layers[cfg[0]]
        us = statistics.median(medians[(tag, cfg[0])])
        clear_outputs(layer)
        launch(fn, TEAM_THREADS, stream, buf, grid)
        got = read_outputs(layer, stream)
        same = reference.setdefault(cfg[0], got) == got
        if not same:
            differ.append("%s: %s" % (tag, cfg[0]))
        gbs = n_tokens * layer.E * 4 / (us * 1e-6) / 1e9
        res[cfg[0]] = {"us": us, "logits_GBps": gbs, "same_bits_as_shipped": same,
                       "round_medians_us": medians[(tag, cfg[0])]}
        print("  prefill %-12s %d tokens, %s: %.2f us, logits at %.0f GB/s; outputs %s"
              % (cfg[0], n_tokens, kernel, us, gbs,
                 "the shipped kernel's bits" if same else "DIFFER FROM THE SHIPPED KERNEL'S"))
    return differ


# Neighbours for a batch's node: kernels over every SM, as the next step of
# a serving graph is, one without shared memory and one with 40 KB of it (a
# GEMM's side of the SMs' shared-memory carveout).
NEIGHBOURS_SRC = r"""
extern "C" __global__ void memra_probe_wide_kernel(float *sink)
{
    if (threadIdx.x == 1000u) sink[0] = 1.0f;
}
extern "C" __global__ void memra_probe_wide_smem_kernel(float *sink)
{
    __shared__ float buf[10240];
    buf[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    if (buf[(threadIdx.x + 1u) % blockDim.x] == -1.0f) sink[0] = 1.0f;
}
"""


def consumer_source():
    """bench_peers' consumer kernel (one block reading every byte a router
    node wrote), taken from its source so the two cannot drift apart."""
    text = open(os.path.join(HERE, "peers", "bench_peers.cu")).read()
    m = re.search(r"__global__ void consume_kernel\(.*?\n}\n", text, re.S)
    if not m:
        raise RuntimeError("no consume_kernel in benchmarks/peers/bench_peers.cu")
    return ("typedef int int32_t;\nextern \"C\" " +
            m.group(0).replace("consume_kernel", "memra_probe_consume_kernel"))


def neighbours(arch, stream):
    """The two neighbour kernels, each as a launch function (2 blocks an SM,
    128 threads), and a function giving a layer's consumer launch."""
    mod, wide, _ = compile_block(None, None, arch, [], "neighbours", "memra_probe_wide_kernel",
                                 NEIGHBOURS_SRC + consumer_source())
    wsm = ctypes.c_void_p()
    ck(cu.cuModuleGetFunction(ctypes.byref(wsm), mod, b"memra_probe_wide_smem_kernel"), "get")
    dev = ctypes.c_int()
    ck(cu.cuCtxGetDevice(ctypes.byref(dev)), "device")
    sms = ctypes.c_int()
    cu.cuDeviceGetAttribute(ctypes.byref(sms), 16, dev)  # multiprocessor count
    sink = alloc(4)
    params = kernel_params(ctypes.c_uint64(sink))

    def launcher(fn):
        return lambda: ck(cu.cuLaunchKernel(fn, 2 * sms.value, 1, 1, 128, 1, 1, 0, stream, params,
                                            None), "cuLaunchKernel neighbour")
    cons = ctypes.c_void_p()
    ck(cu.cuModuleGetFunction(ctypes.byref(cons), mod, b"memra_probe_consume_kernel"), "get")

    def consumer(layer):
        """bench_peers' consumer of this layer's outputs, tables included."""
        ptrs = kernel_params(ctypes.c_uint64(layer.sel), ctypes.c_uint64(layer.selw),
                             ctypes.c_uint64(layer.ptrs), ctypes.c_uint64(layer.scl),
                             ctypes.c_uint32(layer.K * layer.T), ctypes.c_uint32(1),
                             ctypes.c_uint64(sink))
        return lambda: ck(cu.cuLaunchKernel(cons, 1, 1, 1, 128, 1, 1, 0, stream, ptrs, None),
                          "cuLaunchKernel consumer")
    return [("+wide", launcher(wide)), ("+wide-smem", launcher(wsm))], consumer


keep = []  # ctypes objects a captured launch's parameters point at


def kernel_params(*args):
    """cuLaunchKernel's kernelParams for ctypes values `args`, kept alive
    (in `keep`) as long as a captured graph may launch with them."""
    ptrs = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p)
                                           for a in args])
    keep.append((args, ptrs))
    return ptrs


def shared_bytes(fn):
    v = ctypes.c_int()
    ck(cu.cuFuncGetAttribute(ctypes.byref(v), 1, fn), "shared size")  # static shared bytes
    return v.value


def batch(build, arch, stream, sizes, srcs, configs, results):
    """Decode-sized batches: for each configuration and batch size, the node
    time (32-node CUDA graph, fused route + tables, spec-compiled as memra
    does by default; and with the fused layout, block size 16) of the block kernel, the team kernel in its decode form
    and in its throughput form (MEMRA_ROUTE_FLAG_FEW_LANES), for the shipped
    source and each variant of srcs. Every arm's output bytes are held to
    the shipped block kernel's: the kernels are one function of the
    logits, so where memra switches between them is a choice of speed
    alone. Returns the arms whose outputs differ."""
    differ = []
    nbs0, consumer = neighbours(arch, stream)
    nb_alone = {name: graph_node_us(stream, nb) for name, nb in nbs0}
    print("  neighbours alone: %s us per node" % ", ".join("%s %.2f" % kv for kv in nb_alone.items()))
    for cfg in configs:
        arms = {}  # per source: (name, kernel, threads, lanes a token or 0, few lanes)
        sd, sdl = spec_defines(Layer(cfg, 7)), spec_defines(Layer(cfg, 7), True)
        for src, _ in srcs:
            s = None if src == "shipped" else src
            _, bfn, _ = compile_block(build, s, arch, sd)
            _, blfn, _ = compile_block(build, s, arch, sdl)
            arms[src] = [("block", (bfn, blfn), (cfg[1] + 31) // 32 * 32, 0, False)]
            print("  %-12s %s: block kernel %d bytes of static shared memory"
                  % (cfg[0], variant_tag(src, True), shared_bytes(bfn)))
            if cfg[1] <= 512:  # abi: the team kernels' most experts
                module, kernel, m = team_module(cfg[1], cfg[5])
                text = module_text(build, module, s)
                _, tfn, _ = compile_block(build, s, arch, sd, module, kernel, text)
                _, tlfn, _ = compile_block(build, s, arch, sdl, module, kernel, text)
                arms[src] += [("team", (tfn, tlfn), TEAM_THREADS, team_lanes(text, cfg, m, False),
                               False),
                              ("team-few", (tfn, tlfn), TEAM_THREADS, team_lanes(text, cfg, m),
                               True)]
        for n in sizes:
            layer = Layer(cfg, 7, n)
            ref = None
            nbs = nbs0 + [("+consumer", consumer(layer))]
            nb_alone["+consumer"] = graph_node_us(stream, nbs[-1][1])
            for src, _ in srcs:
                tag = variant_tag(src, True)
                res = results.setdefault(tag, {}).setdefault(cfg[0], {})
                line = []
                for name, (fn, lfn), threads, lanes, few in arms[src]:
                    grid = n if not lanes else (n * lanes + TEAM_THREADS - 1) // TEAM_THREADS
                    buf = layer.params(True, few_lanes=few)
                    us = graph_node_us(stream, lambda: launch(fn, threads, stream, buf, grid))
                    # The node beside each neighbour, the neighbour's own node subtracted.
                    beside = {}
                    for nb_name, nb in nbs:
                        def pair():
                            launch(fn, threads, stream, buf, grid)
                            nb()
                        beside[nb_name] = graph_node_us(stream, pair) - nb_alone[nb_name]
                    # The same node with the fused layout (block size 16): the
                    # last block lays the batch out.
                    lbuf = layer.params(True, True, few_lanes=few)
                    us_lay = graph_node_us(stream, lambda: launch(lfn, threads, stream, lbuf, grid))
                    clear_outputs(layer)
                    launch(fn, threads, stream, buf, grid)
                    got = read_outputs(layer, stream)
                    ref = got if ref is None else ref
                    same = got == ref
                    if not same:
                        differ.append("%s: %s %s %d tokens" % (tag, name, cfg[0], n))
                    res.setdefault(name, {})[str(n)] = {"us": us, "layout_us": us_lay,
                                                        "same_bits": same,
                                                        "shared_bytes": shared_bytes(fn),
                                                        "beside_us": beside}
                    line.append("%s %.2f (%s; + layout %.2f)%s" % (name, us, ", ".join(
                        "%s %.2f" % kv for kv in beside.items()), us_lay,
                        "" if same else " (DIFFERS)"))
                print("  %-12s %4d tokens, %s: %s us per node" % (cfg[0], n, tag, ", ".join(line)))
    return differ


def variant_tag(src, spec):
    """A source's name in the results: "shipped", or the variant's folder
    (probe_variants.sh's NAME/kernels_src gives NAME)."""
    src = None if src == "shipped" else src
    name = os.path.normpath(src) if src else "shipped"
    if os.path.basename(name) == "kernels_src":
        name = os.path.dirname(name)
    return os.path.basename(name) + (" (spec as constants)" if spec else "")


def open_device():
    """Device 0's primary context made current; its sm number and a
    non-blocking stream. Prints the device."""
    ck(cu.cuInit(0), "cuInit")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    ck(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ck(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
    ck(cu.cuCtxSetCurrent(ctx), "set current")
    major, minor = ctypes.c_int(), ctypes.c_int()
    cu.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)
    cu.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
    arch = major.value * 10 + minor.value
    name = ctypes.create_string_buffer(128)
    cu.cuDeviceGetName(name, 128, dev)
    print("device: %s, sm_%d" % (name.value.decode(), arch))
    stream = ctypes.c_void_p()
    ck(cu.cuStreamCreate(ctypes.byref(stream), 1), "stream")
    return arch, stream


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="a meson build of memra (its embedded module sources)")
    ap.add_argument("--src", action="append", default=[], help="a kernels_src variant to compare")
    ap.add_argument("--spec-src", action="append", default=[], metavar="DIR",
                    help="a kernels_src variant ('shipped': the build's own) compiled once per"
                         " configuration with its spec as constants (route_common.cuh's"
                         " MEMRA_ROUTE_SPEC_CONSTANTS): what a kernel specialised per model saves")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--prefill", type=int, metavar="N",
                    help="instead: the team kernel (memra's prefill choice) over N tokens per"
                         " configuration, shipped and each variant")
    ap.add_argument("--batch", metavar="N,N,...",
                    help="instead: decode-sized batches, block kernel against the team kernel's"
                         " two forms, a 32-node graph each, spec-compiled")
    ap.add_argument("--reps", type=int, default=21, help="--prefill: launches timed (median)")
    ap.add_argument("--rounds", type=int, default=1, metavar="N",
                    help="--prefill: the variants take turns N times (median of the rounds)")
    ap.add_argument("--grid-div", type=int, default=1, metavar="N",
                    help="--prefill: divide the team kernel's grid by N (variants whose warps "
                    "loop over tokens)")
    ap.add_argument("--no-generic", action="store_true",
                    help="--prefill: leave the generic kernel out (only --src/--spec-src builds;"
                         " the first is the others' reference): ncu_source.sh profiles the spec"
                         " build's first launch")
    ap.add_argument("--configs", default="",
                    help="a comma list of src/route/route_families.h's names to measure "
                         "(default: all)")
    a = ap.parse_args()
    global LIB_PATH
    LIB_PATH = os.path.join(a.build, "src", "libmemra.so.2")
    want = [c for c in a.configs.split(",") if c]
    unknown = [c for c in want if c not in [cfg[0] for cfg in CONFIGS]]
    if unknown:
        ap.error("unknown configuration(s): %s" % ", ".join(unknown))
    configs = [cfg for cfg in CONFIGS if not want or cfg[0] in want]
    arch, stream = open_device()
    srcs = [(None, False)] + [(d, False) for d in a.src] + [(d, True) for d in a.spec_src]
    if a.no_generic:
        if not a.prefill or len(srcs) < 2:
            ap.error("--no-generic: with --prefill and at least one --src or --spec-src")
        srcs = srcs[1:]
    def finish(key, results, differ, against):
        if a.json:
            with open(a.json, "w") as f:
                json.dump({key: results}, f, indent=1)
        if differ:
            print("\noutputs differ from the shipped %s's: %s" % (against, "; ".join(differ)))
            return 1
        return 0
    if a.batch:
        results = {}
        srcs_b = [("shipped", True)] + [(d, True) for d in a.src + a.spec_src]
        differ = batch(a.build, arch, stream, [int(x) for x in a.batch.split(",")], srcs_b,
                       configs, results)
        return finish("batch", results, differ, "block kernel")
    if a.prefill:
        results = {}
        differ = prefill(a.build, arch, stream, a.prefill, srcs, configs, a.reps, results,
                         a.rounds, max(1, a.grid_div))
        return finish("prefill", results, differ, "kernel")
    layers = [Layer(c, 7 + i) for i, c in enumerate(CONFIGS) if c in configs]
    results = {}
    reference = {}  # the shipped kernel's output bytes, by config
    differ = []
    for src, spec in srcs:
        tag = variant_tag(src, spec)
        src = None if src == "shipped" else src
        marks_src = probe_marks(module_text(a.build, "route_block", src))
        if not spec:  # a spec build is compiled per config, below
            pmod, pfn, _ = compile_block(a.build, src, arch, ["MEMRA_ROUTE_PROBE"])
        mod, fn, empty = compile_block(a.build, src, arch, [])
        lpmod, lpfn, lfn = pmod if not spec else None, pfn if not spec else None, fn
        res = results[tag] = {}
        print("\n== %s" % tag)
        e_us = graph_node_us(stream, lambda: launch_empty(empty, stream))
        print("  empty kernel: %.3f us per node (32-node graph)" % e_us)
        res["empty_us"] = e_us
        for cfg, layer in zip(configs, layers):
            threads = (layer.E + 31) // 32 * 32
            if spec:
                sd = spec_defines(layer)
                pmod, pfn, _ = compile_block(a.build, src, arch, ["MEMRA_ROUTE_PROBE"] + sd)
                mod, fn, empty = compile_block(a.build, src, arch, sd)
                # the build for launches with the fused layout, as the library's
                sdl = spec_defines(layer, True)
                lpmod, lpfn, _ = compile_block(a.build, src, arch, ["MEMRA_ROUTE_PROBE"] + sdl)
                _, lfn, _ = compile_block(a.build, src, arch, sdl)
            bufs = {t: layer.params(t) for t in (False, True)}
            router = graph_node_us(stream, lambda: launch(fn, threads, stream, bufs[False]))
            fused = graph_node_us(stream, lambda: launch(fn, threads, stream, bufs[True]))
            # Each node followed by a kernel with no shared memory, as a
            # consumer in a serving graph: a cost of switching the SMs'
            # shared-memory carveout between the two shows here, not above.
            def fused_then_empty():
                launch(fn, threads, stream, bufs[True])
                launch_empty(empty, stream)
            alt = graph_node_us(stream, fused_then_empty) - e_us
            marks, npc = probe(pmod, pfn, layer, stream, True, marks_src)
            # The fused layout (block size 16) after the same routing: its
            # node and its phases, where the source marks them.
            lbuf = layer.params(True, True)
            with_layout = graph_node_us(stream, lambda: launch(lfn, threads, stream, lbuf))
            lmarks = []
            if len(marks_src[0]) > 10:
                lmarks, _ = probe(lpmod, lpfn, layer, stream, True, marks_src, True)
                lmarks = [m for m in lmarks if marks_src[0].index(m[0]) >= 9]
            got = outputs(fn, layer, stream)
            same = reference.setdefault(cfg[0], got) == got
            if not same:
                differ.append("%s: %s" % (tag, cfg[0]))
            res[cfg[0]] = {"router_us": router, "fused_us": fused, "fused_beside_empty_us": alt,
                           "fused_layout_us": with_layout,
                           "ns_per_cycle": npc, "same_bits_as_shipped": same,
                           "marks": [{"mark": m, "warp0_cycles": c0, "slowest_cycles": c,
                                      "slowest_warp": w, "slowest_ns": n}
                                     for m, c0, c, w, n in marks],
                           "layout_marks": [{"mark": m, "warp0_cycles": c0, "slowest_cycles": c,
                                             "slowest_warp": w, "slowest_ns": n}
                                            for m, c0, c, w, n in lmarks]}
            print("  %-12s router %.3f us, fused %.3f us per node, %.3f beside an empty kernel;"
                  " outputs %s; fused probe, cycles from the first warp's entry (warp 0 /"
                  " slowest warp):" % (cfg[0], router, fused, alt,
                                       "the shipped kernel's bits" if same else "DIFFER FROM THE"
                                       " SHIPPED KERNEL'S"))
            for m, c0, c, w, n in marks[1:]:
                print("      %-32s %6s / %6d (warp %2d, %5.0f ns)"
                      % (m, "-" if c0 is None else c0, c, w, n))
            print("    + fused layout (block size 16): %.3f us per node%s"
                  % (with_layout, "; its probe:" if lmarks else ""))
            for m, c0, c, w, n in lmarks:
                print("      %-32s %6s / %6d (warp %2d, %5.0f ns)"
                      % (m, "-" if c0 is None else c0, c, w, n))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if differ:
        print("\noutputs differ from the shipped kernel's: " + "; ".join(differ))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
