#include "mirror.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

void memra_mirror_init(memra_mirror *mir)
{
    *mir = (memra_mirror){0};
    pthread_mutex_init(&mir->lock, NULL);
    memra_pinned_init(&mir->pinned);
}

void memra_mirror_reserve(const memra_driver *d, memra_mirror *mir)
{
    memra_pinned_reserve(d, &mir->pinned);
}

/* (il, kind)'s slot, created on first use. Only the table lookup is under
 * the mirror's lock; the slot has its own, so a miss on one slot never
 * stalls a hit on another. */
static memra_slot *slot_of(memra_mirror *mir, int il, memra_mirror_kind kind)
{
    memra_slot *m = NULL;
    pthread_mutex_lock(&mir->lock);
    size_t *n = &mir->n_slots[kind];
    if ((size_t)il >= *n) {
        size_t grow = *n ? *n : 64;
        while (grow <= (size_t)il)
            grow *= 2;
        memra_slot **t = realloc(mir->slots[kind], grow * sizeof *t);
        if (!t)
            goto out;
        memset(t + *n, 0, (grow - *n) * sizeof *t);
        mir->slots[kind] = t;
        *n = grow;
    }
    memra_slot **at = &mir->slots[kind][il];
    if (!*at && (*at = calloc(1, sizeof **at)))
        pthread_mutex_init(&(*at)->lock, NULL);
    m = *at;
out:
    pthread_mutex_unlock(&mir->lock);
    return m;
}

static int slot_matches(const memra_slot *m, uint32_t n_expert, const float *const *planes,
                        int n_planes)
{
    if (!m->valid || m->n_expert != n_expert || m->n_planes != n_planes)
        return 0;
    for (int k = 0; k < n_planes; k++)
        if (memcmp(m->shadow + (size_t)k * n_expert, planes[k], n_expert * sizeof(float)))
            return 0;
    return 1;
}

static void retire(memra_mirror *mir, memra_slot *m, CUdeviceptr dev, float *host,
                   size_t host_bytes)
{
    memra_retired *r = calloc(1, sizeof *r);
    if (!r)
        return; /* leaking the buffer is safe; freeing what an upload reads is not */
    *r = (memra_retired){
        .slot = m, .last_reader = m->version, .dev = dev, .host = host, .host_bytes = host_bytes};
    pthread_mutex_lock(&mir->lock);
    r->next = mir->retired;
    mir->retired = r;
    pthread_mutex_unlock(&mir->lock);
}

/* Frees the retired buffers whose last reading upload is known finished.
 * The device buffers may still be read by launches queued on any stream:
 * cuMemFree waits for those, so it runs here, after an upload, outside
 * every lock, never on a launch. */
static void reclaim(memra_call *c, memra_mirror *mir)
{
    const memra_driver *d = c->d;
    pthread_mutex_lock(&mir->lock);
    memra_retired *list = mir->retired;
    mir->retired = NULL;
    pthread_mutex_unlock(&mir->lock);
    memra_retired *keep = NULL, **tail = &keep;
    for (memra_retired *r = list, *next; r; r = next) {
        next = r->next;
        if (r->last_reader <= atomic_load(&r->slot->finished)) {
            if (r->dev)
                d->cuMemFree(r->dev);
            memra_pinned_free(&mir->pinned, r->host, r->host_bytes);
            free(r);
        } else {
            r->next = NULL;
            *tail = r;
            tail = &r->next;
        }
    }
    if (!keep)
        return;
    pthread_mutex_lock(&mir->lock);
    *tail = mir->retired;
    mir->retired = keep;
    pthread_mutex_unlock(&mir->lock);
}

/* Records that the slot's upload number `version` (and so every one
 * before it) has finished; callers may race, so the count only grows. */
static void note_finished(memra_slot *m, uint64_t version)
{
    uint64_t f = atomic_load(&m->finished);
    while (f < version && !atomic_compare_exchange_weak(&m->finished, &f, version)) {
    }
}

/* The slot's last upload is known finished (or there was none). */
static int upload_known_done(memra_slot *m)
{
    return atomic_load(&m->finished) >= m->version;
}

/* Whether the slot's last upload may still be running (learning that it
 * finished when the driver says so). */
static memra_status upload_in_flight(memra_call *c, memra_slot *m, int *in_flight)
{
    *in_flight = 0;
    if (upload_known_done(m))
        return MEMRA_OK;
    const CUresult r = c->d->cuEventQuery(m->uploaded);
    if (r == CUDA_SUCCESS) {
        note_finished(m, m->version);
        return MEMRA_OK;
    }
    if (r != CUDA_ERROR_NOT_READY)
        return memra_cu_fail(c->d, r, MEMRA_ERR_DRIVER, c->fn, "cuEventQuery(plane upload)");
    *in_flight = 1;
    return MEMRA_OK;
}

