/* The real NVRTC on this machine: the embedded kernel compiles for every
 * arch it knows from sm_75 up, as CUBIN and PTX, with the exactness options;
 * and, where a disassembler is at hand, the machine code of every target
 * from sm_75 to sm_121 (sm_100 is B200, sm_120 is RTX 5090) is read: the
 * down-scale multiply is an FMUL without .FTZ and no FFMA exists. Needs
 * NVRTC, no GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "cubin_stats.h"

#include "jit/jit.h"
#include "jit/kernels.h"
#include "engine/engine.h"
#include "driver/nvrtc_find.h"
#include "layout/layout_abi.h"
#include "route/route.h"
#include "route/route_abi.h"
#include "route/route_cases.h"
#include "vrows/vrows_abi.h"

static const memra_nvrtc *nv;

/* The team kernels of M > 1 (routing's largest modules, the same source
 * as M = 1 but for the experts a lane holds) compile for the oldest arch,
 * sm_80, the H200's and the two other targets (B200, RTX 5090); every other
 * module for every arch NVRTC knows from sm_75. CI has two cores. */
static int every_arch(int m)
{
    return m == MEMRA_MODULE_VROWS || m == MEMRA_MODULE_LAYOUT || m == MEMRA_MODULE_ROUTE_BLOCK ||
           m == MEMRA_MODULE_ROUTE_WARP1;
}
static int representative(int arch)
{
    return arch == 75 || arch == 80 || arch == 90 || arch == 100 || arch == 120;
}

/* The block size each kernel's launcher uses (the largest, for the routing
 * block kernel's thread per expert). */
static unsigned max_threads(memra_kernel_id k)
{
    switch (k) {
    case MEMRA_KERNEL_VROWS:
        return MEMRA_VROWS_BLOCK;
    case MEMRA_KERNEL_FAULTS_TAKE:
        return 1;
    case MEMRA_KERNEL_LAYOUT_SMALL:
        return MEMRA_LAYOUT_SMALL_THREADS;
    case MEMRA_KERNEL_LAYOUT_COUNT:
        return MEMRA_LAYOUT_COUNT_THREADS;
    case MEMRA_KERNEL_LAYOUT_SCAN:
        return MEMRA_LAYOUT_SCAN_THREADS;
    case MEMRA_KERNEL_LAYOUT_PLACE:
        return MEMRA_LAYOUT_PLACE_THREADS;
    case MEMRA_KERNEL_ROUTE_BLOCK:
        return memra_route_block_threads(MEMRA_ROUTE_MAX_EXPERT);
    default:
        return MEMRA_ROUTE_TEAM_THREADS;
    }
}

/* What each kernel may cost on the H200's arch (sm_90, this NVRTC's ptxas):
 * its registers and machine instructions, where a change that quietly grows
 * a kernel is caught on a machine with no GPU. A 64-bit division's
 * subroutine (+14 registers), a 16-pair unrolled loop (+30) and a block
 * kernel whose code doubled each cost a device run to find. The budgets sit
 * a little above what the kernels build to now (registers to the next
 * multiple of 8, the allocation's unit; instructions +10%): a change meant to
 * grow a kernel raises its row here, on purpose. The rows were built with
 * NVRTC 13.0; another version gets a margin. spec is NULL for the
 * generic build, else the route case's family prefix (route_case_util.h). */
typedef struct kernel_budget {
    memra_kernel_id kernel;
    const char *spec;
    unsigned regs, instrs;
    /* Bytes of stack frame (local memory: spilled registers) it may take;
     * a row without one takes none. A register bound that trades spills
     * for occupancy, measured on a card to be worth it, says so here. */
    unsigned frame;
} kernel_budget;

static const kernel_budget budgets[] = {
#include "kernel_budgets.inc"
};

/* Fails where kernel (built as the image holds it) is over its row, or has
 * no row; its instructions. */
