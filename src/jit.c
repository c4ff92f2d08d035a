#include "jit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

/* Exactness, not speed: no FMA contraction, no flush-to-zero, IEEE division
 * and square root, so the device multiply is the host arm's multiply. */
const char *const memra_jit_options[] = {"--fmad=false", "--ftz=false", "--prec-div=true",
                                         "--prec-sqrt=true", NULL};

static memra_status nvrtc_fail(const memra_driver *d, nvrtcResult r, const char *call)
{
    return memra_fail(MEMRA_ERR_NVRTC, "NVRTC %s failed: %s", call, d->nvrtcGetErrorString(r));
}

memra_status memra_jit_pick_arch(const memra_driver *d, int sm, int *arch, int *is_ptx)
{
    int n = 0;
    nvrtcResult r = d->nvrtcGetNumSupportedArchs(&n);
    if (r != NVRTC_SUCCESS)
        return nvrtc_fail(d, r, "nvrtcGetNumSupportedArchs");
    int archs[128];
    if (n <= 0 || n > (int)(sizeof archs / sizeof archs[0]))
        return memra_fail(MEMRA_ERR_NVRTC, "NVRTC reports %d supported archs", n);
    r = d->nvrtcGetSupportedArchs(archs);
    if (r != NVRTC_SUCCESS)
        return nvrtc_fail(d, r, "nvrtcGetSupportedArchs");
    int best = 0;
    for (int i = 0; i < n; i++) {
        if (archs[i] == sm) {
            *arch = sm;
            *is_ptx = 0;
            return MEMRA_OK;
        }
        if (archs[i] < sm && archs[i] > best)
            best = archs[i];
    }
    if (!best)
        return memra_fail(MEMRA_ERR_NVRTC,
                          "NVRTC (%d archs, lowest sm_%d) cannot target a device of sm_%d", n,
                          archs[0], sm);
    /* An SM newer than this NVRTC: PTX for the newest arch it knows, which the
     * driver JIT-compiles for the device (slow to load, but correct). */
    *arch = best;
    *is_ptx = 1;
    return MEMRA_OK;
}

memra_status memra_jit_compile_src(const memra_driver *d, const char *src, const char *file,
                                   int arch, int is_ptx, const char *const *options,
                                   memra_image *out)
{
    memset(out, 0, sizeof *out);
    char arch_opt[48];
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s_%d", is_ptx ? "compute" : "sm",
             arch);
    const char *opts[32];
    int n_opts = 0;
    opts[n_opts++] = arch_opt;
    for (int i = 0; options && options[i] && n_opts < 32; i++)
        opts[n_opts++] = options[i];

    nvrtcProgram prog;
    nvrtcResult r = d->nvrtcCreateProgram(&prog, src, file, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS)
        return nvrtc_fail(d, r, "nvrtcCreateProgram");

    memra_status st = MEMRA_OK;
    r = d->nvrtcCompileProgram(prog, n_opts, opts);
    if (r != NVRTC_SUCCESS) {
        size_t log_size = 0;
        char *log = NULL;
        if (d->nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 0 &&
            (log = malloc(log_size)) && d->nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS)
            st = memra_fail(MEMRA_ERR_NVRTC, "NVRTC compile for %s failed: %s; log:\n%s", arch_opt,
                            d->nvrtcGetErrorString(r), log);
        else
            st = memra_fail(MEMRA_ERR_NVRTC, "NVRTC compile for %s failed: %s (no log)", arch_opt,
                            d->nvrtcGetErrorString(r));
        free(log);
        d->nvrtcDestroyProgram(&prog);
        return st;
    }

    size_t size = 0;
    r = is_ptx ? d->nvrtcGetPTXSize(prog, &size) : d->nvrtcGetCUBINSize(prog, &size);
    if (r != NVRTC_SUCCESS) {
        st = nvrtc_fail(d, r, is_ptx ? "nvrtcGetPTXSize" : "nvrtcGetCUBINSize");
    } else if (!(out->data = malloc(size ? size : 1))) {
        st = memra_fail(MEMRA_ERR_OUT_OF_MEMORY, "NVRTC image of %zu bytes: out of memory", size);
    } else {
        r = is_ptx ? d->nvrtcGetPTX(prog, out->data) : d->nvrtcGetCUBIN(prog, out->data);
        if (r != NVRTC_SUCCESS) {
            st = nvrtc_fail(d, r, is_ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN");
            free(out->data);
            out->data = NULL;
        } else {
            out->size = size;
            out->is_ptx = is_ptx;
            out->arch = arch;
        }
    }
    d->nvrtcDestroyProgram(&prog);
    return st;
}

memra_status memra_jit_compile(const memra_driver *d, int arch, int is_ptx, memra_image *out)
{
    return memra_jit_compile_src(d, memra_kernel_vrows_src, "vrows.cu", arch, is_ptx,
                                 memra_jit_options, out);
}

void memra_image_free(memra_image *img)
{
    if (!img)
        return;
    free(img->data);
    memset(img, 0, sizeof *img);
}
