#!/usr/bin/env python3
"""What a warm first use is made of: the driver steps a fresh engine's first
table launch takes when the kernel cache already holds its CUBIN, each timed
on its own (median of repeats, in one process, after one untimed round), to
set beside `memra bench`'s "warm cache, CUBIN" first use:

    python3 benchmarks/first_use_probe.py

Steps: loading the table module's CUBIN (cuModuleLoadData, then
cuModuleUnload), the pinned shadow and device buffer of a layer's planes
(cuMemAllocHost, cuMemAlloc), the event an upload records, the upload
itself, and the first launch of a freshly loaded module with its sync (a
module's first launch pays for its upload to the GPU). Needs only the driver
and NVRTC (ctypes); the CUBIN is built here with memra's options.
"""
import ctypes
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import route_probe as rp  # noqa: E402  (the driver and NVRTC loaders, the options)

cu = rp.cu


def cubin_of_vrows(arch):
    src = "".join(open(os.path.join(rp.ROOT, "kernels_src", f)).read() + "\n"
                  for f in ["abi.h", "vrows_pair.cuh", "vrows.cu"])
    nv = rp.nvrtc
    prog = ctypes.c_void_p()
    assert nv.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"vrows.cu", 0, None, None) == 0
    opts = [o.encode() for o in rp.JIT_OPTIONS + ["--gpu-architecture=sm_%d" % arch]]
    assert nv.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)) == 0
    n = ctypes.c_size_t()
    nv.nvrtcGetCUBINSize(prog, ctypes.byref(n))
    cubin = ctypes.create_string_buffer(n.value)
    nv.nvrtcGetCUBIN(prog, cubin)
    return cubin, n.value


def timed(fn, reps=7):
    fn()  # one untimed round
    v = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        v.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(v)


def main():
    ck = rp.ck
    arch, stream = rp.open_device()
    cubin, size = cubin_of_vrows(arch)
    print("table module CUBIN: %d bytes, sm_%d" % (size, arch))

    def load_unload():
        mod = ctypes.c_void_p()
        ck(cu.cuModuleLoadData(ctypes.byref(mod), cubin), "load")
        ck(cu.cuModuleUnload(mod), "unload")

    def pinned():
        p = ctypes.c_void_p()
        ck(cu.cuMemAllocHost_v2(ctypes.byref(p), ctypes.c_size_t(3 * 256 * 4)), "pinned")
        ck(cu.cuMemFreeHost(p), "free pinned")

    def device_buf():
        p = ctypes.c_uint64()
        ck(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(3 * 256 * 4)), "alloc")
        ck(cu.cuMemFree_v2(p), "free")

    def event():
        e = ctypes.c_void_p()
        ck(cu.cuEventCreate(ctypes.byref(e), 2), "event")  # CU_EVENT_DISABLE_TIMING
        ck(cu.cuEventDestroy_v2(e), "event destroy")

    host = ctypes.create_string_buffer(3 * 256 * 4)
    dbuf = ctypes.c_uint64()
    ck(cu.cuMemAlloc_v2(ctypes.byref(dbuf), ctypes.c_size_t(3 * 256 * 4)), "alloc")

    def upload():
        ck(cu.cuMemcpyHtoDAsync_v2(dbuf, host, ctypes.c_size_t(3 * 256 * 4), stream), "upload")
        ck(cu.cuStreamSynchronize(stream), "sync")

    def first_launch():
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        ck(cu.cuModuleLoadData(ctypes.byref(mod), cubin), "load")
        ck(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"memra_vrows_kernel"), "function")
        t0 = time.perf_counter()
        # n_pairs = 0: the kernel returns at once; what is timed is the launch
        params = ctypes.create_string_buffer(136)  # src/vrows/vrows_abi.h, all zero
        sz = ctypes.c_size_t(136)
        extra = (ctypes.c_void_p * 5)(1, ctypes.cast(params, ctypes.c_void_p),
                                      2, ctypes.cast(ctypes.pointer(sz), ctypes.c_void_p), 0)
        r = cu.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, None, extra)
        ck(cu.cuStreamSynchronize(stream), "sync")
        dt = (time.perf_counter() - t0) * 1e6
        ck(cu.cuModuleUnload(mod), "unload")
        return dt if r == 0 else float("nan")

    rows = [("cuModuleLoadData + cuModuleUnload (table module CUBIN)", timed(load_unload)),
            ("cuMemAllocHost + cuMemFreeHost (a layer's pinned shadow)", timed(pinned)),
            ("cuMemAlloc + cuMemFree (a layer's device planes)", timed(device_buf)),
            ("cuEventCreate + cuEventDestroy", timed(event)),
            ("upload of 3 planes (256 experts) + sync", timed(upload))]
    first_launch()
    rows.append(("first launch of a freshly loaded module + sync",
                 statistics.median(first_launch() for _ in range(7))))
    for name, us in rows:
        print("  %-62s %8.1f us" % (name, us))
    return 0


if __name__ == "__main__":
    sys.exit(main())