static unsigned expect_within_budget(const memra_image *img, memra_kernel_id kernel,
                                     const char *spec)
{
    const char *name = memra_kernel_name(kernel);
    unsigned regs, frame, instrs;
    if (!cubin_kernel_stats(img->data, img->size, name, &regs, &frame, &instrs))
        fail_msg("sm_90 CUBIN: no register count or code for %s", name);
    printf("sm_90 %-28s %-12s %3u registers %6u instructions %4u frame bytes\n", name,
           spec ? spec : "generic", regs, instrs, frame);
    for (size_t i = 0; i < sizeof budgets / sizeof budgets[0]; i++) {
        const kernel_budget *b = &budgets[i];
        const int same_spec = b->spec && spec ? strcmp(b->spec, spec) == 0 : b->spec == spec;
        if (b->kernel != kernel || !same_spec)
            continue;
        /* Another ptxas allocates a little differently: one allocation
         * unit and 15% more code before it counts as growth. */
        const int same_nvrtc = nv->major == 13 && nv->minor == 0;
        const unsigned max_regs = b->regs + (same_nvrtc ? 0u : 8u);
        const unsigned max_instrs = same_nvrtc ? b->instrs : b->instrs + b->instrs / 100u * 15u;
        const unsigned max_frame = b->frame + (same_nvrtc ? 0u : 64u);
        if (regs > max_regs || instrs > max_instrs || frame > max_frame)
            fail_msg("sm_90 %s (%s): %u registers, %u instructions, %u frame bytes, over its "
                     "budget of %u, %u and %u (tests/kernel_budgets.inc, NVRTC %d.%d)",
                     name, spec ? spec : "generic", regs, instrs, frame, max_regs, max_instrs,
                     max_frame, nv->major, nv->minor);
        return instrs;
    }
    fail_msg("sm_90 %s (%s): no row in tests/kernel_budgets.inc", name, spec ? spec : "generic");
    return 0;
}

/* The frame reader: a kernel that writes a local array at indices it
 * reads from memory keeps the array in local memory, so ptxas gives it a
 * frame of at least the array's bytes; the table kernel keeps everything
 * in registers. */
static void test_cubin_stats_reads_the_frame(void **state)
{
    (void)state;
    static const char text[] = "extern \"C\" __global__ void memra_frame_probe(int *o, int i)\n"
                               "{\n"
                               "    int a[64];\n"
                               "    for (int j = 0; j < 64; j++)\n"
                               "        a[j] = j;\n"
                               "    for (int j = 0; j < 64; j++)\n"
                               "        a[o[j] & 63] += o[j + 64];\n"
                               "    o[0] = a[i & 63];\n"
                               "}\n";
    const memra_source probe = {"frame_probe.cu", text, sizeof text - 1};
    const memra_source vrows = memra_module_source(MEMRA_MODULE_VROWS);
    memra_image img;
    unsigned regs, frame, instrs;
    if (memra_jit_compile(nv, &probe, 90, 0, &img))
        fail_msg("sm_90 CUBIN of the frame probe: %s", memra_last_error());
    assert_true(
        cubin_kernel_stats(img.data, img.size, "memra_frame_probe", &regs, &frame, &instrs));
    assert_true(frame >= 64u * 4u);
    memra_image_free(&img);
    if (memra_jit_compile(nv, &vrows, 90, 0, &img))
        fail_msg("sm_90 CUBIN of %s: %s", vrows.name, memra_last_error());
    assert_true(
        cubin_kernel_stats(img.data, img.size, "memra_vrows_kernel", &regs, &frame, &instrs));
    assert_int_equal(frame, 0);
    memra_image_free(&img);
}

/* The budget's reader on images that do not parse: a section table whose
 * offset wraps answers 0; a section whose offset plus its size wraps, or
 * a truncated image, answers 0 or what the whole image answers, and
 * never reads outside (tests/cubin_stats.h's checks; held under
 * AddressSanitizer when they were written). */
