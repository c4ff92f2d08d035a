#include "pinned.h"

#include <stdint.h>
#include <stdlib.h>

#include "base/error.h"

/* The class of a block of `bytes`: 256 B << k, the first that holds it;
 * MEMRA_PINNED_CLASSES for more than the largest (a chunk of its own, never
 * reused). */
static int class_of(size_t bytes)
{
    int k = 0;
    while (k < MEMRA_PINNED_CLASSES && ((size_t)256 << k) < bytes)
        k++;
    return k;
}

void memra_pinned_init(memra_pinned *p)
{
    *p = (memra_pinned){0};
    pthread_mutex_init(&p->lock, NULL);
}

/* A new chunk of at least `bytes`, pinned outside the lock. */
static memra_pinned_chunk *new_chunk(const memra_driver *d, size_t bytes, CUresult *r)
{
    const size_t size = bytes > MEMRA_PINNED_CHUNK ? bytes : MEMRA_PINNED_CHUNK;
    memra_pinned_chunk *ch = calloc(1, sizeof *ch);
    void *base = NULL;
    *r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!ch || (*r = d->cuMemAllocHost(&base, size)) != CUDA_SUCCESS) {
        free(ch);
        return NULL;
    }
    ch->base = base, ch->size = size;
    return ch;
}

void memra_pinned_reserve(const memra_driver *d, memra_pinned *p)
{
    CUresult r;
    memra_pinned_chunk *ch = new_chunk(d, MEMRA_PINNED_CHUNK, &r);
    if (!ch)
        return;
    pthread_mutex_lock(&p->lock);
    ch->next = p->chunks;
    p->chunks = ch;
    pthread_mutex_unlock(&p->lock);
}

/* A block of class k from the free list or the newest chunk's room (lock
 * held); NULL if neither has one. */
static void *take(memra_pinned *p, int k, size_t size)
{
    if (k < MEMRA_PINNED_CLASSES && p->free_list[k]) {
        void *b = p->free_list[k];
        p->free_list[k] = *(void **)b;
        return b;
    }
    memra_pinned_chunk *ch = p->chunks;
    if (k < MEMRA_PINNED_CLASSES && ch && ch->size - ch->used >= size) {
        void *b = ch->base + ch->used;
        ch->used += size;
        return b;
    }
    return NULL;
}

memra_status memra_pinned_alloc(memra_call *c, memra_pinned *p, size_t bytes, void **out)
{
    const int k = class_of(bytes);
    const size_t size = k < MEMRA_PINNED_CLASSES ? (size_t)256 << k : bytes;
    pthread_mutex_lock(&p->lock);
    void *b = take(p, k, size);
    pthread_mutex_unlock(&p->lock);
    if (b) {
        *out = b;
        return MEMRA_OK;
    }
    CUresult r;
    memra_pinned_chunk *ch = new_chunk(c->d, size, &r);
    if (!ch)
        return memra_cu_fail(c->d, r, MEMRA_ERR_OUT_OF_MEMORY, c->fn,
                             "cuMemAllocHost(plane shadow)");
    /* The new chunk becomes the newest; what the old one had left stays
     * unused (at most a block's size of each MiB). */
    pthread_mutex_lock(&p->lock);
    ch->next = p->chunks;
    p->chunks = ch;
    ch->used = size;
    pthread_mutex_unlock(&p->lock);
    *out = ch->base;
    return MEMRA_OK;
}

void memra_pinned_free(memra_pinned *p, void *block, size_t bytes)
{
    const int k = class_of(bytes);
    if (!block || k >= MEMRA_PINNED_CLASSES)
        return; /* an outsize block stays with its chunk until the engine goes */
    pthread_mutex_lock(&p->lock);
    *(void **)block = p->free_list[k];
    p->free_list[k] = block;
    pthread_mutex_unlock(&p->lock);
}

void memra_pinned_release(const memra_driver *d, memra_pinned *p, int touch_device)
{
    for (memra_pinned_chunk *ch = p->chunks, *next; ch; ch = next) {
        next = ch->next;
        if (touch_device)
            d->cuMemFreeHost(ch->base);
        free(ch);
    }
    p->chunks = NULL;
    pthread_mutex_destroy(&p->lock);
}
