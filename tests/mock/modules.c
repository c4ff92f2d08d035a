/* The mock driver: modules and launches; every kernel of MEMRA_KERNELS
 * runs on the host from its own source (kernel_on_host.h). */
#include "mock_internal.h"
#include "kernel_on_host.h"
#include "engine/faults_abi.h"
#include "route/route_abi.h"
#include "vrows/vrows_abi.h"

extern const mock_spec_build mock_spec_build_0, mock_spec_build_1, mock_spec_build_2,
    mock_spec_build_3, mock_spec_build_4, mock_spec_build_5, mock_spec_build_6;
static const mock_spec_build *const spec_builds[MOCK_SPEC_BUILDS] = {
    &mock_spec_build_0, &mock_spec_build_1, &mock_spec_build_2, &mock_spec_build_3,
    &mock_spec_build_4, &mock_spec_build_5, &mock_spec_build_6};

/* kernel_on_host.h's path marks: a count a function of the kernels' text,
 * under a lock taken with no other held (the mock runs a block's threads,
 * and launches, on threads of its own). A handful of functions mark; past
 * the table's 64 a mark is not counted. */
static struct {
    const char *fn;
    unsigned long n;
} marks[64];
static pthread_mutex_t marks_mu = PTHREAD_MUTEX_INITIALIZER;

void host_mark(const char *fn)
{
    pthread_mutex_lock(&marks_mu);
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++)
        if (!marks[i].fn || strcmp(marks[i].fn, fn) == 0) {
            marks[i].fn = fn;
            marks[i].n++;
            break;
        }
    pthread_mutex_unlock(&marks_mu);
}

unsigned long host_marks(const char *fn)
{
    unsigned long n = 0;
    pthread_mutex_lock(&marks_mu);
    for (size_t i = 0; i < sizeof marks / sizeof marks[0] && marks[i].fn; i++)
        if (strcmp(marks[i].fn, fn) == 0)
            n = marks[i].n;
    pthread_mutex_unlock(&marks_mu);
    return n;
}

void host_marks_reset(void)
{
    pthread_mutex_lock(&marks_mu);
    memset(marks, 0, sizeof marks);
    pthread_mutex_unlock(&marks_mu);
}

/* The host build compiled for a routing launch's spec, or NULL. */
static const mock_spec_build *spec_build_of(const unsigned char *args)
{
    memra_route_args a;
    memcpy(&a, args, sizeof a);
    for (int i = 0; i < MOCK_SPEC_BUILDS; i++) {
        const mock_spec_build *b = spec_builds[i];
        if (b->e == a.n_expert && b->ng == a.n_group && b->tg == a.topk_group && b->k == a.top_k &&
            b->flags == (a.flags & ~MEMRA_ROUTE_FLAGS_OF_CALL))
            return b;
    }
    return NULL;
}