static void test_cubin_stats_refuses_malformed(void **state)
{
    (void)state;
    const memra_source src = memra_module_source(MEMRA_MODULE_VROWS);
    memra_image img;
    if (memra_jit_compile(nv, &src, 90, 0, &img))
        fail_msg("sm_90 CUBIN of %s: %s", src.name, memra_last_error());
    unsigned regs, frame, instrs, regs0, frame0, instrs0;
    assert_true(
        cubin_kernel_stats(img.data, img.size, "memra_vrows_kernel", &regs0, &frame0, &instrs0));
    assert_false(cubin_kernel_stats(img.data, img.size, "no_such_kernel", &regs, &frame, &instrs));
    unsigned char *bad = malloc(img.size);
    assert_non_null(bad);
    /* e_shoff two bytes short of 2^64: section 1's header would wrap to
     * offset 62. */
    memcpy(bad, img.data, img.size);
    const uint64_t wrap = UINT64_MAX - 65u;
    for (int i = 0; i < 8; i++)
        bad[0x28 + i] = (unsigned char)(wrap >> (8 * i));
    assert_false(cubin_kernel_stats(bad, img.size, "memra_vrows_kernel", &regs, &frame, &instrs));
    /* Each section's offset in turn made to wrap with its size. */
    cubin_elf e;
    assert_true(cubin_open(&e, img.data, img.size));
    for (unsigned i = 1; i < e.shnum; i++) {
        memcpy(bad, img.data, img.size);
        const uint64_t at = e.shoff + (uint64_t)i * e.shentsize + 24;
        const uint64_t off = UINT64_MAX - 29u;
        for (int b = 0; b < 8; b++)
            bad[at + (uint64_t)b] = (unsigned char)(off >> (8 * b));
        if (cubin_kernel_stats(bad, img.size, "memra_vrows_kernel", &regs, &frame, &instrs))
            assert_true(regs == regs0 && frame == frame0 && instrs == instrs0);
    }
    /* A truncated image either still holds everything read (the same
     * answer) or answers 0. */
    for (size_t n = 0; n < img.size; n += 1 + n / 64)
        if (cubin_kernel_stats(img.data, n, "memra_vrows_kernel", &regs, &frame, &instrs))
            assert_true(regs == regs0 && frame == frame0 && instrs == instrs0);
    free(bad);
    memra_image_free(&img);
}

