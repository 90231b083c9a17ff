// sample_math.h: the exact arithmetic of the sample op (ops.h `sample`), shared by its CPU
// reference (kernels/ref/logits.c) and its CUDA kernels (kernels/logits.cu), so that both pick
// the SAME token id for the same logits and the same (seed, n). C and CUDA (host and device).
// defines: g4_sample_params, g4_sample_u64, g4_sample_key, g4_sample_key_value,
//          g4_sample_weight, g4_sample_point, g4_sample_top_p_point, G4_SAMPLE_FRAC_BITS.
//
// What is exact and why it is the same on both sides:
//   - the draw of position n is SplitMix64's output n for the seed (Steele, Lea, Flood 2014:
//     state_n = seed + (n + 1) * 0x9e3779b97f4a7c15, then the mix): a pure function of
//     (seed, n), so a seed reproduces run to run and the GPU needs no RNG state;
//   - the sort order is a uint32 key of each logit (larger logit, larger key; -0 taken as +0),
//     ties broken by the smaller id first;
//   - each kept token's probability is the integer weight floor(exp((x - max) / T) * 2^40),
//     computed with IEEE double adds and multiplies only (no library exp, no fused multiply-
//     add: G4_DMUL / G4_DADD are __dmul_rn / __dadd_rn on the device, and the host file is
//     compiled with -ffp-contract=off), so both sides get the same bits; sums of weights are
//     integer sums, which do not depend on the order they are added in. Weights below 2^-40 of
//     the largest are 0 (they hold < V * 2^-40 of the mass: 2.4e-7 at V = 262144, far below
//     HF's own float32 softmax rounding);
//   - the top-p cut and the draw compare integers: the kept set is the sorted prefix up to the
//     token containing mass point ceil(top_p * Z) - 1, and the draw picks the token containing
//     point floor(u * Z_kept) where u is the draw's top 53 bits.
#ifndef G4_SAMPLE_MATH_H
#define G4_SAMPLE_MATH_H

#include <math.h>
#include <stdint.h>

// The sampler of a state as the sample op reads it from backend memory (32 bytes).
typedef struct {
    float temperature; // <= 0: greedy (the first index of the largest logit, torch.argmax)
    int32_t top_k;     // keep every logit >= the k-th largest (HF TopKLogitsWarper); 0: off
    float top_p;       // HF TopPLogitsWarper (min_tokens_to_keep 1); >= 1: off
    uint32_t seed_lo, seed_hi;
    int32_t reserved[3];
} g4_sample_params;

#define G4_SAMPLE_FRAC_BITS 40 // weights are fixed point with this many fraction bits

#if defined(__CUDACC__)
#define G4_SAMPLE_FN __host__ __device__ __forceinline__ static
#else
#define G4_SAMPLE_FN static inline
#endif

#if defined(__CUDA_ARCH__)
#define G4_DMUL(a, b) __dmul_rn((a), (b))
#define G4_DADD(a, b) __dadd_rn((a), (b))
#else
#define G4_DMUL(a, b) ((a) * (b))
#define G4_DADD(a, b) ((a) + (b))
#endif

// SplitMix64 output n (0-based) of `seed`.
G4_SAMPLE_FN uint64_t g4_sample_u64(uint64_t seed, uint64_t n) {
    uint64_t z = seed + (n + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Order-preserving key of a (non-NaN) float: a > b <=> key(a) > key(b); -0 and +0 are equal.
G4_SAMPLE_FN uint32_t g4_sample_key(float x) {
    union {
        float f;
        uint32_t u;
    } v;
    v.f = x == 0.0f ? 0.0f : x;
    return (v.u & 0x80000000u) ? ~v.u : (v.u | 0x80000000u);
}

// The float whose key is k (the inverse of g4_sample_key on its range).
G4_SAMPLE_FN float g4_sample_key_value(uint32_t k) {
    union {
        float f;
        uint32_t u;
    } v;
    v.u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    return v.f;
}

// floor(exp((x - mx) * inv_t) * 2^40) for x <= mx (mx the row's largest logit, inv_t = 1 / T):
// 2^40 for the largest. When mx is infinite, the logits equal to it share the mass (as a
// softmax over +inf logits would; all -inf: all equal).
G4_SAMPLE_FN uint64_t g4_sample_weight(float x, float mx, double inv_t) {
    if (isinf(mx)) return x == mx ? (1ull << G4_SAMPLE_FRAC_BITS) : 0;
    const double s = G4_DMUL(G4_DADD((double)x, -(double)mx), inv_t);      // <= 0
    const double y = G4_DMUL(s, 0x1.71547652b82fep+0);                        // s * log2(e)
    if (!(y > -(double)(G4_SAMPLE_FRAC_BITS + 1))) return 0;                  // also -inf
    const double k = floor(y), g = G4_DMUL(G4_DADD(y, -k), 0x1.62e42fefa39efp-1); // [0, ln 2)
    // e^g by its Taylor series to g^13/13! (relative error < 1e-14 on [0, ln 2)), Horner.
    double p = 0x1.6124613a86d09p-33;
    p = G4_DADD(G4_DMUL(p, g), 0x1.1eed8eff8d898p-29);
    p = G4_DADD(G4_DMUL(p, g), 0x1.ae64567f544e4p-26);
    p = G4_DADD(G4_DMUL(p, g), 0x1.27e4fb7789f5cp-22);
    p = G4_DADD(G4_DMUL(p, g), 0x1.71de3a556c734p-19);
    p = G4_DADD(G4_DMUL(p, g), 0x1.a01a01a01a01ap-16);
    p = G4_DADD(G4_DMUL(p, g), 0x1.a01a01a01a01ap-13);
    p = G4_DADD(G4_DMUL(p, g), 0x1.6c16c16c16c17p-10);
    p = G4_DADD(G4_DMUL(p, g), 0x1.1111111111111p-7);
    p = G4_DADD(G4_DMUL(p, g), 0x1.5555555555555p-5);
    p = G4_DADD(G4_DMUL(p, g), 0x1.5555555555555p-3);
    p = G4_DADD(G4_DMUL(p, g), 0x1.0000000000000p-1);
    p = G4_DADD(G4_DMUL(p, g), 1.0);
    p = G4_DADD(G4_DMUL(p, g), 1.0);
    return (uint64_t)floor(ldexp(p, G4_SAMPLE_FRAC_BITS + (int)k)); // 2^(40 + k) * e^g
}

// The mass point of draw `bits` (a SplitMix64 output) over a kept mass of Z:
// floor(u * Z) with u = the top 53 bits / 2^53, in [0, Z).
G4_SAMPLE_FN uint64_t g4_sample_point(uint64_t bits, uint64_t Z) {
    const uint64_t a = bits & ~(uint64_t)0x7ff;
#if defined(__CUDA_ARCH__)
    return __umul64hi(a, Z);
#else
    return (uint64_t)(((unsigned __int128)a * Z) >> 64);
#endif
}

// The mass point whose token is the last one top-p keeps: ceil(top_p * Z) - 1 (top_p in (0, 1),
// Z >= 2^40): HF keeps a token while the mass above it is below top_p of the total.
G4_SAMPLE_FN uint64_t g4_sample_top_p_point(float top_p, uint64_t Z) {
    const double pd = G4_DMUL((double)top_p, (double)Z);
    const uint64_t pc = (uint64_t)ceil(pd);
    return pc > 0 ? pc - 1 : 0;
}

#endif
