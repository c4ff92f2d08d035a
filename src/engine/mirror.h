/* The mirror: host planes (macro scales, a routing bias) kept in device
 * memory per (layer, kind), for kernels to read.
 *
 * Each slot is versioned: the host shadow always holds the content of the
 * last upload issued, uploads of a slot are totally ordered (each waits for
 * the one before it, whatever stream either ran on), and a launch is
 * ordered after the upload of the content it reads — eagerly by an event
 * wait until the upload is seen finished; in a captured graph by an
 * external event wait node while the upload may still run, and for every
 * later upload by that upload finishing before its call returns. A slot's device buffer keeps its
 * address while its content fits (graphs bake addresses in); buffers it
 * outgrew and host shadows an in-flight upload still reads are retired and
 * freed on a later upload once their last upload has finished. */
#ifndef MEMRA_MIRROR_H
#define MEMRA_MIRROR_H

#include <pthread.h>
#include <stdatomic.h>

#include "context.h"
#include "pinned.h"

/* What a slot holds; the kinds never share a slot, so the table kernel and
 * the routing kernel can use the same layer index in one graph. The
 * scratch kinds are the engine's own self-check's: it never touches a
 * caller's slot. */
typedef enum memra_mirror_kind {
    MEMRA_MIRROR_VROWS,         /* the table kernel's three macro planes */
    MEMRA_MIRROR_ROUTE,         /* the routing kernel's macro planes and/or bias */
    MEMRA_MIRROR_SCRATCH_VROWS, /* the same two, for the self-check */
    MEMRA_MIRROR_SCRATCH_ROUTE,
    MEMRA_MIRROR_KINDS
} memra_mirror_kind;
static inline memra_mirror_kind memra_mirror_kind_of(memra_mirror_kind kind, int scratch)
{
    return scratch ? (memra_mirror_kind)(kind + MEMRA_MIRROR_SCRATCH_VROWS) : kind;
}

typedef struct memra_slot {
    pthread_mutex_t lock; /* the slot's state; never held across a device wait */
    uint32_t n_expert;    /* the content: n_planes planes of n_expert floats */
    int n_planes;
    int valid;        /* the last upload was issued without error */
    uint64_t version; /* uploads issued */
    size_t capacity;  /* floats the buffers hold */
    float *shadow;    /* pinned: the last issued upload's content and source */
    float *spare;     /* pinned: the shadow before, free once upload spare_reader has finished */
    uint64_t spare_reader;
    CUdeviceptr dev;                  /* the planes back to back */
    CUevent uploaded;                 /* recorded after each upload */
    unsigned long long upload_stream; /* cuStreamGetId of the last upload's stream */
    int captured; /* a graph reads the slot: uploads into it finish before they return */
    _Atomic uint64_t finished; /* uploads known finished (each waited for the one before) */
} memra_slot;

/* Buffers no longer a slot's own, freed once the slot's upload number
 * `last_reader` (the last that may read them) is known finished. */
typedef struct memra_retired {
    struct memra_retired *next;
    memra_slot *slot;
    uint64_t last_reader;
    CUdeviceptr dev;
    float *host; /* pinned: a block of the engine's arena (pinned.h) */
    size_t host_bytes;
} memra_retired;

/* An engine's mirror: its slots by kind and layer, the buffers waiting to
 * be freed, and the pinned arena the host shadows come from. */
typedef struct memra_mirror {
    /* Short critical sections only, no driver call inside: the slot tables
     * and the retired list. Each slot has its own lock besides. */
    pthread_mutex_t lock;
    memra_slot **slots[MEMRA_MIRROR_KINDS];
    size_t n_slots[MEMRA_MIRROR_KINDS];
    memra_retired *retired;
    memra_pinned pinned;
} memra_mirror;

void memra_mirror_init(memra_mirror *mir);
/* Takes the arena's first chunk now (engine creation), not at a layer's
 * first upload; a failure is not one: the first upload tries again. */
void memra_mirror_reserve(const memra_driver *d, memra_mirror *mir);

/* The device address of (il, kind)'s planes, uploaded on `s` when missing or
 * changed. `cap` is what work on `s` meets (memra_capture_of). For a launch
 * (`settle` 0) the launch about to follow on `s` is ordered after the
 * upload: under capture a miss is MEMRA_ERR_CAPTURE (nothing is allocated or
 * copied) and a hit whose upload is not known finished adds an external
 * event wait node. For a prepare call (`settle` 1) the upload is finished
 * before the call returns, so a graph captured next needs no wait. Caller
 * holds the call (context) and has checked il. */
memra_status memra_mirror_get(memra_call *c, memra_mirror *mir, memra_capture cap, int il,
                              memra_mirror_kind kind, uint32_t n_expert, const float *const *planes,
                              int n_planes, CUstream s, int settle, CUdeviceptr *dev);

/* Plane k of a mirror of n_expert-float planes. */
static inline CUdeviceptr memra_mirror_plane(CUdeviceptr dev, uint32_t n_expert, int k)
{
    return dev + (uint64_t)k * n_expert * sizeof(float);
}

/* Frees every slot, retired buffer and the arena (touch_device = 0 after a
 * context reset: host memory only). */
void memra_mirror_release(memra_mirror *mir, const memra_driver *d, int touch_device);

#endif /* MEMRA_MIRROR_H */