static void test_every_arch_cubin_and_ptx(void **state)
{
    (void)state;
    int seen90 = 0, seen100 = 0, seen120 = 0, compiled = 0;
    for (int i = 0; i < nv->n_archs; i++) {
        const int arch = nv->archs[i];
        if (arch < 75)
            continue;
        seen90 |= arch == 90;
        seen100 |= arch == 100;
        seen120 |= arch == 120;
        for (int m = 0; m < MEMRA_MODULE_COUNT; m++) {
            if (!every_arch(m) && !representative(arch))
                continue;
            const memra_source src = memra_module_source((memra_module_id)m);
            memra_image img;
            memra_status st = memra_jit_compile(nv, &src, arch, 0, &img);
            if (st)
                fail_msg("sm_%d CUBIN of %s: %s", arch, src.name, memra_last_error());
            assert_true(img.size > 64);
            assert_memory_equal(img.data,
                                "\x7f"
                                "ELF",
                                4);
            assert_int_equal(img.is_ptx, 0);
            if (arch == 90)
                for (int k = 0; k < MEMRA_KERNEL_COUNT; k++)
                    if (memra_kernel_module((memra_kernel_id)k) == (memra_module_id)m)
                        expect_within_budget(&img, (memra_kernel_id)k, NULL);
            memra_image_free(&img);

            st = memra_jit_compile(nv, &src, arch, 1, &img);
            if (st)
                fail_msg("compute_%d PTX of %s: %s", arch, src.name, memra_last_error());
            assert_int_equal(img.data[img.size - 1], '\0'); /* cuModuleLoadData needs the NUL */
            /* Each kernel is in its module, and only there. */
            for (int k = 0; k < MEMRA_KERNEL_COUNT; k++) {
                char entry[96];
                snprintf(entry, sizeof entry, ".entry %s(", memra_kernel_name((memra_kernel_id)k));
                const char *at = strstr(img.data, entry);
                if ((at != NULL) != (memra_kernel_module((memra_kernel_id)k) == (memra_module_id)m))
                    fail_msg("compute_%d %s: %s misplaced", arch, src.name, entry);
                /* Each kernel bounded to its launcher's block size: a build
                 * needing more registers than that block can have fails to
                 * compile, never to launch. */
                const char *body = at ? strchr(at, '{') : NULL, *bound;
                char want[48];
                const int len =
                    snprintf(want, sizeof want, ".maxntid %u", max_threads((memra_kernel_id)k));
                if (at && (!body || !(bound = strstr(at, want)) || bound > body ||
                           (strncmp(bound + len, "\n", 1) && strncmp(bound + len, ", 1, 1\n", 7))))
                    fail_msg("compute_%d %s: %s lacks %s (, 1, 1)", arch, src.name, entry, want);
            }
            if (m == MEMRA_MODULE_VROWS) {
                /* --fmad=false: the scale product is a lone IEEE multiply. */
                assert_non_null(strstr(img.data, "mul.rn.f32"));
                assert_null(strstr(img.data, "fma.rn.f32"));
            } else if (m == MEMRA_MODULE_LAYOUT) {
                /* The layout counts and places: no float arithmetic at all. */
                assert_null(strstr(img.data, ".f32"));
            } else {
                /* The routing arithmetic, on every target (sm_100 and sm_120
                 * too): every float operation an explicit round-to-nearest
                 * one, divisions IEEE (div.rn). PTX's meaning of these is the
                 * same on every arch, which is the proof for the targets no
                 * device here runs. */
                assert_non_null(strstr(img.data, "div.rn.f32"));
            }
            /* Programmatic dependent launch: from sm_90 each kernel waits
             * on the kernel before it (griddepcontrol.wait) before touching
             * memory and lets the next one start; below sm_90 neither is
             * emitted. */
            const int has_wait = strstr(img.data, "griddepcontrol.wait") != NULL;
            const int has_launch = strstr(img.data, "griddepcontrol.launch_dependents") != NULL;
            if (has_wait != (arch >= 90) || has_launch != (arch >= 90))
                fail_msg("compute_%d %s: griddepcontrol.wait %d, launch_dependents %d", arch,
                         src.name, has_wait, has_launch);
            /* Nothing approximate, nothing flushed, anywhere. */
            assert_null(strstr(img.data, ".approx"));
            assert_null(strstr(img.data, ".ftz"));
            if (m != MEMRA_MODULE_LAYOUT) {
                /* The tables are streamed out (evict-first), not left dirty
                 * in L2. */
                assert_non_null(strstr(img.data, "st.global.cs"));
                /* 64-bit address arithmetic: base + ex * stride is a 64-bit
                 * multiply(-add), never a 32-bit one that would wrap past 4
                 * GiB. */
                assert_true(strstr(img.data, "mad.lo.s64") || strstr(img.data, "mul.lo.s64"));
            }
            memra_image_free(&img);
        }
        printf("sm_%d: CUBIN and PTX compiled\n", arch);
        compiled++;
    }
    assert_true(seen90 && seen100 && seen120);
    assert_true(compiled >= 3);
}

/* The routing modules as the engine compiles them for a layer spec (on by
 * default, MEMRA_ROUTE_SPECIALIZE): the text memra_engine_special_text
 * makes from the spec's key, for each kernel a spec takes (the block
 * kernel, the team kernel screened and exact), for the six benchmark
 * families, as PTX for the H200 and the two targets no device here runs
 * (sm_100, sm_120). Constants change what the optimiser folds, never the
 * rounding: every division IEEE, nothing approximate or flushed. */
