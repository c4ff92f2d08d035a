/* The routing device arm: router logits to sel, selw and the tables in one
 * launch, with the layer's macro planes and bias mirrored like the table
 * kernel's. */
#include "engine/engine.h"
#include "route.h"

#include "base/error.h"
#include "engine/launch.h"
#include "layout/layout.h"
#include "layout/layout_spec.h"
#include "engine/layer_spec.h"
#include "route_abi.h"
#include "route_spec.h"
#include "vrows/vrows_spec.h"

/* memra_route_tables takes the block kernel (a block per token, latency
 * first) while the batch is small, the team kernel (a warp per token,
 * throughput first) past that, and the team kernel at every size for 32
 * experts or fewer, where a token is a few lanes' work. The block kernel's
 * cost grows with its blocks' threads (n_tokens x n_expert) where the team
 * kernel's hardly moves below a thousand tokens: measured per node on the
 * H100, spec-compiled (BENCHMARKS.md), the two cross between 256 and 512
 * tokens for 384 and 512 experts and between 512 and 1,024 for 128 to 256
 * (Qwen3-Next at 1,024 tokens: 21.5 us against 7.8). The bound below keeps
 * the block kernel to at most ROUTE_BLOCK_MAX_TOKENS tokens and
 * ROUTE_BLOCK_MAX_THREADS threads. The tests and the benchmark force either
 * (memra_route_variant). */
#define ROUTE_BLOCK_MAX_TOKENS 512u
#define ROUTE_BLOCK_MAX_THREADS (1u << 17)
int memra_route_variant = MEMRA_ROUTE_VARIANT_AUTO;

/* The team kernel for a spec (route_abi.h's memra_route_team_m): screened
 * for sigmoid scores past 32 experts unless `exact` (the benchmark's
 * comparison). */
static memra_kernel_id team_kernel(uint32_t n_expert, int sigmoid, int exact)
{
    const int sig = sigmoid && !exact;
    switch (memra_route_team_m(n_expert)) {
    case 1:
        return MEMRA_KERNEL_ROUTE_WARP1;
    case 4:
        return sig ? MEMRA_KERNEL_ROUTE_SIG4 : MEMRA_KERNEL_ROUTE_WARP4;
    case 8:
        return sig ? MEMRA_KERNEL_ROUTE_SIG8 : MEMRA_KERNEL_ROUTE_WARP8;
    default:
        return sig ? MEMRA_KERNEL_ROUTE_SIG16 : MEMRA_KERNEL_ROUTE_WARP16;
    }
}

/* The names the routing kernels read a layer's spec under when it is
 * compiled in (kernels_src/route_common.cuh's MEMRA_ROUTE_SPEC_CONSTANTS). */
static const char *const spec_names[] = {"MEMRA_SPEC_E", "MEMRA_SPEC_NG", "MEMRA_SPEC_TG",
                                         "MEMRA_SPEC_K", "MEMRA_SPEC_FLAGS"};

memra_special_key memra_route_special_key(memra_kernel_id k, const memra_route_spec *spec, int laid)
{
    const memra_special_key key = {
        .k = k,
        .n = (int)(sizeof spec_names / sizeof spec_names[0]),
        .names = spec_names,
        .vals = {spec->n_expert, spec->n_group, spec->topk_group, spec->top_k,
                 (memra_route_flags(spec) & ~MEMRA_ROUTE_FLAGS_OF_CALL) |
                     (laid ? MEMRA_ROUTE_FLAG_LAYOUT : 0u)},
    };
    return key;
}

/* Kernel k for a checked spec: with specialisation on, the build of k for
 * this spec (its counts and the flags a layer fixes as constants), and the
 * generic k where that cannot be had (capturing before the spec's first
 * use, the engine's MEMRA_SPECIAL_MODULES taken, or a module that could not
 * be built). The self-check's launches (`scratch`) take the generic
 * kernels: its made-up specs must not use up the modules the model's
 * layers will want. */
static memra_status route_function(memra_call *c, memra_capture cap, memra_kernel_id k,
                                   const memra_route_spec *spec, int laid, int scratch,
                                   CUfunction *f)
{
    if (c->eng->route_specialize && !scratch) {
        const memra_special_key key = memra_route_special_key(k, spec, laid);
        memra_status st = memra_engine_special_kernel(c, cap, &key, f);
        if (st || *f)
            return st;
    }
    return memra_engine_kernel(c, cap, k, f);
}

/* After the arguments and the layer index are checked: the context, what
 * the stream meets (refused where the launch would join another stream's
 * capture), and the loaded kernel `k`. */
