/* The routing arithmetic both arms share: exp, the expert order, and the
 * fixed reduction order. Concatenated into the kernel source NVRTC compiles
 * (after vrows.cu) and included by the host arm (src/route/route_host.c), so the
 * two run the same sequence of IEEE binary32 operations.
 *
 * Every add, subtract, multiply and divide goes through memra_*_rn, which is
 * the round-to-nearest intrinsic on the device and the plain operator on the
 * host (compiled with -ffp-contract=off): no FMA the text does not spell
 * (memra_fma_rn: one rounding on both sides, C's fmaf on the host), no
 * fast-math, no flush-to-zero on either side. */
#ifdef __CUDACC_RTC__
#define memra_add_rn(a, b) __fadd_rn((a), (b))
#define memra_sub_rn(a, b) __fsub_rn((a), (b))
/* Everything is inlined, nothing called: a called function keeps its
 * arguments (the kernel's output description among them) in local memory,
 * which on a decode step costs more than the arithmetic. Each routing
 * kernel is its own NVRTC program (kernels_src/meson.build), so inlining
 * does not multiply the compile time (measured: the same within noise). */
#define memra_div_rn(a, b) __fdiv_rn((a), (b))
#define memra_fma_rn(a, b, c) __fmaf_rn((a), (b), (c))
#else
#include <math.h>
#define memra_fma_rn(a, b, c) fmaf((a), (b), (c))
#endif

/* Scores are in (0, 1], so no expert scores -inf: it marks "nothing". */
#define MEMRA_NEG_INF_BITS 0xff800000u

/* The input's parts and FreeBSD's constants, as both forms of exp begin. */
#define MEMRA_EXPF_PROLOGUE(x)                                                                     \
    const memra_u32 bits = memra_as_bits(x);                                                       \
    const memra_u32 hx = bits & 0x7fffffffu;                                                       \
    const int xsb = (int)(bits >> 31);                                                             \
    const float one = 1.0f, two = 2.0f;                                                            \
    const float ln2hi = memra_from_bits(0x3f317200u); /* 6.9314575195e-01 */                       \
    const float ln2lo = memra_from_bits(0x35bfbe8eu); /* 1.4286067653e-06 */                       \
    const float invln2 = memra_from_bits(0x3fb8aa3bu);                                             \
    const float p1 = memra_from_bits(0x3e2aaa8fu); /* 1.6666625440e-1 */                           \
    const float p2 = memra_from_bits(0xbb355215u)  /* -2.7667332906e-3 */

/* exp(x) in binary32: FreeBSD's e_expf.c (Sun's algorithm, error below one
 * ulp), written with explicit roundings and integer bit tricks so that the
 * device and the host compute it the same way. Range reduction
 * x = k*ln2 + r, |r| <= 0.5 ln2, with ln2 split so k*ln2_hi is exact; a
 * rational approximation of exp(r); scaling by 2^k in two steps below
 * 2^-125 so a subnormal result is rounded once. NaN in, NaN out. */