static void test_specialised_routing_exact_on_every_target(void **state)
{
    (void)state;
    static const int archs[] = {90, 100, 120};
    int built = 0;
    for (size_t ci = 0; ci < N_ROUTE_CASES; ci++) {
        if (!route_case_is_family(&route_cases[ci]))
            continue;
        static route_inputs in;
        const memra_route_spec spec = route_case_inputs(&route_cases[ci], &in);
        /* The block kernel and the team kernel also as launches with a
         * fused layout take them (MEMRA_ROUTE_FLAG_LAYOUT), builds of
         * their own: the ones without hold no one-token layout path (the
         * block kernel) or no layout at all (the team kernel), so they are
         * the smaller. */
        const memra_kernel_id block = memra_route_kernel(MEMRA_ROUTE_VARIANT_BLOCK, 1, &spec),
                              team = memra_route_kernel(MEMRA_ROUTE_VARIANT_WARP, 4096, &spec),
                              exact =
                                  memra_route_kernel(MEMRA_ROUTE_VARIANT_WARP_EXACT, 4096, &spec);
        const struct {
            memra_kernel_id k;
            int laid;
        } builds[] = {{block, 0}, {team, 0}, {exact, 0}, {block, 1}, {team, 1}};
        /* sm_90 instructions by kernel, without and with the flag (0: not built) */
        unsigned instrs_of[MEMRA_KERNEL_COUNT][2] = {{0}};
        for (size_t i = 0; i < sizeof builds / sizeof builds[0]; i++) {
            const memra_kernel_id k = builds[i].k;
            const int laid = builds[i].laid;
            if (instrs_of[k][laid]) /* sigmoid-free specs: the exact kernel is the team kernel */
                continue;
            const memra_special_key key = memra_route_special_key(k, &spec, laid);
            const memra_source base = memra_module_source(memra_kernel_module(k));
            memra_source src = base;
            char *text = memra_engine_special_text(&key, &base, &src.len);
            assert_non_null(text);
            src.text = text;
            char head[64];
            snprintf(head, sizeof head, "#define MEMRA_SPEC_E %uu\n", spec.n_expert);
            assert_memory_equal(text, head, strlen(head));
            for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
                memra_image img;
                if (memra_jit_compile(nv, &src, archs[a], 1, &img))
                    fail_msg("%s, %s for its spec, compute_%d: %s", route_cases[ci].name,
                             memra_kernel_name(k), archs[a], memra_last_error());
                char entry[96];
                snprintf(entry, sizeof entry, ".entry %s(", memra_kernel_name(k));
                assert_non_null(strstr(img.data, entry));
                assert_non_null(strstr(img.data, "div.rn.f32"));
                assert_null(strstr(img.data, ".approx"));
                assert_null(strstr(img.data, ".ftz"));
                memra_image_free(&img);
                built++;
            }
            /* What ptxas makes of it for the H200: within its budget. */
            char family[48];
            snprintf(family, sizeof family, "%.*s%s", (int)strcspn(route_cases[ci].name, ":,"),
                     route_cases[ci].name, laid ? "+layout" : "");
            memra_image img;
            if (memra_jit_compile(nv, &src, 90, 0, &img))
                fail_msg("%s, %s for its spec, sm_90: %s", family, memra_kernel_name(k),
                         memra_last_error());
            instrs_of[k][laid] = expect_within_budget(&img, k, family);
            memra_image_free(&img);
            free(text);
        }
        for (int k = 0; k < MEMRA_KERNEL_COUNT; k++)
            if (instrs_of[k][1] && instrs_of[k][0] >= instrs_of[k][1])
                fail_msg("%s: %s's build without the layout flag has %u sm_90 instructions, with "
                         "it %u: its layout code was not left out",
                         route_cases[ci].name, memra_kernel_name((memra_kernel_id)k),
                         instrs_of[k][0], instrs_of[k][1]);
        assert_true(instrs_of[block][1] && instrs_of[team][1]);
    }
    printf("%d specialised routing builds: IEEE divisions, nothing approximate or flushed\n",
           built);
    assert_true(built >= 6 * 4 * 3);
}