/* Room for `need` floats. A larger buffer at least doubles, so a slot whose
 * shape alternates settles on one buffer; the old ones are retired. While
 * the last upload may still read the shadow, the new content goes to the
 * slot's spare shadow once the upload that last read it has finished, else
 * to a fresh one: contents that keep changing ping-pong between two
 * shadows, with no allocation and no free. */
static memra_status make_room(memra_call *c, memra_mirror *mir, memra_slot *m, size_t need,
                              int in_flight)
{
    const memra_driver *d = c->d;
    const int grow = need > m->capacity;
    if (!grow && !in_flight)
        return MEMRA_OK;
    if (!grow && m->spare && m->spare_reader <= atomic_load(&m->finished)) {
        float *t = m->shadow;
        m->shadow = m->spare;
        m->spare = t;
        m->spare_reader = m->version;
        return MEMRA_OK;
    }
    const size_t cap = grow ? (need > 2 * m->capacity ? need : 2 * m->capacity) : m->capacity;
    CUdeviceptr dev = 0;
    void *host = NULL;
    CUresult r;
    if (grow && (r = d->cuMemAlloc(&dev, cap * sizeof(float))) != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_OUT_OF_MEMORY, c->fn, "cuMemAlloc(mirrored planes)");
    memra_status st = memra_pinned_alloc(c, &mir->pinned, cap * sizeof(float), &host);
    if (st) {
        if (dev)
            d->cuMemFree(dev);
        return st;
    }
    const size_t held = m->capacity * sizeof(float); /* the old shadows' size */
    if (grow) {
        if (m->shadow || m->dev)
            retire(mir, m, m->dev, m->shadow, held);
        if (m->spare)
            retire(mir, m, 0, m->spare, held);
        m->spare = NULL;
        m->dev = dev;
        m->capacity = cap;
    } else if (!m->spare) {
        m->spare = m->shadow;
        m->spare_reader = m->version;
    } else {
        retire(mir, m, 0, m->shadow, held);
    }
    m->shadow = host;
    return MEMRA_OK;
}

/* Uploads the planes into the slot on `s` (not capturing), after the slot's
 * previous upload. Caller holds m->lock. */
static memra_status upload(memra_call *c, memra_mirror *mir, memra_slot *m, uint32_t n_expert,
                           const float *const *planes, int n_planes, CUstream s)
{
    const memra_driver *d = c->d;
    CUresult r;
    int in_flight;
    memra_status st = upload_in_flight(c, m, &in_flight);
    if (st)
        return st;
    if (!m->uploaded && (r = d->cuEventCreate(&m->uploaded, CU_EVENT_DISABLE_TIMING))) {
        m->uploaded = NULL;
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, c->fn, "cuEventCreate(plane upload)");
    }
    const size_t plane = n_expert, need = plane * (size_t)n_planes;
    if ((st = make_room(c, mir, m, need, in_flight)))
        return st;
    /* Invalid until the upload is issued: a failed upload must make the
     * next call upload again, never find a matching shadow over stale
     * device planes. */
    m->valid = 0;
    for (int k = 0; k < n_planes; k++)
        memcpy(m->shadow + (size_t)k * plane, planes[k], plane * sizeof(float));
    /* The uploads of a slot land in the order they were issued, whatever
     * streams they ran on: the device content is always the shadow's. */
    if (in_flight && (r = d->cuStreamWaitEvent(s, m->uploaded, 0)) != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, c->fn, "cuStreamWaitEvent(previous upload)");
    if ((r = d->cuMemcpyHtoDAsync(m->dev, m->shadow, need * sizeof(float), s)) != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, c->fn,
                             "cuMemcpyHtoDAsync(layer macro planes)");
    if ((r = d->cuEventRecord(m->uploaded, s)) != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, c->fn, "cuEventRecord(plane upload)");
    m->upload_stream = memra_stream_id(d, s);
    m->n_expert = n_expert;
    m->n_planes = n_planes;
    m->version++;
    m->valid = 1;
    return MEMRA_OK;
}

/* Orders the launch about to follow on `s` after the slot's last upload.
 * Eagerly nothing is needed once the upload is seen finished, or on its own
 * stream; otherwise the stream waits for the upload's event. Under capture
 * nothing may be asked of the event: a query, even in relaxed thread mode,
 * invalidates the caller's own capture (driver 580 on the H200). A launch
 * captured after its upload is known finished -- the prepare calls finish
 * theirs before returning (memra_mirror_get's `settle`) -- has no wait in
 * the graph; otherwise a wait node is recorded (CU_EVENT_WAIT_EXTERNAL,
 * evaluated at each graph launch). The slot is marked captured, and every
 * later upload into it is finished before its call returns, so a replay
 * launched after it reads the new planes: a wait node on every captured
 * launch cost 0.67 us per node per replay on the H200. */