/* Runs one queued operation (mu held). */
void execute(const op *o)
{
    switch (o->kind) {
    case MOCK_OP_LAUNCH: {
        host_dim3 g = {o->l.grid[0], o->l.grid[1], o->l.grid[2]};
        host_dim3 b = {o->l.block[0], o->l.block[1], o->l.block[2]};
        if (o->l.f == MOCK_FN(VROWS)) {
            run_vrows_on_host(o->l.args, g, b);
            if (mock.corrupt_tables) {
                uint64_t scl;
                uint32_t n_pairs;
                memcpy(&scl, o->l.args + offsetof(memra_vrows_args, scl), 8);
                memcpy(&n_pairs, o->l.args + offsetof(memra_vrows_args, n_pairs), 4);
                ((unsigned char *)(uintptr_t)scl)[8 * (size_t)n_pairs] ^= 1;
            }
        } else if (o->l.f == MOCK_FN(FAULTS_TAKE)) {
            run_take_on_host(o->l.args);
        } else if (host_layout_kernel((memra_kernel_id)((char *)o->l.f - fn_kernel))) {
            pthread_mutex_unlock(&mu);
            run_layout_on_host(o->l.args, o->l.args_size, g, b,
                               host_layout_kernel((memra_kernel_id)((char *)o->l.f - fn_kernel)));
            pthread_mutex_lock(&mu);
        } else if (!host_route_kernel((memra_kernel_id)((char *)o->l.f - fn_kernel))) {
            fail_msg("the mock has no host run for kernel %s",
                     memra_kernel_name((memra_kernel_id)((char *)o->l.f - fn_kernel)));
        } else if (!mock.drop_route_launches) {
            /* The lanes run as threads, unlocked: they take no mock lock
             * (only the path marks' own, a leaf: host_mark). */
            const memra_kernel_id k = (memra_kernel_id)((char *)o->l.f - fn_kernel);
            const mock_spec_build *sb = o->l.special ? spec_build_of(o->l.args) : NULL;
            pthread_mutex_unlock(&mu);
            if (sb) {
                sb->run(o->l.args, o->l.args_size, g.x, b.x, k);
                mock.spec_host_runs++;
            } else {
                run_route_on_host(o->l.args, o->l.args_size, g, b, host_route_kernel(k));
            }
            mock.route_host_runs++;
            pthread_mutex_lock(&mu);
        }
        break;
    }
    case MOCK_OP_HTOD:
        memcpy((void *)(uintptr_t)o->dev, o->staged ? o->staged : o->host, o->n);
        break;
    case MOCK_OP_DTOH:
        memcpy(o->host, (void *)(uintptr_t)o->dev, o->n);
        break;
    case MOCK_OP_DTOD:
        memmove(o->host, (void *)(uintptr_t)o->dev, o->n);
        break;
    case MOCK_OP_MEMSET:
        for (size_t i = 0; i < o->n; i++)
            memcpy((char *)(uintptr_t)o->dev + 4 * i, &o->val, 4);
        break;
    case MOCK_OP_RECORD:
        break;
    case MOCK_OP_WAIT: {
        fstream *t = stream_by_id(o->target);
        if (t)
            run_until(t, o->target_seq);
        break;
    }
    case MOCK_OP_GATE:
        while (!atomic_load(o->gate)) {
            pthread_mutex_unlock(&mu);
            usleep(1000);
            pthread_mutex_lock(&mu);
        }
        break;
    }
}

/* ---- modules and launches ---------------------------------------------------- */

/* What the driver says of an image: the mock's own are always fine; those
 * of the fake NVRTC libraries ("MOCKIMG-FAKE <kind> <major>.<minor> <arch>")
 * follow the driver's rules; anything else is not an image. */
CUresult judge_image(const char *img)
{
    if (mock.refuse_loads)
        return mock.refuse_loads;
    if (strncmp(img, "MOCKIMG", 7) != 0)
        return CUDA_ERROR_INVALID_IMAGE;
    char kind[8];
    int maj, min, arch;
    if (sscanf(img, "MOCKIMG-FAKE %7s %d.%d %d", kind, &maj, &min, &arch) != 4)
        return CUDA_SUCCESS;
    const int sm = mock.sm_major * 10 + mock.sm_minor;
    if (strcmp(kind, "PTX") == 0)
        return maj * 1000 + min * 10 > mock.driver_version ? CUDA_ERROR_UNSUPPORTED_PTX_VERSION
               : arch > sm                                 ? CUDA_ERROR_INVALID_PTX
                                                           : CUDA_SUCCESS;
    if (maj > mock.driver_version / 1000)
        return CUDA_ERROR_INVALID_IMAGE;
    return arch / 10 != sm / 10 || arch > sm ? CUDA_ERROR_NO_BINARY_FOR_GPU : CUDA_SUCCESS;
}