static void test_exactness_options(void **state)
{
    (void)state;
    const char *want[] = {"--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true"};
    for (size_t w = 0; w < 4; w++) {
        int found = 0;
        for (int i = 0; memra_jit_options[i]; i++)
            found |= strcmp(memra_jit_options[i], want[w]) == 0;
        assert_true(found);
    }
    for (int i = 0; memra_jit_options[i]; i++)
        assert_null(strstr(memra_jit_options[i], "fast-math"));
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Each module (kernels_src/meson.build) is an NVRTC program of its own,
 * compiled at its first use: prints NVRTC's time per module for sm_90
 * CUBIN (median of 3) on this machine, the cold first use of each. */
static void test_each_module_compile_time(void **state)
{
    (void)state;
    for (int m = 0; m < MEMRA_MODULE_COUNT; m++) {
        const memra_source src = memra_module_source((memra_module_id)m);
        double ms[3];
        for (int rep = 0; rep < 3; rep++) {
            memra_image img;
            const double t0 = now_ms();
            if (memra_jit_compile(nv, &src, 90, 0, &img))
                fail_msg("%s: %s", src.name, memra_last_error());
            ms[rep] = now_ms() - t0;
            memra_image_free(&img);
        }
        const double lo = ms[0] < ms[1] ? ms[0] : ms[1], hi = ms[0] < ms[1] ? ms[1] : ms[0];
        const double med = ms[2] < lo ? lo : ms[2] > hi ? hi : ms[2];
        printf("NVRTC %d.%d, sm_90 CUBIN of %-16s %7.1f ms (median of 3, this machine)\n",
               nv->major, nv->minor, src.name, med);
    }
}

/* A disassembler: $MEMRA_NVDISASM, the toolkit's, or one on PATH (the
 * README's test command installs NVIDIA's nvdisasm wheel where it can). */
static int find_disassembler(char *out, size_t n)
{
    const char *env = getenv("MEMRA_NVDISASM");
    const char *home = getenv("CUDA_HOME");
    char p[600];
    if (env && *env && access(env, X_OK) == 0)
        return snprintf(out, n, "%s", env), 1;
    if (home && *home && (snprintf(p, sizeof p, "%s/bin/nvdisasm", home), access(p, X_OK) == 0))
        return snprintf(out, n, "%s", p), 1;
    if (access("/usr/local/cuda/bin/nvdisasm", X_OK) == 0)
        return snprintf(out, n, "/usr/local/cuda/bin/nvdisasm"), 1;
    FILE *f = popen("command -v nvdisasm 2>/dev/null", "r");
    int ok = f && fgets(out, (int)n, f) != NULL;
    if (f)
        pclose(f);
    if (ok)
        out[strcspn(out, "\n")] = 0;
    return ok && *out;
}

/* The machine code, not only the PTX: ptxas could still fuse or flush. The
 * table kernel has one FMUL (the down scale) and no FFMA; no instruction of
 * the module flushes subnormals. (The routing kernel's IEEE divisions,
 * __fdiv_rn, use FFMA inside their correctly rounded quotient, so FFMA is
 * only ruled out in the table kernel; routing's exactness is shown device
 * against host.) */
static void test_sass_multiply_is_exact_on_every_target(void **state)
{
    (void)state;
    char dis[600];
    if (!find_disassembler(dis, sizeof dis)) {
        printf("SKIPPED: no nvdisasm here (set MEMRA_NVDISASM, or install the "
               "nvidia-cuda-nvdisasm wheel); the SASS of each target was not read\n");
        skip();
    }
    int checked = 0;
    for (int i = 0; i < nv->n_archs; i++) {
        const int arch = nv->archs[i];
        if (arch < 75 || arch > 121)
            continue;
        memra_image img;
        const memra_source src = memra_module_source(MEMRA_MODULE_VROWS);
        if (memra_jit_compile(nv, &src, arch, 0, &img))
            fail_msg("sm_%d: %s", arch, memra_last_error());
        char path[] = "/tmp/memra-sass-XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, img.data, img.size), (ssize_t)img.size);
        close(fd);
        memra_image_free(&img);
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "'%s' -c '%s' 2>&1", dis, path);
        FILE *f = popen(cmd, "r");
        assert_non_null(f);
        char line[512], fn_name[128] = "";
        int fmul = 0, fmul_ftz = 0, ffma = 0, lines = 0, ftz_anywhere = 0;
        while (fgets(line, sizeof line, f)) {
            lines++;
            /* Functions start at a ".text.<name>:" label. */
            const char *label = strstr(line, ".text.");
            if (label && strchr(label, ':') && !strstr(line, ".section"))
                sscanf(label + 6, "%127[^:]", fn_name);
            if (strcmp(fn_name, "memra_vrows_kernel") != 0)
                continue;
            ftz_anywhere += strstr(line, ".FTZ") != NULL;
            const char *m = strstr(line, "FMUL");
            if (m) {
                fmul++;
                fmul_ftz += strstr(m, ".FTZ") != NULL;
            }
            ffma += strstr(line, "FFMA") != NULL;
        }
        const int rc = pclose(f);
        unlink(path);
        if (rc != 0 || lines < 10)
            fail_msg("sm_%d: %s failed (exit %d, %d lines)", arch, dis, rc, lines);
        printf("sm_%d SASS of memra_vrows_kernel: %d FMUL (%d with .FTZ), %d FFMA, %d .FTZ\n", arch,
               fmul, fmul_ftz, ffma, ftz_anywhere);
        if (fmul < 1 || fmul_ftz || ffma || ftz_anywhere)
            fail_msg("sm_%d: the down-scale multiply is not a lone FMUL without .FTZ "
                     "(FMUL %d, FMUL.FTZ %d, FFMA %d)",
                     arch, fmul, fmul_ftz, ffma);
        checked++;
    }
    assert_true(checked >= 3);
}

