/* Deterministic inputs for checks: splitmix64 and floats drawn to hit the
 * edges. Shared by memra_engine_self_check and the test suites, so a case
 * seeded the same is the same case everywhere. */
#ifndef MEMRA_RNG_H
#define MEMRA_RNG_H

#include <stdint.h>
#include <string.h>

#include <memra/memra.h>

static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline float rng_bits_float(uint32_t b)
{
    float x;
    memcpy(&x, &b, 4);
    return x;
}

/* Subnormals, +/-0, +/-inf, NaNs with payloads, huge and tiny normals, and
 * ordinary values. */
static inline float rng_special_float(uint64_t *s)
{
    uint64_t r = rng_next(s);
    uint32_t sign = (uint32_t)(r >> 63) << 31;
    switch (r % 10) {
    case 0:
        return rng_bits_float(sign | ((uint32_t)(r >> 8) % 0x7fffff + 1)); /* subnormal */
    case 1:
        return rng_bits_float(sign); /* +/-0 */
    case 2:
        return rng_bits_float(sign | 0x7f800000u); /* +/-inf */
    case 3:
        return rng_bits_float(sign | 0x7f800000u | ((uint32_t)(r >> 9) % 0x7fffff + 1)); /* NaN */
    case 4:
        return rng_bits_float(sign | (uint32_t)(0x00800000u + (r >> 11) % 0x02000000u)); /* tiny */
    case 5:
        return rng_bits_float(sign | (uint32_t)(0x7e000000u + (r >> 11) % 0x017fffffu)); /* huge */
    default:
        return rng_bits_float(sign | (uint32_t)(0x3a000000u + (r >> 11) % 0x0a000000u));
    }
}

/* Slabs whose strides have bit `min_bit` set (so every product passes
 * 2^min_bit) and run up to 2^40, with bases placed so the last expert's row
 * ends just below 2^64: the top of the address space. */
static inline void rng_high_slabs(uint64_t *s, uint32_t n_expert, int min_bit,
                                  memra_vrows_slabs *sl)
{
    for (int k = 0; k < 3; k++) {
        sl->stride[k] = (rng_next(s) % (1ull << 40)) | (1ull << min_bit);
        sl->base[k] = ~0ull - (uint64_t)(n_expert - 1) * sl->stride[k] - rng_next(s) % 65536;
    }
}

#endif /* MEMRA_RNG_H */
