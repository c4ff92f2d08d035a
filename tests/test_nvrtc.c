/* NVRTC compile of the embedded kernel for every supported arch from sm_75
 * up, as CUBIN and PTX, with the exactness options. Needs NVRTC, no GPU. */
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

#include "jit.h"

static const memra_driver *drv;

static void test_every_arch_cubin_and_ptx(void **state)
{
    (void)state;
    int n = 0;
    assert_int_equal(drv->nvrtcGetNumSupportedArchs(&n), NVRTC_SUCCESS);
    int *archs = calloc((size_t)n, sizeof *archs);
    assert_int_equal(drv->nvrtcGetSupportedArchs(archs), NVRTC_SUCCESS);
    int seen90 = 0, seen100 = 0, seen120 = 0, compiled = 0;
    for (int i = 0; i < n; i++) {
        if (archs[i] < 75)
            continue;
        seen90 |= archs[i] == 90;
        seen100 |= archs[i] == 100;
        seen120 |= archs[i] == 120;
        memra_image img;
        memra_status st = memra_jit_compile(drv, archs[i], 0, &img);
        if (st)
            fail_msg("sm_%d CUBIN: %s", archs[i], memra_last_error());
        assert_true(img.size > 64);
        assert_memory_equal(img.data,
                            "\x7f"
                            "ELF",
                            4);
        assert_int_equal(img.is_ptx, 0);
        memra_image_free(&img);

        st = memra_jit_compile(drv, archs[i], 1, &img);
        if (st)
            fail_msg("compute_%d PTX: %s", archs[i], memra_last_error());
        assert_int_equal(img.data[img.size - 1], '\0'); /* cuModuleLoadData needs the NUL */
        assert_non_null(strstr(img.data, ".entry memra_vrows_tables("));
        /* --fmad=false: the scale product is a lone IEEE multiply. */
        assert_non_null(strstr(img.data, "mul.rn.f32"));
        assert_null(strstr(img.data, "fma.rn.f32"));
        /* The tables are streamed out (evict-first), not left dirty in L2. */
        assert_non_null(strstr(img.data, "st.global.cs"));
        /* 64-bit address arithmetic: base + ex * stride is a 64-bit
         * multiply(-add), never a 32-bit one that would wrap past 4 GiB. */
        assert_true(strstr(img.data, "mad.lo.s64") || strstr(img.data, "mul.lo.s64"));
        memra_image_free(&img);
        printf("sm_%d: CUBIN and PTX compiled\n", archs[i]);
        compiled++;
    }
    free(archs);
    assert_true(seen90 && seen100 && seen120);
    assert_true(compiled >= 3);
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

static void test_pick_arch(void **state)
{
    (void)state;
    int arch, is_ptx;
    assert_int_equal(memra_jit_pick_arch(drv, 90, &arch, &is_ptx), MEMRA_OK);
    assert_int_equal(arch, 90);
    assert_int_equal(is_ptx, 0);
    /* An SM newer than this NVRTC knows: PTX for the highest arch below it. */
    assert_int_equal(memra_jit_pick_arch(drv, 999, &arch, &is_ptx), MEMRA_OK);
    assert_int_equal(is_ptx, 1);
    assert_true(arch >= 120 && arch < 999);
    /* Older than anything it knows: a clear error. */
    assert_int_equal(memra_jit_pick_arch(drv, 10, &arch, &is_ptx), MEMRA_ERR_NVRTC);
    assert_non_null(strstr(memra_last_error(), "sm_10"));
}

int main(void)
{
    if (memra_driver_nvrtc("test_nvrtc", &drv) != MEMRA_OK) {
        printf("SKIP: NVRTC is not available here: %s\n", memra_last_error());
        return 77;
    }
    int maj = 0, min = 0;
    drv->nvrtcVersion(&maj, &min);
    printf("NVRTC %d.%d (%s)\n", maj, min, drv->nvrtc_path);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exactness_options),
        cmocka_unit_test(test_pick_arch),
        cmocka_unit_test(test_every_arch_cubin_and_ptx),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
