#include "jit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/error.h"
#include "driver/nvrtc_find.h"

/* Exactness, not speed: no FMA contraction, no flush-to-zero, IEEE division
 * and square root, so the device multiply is the host arm's multiply. */
const char *const memra_jit_options[] = {"--fmad=false", "--ftz=false", "--prec-div=true",
                                         "--prec-sqrt=true", NULL};

static memra_status nvrtc_fail(const memra_nvrtc *nv, nvrtcResult r, const char *call)
{
    return memra_fail(MEMRA_ERR_NVRTC, "NVRTC %d.%d (%s) %s failed: %s", nv->major, nv->minor,
                      nv->path, call, nv->nvrtcGetErrorString(r));
}

int memra_jit_target(const memra_nvrtc *nv, int sm, int driver_version, int is_ptx, int *arch,
                     char *why, size_t n)
{
    const int drv_major = driver_version / 1000, drv_minor = driver_version % 1000 / 10;
    if (!MEMRA_NVRTC_VERSION_OK(nv->major, nv->minor)) {
        snprintf(why, n, "NVRTC version %d.%d is no CUDA release's", nv->major, nv->minor);
        return 0;
    }
    if (nv->major > drv_major) {
        snprintf(why, n,
                 "NVRTC %d.%d is newer than the driver (CUDA %d.%d): the driver cannot load what "
                 "it makes",
                 nv->major, nv->minor, drv_major, drv_minor);
        return 0;
    }
    int best = 0;
    for (int i = 0; i < nv->n_archs; i++) {
        const int a = nv->archs[i];
        if (a <= sm && (is_ptx || a / 10 == sm / 10) && a > best)
            best = a;
    }
    if (!best) {
        if (is_ptx)
            snprintf(why, n, "NVRTC %d.%d knows neither sm_%d nor any arch below it (from sm_%d)",
                     nv->major, nv->minor, sm, nv->n_archs ? nv->archs[0] : 0);
        else
            snprintf(why, n, "NVRTC %d.%d has no CUBIN target of sm_%d's major at or below it",
                     nv->major, nv->minor, sm);
        return 0;
    }
    if (is_ptx && MEMRA_CUDA_VERSION_CODE(nv->major, nv->minor) > driver_version) {
        snprintf(why, n,
                 "PTX from NVRTC %d.%d needs a driver of CUDA %d.%d or newer (this one is %d.%d)",
                 nv->major, nv->minor, nv->major, nv->minor, drv_major, drv_minor);
        return 0;
    }
    *arch = best;
    return 1;
}

/* The plan over the candidates listed so far, from the first-th on; *seen
 * becomes how many were listed. */
static int plan_listed(const memra_driver *d, int sm, int driver_version, int force_ptx, int first,
                       memra_jit_choice *plan, int max, char *why, size_t n, int *seen)
{
    const memra_nvrtc *list;
    const int n_c = memra_nvrtc_candidates(d, &list);
    *seen = n_c;
    int k = 0, cubins = 0;
    size_t used = strlen(why);
    for (int pass = force_ptx ? 1 : 0; pass < 2; pass++) {
        for (int i = first; i < n_c; i++) {
            const memra_nvrtc *nv = &list[i];
            char reason[256];
            int arch, usable = 0;
            if (nv->status)
                snprintf(reason, sizeof reason, "%s", nv->why);
            else
                usable =
                    memra_jit_target(nv, sm, driver_version, pass, &arch, reason, sizeof reason);
            if (usable && k < max) {
                plan[k++] = (memra_jit_choice){nv, arch, pass};
                cubins += !pass;
                continue;
            }
            /* Refused for both kinds: say why, once, with the last reason. */
            int had_cubin = 0;
            for (int j = 0; j < cubins; j++)
                had_cubin |= plan[j].nv == nv;
            if (pass == 1 && !had_cubin && used < n) {
                char e[MEMRA_ESCAPED_MAX];
                used += (size_t)snprintf(why + used, n - used, "\n  %s (%s): %s",
                                         memra_escape(nv->path, e, sizeof e), nv->origin, reason);
            }
        }
    }
    return k;
}

