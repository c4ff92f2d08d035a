/* Reading (and resetting) the engine's fault word, ordered on the caller's
 * stream like a copy on it. */
#include <stdatomic.h>

#include "abi.h"
#include "base/error.h"
#include "engine.h"
#include "faults_abi.h"

/* A readback area for one reset: a free one of the engine's, or a
 * temporary allocation when every one is taken (*temp set). */
static memra_status take_readback(memra_call *c, CUdeviceptr *area, int *slot, int *temp)
{
    memra_engine *eng = c->eng;
    unsigned long long busy = atomic_load(&eng->readbacks_busy);
    for (;;) {
        int free_slot = -1;
        for (int i = 0; i < MEMRA_FAULT_READBACKS; i++)
            if (!(busy >> i & 1)) {
                free_slot = i;
                break;
            }
        if (free_slot < 0)
            break;
        if (atomic_compare_exchange_weak(&eng->readbacks_busy, &busy, busy | 1ull << free_slot)) {
            *slot = free_slot, *temp = 0;
            *area = eng->faults + (CUdeviceptr)(1 + free_slot) * MEMRA_FAULT_WORDS * 4;
            return MEMRA_OK;
        }
    }
    CUresult r = c->d->cuMemAlloc(area, MEMRA_FAULT_WORDS * 4);
    if (r != CUDA_SUCCESS)
        return memra_cu_fail(c->d, r, MEMRA_ERR_OUT_OF_MEMORY, c->fn, "cuMemAlloc(fault readback)");
    *slot = -1, *temp = 1;
    return MEMRA_OK;
}

static void give_readback(memra_call *c, CUdeviceptr area, int slot, int temp)
{
    if (temp)
        c->d->cuMemFree(area);
    else
        atomic_fetch_and(&c->eng->readbacks_busy, ~(1ull << slot));
}

memra_status memra_engine_faults(memra_engine *eng, memra_stream stream, memra_faults *out,
                                 int reset)
{
    static const char fn[] = "memra_engine_faults";
    if (!eng || !out)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: %s is NULL", fn, eng ? "out" : "eng");
    const memra_driver *d = eng->d;
    CUstream s = (CUstream)stream;
    memra_call c;
    memra_status st = memra_call_enter(eng, fn, &c);
    CUfunction take = NULL;
    if (!st)
        st = memra_refuse_capture(&c, s, "wait for the stream to read the fault word",
                                  "read faults outside the capture, on the stream after it");
    if (!st && reset)
        st = memra_engine_kernel(&c, MEMRA_CAPTURE_NONE, MEMRA_KERNEL_FAULTS_TAKE, &take);
    if (st) {
        memra_call_leave(&c);
        return st;
    }
    memra_call_relax(&c);
    CUdeviceptr from = eng->faults, area = 0;
    int slot = -1, temp = 0, launched = 0;
    CUresult r = CUDA_SUCCESS;
    const char *call = "cuMemcpyDtoHAsync(fault word)";
    if (reset) {
        /* Read and clear on the device in one step (atomicExch) into an
         * area of this call's own, so counts that other streams add
         * meanwhile are never wiped unread, and no other reader waits for
         * this stream. */
        if ((st = take_readback(&c, &area, &slot, &temp))) {
            memra_call_leave(&c);
            return st;
        }
        memra_take_args a = {eng->faults, area};
        size_t size = sizeof a;
        void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &a, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                         CU_LAUNCH_PARAM_END};
        r = d->cuLaunchKernel(take, 1, 1, 1, 1, 1, 1, 0, s, NULL, extra);
        launched = r == CUDA_SUCCESS;
        call = "cuLaunchKernel(memra_faults_take_kernel)";
        from = area;
    }
    uint32_t w[MEMRA_FAULT_WORDS];
    if (r == CUDA_SUCCESS && (r = d->cuMemcpyDtoHAsync(w, from, sizeof w, s)) == CUDA_SUCCESS) {
        call = "cuStreamSynchronize";
        r = d->cuStreamSynchronize(s);
    }
    /* An area a queued take may still write after a failure is not
     * handed out again. */
    if (reset && (r == CUDA_SUCCESS || !launched))
        give_readback(&c, area, slot, temp);
    if (r != CUDA_SUCCESS) {
        st = memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, call);
    } else {
        out->bad_expert = w[MEMRA_FAULT_BAD_EXPERT];
        out->nonfinite = w[MEMRA_FAULT_NONFINITE];
        out->first_pair = w[MEMRA_FAULT_FIRST_PAIR];
        out->not_local = w[MEMRA_FAULT_NOT_LOCAL];
        out->padded = w[MEMRA_FAULT_PADDED];
    }
    memra_call_leave(&c);
    return st;
}