MEMRA_DEVICE float memra_expf(float x)
{
    MEMRA_EXPF_PROLOGUE(x);
    if (hx > 0x7f800000u)
        return memra_add_rn(x, x); /* NaN */
    if (hx == 0x7f800000u)
        return xsb ? 0.0f : x;
    if (!xsb && hx > 0x42b17217u) /* above ln(FLT_MAX): overflow */
        return memra_from_bits(0x7f800000u);
    if (xsb && hx > 0x42cff1b5u) /* below -103.972084: underflow */
        return 0.0f;
    float hi = 0.0f, lo = 0.0f, r = x;
    int k = 0;
    if (hx > 0x3eb17218u) {     /* |x| > 0.5 ln2 */
        if (hx < 0x3f851592u) { /* and |x| < 1.5 ln2 */
            hi = xsb ? memra_add_rn(x, ln2hi) : memra_sub_rn(x, ln2hi);
            lo = xsb ? -ln2lo : ln2lo;
            k = xsb ? -1 : 1;
        } else {
            const float kf = memra_add_rn(memra_mul_rn(invln2, x), xsb ? -0.5f : 0.5f);
            k = (int)kf; /* towards zero, as C and cvt.rzi do */
            const float t = (float)k;
            hi = memra_sub_rn(x, memra_mul_rn(t, ln2hi)); /* t*ln2hi is exact */
            lo = memra_mul_rn(t, ln2lo);
        }
        r = memra_sub_rn(hi, lo);
    } else if (hx < 0x39000000u) { /* |x| < 2^-14 */
        return memra_add_rn(one, x);
    }
    const float t = memra_mul_rn(r, r);
    const float c = memra_sub_rn(r, memra_mul_rn(t, memra_add_rn(p1, memra_mul_rn(t, p2))));
    if (k == 0)
        return memra_sub_rn(
            one, memra_sub_rn(memra_div_rn(memra_mul_rn(r, c), memra_sub_rn(c, two)), r));
    const float y = memra_sub_rn(
        one,
        memra_sub_rn(memra_sub_rn(lo, memra_div_rn(memra_mul_rn(r, c), memra_sub_rn(two, c))), hi));
    if (k >= -125) {
        if (k == 128)
            return memra_mul_rn(memra_mul_rn(y, 2.0f), memra_from_bits(0x7f000000u));
        return memra_mul_rn(y, memra_from_bits((memra_u32)(0x7f + k) << 23));
    }
    return memra_mul_rn(memra_mul_rn(y, memra_from_bits((memra_u32)(0x7f + k + 100) << 23)),
                        memra_from_bits(0x0d800000u)); /* 2^-100 */
}

/* a / d rounded once, for exp's rational step only (d is 2 - c with
 * |c| < 0.4, so d lies in [1.6, 2.4]; a = r c is zero or normal): the
 * reciprocal from a quadratic (minimax for 1/d there, relative error
 * 2.1e-3) by two Newton steps, then one correction of the quotient
 * (Markstein's), IEEE operations with explicit fma and no branch, where
 * the IEEE division compiles to a range check and a branch to a slow path
 * (a region of its own, which keeps a lane's several exps from
 * overlapping). Not a general division: for every input of memra_expf's
 * select forms it gives the IEEE division's bits (test_routing compares
 * them with memra_expf, whose division is the IEEE one, on every 61st
 * float and around each range boundary, and on all 2^32 floats with
 * MEMRA_EXPF_EXHAUSTIVE=1). */
MEMRA_DEVICE float memra_exp_div(float a, float d)
{
    const float c2 = memra_from_bits(0x3e03f571u), c1 = memra_from_bits(0xbf45f02au),
                c0 = memra_from_bits(0x3fc3f571u);
    float y = memra_fma_rn(memra_fma_rn(c2, d, c1), d, c0);
    for (int i = 0; i < 2; i++)
        y = memra_fma_rn(y, memra_fma_rn(-d, y, 1.0f), y);
    const float q = memra_mul_rn(a, y);
    return memra_fma_rn(memra_fma_rn(-q, d, a), y, q);
}

/* memra_expf with one path for every input, its cases chosen by selects,
 * each case's result the same bits as memra_expf's branch for it
 * (test_routing compares the two on every 61st float and around every
 * range boundary, and on all 2^32 floats with MEMRA_EXPF_EXHAUSTIVE=1).
 * Sigmoid takes exp(-x) of logits of both signs, where a warp ran the
 * branches one after another: on the H200 the scores of a DeepSeek-V3
 * decode step took 865 cycles this way against 1129. The rational step
 * divides by memra_exp_div, not the IEEE division (the same bits): no
 * branch at all, so a lane's several exps (the team kernels' softmax)
 * overlap. Softmax's exp(x - max) where a thread takes one (the block
 * kernel) keeps memra_expf's branches (2000 against 2283 cycles for
 * Qwen3-MoE, measured against an older select form). */