int memra_jit_plan(const memra_driver *d, int sm, int driver_version, int force_ptx,
                   memra_jit_choice *plan, int max, char *why, size_t n, int *seen)
{
    /* Candidates are opened one at a time until one serves this device and
     * driver: a CUBIN for its SM (PTX with force_ptx). With none that can,
     * every candidate ends up opened and the plan is whatever they offer.
     * Other threads open candidates too: when none is left to open, the list
     * is read once more, since some may have been opened after the last
     * reading. */
    const size_t base = strlen(why);
    for (int more = 1;; more = memra_nvrtc_open_next(d)) {
        why[base] = 0;
        const int k = plan_listed(d, sm, driver_version, force_ptx, 0, plan, max, why, n, seen);
        if ((k > 0 && (force_ptx || !plan[0].is_ptx)) || !more)
            return k;
    }
}

int memra_jit_plan_more(const memra_driver *d, int sm, int driver_version, int force_ptx,
                        memra_jit_choice *plan, int max, char *why, size_t n, int *seen)
{
    /* From the first candidate the caller has not seen, whoever opened it. */
    for (;;) {
        const int more = memra_nvrtc_open_next(d);
        const int k = plan_listed(d, sm, driver_version, force_ptx, *seen, plan, max, why, n, seen);
        if (k > 0 || !more)
            return k;
    }
}

memra_status memra_jit_compile_src(const memra_nvrtc *nv, const char *src, const char *file,
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
    nvrtcResult r = nv->nvrtcCreateProgram(&prog, src, file, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS)
        return nvrtc_fail(nv, r, "nvrtcCreateProgram");

    memra_status st = MEMRA_OK;
    r = nv->nvrtcCompileProgram(prog, n_opts, opts);
    if (r != NVRTC_SUCCESS) {
        size_t log_size = 0;
        char *log = NULL;
        if (nv->nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 0 &&
            (log = malloc(log_size)) && nv->nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS)
            st = memra_fail(MEMRA_ERR_NVRTC, "NVRTC %d.%d compile for %s failed: %s; log:\n%s",
                            nv->major, nv->minor, arch_opt, nv->nvrtcGetErrorString(r), log);
        else
            st = memra_fail(MEMRA_ERR_NVRTC, "NVRTC compile for %s failed: %s (no log)", arch_opt,
                            nv->nvrtcGetErrorString(r));
        free(log);
        nv->nvrtcDestroyProgram(&prog);
        return st;
    }

    size_t size = 0;
    r = is_ptx ? nv->nvrtcGetPTXSize(prog, &size) : nv->nvrtcGetCUBINSize(prog, &size);
    if (r != NVRTC_SUCCESS) {
        st = nvrtc_fail(nv, r, is_ptx ? "nvrtcGetPTXSize" : "nvrtcGetCUBINSize");
    } else if (!(out->data = malloc(size ? size : 1))) {
        st = memra_fail(MEMRA_ERR_OUT_OF_MEMORY, "NVRTC image of %zu bytes: out of memory", size);
    } else {
        r = is_ptx ? nv->nvrtcGetPTX(prog, out->data) : nv->nvrtcGetCUBIN(prog, out->data);
        if (r != NVRTC_SUCCESS) {
            st = nvrtc_fail(nv, r, is_ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN");
            free(out->data);
            out->data = NULL;
        } else {
            out->size = size;
            out->is_ptx = is_ptx;
            out->arch = arch;
        }
    }
    nv->nvrtcDestroyProgram(&prog);
    return st;
}

memra_status memra_jit_compile(const memra_nvrtc *nv, const memra_source *src, int arch, int is_ptx,
                               memra_image *out)
{
    return memra_jit_compile_src(nv, src->text, src->name, arch, is_ptx, memra_jit_options, out);
}

void memra_image_free(memra_image *img)
{
    if (!img)
        return;
    free(img->data);
    memset(img, 0, sizeof *img);
}
