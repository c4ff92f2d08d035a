/* A serving process's view of memra: dlopen the shared library with
 * RTLD_NOW | RTLD_LOCAL, resolve everything through dlsym, check the version
 * against the header, run the host arm, and create an engine: NO_DRIVER where
 * libcuda is absent, success (or NO_DEVICE) where it is present. Links no
 * part of memra. usage: harness_dlopen /path/to/libmemra.so.2 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <memra/memra.h>

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "harness: " __VA_ARGS__);                                                  \
        fputc('\n', stderr);                                                                       \
        return 1;                                                                                  \
    } while (0)

#define RESOLVE(name)                                                                              \
    __typeof__(&name) p_##name;                                                                    \
    do {                                                                                           \
        void *s_ = dlsym(h, #name);                                                                \
        if (!s_)                                                                                   \
            FAIL("dlsym(%s): %s", #name, dlerror());                                               \
        memcpy(&p_##name, &s_, sizeof s_);                                                         \
    } while (0)

int main(int argc, char **argv)
{
    if (argc < 2)
        FAIL("usage: harness_dlopen LIB");
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h)
        FAIL("dlopen(%s): %s", argv[1], dlerror());
    RESOLVE(memra_version);
    RESOLVE(memra_version_string);
    RESOLVE(memra_status_string);
    RESOLVE(memra_last_error);
    RESOLVE(memra_vrows_tables_host);
    RESOLVE(memra_engine_create);
    RESOLVE(memra_engine_destroy);
    RESOLVE(memra_vrows_tables);
    /* Internal symbols must not be reachable. */
    if (dlsym(h, "memra_driver_get") || dlsym(h, "memra_fail") || dlsym(h, "memra_cache_read"))
        FAIL("an internal symbol is exported");

    if (p_memra_version() != MEMRA_VERSION_NUMBER)
        FAIL("library version %u, header %u", p_memra_version(), MEMRA_VERSION_NUMBER);
    if (strcmp(p_memra_version_string(), MEMRA_VERSION_STRING) != 0)
        FAIL("version string %s != %s", p_memra_version_string(), MEMRA_VERSION_STRING);

    const int32_t sel[2] = {1, 255};
    const float selw[2] = {0.5f, 0.25f};
    memra_vrows_slabs sl = {{0x7e0000000000ull, 0x7e4000000000ull, 0x7e8000000000ull},
                            {24ull << 20, 24ull << 20, 48ull << 20}};
    uint64_t ptrs[6];
    float scl[6];
    memra_status st = p_memra_vrows_tables_host(sel, selw, 2, 256, NULL, &sl, ptrs, scl, NULL);
    if (st != MEMRA_OK)
        FAIL("host arm: %s", p_memra_last_error());
    if (ptrs[1] != 0x7e0000000000ull + 255ull * (24ull << 20) ||
        ptrs[5] != 0x7e8000000000ull + 255ull * (48ull << 20) || scl[4] != 0.5f)
        FAIL("host arm produced wrong tables");
    if (p_memra_vrows_tables_host(NULL, selw, 2, 256, NULL, &sl, ptrs, scl, NULL) !=
            MEMRA_ERR_NULL_ARG ||
        !strstr(p_memra_last_error(), "sel is NULL"))
        FAIL("bad input not reported through the dlopen()ed library");

    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    memra_engine *eng = NULL;
    st = p_memra_engine_create(0, &eng);
    if (!cuda) {
        if (st != MEMRA_ERR_NO_DRIVER)
            FAIL("no libcuda here, but engine_create gave %s", p_memra_status_string(st));
        printf("harness: no libcuda: engine_create -> %s (%s)\n", p_memra_status_string(st),
               p_memra_last_error());
    } else {
        if (st != MEMRA_OK && st != MEMRA_ERR_NO_DEVICE)
            FAIL("engine_create: %s", p_memra_last_error());
        printf("harness: libcuda present: engine_create -> %s\n", p_memra_status_string(st));
        p_memra_engine_destroy(eng);
    }
    printf("harness: memra %s loaded RTLD_LOCAL, host arm exact, errors clear\n",
           p_memra_version_string());
    return 0;
}
