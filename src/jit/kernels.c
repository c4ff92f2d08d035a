#include "kernels.h"

#define MEMRA_X(id, sym)                                                                           \
    extern const char memra_src_##sym[];                                                           \
    extern const size_t memra_src_##sym##_len;
MEMRA_MODULES(MEMRA_X)
#undef MEMRA_X

memra_source memra_module_source(memra_module_id m)
{
    switch (m) {
#define MEMRA_X(id, sym)                                                                           \
    case MEMRA_MODULE_##id:                                                                        \
        return (memra_source){#sym ".cu", memra_src_##sym, memra_src_##sym##_len};
        MEMRA_MODULES(MEMRA_X)
#undef MEMRA_X
    default:
        return (memra_source){"", "", 0};
    }
}

const char *memra_kernel_name(memra_kernel_id k)
{
    static const char *const names[] = {
#define MEMRA_X(id, name, module, prepare) name,
        MEMRA_KERNELS(MEMRA_X)
#undef MEMRA_X
    };
    return names[k];
}

memra_module_id memra_kernel_module(memra_kernel_id k)
{
    static const memra_module_id modules[] = {
#define MEMRA_X(id, name, module, prepare) MEMRA_MODULE_##module,
        MEMRA_KERNELS(MEMRA_X)
#undef MEMRA_X
    };
    return modules[k];
}

const char *memra_kernel_prepare(memra_kernel_id k)
{
    static const char *const calls[] = {
#define MEMRA_X(id, name, module, prepare) prepare,
        MEMRA_KERNELS(MEMRA_X)
#undef MEMRA_X
    };
    return calls[k];
}