CUresult m_cuModuleLoadData(CUmodule *m, const void *img)
{
    ENTER_CU(cuModuleLoadData);
    CUresult judged = judge_image(img);
    if (judged != CUDA_SUCCESS)
        return judged;
    pthread_mutex_lock(&mu);
    CUresult r = unsafe_call();
    fmodule *f = NULL;
    if (r == CUDA_SUCCESS) {
        f = new_obj(sizeof *f);
        f->gen = gen;
        const char *sp = strstr(img, "-SPEC ");
        if (sp) {
            f->special = 1;
            assert_int_equal(sscanf(sp, "-SPEC %u %u %u %u %u", &f->spec[0], &f->spec[1],
                                    &f->spec[2], &f->spec[3], &f->spec[4]),
                             5);
            int i = 0;
            while (i < MOCK_SPECIAL_MODULES && special_modules[i])
                i++;
            assert_true(i < MOCK_SPECIAL_MODULES);
            special_modules[i] = f;
        }
    }
    pthread_mutex_unlock(&mu);
    if (r != CUDA_SUCCESS)
        return r;
    *m = (CUmodule)f;
    mock.modules_live++;
    return CUDA_SUCCESS;
}
CUresult m_cuModuleUnload(CUmodule m)
{
    fmodule *f = (fmodule *)m;
    pthread_mutex_lock(&mu);
    int st = stale(f->gen);
    if (!st) {
        for (int i = 0; i < MOCK_SPECIAL_MODULES; i++)
            if (special_modules[i] == f)
                special_modules[i] = NULL;
        free_obj(f);
    }
    pthread_mutex_unlock(&mu);
    if (st)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    mock.modules_live--;
    return released(MOCK_cuModuleUnload);
}
CUresult m_cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    ENTER_CU(cuModuleGetFunction);
    for (int k = 0; k < MEMRA_KERNEL_COUNT; k++)
        if (strcmp(name, memra_kernel_name((memra_kernel_id)k)) == 0) {
            *f = (CUfunction)(((fmodule *)m)->special ? &((fmodule *)m)->fn[k] : &fn_kernel[k]);
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

CUresult launch(mock_launch *l)
{
    fstream *f = S(l->stream);
    if (stale(f->gen))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (l->f == MOCK_FN(VROWS)) {
        mock.last = *l;
        mock.launches++;
    }
    op o = {.kind = MOCK_OP_LAUNCH, .l = *l};
    return enqueue(f, o);
}

/* Checks a launch as the real driver would see it and queues it. */
CUresult checked_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                        void **extra, int pdl)
{
    /* A layer spec's module's kernel is checked as its generic one, and
     * its launch against the spec it was compiled for. */
    const fmodule *sm = NULL;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MOCK_SPECIAL_MODULES && !sm; i++)
        if (special_modules[i] && (char *)f >= special_modules[i]->fn &&
            (char *)f < special_modules[i]->fn + MEMRA_KERNEL_COUNT)
            sm = special_modules[i];
    pthread_mutex_unlock(&mu);
    const int special = sm != NULL;
    if (sm)
        f = (CUfunction)&fn_kernel[(char *)f - sm->fn];
    assert_true((char *)f >= fn_kernel && (char *)f < fn_kernel + MEMRA_KERNEL_COUNT);
    assert_null(params);
    assert_non_null(extra);
    /* The parameter block must be exactly the kernel's: a narrowed field
     * changes its size. */
    void *buf = NULL;
    size_t *size = NULL;
    for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
            size = extra[i + 1];
        else
            fail_msg("unknown launch extra key %p", extra[i]);
    }
    assert_non_null(buf);
    assert_non_null(size);
    assert_true(*size <= sizeof(((mock_launch *)0)->args));
    if (f == MOCK_FN(VROWS)) {
        assert_int_equal(*size, sizeof(memra_vrows_args));
    } else if (f == MOCK_FN(FAULTS_TAKE)) {
        assert_int_equal(*size, sizeof(memra_take_args));
        assert_int_equal(gx * bx, 1);
    } else if (f == MOCK_FN(LAYOUT_SMALL) || f == MOCK_FN(LAYOUT_COUNT) ||
               f == MOCK_FN(LAYOUT_SCAN) || f == MOCK_FN(LAYOUT_PLACE)) {
        assert_int_equal(*size, MEMRA_LAYOUT_PARAM_BYTES);
        memra_layout_args a;
        memcpy(&a, buf, sizeof a);
        if (f == MOCK_FN(LAYOUT_SMALL)) {
            assert_true(a.n_pairs <= MEMRA_LAYOUT_ONE_LAUNCH);
            assert_int_equal(gx, a.n_pairs <= MEMRA_LAYOUT_SMALL_TILE
                                     ? 1
                                     : (a.n_pairs + MEMRA_LAYOUT_SMALL_TILE - 1) /
                                           MEMRA_LAYOUT_SMALL_TILE);
            assert_int_equal(bx, MEMRA_LAYOUT_SMALL_THREADS);
        } else if (f == MOCK_FN(LAYOUT_SCAN)) {
            assert_int_equal(gx, 1), assert_int_equal(bx, MEMRA_LAYOUT_SCAN_THREADS);
        } else { /* a block a tile, the tiles' counts in a workspace */
            assert_true(a.n_pairs > MEMRA_LAYOUT_ONE_LAUNCH);
            assert_true(a.lp.workspace != 0);
            assert_true(a.tile >= MEMRA_LAYOUT_TILE_MIN && a.tile <= MEMRA_LAYOUT_TILE_MAX);
            assert_int_equal(a.tile & (a.tile - 1), 0);
            assert_int_equal(a.lp.n_tiles, (a.n_pairs + a.tile - 1) / a.tile);
            assert_int_equal(gx, a.lp.n_tiles);
            assert_int_equal(bx, f == MOCK_FN(LAYOUT_COUNT) ? MEMRA_LAYOUT_COUNT_THREADS
                                                            : MEMRA_LAYOUT_PLACE_THREADS);
        }
    } else {
        assert_int_equal(*size, MEMRA_ROUTE_PARAM_BYTES);
        memra_route_args a;
        memcpy(&a, buf, sizeof a);
        if (sm) { /* the values its constants stand for */
            assert_int_equal(a.n_expert, sm->spec[0]);
            assert_int_equal(a.n_group, sm->spec[1]);
            assert_int_equal(a.topk_group, sm->spec[2]);
            assert_int_equal(a.top_k, sm->spec[3]);
            assert_int_equal(a.flags & ~MEMRA_ROUTE_FLAGS_OF_CALL, sm->spec[4]);
        }
        if (f != MOCK_FN(ROUTE_BLOCK)) { /* the team kernel for the expert count */
            const uint32_t m = memra_route_team_m(a.n_expert);
            const int sig = (a.flags & MEMRA_ROUTE_FLAG_SIGMOID) != 0;
            const memra_kernel_id plain = m == 1   ? MEMRA_KERNEL_ROUTE_WARP1
                                          : m == 4 ? MEMRA_KERNEL_ROUTE_WARP4
                                          : m == 8 ? MEMRA_KERNEL_ROUTE_WARP8
                                                   : MEMRA_KERNEL_ROUTE_WARP16;
            const memra_kernel_id screened = m == 4   ? MEMRA_KERNEL_ROUTE_SIG4
                                             : m == 8 ? MEMRA_KERNEL_ROUTE_SIG8
                                                      : MEMRA_KERNEL_ROUTE_SIG16;
            assert_true(a.n_expert <= MEMRA_ROUTE_TEAM_MAX_EXPERT);
            assert_true(f == (CUfunction)&fn_kernel[plain] ||
                        (sig && m > 1 && f == (CUfunction)&fn_kernel[screened]));
            assert_int_equal(bx, MEMRA_ROUTE_TEAM_THREADS);
            assert_int_equal(
                gx, memra_route_team_grid(a.n_tokens, a.n_expert, a.n_group, a.top_k, a.flags));
        } else { /* a block of whole warps per token, a thread per expert */
            assert_int_equal(bx, memra_route_block_threads(a.n_expert));
            assert_int_equal(gx, a.n_tokens);
        }
    }
    assert_int_equal(gy, 1);
    assert_int_equal(gz, 1);
    assert_int_equal(by, 1);
    assert_int_equal(bz, 1);
    assert_int_equal(shmem, 0);
    mock_launch l = {f, {gx, gy, gz}, {bx, by, bz}, {0}, *size, s, pdl, special};
    memcpy(l.args, buf, *size);
    LOCKED(launch(&l));
}