static memra_status enter(memra_engine *eng, const char *fn, const memra_route_spec *spec,
                          int scratch, CUstream s, memra_kernel_id k, int laid, memra_call *c,
                          memra_capture *cap, CUfunction *f)
{
    memra_status st;
    *c = (memra_call){.eng = eng, .d = eng->d, .fn = fn};
    if ((st = memra_call_enter(eng, fn, c)) || (st = memra_capture_of(c, s, cap)))
        return st;
    if (*cap == MEMRA_CAPTURE_JOINS)
        return memra_refuse_capture(c, s, "launch the kernel", NULL);
    return route_function(c, *cap, k, spec, laid, scratch, f);
}

/* The layer's mirrored planes (macro planes, host bias) on the device, in
 * routing's own slot. */
static memra_status route_mirror(memra_call *c, memra_capture cap, int il, int scratch,
                                 const memra_route_spec *spec, const memra_vrows_macros *macros,
                                 int have_macros, CUstream s, memra_route_args *a)
{
    float padded[MEMRA_ROUTE_SCRATCH];
    const float *planes[4];
    uint32_t len;
    const int n = memra_route_planes(spec, macros, have_macros, planes, &len, padded);
    if (!n)
        return MEMRA_OK;
    CUdeviceptr dev;
    memra_status st = memra_mirror_get(c, &c->eng->mirror, cap, il,
                                       memra_mirror_kind_of(MEMRA_MIRROR_ROUTE, scratch), len,
                                       planes, n, s, !a, &dev);
    if (st || !a)
        return st;
    if (have_macros) {
        a->mg = memra_mirror_plane(dev, len, 0);
        a->mu = memra_mirror_plane(dev, len, 1);
        a->md = memra_mirror_plane(dev, len, 2);
    }
    if (spec->bias) /* after the macro planes, as memra_route_planes lists them */
        a->bias = memra_mirror_plane(dev, len, n - 1);
    return MEMRA_OK;
}

memra_status memra_route_prepare_layer(memra_engine *eng, int il, const memra_route_spec *spec,
                                       const memra_vrows_macros *macros, memra_stream stream)
{
    static const char fn[] = "memra_route_prepare_layer";
    if (!eng)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: eng is NULL", fn);
    int have_macros;
    memra_status st = memra_route_spec_check(fn, spec);
    if (st || (st = memra_macros_check(fn, macros, &have_macros)) ||
        (st = memra_check_layer(fn, il, 0))) /* whatever the layer mirrors */
        return st;
    CUstream s = (CUstream)stream;
    memra_call c;
    memra_capture cap;
    CUfunction f;
    /* Both kernels a call may take for this spec: the block kernel for
     * decode batches, the team kernel for its expert count; with
     * specialisation, their builds for this spec and the generic ones too,
     * which a spec first met under capture takes. */
    const memra_kernel_id team = memra_route_kernel(MEMRA_ROUTE_VARIANT_WARP, 1, spec);
    if (!(st = enter(eng, fn, spec, 0, s, MEMRA_KERNEL_ROUTE_BLOCK, 0, &c, &cap, &f)) &&
        !(st = memra_refuse_capture(&c, s, "upload the layer's planes",
                                    "prepare every layer before capture")) &&
        !(st = route_function(&c, cap, team, spec, 0, 0, &f)) &&
        (!eng->route_specialize ||
         (!(st = memra_engine_kernel(&c, cap, MEMRA_KERNEL_ROUTE_BLOCK, &f)) &&
          !(st = memra_engine_kernel(&c, cap, team, &f)))))
        st = route_mirror(&c, cap, il, 0, spec, macros, have_macros, s, NULL);
    memra_call_leave(&c);
    return st;
}

uint32_t memra_route_flags(const memra_route_spec *spec)
{
    return (spec->scoring == MEMRA_ROUTE_SIGMOID ? MEMRA_ROUTE_FLAG_SIGMOID : 0u) |
           (spec->logits_dtype == MEMRA_LOGITS_BF16 ? MEMRA_ROUTE_FLAG_BF16 : 0u) |
           (spec->logits_dtype == MEMRA_LOGITS_F16 ? MEMRA_ROUTE_FLAG_F16 : 0u) |
           (spec->renormalize ? MEMRA_ROUTE_FLAG_RENORM : 0u) |
           (!spec->bias && spec->bias_ptr && spec->bias_dtype == MEMRA_BIAS_BF16
                ? MEMRA_ROUTE_FLAG_BIAS_BF16
                : 0u) |
           (spec->bias || spec->bias_ptr ? MEMRA_ROUTE_FLAG_BIAS : 0u) |
           (memra_route_group_max(spec) ? MEMRA_ROUTE_FLAG_GROUP_MAX : 0u) |
           (spec->shared_rule == MEMRA_SHARED_ROUTED_SUM ? MEMRA_ROUTE_FLAG_SHARED_SUM : 0u) |
           (spec->n_real && spec->n_real_dtype == MEMRA_COUNT_I64 ? MEMRA_ROUTE_FLAG_NREAL_I64
                                                                  : 0u);
}