int main(int argc, char **argv)
{
    const memra_nvrtc *list;
    const int n = memra_nvrtc_candidates(memra_driver_get(), &list);
    for (int i = 0; i < n && !nv; i++)
        if (list[i].status == MEMRA_OK)
            nv = &list[i];
    if (!nv) {
        memra_nvrtc_info info[16];
        int count = 0;
        memra_nvrtc_list(info, 16, &count);
        printf("SKIP: no usable NVRTC here:\n");
        for (int i = 0; i < count && i < 16; i++)
            printf("  %s (%s): %s\n", info[i].path, info[i].origin, info[i].why);
        return 77;
    }
    printf("NVRTC %d.%d (%s, %s)\n", nv->major, nv->minor, nv->path, nv->origin);
    /* Two halves, two meson tests (`spec`: the specialised builds and
     * their budgets, and each module's compile time), which CI's two
     * cores run side by side. */
    const struct CMUnitTest spec[] = {
        cmocka_unit_test(test_specialised_routing_exact_on_every_target),
        cmocka_unit_test(test_each_module_compile_time),
    };
    if (argc > 1 && strcmp(argv[1], "spec") == 0)
        return cmocka_run_group_tests(spec, NULL, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exactness_options),
        cmocka_unit_test(test_cubin_stats_refuses_malformed),
        cmocka_unit_test(test_cubin_stats_reads_the_frame),
        cmocka_unit_test(test_every_arch_cubin_and_ptx),
        cmocka_unit_test(test_sass_multiply_is_exact_on_every_target),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