CUresult m_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                          void **extra)
{
    ENTER_CU(cuLaunchKernel);
    return checked_launch(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra, 0);
}

/* Only the attribute memra uses is known: programmatic stream
 * serialization, which the mock records (its streams run in order anyway,
 * the strongest order PDL allows). */
CUresult m_cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    ENTER_CU(cuLaunchKernelEx);
    assert_non_null(c);
    int pdl = 0;
    for (unsigned i = 0; i < c->numAttrs; i++) {
        if (c->attrs[i].id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
            fail_msg("unexpected launch attribute %d", (int)c->attrs[i].id);
        pdl = c->attrs[i].value.programmaticStreamSerializationAllowed != 0;
    }
    if (pdl)
        mock.pdl_launches++;
    return checked_launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                          c->blockDimZ, c->sharedMemBytes, c->hStream, params, extra, pdl);
}
/* The parameter layout NVRTC gave a kernel is what the GPU suite checks
 * against the ABI structs (test_gpu_tables); the mock runs the source
 * itself and has no compiled layout to report. */
CUresult m_cuFuncGetParamInfo(CUfunction f, size_t index, size_t *offset, size_t *size)
{
    (void)f, (void)index, (void)offset, (void)size;
    ENTER_CU(cuFuncGetParamInfo);
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult m_cuGetErrorName(CUresult r, const char **s)
{
    switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY:
        *s = "CUDA_ERROR_OUT_OF_MEMORY";
        break;
    case CUDA_ERROR_INVALID_IMAGE:
        *s = "CUDA_ERROR_INVALID_IMAGE";
        break;
    case CUDA_ERROR_LAUNCH_FAILED:
        *s = "CUDA_ERROR_LAUNCH_FAILED";
        break;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
        *s = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
        break;
    default:
        *s = "CUDA_ERROR_MOCK";
        break;
    }
    return CUDA_SUCCESS;
}
CUresult m_cuGetErrorString(CUresult r, const char **s)
{
    (void)r;
    *s = "mock driver error";
    return CUDA_SUCCESS;
}