MEMRA_DEVICE float memra_expf_select(float x, int nonpos)
{
    MEMRA_EXPF_PROLOGUE(x);
    /* `nonpos`: the caller's x is never above zero unless NaN (softmax's
     * x - max), so every case of a positive x folds away: its result is
     * unspecified, and its k is kept in range (no undefined conversion). A
     * +0 is the tiny case, whose result does not read the sign. */
    const int neg = nonpos ? 1 : xsb;
    const int is_nan = hx > 0x7f800000u, is_inf = !nonpos && hx == 0x7f800000u;
    const int over = !nonpos && !xsb && hx > 0x42b17217u; /* above ln(FLT_MAX) */
    const int under = neg && hx > 0x42cff1b5u;            /* below -103.972084 (-inf too) */
    const int reduce = hx > 0x3eb17218u;                  /* |x| > 0.5 ln2 */
    const int tiny = hx < 0x39000000u;                    /* |x| < 2^-14 */
    const float xs =                                      /* keeps k in range */
        is_nan || is_inf || over || under || (nonpos && !xsb) ? 0.0f : x;
    /* |x| > 0.5 ln2: k = round(x / ln2); k * ln2hi is exact, so x - k ln2hi
     * is one fma. memra_expf's case |x| < 1.5 ln2 (k = +-1, hi = x -+ ln2hi,
     * lo = +-ln2lo) is this one: k comes out +-1 for every float there
     * (test_routing compares the two forms on each of them), and
     * x - (-1) ln2hi is x + ln2hi exactly. Elsewhere k = 0, which makes
     * hi = x, lo = +0 and r = x, memra_expf's values for |x| <= 0.5 ln2,
     * with no select of its own. */
    const float kf = reduce ? memra_add_rn(memra_mul_rn(invln2, xs), neg ? -0.5f : 0.5f) : 0.0f;
    const int k = (int)kf; /* towards zero, as C and cvt.rzi do */
    const float tk = (float)k;
    const float hi = memra_fma_rn(-tk, ln2hi, xs), lo = memra_mul_rn(tk, ln2lo);
    const float r = memra_sub_rn(hi, lo);
    const float t = memra_mul_rn(r, r);
    const float c = memra_sub_rn(r, memra_mul_rn(t, memra_add_rn(p1, memra_mul_rn(t, p2))));
    /* memra_expf's k = 0 case, 1 - (r c / (c - 2) - r), is the general
     * one at lo = +0 and hi = r: r c / (2 - c) is the other quotient
     * negated exactly, and +0 minus it is that quotient (a zero quotient
     * only where r is zero, which is the tiny case). */
    const float num = memra_mul_rn(r, c), den = memra_sub_rn(two, c);
    const float q = memra_exp_div(num, den);
    const float y = memra_sub_rn(one, memra_sub_rn(memra_sub_rn(lo, q), hi));
    /* y * 2^k: in two steps at k = 128 and below 2^-125 (so a subnormal
     * result is rounded once), else in one. `nonpos` (k <= 0) takes the
     * two steps below 2^-125's for every k: y 2^(k+100) is exact and
     * normal, and so is its product with 2^-100 wherever y 2^k is normal
     * (k >= -125, y > 0.7): the same bits with no test of k. */
    const int k_big = !nonpos && k == 128, k_small = nonpos || k < -125;
    const memra_u32 e1 = (memra_u32)(0x7f + (k_small ? k + 100 : k_big ? 1 : k)) << 23;
    const float y1 = memra_mul_rn(y, memra_from_bits(e1));
    const float scaled = k_big     ? memra_mul_rn(y1, memra_from_bits(0x7f000000u)) /* 2^127 */
                         : k_small ? memra_mul_rn(y1, memra_from_bits(0x0d800000u)) /* 2^-100 */
                                   : y1;
    /* Each case's value made, then the case chosen by selects, tiny's
     * first and is_nan's last, so that the case memra_expf tests first
     * wins. Written as one chain of ?:, it was two branches and a
     * convergence region an exp in ptxas's code (Qwen3-Next's spec build,
     * sixteen exps a lane: 3,032 -> 2,960 sm_90 instructions this way,
     * 77 -> 61 regions); the same values either way. */
    const float v_nan = memra_add_rn(x, x), v_tiny = memra_add_rn(one, x);
    float v = tiny ? v_tiny : scaled;
    v = under ? 0.0f : v;
    v = over ? memra_from_bits(0x7f800000u) : v;
    v = is_inf ? (xsb ? 0.0f : x) : v; /* nonpos: -inf is `under` */
    return is_nan ? v_nan : v;
}