uint32_t memra_route_block_max_tokens(uint32_t n_expert)
{
    if (n_expert > MEMRA_ROUTE_TEAM_MAX_EXPERT) /* no team kernel holds them */
        return UINT32_MAX;
    if (n_expert <= 32u)
        return 0;
    const uint32_t by_threads = ROUTE_BLOCK_MAX_THREADS / n_expert;
    return by_threads < ROUTE_BLOCK_MAX_TOKENS ? by_threads : ROUTE_BLOCK_MAX_TOKENS;
}

static int use_block(int variant, uint32_t n_tokens, uint32_t n_expert)
{
    if (n_expert > MEMRA_ROUTE_TEAM_MAX_EXPERT) /* no team kernel holds them */
        return 1;
    return variant == MEMRA_ROUTE_VARIANT_BLOCK ||
           (variant == MEMRA_ROUTE_VARIANT_AUTO &&
            n_tokens <= memra_route_block_max_tokens(n_expert));
}

int memra_route_use_block(uint32_t n_tokens, uint32_t n_expert)
{
    return use_block(memra_route_variant, n_tokens, n_expert);
}

uint32_t memra_route_team_form(int variant, uint32_t n_tokens)
{
    /* A forced team kernel is the throughput form, so the tests and the
     * benchmark reach it at any size; the decode form is AUTO's below. */
    return variant == MEMRA_ROUTE_VARIANT_WARP || variant == MEMRA_ROUTE_VARIANT_WARP_EXACT ||
                   n_tokens >= MEMRA_ROUTE_FEW_LANES_MIN_TOKENS
               ? MEMRA_ROUTE_FLAG_FEW_LANES
               : 0u;
}

memra_kernel_id memra_route_kernel(int variant, uint32_t n_tokens, const memra_route_spec *spec)
{
    if (use_block(variant, n_tokens, spec->n_expert))
        return MEMRA_KERNEL_ROUTE_BLOCK;
    return team_kernel(spec->n_expert, spec->scoring == MEMRA_ROUTE_SIGMOID,
                       variant == MEMRA_ROUTE_VARIANT_WARP_EXACT);
}

memra_status memra_route_tables(memra_engine *eng, memra_devptr logits, uint32_t n_tokens,
                                const memra_route_spec *spec, int il,
                                const memra_vrows_macros *macros, const memra_vrows_slabs *slabs,
                                memra_devptr sel, memra_devptr selw, memra_devptr ptrs,
                                memra_devptr scl, memra_stream stream)
{
    return memra_route_launch(eng, "memra_route_tables", logits, n_tokens, spec, il, 0, 0, macros,
                              slabs, sel, selw, ptrs, scl, NULL, NULL, stream, memra_route_variant);
}

memra_status memra_route_tables_ex(memra_engine *eng, memra_devptr logits, uint32_t n_tokens,
                                   const memra_route_spec *spec, int il,
                                   const memra_vrows_macros *macros, const memra_vrows_slabs *slabs,
                                   memra_devptr sel, memra_devptr selw, memra_devptr ptrs,
                                   memra_devptr scl, const memra_layout_spec *layout_spec,
                                   const memra_layout *layout, memra_stream stream)
{
    return memra_route_launch(eng, "memra_route_tables_ex", logits, n_tokens, spec, il, 0, 0,
                              macros, slabs, sel, selw, ptrs, scl, layout_spec, layout, stream,
                              memra_route_variant);
}