static memra_status order_launch(memra_call *c, memra_slot *m, memra_capture cap, CUstream s)
{
    const memra_driver *d = c->d;
    CUresult r;
    const int done = upload_known_done(m);
    if (cap == MEMRA_CAPTURE_ACTIVE) {
        m->captured = 1;
        if (done)
            return MEMRA_OK;
        if ((r = d->cuStreamWaitEvent(s, m->uploaded, CU_EVENT_WAIT_EXTERNAL)) != CUDA_SUCCESS)
            return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, c->fn,
                                 "cuStreamWaitEvent(plane upload, external)");
        return MEMRA_OK;
    }
    if (cap != MEMRA_CAPTURE_NONE || done)
        return MEMRA_OK;
    const unsigned long long id = memra_stream_id(d, s);
    if (id && id == m->upload_stream)
        return MEMRA_OK;
    memra_call_relax(c); /* an event query is unsafe under another's global capture */
    int in_flight;
    memra_status st = upload_in_flight(c, m, &in_flight);
    if (st || !in_flight)
        return st;
    if ((r = d->cuStreamWaitEvent(s, m->uploaded, 0)) != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, c->fn, "cuStreamWaitEvent(plane upload)");
    return MEMRA_OK;
}

memra_status memra_mirror_get(memra_call *c, memra_mirror *mir, memra_capture cap, int il,
                              memra_mirror_kind kind, uint32_t n_expert, const float *const *planes,
                              int n_planes, CUstream s, int settle, CUdeviceptr *dev)
{
    memra_slot *m = slot_of(mir, il, kind);
    if (!m)
        return memra_fail(MEMRA_ERR_OUT_OF_MEMORY, "%s: growing the table of layers to %d", c->fn,
                          il);
    pthread_mutex_lock(&m->lock);
    memra_status st = MEMRA_OK;
    int uploaded = 0;
    if (slot_matches(m, n_expert, planes, n_planes)) {
        if (!settle)
            st = order_launch(c, m, cap, s);
    } else if (cap != MEMRA_CAPTURE_NONE) {
        st = memra_refuse_capture(c, s, "upload the layer's planes",
                                  kind == MEMRA_MIRROR_ROUTE
                                      ? "call memra_route_prepare_layer() for this layer first"
                                      : "call memra_vrows_prepare_layer() for this layer first");
    } else {
        memra_call_relax(c);
        st = upload(c, mir, m, n_expert, planes, n_planes, s);
        uploaded = 1;
    }
    *dev = m->dev;
    /* The upload is finished before the call returns where a graph may read
     * the slot with no wait for it (order_launch): a slot a graph already
     * reads, and a prepared one, which the next capture will read. */
    const int finish = !st && !upload_known_done(m) && (settle || (uploaded && m->captured));
    const CUevent ev = m->uploaded;
    const uint64_t version = m->version;
    pthread_mutex_unlock(&m->lock);
    if (finish) {
        memra_call_relax(c); /* unsafe under another thread's global capture */
        const CUresult r = c->d->cuEventSynchronize(ev);
        if (r != CUDA_SUCCESS) {
            st = memra_cu_fail(c->d, r, MEMRA_ERR_DRIVER, c->fn,
                               "cuEventSynchronize(upload into a captured or prepared layer)");
        } else {
            note_finished(m, version);
        }
    }
    if (uploaded)
        reclaim(c, mir);
    return st;
}

void memra_mirror_release(memra_mirror *mir, const memra_driver *d, int touch_device)
{
    for (int k = 0; k < MEMRA_MIRROR_KINDS; k++) {
        for (size_t i = 0; i < mir->n_slots[k]; i++) {
            memra_slot *m = mir->slots[k][i];
            if (!m)
                continue;
            if (touch_device) {
                if (m->dev)
                    d->cuMemFree(m->dev);
                if (m->uploaded)
                    d->cuEventDestroy(m->uploaded);
            }
            pthread_mutex_destroy(&m->lock);
            free(m);
        }
        free(mir->slots[k]);
        mir->slots[k] = NULL;
        mir->n_slots[k] = 0;
    }
    for (memra_retired *r = mir->retired, *next; r; r = next) {
        next = r->next;
        if (touch_device && r->dev)
            d->cuMemFree(r->dev);
        free(r);
    }
    mir->retired = NULL;
    /* The shadows, live and retired, are blocks of the arena. */
    memra_pinned_release(d, &mir->pinned, touch_device);
    pthread_mutex_destroy(&mir->lock);
}
