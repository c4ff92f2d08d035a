/* A stand-in NVRTC library for the tests of how memra finds and chooses
 * NVRTC: it reports the version and archs it was built with (FAKE_MAJOR,
 * FAKE_MINOR, FAKE_ARCHS) and either "compiles" into an image the mock
 * driver judges by the driver's rules ("MOCKIMG-FAKE <kind> <maj>.<min>
 * <arch>"), makes an image no driver loads (FAKE_MODE 1), or fails every
 * compile with a log (FAKE_MODE 2). Built as libnvrtc.so.<major> in a
 * folder of its own, as a pip wheel or a second toolkit would install it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/cuda_abi.h"

#ifndef FAKE_MODE
#define FAKE_MODE 0
#endif

static const int archs[] = {FAKE_ARCHS};

typedef struct fake_prog {
    char image[96];
} fake_prog;

const char *nvrtcGetErrorString(nvrtcResult r)
{
    return r == NVRTC_SUCCESS ? "NVRTC_SUCCESS" : "NVRTC_ERROR (fake)";
}

nvrtcResult nvrtcVersion(int *major, int *minor)
{
    *major = FAKE_MAJOR;
    *minor = FAKE_MINOR;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetNumSupportedArchs(int *n)
{
    *n = (int)(sizeof archs / sizeof archs[0]);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetSupportedArchs(int *out)
{
    memcpy(out, archs, sizeof archs);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram *p, const char *src, const char *name, int n,
                               const char *const *headers, const char *const *names)
{
    (void)src, (void)name, (void)n, (void)headers, (void)names;
    *p = (nvrtcProgram)calloc(1, sizeof(fake_prog));
    return *p ? NVRTC_SUCCESS : NVRTC_ERROR_OUT_OF_MEMORY;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram *p)
{
    free(*p);
    *p = NULL;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram p, int n, const char *const *opts)
{
    fake_prog *f = (fake_prog *)p;
    if (FAKE_MODE == 2)
        return NVRTC_ERROR_COMPILATION;
    for (int i = 0; i < n; i++) {
        int arch;
        if (sscanf(opts[i], "--gpu-architecture=sm_%d", &arch) == 1)
            snprintf(f->image, sizeof f->image, "%s CUBIN %d.%d %d",
                     FAKE_MODE == 1 ? "BADIMG-FAKE" : "MOCKIMG-FAKE", FAKE_MAJOR, FAKE_MINOR, arch);
        else if (sscanf(opts[i], "--gpu-architecture=compute_%d", &arch) == 1)
            snprintf(f->image, sizeof f->image, "%s PTX %d.%d %d",
                     FAKE_MODE == 1 ? "BADIMG-FAKE" : "MOCKIMG-FAKE", FAKE_MAJOR, FAKE_MINOR, arch);
    }
    return f->image[0] ? NVRTC_SUCCESS : NVRTC_ERROR_INVALID_OPTION;
}

static const char fail_log[] = "fake NVRTC: this one refuses every compile";

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram p, size_t *n)
{
    (void)p;
    *n = FAKE_MODE == 2 ? sizeof fail_log : 1;
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram p, char *log)
{
    (void)p;
    strcpy(log, FAKE_MODE == 2 ? fail_log : "");
    return NVRTC_SUCCESS;
}

static nvrtcResult image_size(nvrtcProgram p, size_t *n)
{
    *n = strlen(((fake_prog *)p)->image) + 1;
    return NVRTC_SUCCESS;
}

static nvrtcResult image(nvrtcProgram p, char *out)
{
    strcpy(out, ((fake_prog *)p)->image);
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetPTXSize(nvrtcProgram p, size_t *n)
{
    return image_size(p, n);
}

nvrtcResult nvrtcGetPTX(nvrtcProgram p, char *out)
{
    return image(p, out);
}

nvrtcResult nvrtcGetCUBINSize(nvrtcProgram p, size_t *n)
{
    return image_size(p, n);
}

nvrtcResult nvrtcGetCUBIN(nvrtcProgram p, char *out)
{
    return image(p, out);
}

#ifdef FAKE_NEEDS_DEP
/* A use of the library it needs, so the link keeps its DT_NEEDED. */
int memra_fake_dep(void);
int fake_nvrtc_uses_its_dep(void);
int fake_nvrtc_uses_its_dep(void)
{
    return memra_fake_dep();
}
#endif
