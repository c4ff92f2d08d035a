/* The mock driver: The mock's own NVRTC. */
#include "mock_internal.h"

/* ---- NVRTC ---- */

nvrtcResult m_nvrtcVersion(int *maj, int *min)
{
    ENTER_NV(nvrtcVersion);
    *maj = mock_nv.major;
    *min = mock_nv.minor;
    return NVRTC_SUCCESS;
}
const char *m_nvrtcGetErrorString(nvrtcResult r)
{
    return r == NVRTC_ERROR_COMPILATION ? "NVRTC_ERROR_COMPILATION" : "NVRTC_ERROR_MOCK";
}
nvrtcResult m_nvrtcGetNumSupportedArchs(int *n)
{
    ENTER_NV(nvrtcGetNumSupportedArchs);
    *n = mock_nv.n_archs;
    return NVRTC_SUCCESS;
}
nvrtcResult m_nvrtcGetSupportedArchs(int *a)
{
    ENTER_NV(nvrtcGetSupportedArchs);
    memcpy(a, mock_nv.archs, sizeof(int) * (size_t)mock_nv.n_archs);
    return NVRTC_SUCCESS;
}
pthread_mutex_t options_lock = PTHREAD_MUTEX_INITIALIZER;
nvrtcResult m_nvrtcCreateProgram(nvrtcProgram *p, const char *src, const char *name, int nh,
                                 const char *const *h, const char *const *hn)
{
    (void)name, (void)nh, (void)h, (void)hn;
    ENTER_NV(nvrtcCreateProgram);
    assert_non_null(strstr(src, "MEMRA_KERNEL")); /* one of memra's modules */
    mock_program *prog = calloc(1, sizeof *prog);
    if (!prog)
        return NVRTC_ERROR_OUT_OF_MEMORY;
    /* A module for one layer spec: its defines, kept for its image. */
    if (strncmp(src, "#define MEMRA_SPEC_", 19) == 0) {
        const char *end = strstr(src, "\n#define MEMRA_SPEC_FLAGS ");
        end = end ? strchr(end + 1, '\n') : NULL;
        const size_t n = end ? (size_t)(end - src) : 0;
        unsigned *v = prog->spec;
        assert_int_equal(sscanf(src,
                                "#define MEMRA_SPEC_E %uu #define MEMRA_SPEC_NG %uu "
                                "#define MEMRA_SPEC_TG %uu #define MEMRA_SPEC_K %uu "
                                "#define MEMRA_SPEC_FLAGS %uu",
                                &v[0], &v[1], &v[2], &v[3], &v[4]),
                         5);
        prog->special = 1;
        pthread_mutex_lock(&options_lock);
        snprintf(mock.spec_defines, sizeof mock.spec_defines, "%.*s", (int)n, src);
        pthread_mutex_unlock(&options_lock);
        mock.spec_programs++;
    }
    /* Heap-allocated so that a program the library never destroys is a leak
     * that AddressSanitizer and valgrind report. */
    *p = (nvrtcProgram)prog;
    return NVRTC_SUCCESS;
}
nvrtcResult m_nvrtcDestroyProgram(nvrtcProgram *p)
{
    free(*p);
    *p = NULL;
    return failing(MOCK_nvrtcDestroyProgram) ? (nvrtcResult)mock.fail_result : NVRTC_SUCCESS;
}
nvrtcResult m_nvrtcCompileProgram(nvrtcProgram p, int n, const char *const *opts)
{
    (void)p;
    ENTER_NV(nvrtcCompileProgram);
    pthread_mutex_lock(&options_lock); /* engines compile concurrently */
    mock.options[0] = 0;
    for (int i = 0; i < n; i++) {
        strncat(mock.options, opts[i], sizeof mock.options - strlen(mock.options) - 2);
        strcat(mock.options, " ");
    }
    pthread_mutex_unlock(&options_lock);
    if (mock.compile_delay_ms)
        usleep((useconds_t)mock.compile_delay_ms * 1000);
    if (mock.compile_log)
        return NVRTC_ERROR_COMPILATION;
    return NVRTC_SUCCESS;
}
nvrtcResult m_nvrtcGetProgramLogSize(nvrtcProgram p, size_t *n)
{
    (void)p;
    ENTER_NV(nvrtcGetProgramLogSize);
    *n = mock.compile_log ? strlen(mock.compile_log) + 1 : 1;
    return NVRTC_SUCCESS;
}
nvrtcResult m_nvrtcGetProgramLog(nvrtcProgram p, char *log)
{
    (void)p;
    ENTER_NV(nvrtcGetProgramLog);
    strcpy(log, mock.compile_log ? mock.compile_log : "");
    return NVRTC_SUCCESS;
}
/* The image: "MOCKIMG-CUBIN" or "MOCKIMG-PTX", and for a layer spec's
 * module "-SPEC" and its five values (cuModuleLoadData reads them back). */
static size_t image_of(nvrtcProgram p, const char *kind, char *out, size_t n)
{
    const mock_program *prog = (const mock_program *)p;
    const unsigned *v = prog->spec;
    if (!prog->special)
        return (size_t)snprintf(out, n, "MOCKIMG-%s", kind) + 1;
    return (size_t)snprintf(out, n, "MOCKIMG-%s-SPEC %u %u %u %u %u", kind, v[0], v[1], v[2], v[3],
                            v[4]) +
           1;
}
nvrtcResult m_nvrtcGetPTXSize(nvrtcProgram p, size_t *n)
{
    ENTER_NV(nvrtcGetPTXSize);
    *n = image_of(p, "PTX", NULL, 0);
    return NVRTC_SUCCESS;
}
nvrtcResult m_nvrtcGetPTX(nvrtcProgram p, char *out)
{
    ENTER_NV(nvrtcGetPTX);
    image_of(p, "PTX", out, image_of(p, "PTX", NULL, 0));
    return NVRTC_SUCCESS;
}
nvrtcResult m_nvrtcGetCUBINSize(nvrtcProgram p, size_t *n)
{
    ENTER_NV(nvrtcGetCUBINSize);
    *n = image_of(p, "CUBIN", NULL, 0);
    return NVRTC_SUCCESS;
}
nvrtcResult m_nvrtcGetCUBIN(nvrtcProgram p, char *out)
{
    ENTER_NV(nvrtcGetCUBIN);
    image_of(p, "CUBIN", out, image_of(p, "CUBIN", NULL, 0));
    return NVRTC_SUCCESS;
}