/* The select form for x of either sign (sigmoid's exp(-x)). */
MEMRA_DEVICE float memra_expf_flat(float x)
{
    return memra_expf_select(x, 0);
}

/* memra_expf_flat for x <= 0 or NaN (softmax's x - max, where a token's
 * logits are finite; a token with a non-finite one is written out as such
 * whatever its exps): memra_expf's bits there, about a sixth fewer
 * instructions. */
MEMRA_DEVICE float memra_expf_nonpos(float x)
{
    return memra_expf_select(x, 1);
}

/* The expert order: higher choice score first, the lower index on a tie.
 * A total order on (score, index), so every lane of a reduction and the
 * host agree on the winner whatever the order of comparisons. */
MEMRA_DEVICE int memra_route_better(float a, int ia, float b, int ib)
{
    return a > b || (a == b && ia < ib);
}

/* A logit no score can be made of, which leaves its token unrouted: NaN,
 * and for softmax +inf (exp(inf - inf)). -inf is a logit like any other,
 * its score +0, as PyTorch's sigmoid and softmax give it (engines mask
 * experts so); a token whose logits are all -inf has no softmax (its max
 * is -inf: the kernels and the host arm test that apart). */
MEMRA_DEVICE int memra_route_logit_bad(float x, int sigmoid)
{
    const memra_u32 b = memra_as_bits(x);
    return (b & 0x7fffffffu) > 0x7f800000u || (!sigmoid && b == 0x7f800000u);
}

/* One expert's score from its logit: softmax's numerator exp(x - max), or
 * sigmoid 1 / (1 + exp(-x)). */
MEMRA_DEVICE float memra_route_sigmoid(float x)
{
    return memra_div_rn(1.0f, memra_add_rn(1.0f, memra_expf_flat(-x)));
}

/* float16 bits to binary32, exactly: every half is a float. A subnormal
 * half m * 2^-24 is (float)m times 2^-24, both steps exact. */
MEMRA_DEVICE float memra_half_to_float(memra_u32 h)
{
    const memra_u32 sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1fu) /* inf, NaN (payload kept) */
        return memra_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        const float v = memra_mul_rn((float)man, memra_from_bits(0x33800000u)); /* 2^-24 */
        return memra_from_bits(memra_as_bits(v) | sign);
    }
    return memra_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

/* Element types of the logits (memra_logits_dtype) and of a bias read in
 * place (memra_bias_dtype: 0 float32, 1 bfloat16). */
#define MEMRA_DT_F32 0
#define MEMRA_DT_BF16 1
#define MEMRA_DT_F16 2

/* Element i as binary32: bfloat16 is the top half of a binary32, float16
 * converts exactly. */
MEMRA_DEVICE float memra_route_load(const void *p, int dtype, memra_u64 i)
{
    if (dtype == MEMRA_DT_BF16)
        return memra_from_bits((memra_u32)((const unsigned short *)p)[i] << 16);
    if (dtype == MEMRA_DT_F16)
        return memra_half_to_float((memra_u32)((const unsigned short *)p)[i]);
    return ((const float *)p)[i];
}

/* A float's place in the expert order as an unsigned key: larger values
 * have larger keys, and +0 and -0 one key (they are equal scores, ranked by
 * index). The sentinel -inf has the smallest key of any value used, and 0
 * is below every key of a value. */
