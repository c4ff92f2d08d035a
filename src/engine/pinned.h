/* One pinned host arena per engine, handed out to the mirror's host
 * shadows (mirror.c). cuMemAllocHost costs 0.7-1.3 ms a call on the H200
 * (BENCHMARKS.md: warm first use), so a server preparing ~60 layers of two
 * kinds paid over 0.1 s in it; the arena takes pinned memory in chunks of
 * at least 1 MiB (the first when the engine is made) and hands out blocks
 * of power-of-two sizes, which go back to a free list of their size, never
 * to the driver, until the engine is destroyed. */
#ifndef MEMRA_PINNED_H
#define MEMRA_PINNED_H

#include <pthread.h>
#include <stddef.h>

#include "context.h"

#define MEMRA_PINNED_CLASSES 24 /* blocks of 256 B << k */
#define MEMRA_PINNED_CHUNK (1u << 20)

typedef struct memra_pinned_chunk {
    struct memra_pinned_chunk *next;
    char *base;
    size_t size, used;
} memra_pinned_chunk;

typedef struct memra_pinned {
    pthread_mutex_t lock; /* no driver call under it */
    memra_pinned_chunk *chunks;
    void *free_list[MEMRA_PINNED_CLASSES]; /* each free block's first bytes link the next */
} memra_pinned;

void memra_pinned_init(memra_pinned *p);
/* Takes the first chunk now (engine creation), so no layer's first upload
 * pays for pinning; a failure here is not one: the next block tries again. */
void memra_pinned_reserve(const memra_driver *d, memra_pinned *p);
/* A pinned block of at least `bytes`, 8-byte aligned. */
memra_status memra_pinned_alloc(memra_call *c, memra_pinned *p, size_t bytes, void **out);
/* Gives back a block of memra_pinned_alloc(bytes). */
void memra_pinned_free(memra_pinned *p, void *block, size_t bytes);
/* Frees every chunk (touch_device 0 after a context reset: none, the
 * memory went with the context) and the arena's lock. */
void memra_pinned_release(const memra_driver *d, memra_pinned *p, int touch_device);

#endif /* MEMRA_PINNED_H */
