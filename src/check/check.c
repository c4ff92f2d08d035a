/* memra_route_check(_ex), memra_vrows_check and memra_layout_check: each
 * call's argument checks, made in the order that call makes them (route/,
 * vrows/ and layout/: each operation's device and host calls) through the
 * very validators it uses, so that a binding asking "would this be
 * refused?" gets the call's own status and message. tests/test_check.c
 * holds every kind to its call, case by case. */
#include <memra/memra.h>

#include "base/error.h"
#include "engine/layer_spec.h"
#include "layout/layout_spec.h"
#include "route/route_spec.h"
#include "vrows/vrows_spec.h"

/* The fused call's layout checks (route.c's memra_route_launch, route_host.c's
 * memra_route_tables_host_ex): after the routing's own, which passed, so
 * spec is valid and n_tokens * K fits. */
static memra_status fused_layout(const char *fn, const memra_route_spec *spec, uint32_t n_tokens,
                                 uint64_t sel, const memra_layout_spec *layout_spec,
                                 const memra_layout *layout, int device)
{
    memra_layout_params lp;
    return memra_route_layout_check(fn, spec, sel, n_tokens * memra_route_pairs_per_token(spec),
                                    layout_spec, layout, device, &lp);
}

/* `self` names the entry point asked, for the refusal of a wrong kind. */
static memra_status route_check(const char *self, memra_checked_call call, uint64_t logits,
                                uint32_t n_tokens, const memra_route_spec *spec, int il,
                                const memra_vrows_macros *macros, const memra_vrows_slabs *slabs,
                                uint64_t sel, uint64_t selw, uint64_t ptrs, uint64_t scl,
                                const memra_layout_spec *layout_spec, const memra_layout *layout)
{
    int have_macros;
    memra_status st;
    switch (call) {
    case MEMRA_CALL_ROUTE_TABLES_HOST:
        return memra_route_validate("memra_route_tables_host", logits, n_tokens, spec, macros,
                                    slabs, sel, selw, ptrs, scl, &have_macros);
    case MEMRA_CALL_ROUTE_TABLES: {
        static const char fn[] = "memra_route_tables";
        st = memra_route_validate(fn, logits, n_tokens, spec, macros, slabs, sel, selw, ptrs, scl,
                                  &have_macros);
        if (st || n_tokens == 0) /* an empty batch returns before the layer is looked at */
            return st;
        /* route.c's enter(): the layer index, whatever the layer mirrors */
        return memra_check_layer(fn, il, 0);
    }
    case MEMRA_CALL_ROUTE_PREPARE_LAYER: {
        static const char fn[] = "memra_route_prepare_layer";
        if ((st = memra_route_spec_check(fn, spec)) ||
            (st = memra_macros_check(fn, macros, &have_macros)))
            return st;
        return memra_check_layer(fn, il, 0);
    }
    case MEMRA_CALL_ROUTE_TABLES_EX: {
        /* route.c's memra_route_launch: the routing's arguments, the
         * layout's, then the layer, unless the batch is empty and has no
         * layout (a layout's counts are per layer, so it names one even
         * then). */
        static const char fn[] = "memra_route_tables_ex";
        st = memra_route_validate(fn, logits, n_tokens, spec, macros, slabs, sel, selw, ptrs, scl,
                                  &have_macros);
        const int laid = layout_spec || layout;
        if (!st && laid)
            st = fused_layout(fn, spec, n_tokens, sel, layout_spec, layout, 1);
        if (st || (n_tokens == 0 && !laid))
            return st;
        return memra_check_layer(fn, il, 0);
    }
    case MEMRA_CALL_ROUTE_TABLES_HOST_EX: {
        /* Without a layout the call is memra_route_tables_host, by its name. */
        if (!layout_spec && !layout)
            return memra_route_validate("memra_route_tables_host", logits, n_tokens, spec, macros,
                                        slabs, sel, selw, ptrs, scl, &have_macros);
        static const char fn[] = "memra_route_tables_host_ex";
        st = memra_route_validate(fn, logits, n_tokens, spec, macros, slabs, sel, selw, ptrs, scl,
                                  &have_macros);
        return st ? st : fused_layout(fn, spec, n_tokens, sel, layout_spec, layout, 0);
    }
    default:
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: call = %d is not a routing call (MEMRA_CALL_ROUTE_*)", self,
                          (int)call);
    }
}