MEMRA_DEVICE memra_u32 memra_route_key(float v)
{
    /* One XOR with the sign spread (all ones flips a negative, the top bit
     * marks the rest) rather than a branch on the sign: the same key for
     * every input, and ptxas made the branch form two predicated arms, a
     * cost the team kernels pay for every expert (DeepSeek-V3's prefill
     * 151.1 -> 147.1 us on the H100). */
    memra_u32 b = memra_as_bits(v);
    b = b == 0x80000000u ? 0u : b;
    return b ^ ((memra_u32)((int)b >> 31) | 0x80000000u);
}

/* memra_route_key of a value that is +0 or more or NaN (a score before
 * any bias: an exp over a sum, a sigmoid): one OR, where the general key
 * also turns -0 into +0 and orders negatives. The same key for every such
 * value but a NaN with its sign bit set, which only a non-finite token's
 * scores hold (its choice is discarded). */
MEMRA_DEVICE memra_u32 memra_route_key_nonneg(float v)
{
    return memra_as_bits(v) | 0x80000000u;
}

/* The value of a key (for the values routing meets, never -0: a score is
 * +0 or more, and +0 plus -0 is +0). */
MEMRA_DEVICE float memra_route_unkey(memra_u32 k)
{
    return memra_from_bits((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

/* The larger of two values under a total order (equal values: the one with
 * the smaller bits, +0 before -0), so every lane of a butterfly keeps the
 * same bits. */
MEMRA_DEVICE float memra_route_max(float a, float b)
{
    return (b > a || (b == a && memra_as_bits(b) < memra_as_bits(a))) ? b : a;
}

/* memra_route_max's order as an unsigned key (-0 below +0), and back. */
MEMRA_DEVICE memra_u32 memra_route_max_key(float v)
{
    const memra_u32 b = memra_as_bits(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
MEMRA_DEVICE float memra_route_max_unkey(memra_u32 k)
{
    return memra_from_bits((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

/* The two best values of a set as keys (k1 >= k2; 0 for "none"), merged
 * with another set's: values only, so the order of merging is free. */
MEMRA_DEVICE void memra_route_top2_merge(memra_u32 *k1, memra_u32 *k2, memra_u32 b1, memra_u32 b2)
{
    const memra_u32 a1 = *k1, a2 = *k2;
    if (a1 >= b1) {
        *k2 = a2 > b1 ? a2 : b1;
    } else {
        *k1 = b1;
        *k2 = a1 > b2 ? a1 : b2;
    }
}

/* A group's score from its two best choice scores: their sum (its one score
 * when it has one expert), or the best alone. */
MEMRA_DEVICE float memra_route_group_score(memra_u32 k1, memra_u32 k2, int by_max, memra_u32 size)
{
    const float b1 = memra_route_unkey(k1);
    return by_max || size == 1 ? b1 : memra_add_rn(b1, memra_route_unkey(k2));
}

/* A routed weight from its unbiased score s, given the token's routed
 * scores' sum W (taken in rank order, left to right): divided by W when
 * renormalizing (not when W is 0), then scaled. Under SGLang's shared rule
 * (MEMRA_SHARED_ROUTED_SUM) a shared expert's weight is this of
 * s = W / divisor. */
MEMRA_DEVICE float memra_route_finish(float s, float W, int renorm, float scale)
{
    const float w = renorm && W > 0.0f ? memra_div_rn(s, W) : s;
    return memra_mul_rn(w, scale);
}

/* How many leading rows of a batch are real tokens: the integer at n_real
 * (int32, or int64 with i64), clamped to [0, n_tokens]; all of them without
 * one. */
MEMRA_DEVICE memra_u32 memra_route_n_real(const void *n_real, int i64, memra_u32 n_tokens)
{
    if (!n_real)
        return n_tokens;
    const long long v = i64 ? *(const long long *)n_real : (long long)*(const int *)n_real;
    return v <= 0 ? 0u : v >= (long long)n_tokens ? n_tokens : (memra_u32)v;
}
