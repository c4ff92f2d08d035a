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

/* MEMRA_KERNELS' rows as data, indexed by kernel id. */
static const struct {
    const char *name;
    memra_module_id module;
    const char *prepare;
} kernel_rows[] = {
#define MEMRA_X(id, name, module, prepare) {name, MEMRA_MODULE_##module, prepare},
    MEMRA_KERNELS(MEMRA_X)
#undef MEMRA_X
};

const char *memra_kernel_name(memra_kernel_id k)
{
    return kernel_rows[k].name;
}

memra_module_id memra_kernel_module(memra_kernel_id k)
{
    return kernel_rows[k].module;
}

const char *memra_kernel_prepare(memra_kernel_id k)
{
    return kernel_rows[k].prepare;
}