memra_status memra_route_launch(memra_engine *eng, const char *fn, memra_devptr logits,
                                uint32_t n_tokens, const memra_route_spec *spec, int il,
                                int scratch, memra_devptr faults, const memra_vrows_macros *macros,
                                const memra_vrows_slabs *slabs, memra_devptr sel, memra_devptr selw,
                                memra_devptr ptrs, memra_devptr scl,
                                const memra_layout_spec *layout_spec, const memra_layout *layout,
                                memra_stream stream, int variant)
{
    if (!eng)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: eng is NULL", fn);
    int have_macros;
    memra_status st = memra_route_validate(fn, logits, n_tokens, spec, macros, slabs, sel, selw,
                                           ptrs, scl, &have_macros);
    memra_layout_params lp = {0};
    const int laid = layout_spec || layout;
    const uint32_t n_pairs =
        st ? 0 : n_tokens * memra_route_pairs_per_token(spec); /* spec may be NULL until checked */
    if (!st && laid)
        st = memra_route_layout_check(fn, spec, sel, n_pairs, layout_spec, layout, 1, &lp);
    /* The layer index, whatever the layer mirrors, unless the batch is
     * empty with no layout (a layout's counts are per layer: it names one
     * even for an empty batch). */
    if (st || (n_tokens == 0 && !laid) || (st = memra_check_layer(fn, il, scratch)))
        return st;
    CUstream s = (CUstream)stream;
    const int block = use_block(variant, n_tokens, spec->n_expert);
    memra_call c;
    memra_capture cap;
    CUfunction f;
    if (n_tokens == 0) { /* the empty layout alone */
        if (!(st = memra_call_enter(eng, fn, &c)) && !(st = memra_capture_of(&c, s, &cap)))
            st = cap == MEMRA_CAPTURE_JOINS ? memra_refuse_capture(&c, s, "launch the kernel", NULL)
                                            : memra_layout_launch(&c, cap, sel, 0, &lp, s);
        goto done;
    }
    /* Decode-sized batches are laid out by the routing launch's last block
     * (the layer's count); larger ones by the layout's own launches after
     * it: past MEMRA_LAYOUT_ONE_LAUNCH pairs, and on the team kernel past
     * what its bitmap path takes (MEMRA_ROUTE_TEAM_LAID_MAX_PAIRS), where
     * its block's four warps would walk the pairs in order: DeepSeek-V3 at
     * 1,024 / 2,048 tokens measured 65.0 / 116.2 us so against 39.0 / 61.0
     * by the layout's own launch (H100, BENCHMARKS.md). The block kernel's
     * blocks are as wide as the expert count: at 512 tokens of DeepSeek-V3
     * the two ways measured the same (27.1 / 27.2 us). A launch that lays
     * out takes a spec's build of its own
     * (MEMRA_ROUTE_FLAG_LAYOUT): the team kernels' other builds hold no
     * layout code; the block kernel's +layout build holds the one-token
     * path and the bitmap path up to 256 tokens (kernels_src/route_block.cu
     * says what each is worth). */
    const int one_launch =
        laid && n_pairs <= (block ? MEMRA_LAYOUT_ONE_LAUNCH : MEMRA_ROUTE_TEAM_LAID_MAX_PAIRS);
    const uint32_t layout_flag = one_launch ? MEMRA_ROUTE_FLAG_LAYOUT : 0u;
    if ((st = enter(eng, fn, spec, scratch, s, memra_route_kernel(variant, n_tokens, spec),
                    layout_flag != 0, &c, &cap, &f)))
        goto done;
    uint64_t ticket = 0;
    if (one_launch && (st = memra_layout_ticket(&c, cap, il, scratch, &ticket)))
        goto done;
    /* Past one launch the layout's own kernels, loaded before the routing's
     * launch: refused under capture, the capture holds nothing of this call. */
    CUfunction layout_fns[3];
    if (laid && !one_launch && (st = memra_layout_kernels(&c, cap, n_pairs, layout_fns)))
        goto done;
    lp.ticket = ticket;

    memra_route_args a = {
        .logits = logits,
        .bias = spec->bias_ptr,
        .pg = slabs->base[0],
        .pu = slabs->base[1],
        .pd = slabs->base[2],
        .sg = slabs->stride[0],
        .su = slabs->stride[1],
        .sd = slabs->stride[2],
        .sel = sel,
        .selw = selw,
        .ptrs = ptrs,
        .scl = scl,
        .faults = faults ? faults : eng->faults,
        .map = spec->expert_map,
        .n_real = spec->n_real,
        .n_tokens = n_tokens,
        .n_expert = spec->n_expert,
        .top_k = spec->top_k,
        .n_group = spec->n_group,
        .topk_group = spec->topk_group,
        .flags = memra_route_flags(spec) | memra_route_team_form(variant, n_tokens) | layout_flag,
        .n_local = spec->n_local,
        .n_shared = spec->n_shared,
        .scale = spec->routed_scaling_factor,
        .shared_weight = spec->shared_rule == MEMRA_SHARED_ROUTED_SUM ? spec->shared_divisor
                                                                      : spec->shared_weight,
    };
    if (one_launch)
        a.lp = lp;
    if (!(st = route_mirror(&c, cap, il, scratch, spec, macros, have_macros, s, &a))) {
        if (block)
            st = memra_launch(eng, fn, f, n_tokens, memra_route_block_threads(spec->n_expert), &a,
                              MEMRA_ROUTE_PARAM_BYTES, s);
        else
            st = memra_launch(eng, fn, f,
                              memra_route_team_grid(n_tokens, spec->n_expert, spec->n_group,
                                                    spec->top_k, a.flags),
                              MEMRA_ROUTE_TEAM_THREADS, &a, MEMRA_ROUTE_PARAM_BYTES, s);
    }
    if (!st && laid && !one_launch)
        st = memra_layout_launch_with(&c, sel, n_pairs, &lp, layout_fns, s);
done:
    memra_call_leave(&c);
    return st;
}