void mock_reset_primary_ctx(int dev)
{
    pthread_mutex_lock(&mu);
    /* Queued work is dropped, every allocation freed; streams, events and
     * modules of the old generation answer CONTEXT_IS_DESTROYED. */
    int n_dev = 0, n_pinned = 0;
    while (allocs) {
        alloc_rec *a = allocs;
        allocs = a->next;
        if (a->pinned)
            n_pinned++;
        else
            n_dev++;
        free((void *)a->p);
        free(a);
    }
    mock.live_allocs -= n_dev;
    mock.live_pinned -= n_pinned;
    for (fstream *s = all_streams(NULL); s; s = all_streams(s)) {
        for (size_t i = s->done; i < s->n_ops; i++) {
            free(s->ops[i].staged);
            s->ops[i].staged = NULL;
        }
        s->done = s->n_ops;
    }
    /* The handles stay allocated (their owners may still call into them);
     * they no longer count as live objects of the context. */
    int n_streams = 0;
    for (fstream *s = live; s; s = s->next)
        n_streams += !s->per_thread && s->gen == gen;
    mock.streams_live -= n_streams;
    mock.events_live = 0;
    mock.modules_live = 0;
    gen++;
    legacy.gen = gen;
    ctx_id[dev] = next_ctx_id++;
    pthread_mutex_unlock(&mu);
}