memra_status memra_route_check(memra_checked_call call, uint64_t logits, uint32_t n_tokens,
                               const memra_route_spec *spec, int il,
                               const memra_vrows_macros *macros, const memra_vrows_slabs *slabs,
                               uint64_t sel, uint64_t selw, uint64_t ptrs, uint64_t scl)
{
    return route_check("memra_route_check", call, logits, n_tokens, spec, il, macros, slabs, sel,
                       selw, ptrs, scl, NULL, NULL);
}

memra_status memra_route_check_ex(memra_checked_call call, uint64_t logits, uint32_t n_tokens,
                                  const memra_route_spec *spec, int il,
                                  const memra_vrows_macros *macros, const memra_vrows_slabs *slabs,
                                  uint64_t sel, uint64_t selw, uint64_t ptrs, uint64_t scl,
                                  const memra_layout_spec *layout_spec, const memra_layout *layout)
{
    return route_check("memra_route_check_ex", call, logits, n_tokens, spec, il, macros, slabs, sel,
                       selw, ptrs, scl, layout_spec, layout);
}

memra_status memra_layout_check(memra_checked_call call, uint64_t ids, uint32_t n_pairs,
                                const memra_layout_spec *spec, const memra_layout *out)
{
    /* Both calls are memra_layout_validate and nothing else before they
     * write (layout.c checks the engine first, which is not judged here). */
    memra_layout_params lp;
    switch (call) {
    case MEMRA_CALL_LAYOUT_TABLES:
        return memra_layout_validate("memra_layout_tables", ids, n_pairs, spec, out, 1, &lp);
    case MEMRA_CALL_LAYOUT_TABLES_HOST:
        return memra_layout_validate("memra_layout_tables_host", ids, n_pairs, spec, out, 0, &lp);
    default:
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "memra_layout_check: call = %d is not a layout call "
                          "(MEMRA_CALL_LAYOUT_*)",
                          (int)call);
    }
}

memra_status memra_vrows_check(memra_checked_call call, uint64_t sel, uint64_t selw,
                               uint32_t n_pairs, uint32_t n_expert, int il,
                               const memra_vrows_macros *macros, const memra_vrows_slabs *slabs,
                               const memra_vrows_options *options, uint64_t ptrs, uint64_t scl)
{
    /* memra_vrows_tables_ex's stand-in for a NULL options pointer. */
    static const memra_vrows_options none = {0, 0, 0};
    int present;
    memra_status st;
    switch (call) {
    case MEMRA_CALL_VROWS_TABLES_HOST:
        return memra_vrows_validate("memra_vrows_tables_host", sel, selw, n_pairs, n_expert, macros,
                                    slabs, ptrs, scl, &present);
    case MEMRA_CALL_VROWS_TABLES_HOST_EX:
        return memra_vrows_validate_ex("memra_vrows_tables_host_ex", sel, selw, n_pairs, n_expert,
                                       options, macros, slabs, ptrs, scl, &present);
    case MEMRA_CALL_VROWS_TABLES: {
        static const char fn[] = "memra_vrows_tables";
        st = memra_vrows_validate(fn, sel, selw, n_pairs, n_expert, macros, slabs, ptrs, scl,
                                  &present);
        return st ? st : memra_check_layer(fn, il, 0);
    }
    case MEMRA_CALL_VROWS_TABLES_EX: {
        static const char fn[] = "memra_vrows_tables_ex";
        st = memra_vrows_validate_ex(fn, sel, selw, n_pairs, n_expert, options ? options : &none,
                                     macros, slabs, ptrs, scl, &present);
        if (st || n_pairs == 0) /* an empty call returns before the layer is looked at */
            return st;
        return memra_check_layer(fn, il, 0);
    }
    case MEMRA_CALL_VROWS_PREPARE_LAYER: {
        static const char fn[] = "memra_vrows_prepare_layer";
        if ((st = memra_macros_check(fn, macros, &present)) || (st = memra_check_layer(fn, il, 0)))
            return st;
        if (present && n_expert == 0)
            return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: n_expert is 0", fn);
        return MEMRA_OK;
    }
    default:
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "memra_vrows_check: call = %d is not a table call (MEMRA_CALL_VROWS_*)",
                          (int)call);
    }
}
