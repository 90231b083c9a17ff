// logits.cu: the sample op (ops.h `sample`): soft-cap + the next token of each row of logits,
// greedy or sampled (temperature, top-k, top-p, one seeded draw) on the device; and the plain
// soft-cap. Oracle: ref_sample / ref_softcap (kernels/ref/logits.c), with the
// exact integer arithmetic of kernels/ref/sample_math.h, so this kernel picks the SAME id as the
// reference for the same capped logits and the same (seed, draw index). Test:
// tests/test_cuda_ops.c --op sample (V 262144 and odd V, greedy and sampled); bench:
// g4cu bench --kernels --filter logits.
//
// Three launches, all graph-capturable (no host decision depends on the request: the sampler
// is read from device memory) and self-resetting (every workspace counter and histogram is
// zero again when the last one ends):
//  1. lg_pass1 [nb CTAs x rows]: caps its slice in place, reduces it to (max, first index)
//     (NaN above everything, ties to the smaller index) and, for a top-k request over a row
//     too long to sort whole, counts the row's 11-bit key prefixes (a 2048-bin histogram). The
//     CTA that arrives last at the row's ticket (atomic after a __threadfence, the CUDA
//     threadFenceReduction pattern) merges the partials: greedy (or a NaN row, -1) writes the
//     answer there. Memory-bound: V x 4 bytes read and written (1 MB each at V = 262144).
//  2. lg_mass [nb x rows]: only for a sampled request without top-k over a long row: every
//     token's weight (sample_math.h), the row's total Z and a 2048-bin histogram of the
//     weights by key prefix, so the last launch can find mass points without a sort.
//  3. lg_select [1 CTA of 1024 x rows]: the sampled pick. When the tokens that can be kept
//     number at most SEL_CAP (a short row; or top-k, whose threshold the count histogram
//     narrows to a key prefix with at most SEL_CAP tokens at or above it, refined by up to two
//     passes of 11 and 10 more key bits), they are gathered into shared memory, sorted by
//     (key desc, id asc) and the reference's algorithm runs on the sorted list. Otherwise
//     (top-k off, or a top-k / tie set above SEL_CAP) it is a radix descent on the weights:
//     the token holding a mass point is found key digit by key digit (11, 11, 10 bits) from
//     weight histograms, then among equal logits by id rank; once for the top-p cut and once
//     for the draw. No full sort of the vocabulary ever.
// All three follow the programmatic-dependent-launch rule (kernels/pdl.cuh): nothing above the
// wait.
#include "kernels/logits.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/attnops_common.cuh"
#include "kernels/cuda_util.h"
#include "kernels/pdl.cuh"
#include "kernels/ref/sample_math.h"

using namespace g4k;

namespace {

constexpr int LG_THREADS = 256, LG_PER_THREAD = 8, LG_BLOCKS_MAX = 128;
constexpr int SEL_THREADS = 1024, SEL_CAP = 2048;
constexpr int NB0 = 2048, NB1 = 2048, NB2 = 1024; // key digits: bits 31..21, 20..10, 9..0

// Per-row workspace (all zero between launches except part_v / part_i / best_v / p). Row t's is
// the t-th of the array whatever the launch's row count, with its partials inside, so one
// workspace serves launches of any row count in any order (a batch step's sampled rows). (Issue
// 31: the partials used to follow rows x RowWs, so a launch of fewer rows wrote them where a
// later, larger one read its rows' tickets and samplers: rows never merged, stale or random ids.)
struct RowWs {
    unsigned ticket;
    float best_v; // the row's largest capped logit (NaN when the row has one)
    g4_sample_params p;   // the row's sampler, for lg_select (written by lg_pass1's last CTA)
    unsigned long long z; // lg_mass: total weight
    unsigned cnt0[NB0];  // lg_pass1: tokens per 11-bit key prefix (top-k requests)
    unsigned long long mass0[NB0]; // lg_mass: weight per 11-bit key prefix
    float part_v[LG_BLOCKS_MAX];   // lg_pass1: each CTA's (max, first index)
    int part_i[LG_BLOCKS_MAX];
};

size_t lg_align(size_t n) {
    return (n + 255) & ~(size_t)255;
}

int lg_blocks(int V) {
    int b = (V + LG_THREADS * LG_PER_THREAD - 1) / (LG_THREADS * LG_PER_THREAD);
    return b < 1 ? 1 : b > LG_BLOCKS_MAX ? LG_BLOCKS_MAX : b;
}

// Row t's sampler: the one for every row, or (sample_rows) row t's own from the table.
__device__ __forceinline__ g4_sample_params row_params(const g4_sample_params *params,
                                                       const uint64_t *tab, int t) {
    return tab ? *reinterpret_cast<const g4_sample_params *>(tab[t]) : *params;
}

__device__ __forceinline__ bool sampling(const g4_sample_params &p) {
    return p.temperature > 0.0f;
}
__device__ __forceinline__ bool topk_on(const g4_sample_params &p, int V) {
    return p.top_k > 0 && p.top_k < V;
}

// (v, i) beats (bv, bi): larger value, NaN above everything, ties to the smaller index.
__device__ __forceinline__ bool lg_better(float v, int i, float bv, int bi) {
    const bool nv = isnan(v), nb = isnan(bv);
    if (nv || nb) return nv && (!nb || i < bi);
    return v > bv || (v == bv && i < bi);
}

// Block-wide best (v, i) over up to 32 warps; the result is valid in warp 0.
__device__ __forceinline__ void lg_block_best(float &v, int &i, float *sv, int *si) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (lg_better(ov, oi, v, i)) v = ov, i = oi;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) sv[warp] = v, si[warp] = i;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? sv[lane] : -INFINITY;
        i = lane < (int)(blockDim.x >> 5) ? si[lane] : 0x7fffffff;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, v, o);
            const int oi = __shfl_xor_sync(0xffffffffu, i, o);
            if (lg_better(ov, oi, v, i)) v = ov, i = oi;
        }
    }
}

// --- 1. cap, max, key counts -------------------------------------------------------------------
__global__ void __launch_bounds__(LG_THREADS)
    lg_pass1(float *logits, int V, float cap, const g4_sample_params *params, const uint64_t *ptab,
             int32_t *next, RowWs *rws, int vec) {
    g4_pdl_wait();
    g4_pdl_trigger();
    __shared__ float sv[32];
    __shared__ int si[32];
    __shared__ unsigned hist[NB0];
    __shared__ bool last;
    const int t = blockIdx.y, nb = gridDim.x;
    const g4_sample_params p = row_params(params, ptab, t);
    RowWs *rw = &rws[t];
    float *row = logits + (size_t)t * V;
    const bool count = sampling(p) && topk_on(p, V) && V > SEL_CAP;
    if (count) {
        for (int b = threadIdx.x; b < NB0; b += LG_THREADS) hist[b] = 0;
        __syncthreads();
    }
    // vec: a multiple of 8 per CTA (whole float4 pairs; V % 8 == 0 then); else a plain split
    const int per_block = vec ? (V / 8 + nb - 1) / nb * 8 : (V + nb - 1) / nb;
    const int begin = blockIdx.x * per_block, end = min(V, begin + per_block);
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    auto visit = [&](float &x, int i) {
        if (cap > 0.0f) x = cap * tanhf(x / cap);
        if (lg_better(x, i, bv, bi)) bv = x, bi = i;
        if (count && !isnan(x)) atomicAdd(&hist[g4_sample_key(x) >> 21], 1u);
    };
    if (vec) { // V % 8 == 0 and the logits 16-byte aligned: float4 pairs
        for (int i = begin + threadIdx.x * 8; i < end; i += LG_THREADS * 8) {
            float4 a = *reinterpret_cast<float4 *>(row + i),
                   b = *reinterpret_cast<float4 *>(row + i + 4);
            float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
            for (int e = 0; e < 8; e++) visit(x[e], i + e);
            if (cap > 0.0f) {
                *reinterpret_cast<float4 *>(row + i) = make_float4(x[0], x[1], x[2], x[3]);
                *reinterpret_cast<float4 *>(row + i + 4) = make_float4(x[4], x[5], x[6], x[7]);
            }
        }
    } else {
        for (int i = begin + threadIdx.x; i < end; i += LG_THREADS) {
            float x = row[i];
            visit(x, i);
            if (cap > 0.0f) row[i] = x;
        }
    }
    lg_block_best(bv, bi, sv, si);
    if (count) {
        __syncthreads();
        for (int b = threadIdx.x; b < NB0; b += LG_THREADS)
            if (hist[b]) atomicAdd(&rw->cnt0[b], hist[b]);
    }
    if (threadIdx.x == 0) {
        rw->part_v[blockIdx.x] = bv;
        rw->part_i[blockIdx.x] = bi;
        __threadfence(); // partials (and the histogram) visible device-wide before the ticket
        last = atomicAdd(&rw->ticket, 1u) == (unsigned)nb - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    bv = -INFINITY, bi = 0x7fffffff;
    for (int b = threadIdx.x; b < nb; b += LG_THREADS) {
        const float v = *((volatile float *)&rw->part_v[b]);
        const int i = *((volatile int *)&rw->part_i[b]);
        if (lg_better(v, i, bv, bi)) bv = v, bi = i;
    }
    __syncthreads(); // sv/si reuse
    lg_block_best(bv, bi, sv, si);
    if (threadIdx.x == 0) {
        rw->best_v = bv;
        rw->p = p;
        if (isnan(bv)) next[t] = -1; // a broken forward pass: no distribution
        else if (!sampling(p)) next[t] = bi;
        rw->ticket = 0; // ready for the next launch (graph replay)
    }
}

// --- 2. weights: total and histogram by key prefix ---------------------------------------------
__global__ void __launch_bounds__(LG_THREADS)
    lg_mass(const float *logits, int V, const g4_sample_params *params, const uint64_t *ptab,
            RowWs *rws) {
    g4_pdl_wait();
    g4_pdl_trigger();
    __shared__ unsigned long long hist[NB0];
    __shared__ unsigned long long zs[32];
    const int t = blockIdx.y, nb = gridDim.x;
    const g4_sample_params p = row_params(params, ptab, t);
    RowWs *rw = &rws[t];
    const float mx = rw->best_v;
    if (!sampling(p) || topk_on(p, V) || V <= SEL_CAP || isnan(mx)) return;
    const double inv_t = __ddiv_rn(1.0, (double)p.temperature);
    for (int b = threadIdx.x; b < NB0; b += LG_THREADS) hist[b] = 0;
    __syncthreads();
    const float *row = logits + (size_t)t * V;
    const int per_block = (V + nb - 1) / nb;
    const int begin = blockIdx.x * per_block, end = min(V, begin + per_block);
    unsigned long long z = 0;
    for (int i = begin + threadIdx.x; i < end; i += LG_THREADS) {
        const float x = row[i];
        const unsigned long long w = g4_sample_weight(x, mx, inv_t);
        if (w) {
            z += w;
            atomicAdd(&hist[g4_sample_key(x) >> 21], w);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
    if ((threadIdx.x & 31) == 0) zs[threadIdx.x >> 5] = z;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long s = 0;
        for (int w = 0; w < LG_THREADS / 32; w++) s += zs[w];
        atomicAdd(&rw->z, s);
    }
    for (int b = threadIdx.x; b < NB0; b += LG_THREADS)
        if (hist[b]) atomicAdd(&rw->mass0[b], hist[b]);
}

// --- 3. the sampled pick (one CTA per row) -----------------------------------------------------
struct SelShared {
    union {
        struct {
            unsigned long long cand[SEL_CAP]; // (key << 32) | ~id of the gathered tokens
            unsigned long long acc[SEL_CAP];  // inclusive prefix sums of their weights
        } c;
        struct {
            unsigned long long h0[NB0];   // level 0 weights (radix path)
            unsigned long long mass[NB1]; // weight (or count) per digit value
            unsigned cnt[NB2];            // level 2: tokens per digit value
            int minid[NB2];               // level 2: the smallest id per digit value
        } r;
    } u;
    unsigned long long warp[32];
    unsigned long long found_u64[2];
    int found[4];
};

// Exclusive prefix sum of v over the CTA (1024 threads); *total gets the sum.
__device__ unsigned long long sel_scan(unsigned long long v, SelShared &sh,
                                       unsigned long long *total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned long long incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long n = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += n;
    }
    __syncthreads();
    if (lane == 31) sh.warp[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        unsigned long long w = sh.warp[lane], wi = w;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned long long n = __shfl_up_sync(0xffffffffu, wi, o);
            if (lane >= o) wi += n;
        }
        sh.warp[lane] = wi - w; // exclusive per warp
        if (lane == 31) sh.found_u64[1] = wi;
    }
    __syncthreads();
    const unsigned long long r = sh.warp[warp] + incl - v;
    *total = sh.found_u64[1];
    __syncthreads();
    return r;
}

// Among bins h[0..nbins) (nbins = 2 x 1024 or 1 x 1024) ordered from the highest, the bin holding
// point t (sum of higher bins <= t < that + h[bin]); *above = the sum of the higher bins.
__device__ int sel_bin(const unsigned long long *h, int nbins, unsigned long long t,
                       SelShared &sh, unsigned long long *above) {
    const int per = nbins / SEL_THREADS; // 1 or 2 bins per thread, highest bins first
    const int b0 = nbins - 1 - threadIdx.x * per;
    unsigned long long mine = 0;
    for (int k = 0; k < per; k++) mine += h[b0 - k];
    if (threadIdx.x == 0) sh.found[0] = -1;
    unsigned long long total;
    unsigned long long ex = sel_scan(mine, sh, &total);
    for (int k = 0; k < per; k++) {
        const unsigned long long w = h[b0 - k];
        if (w && ex <= t && t < ex + w) {
            sh.found[0] = b0 - k;
            sh.found_u64[0] = ex;
        }
        ex += w;
    }
    __syncthreads();
    const int b = sh.found[0];
    *above = sh.found_u64[0];
    __syncthreads();
    return b;
}

// The m-th smallest id (0-based) of the tokens with key kk.
__device__ int sel_rank(const float *row, int V, uint32_t kk, unsigned m, SelShared &sh) {
    if (threadIdx.x == 0) sh.found[1] = -1;
    __syncthreads();
    unsigned seen = 0;
    for (int base = 0; base < V; base += SEL_THREADS) {
        const int i = base + threadIdx.x;
        const bool hit = i < V && g4_sample_key(row[i]) == kk;
        unsigned long long total;
        const unsigned long long before = sel_scan(hit ? 1 : 0, sh, &total);
        if (hit && seen + before == m) sh.found[1] = i;
        seen += (unsigned)total;
        __syncthreads();
        if (sh.found[1] >= 0) break;
    }
    return sh.found[1];
}

struct Point {
    uint32_t key;           // the key holding the point
    unsigned long long above; // the weight of the tokens before that key
    unsigned long long w;   // that key's weight (each of its tokens)
    unsigned rank;          // the point's token among that key's, by id
    int id;                 // its id
};

// The token holding mass point t among the tokens with key >= kk, over weight histogram h0 (11
// key bits, the row's level 0): refined by two passes over the row (11 and 10 more bits).
__device__ Point sel_point(const float *row, int V, uint32_t kk, float mx, double inv_t,
                           const unsigned long long *h0, unsigned long long t, SelShared &sh) {
    Point pt;
    unsigned long long above;
    const int b0 = sel_bin(h0, NB0, t, sh, &above);
    t -= above;
    pt.above = above;
    // level 1: bits 20..10 of the keys in bin b0
    for (int b = threadIdx.x; b < NB1; b += SEL_THREADS) sh.u.r.mass[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < V; i += SEL_THREADS) {
        const float x = row[i];
        const uint32_t k = g4_sample_key(x);
        if (k >= kk && (int)(k >> 21) == b0)
            atomicAdd(&sh.u.r.mass[(k >> 10) & (NB1 - 1)], g4_sample_weight(x, mx, inv_t));
    }
    __syncthreads();
    const int b1 = sel_bin(sh.u.r.mass, NB1, t, sh, &above);
    t -= above;
    pt.above += above;
    // level 2: bits 9..0, with counts and the smallest id per value
    const uint32_t pre = ((uint32_t)b0 << 11) | (uint32_t)b1;
    for (int b = threadIdx.x; b < NB2; b += SEL_THREADS) {
        sh.u.r.mass[b] = 0;
        sh.u.r.cnt[b] = 0;
        sh.u.r.minid[b] = 0x7fffffff;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < V; i += SEL_THREADS) {
        const float x = row[i];
        const uint32_t k = g4_sample_key(x);
        if (k >= kk && (k >> 10) == pre) {
            atomicAdd(&sh.u.r.mass[k & (NB2 - 1)], g4_sample_weight(x, mx, inv_t));
            atomicAdd(&sh.u.r.cnt[k & (NB2 - 1)], 1u);
            atomicMin(&sh.u.r.minid[k & (NB2 - 1)], i);
        }
    }
    __syncthreads();
    const int b2 = sel_bin(sh.u.r.mass, NB2, t, sh, &above);
    t -= above;
    pt.above += above;
    pt.key = (pre << 10) | (uint32_t)b2;
    pt.w = g4_sample_weight(g4_sample_key_value(pt.key), mx, inv_t);
    pt.rank = (unsigned)(t / pt.w);
    const int first = sh.u.r.minid[b2];
    __syncthreads();
    pt.id = pt.rank == 0 ? first : sel_rank(row, V, pt.key, pt.rank, sh);
    return pt;
}

// The count level of the top-k threshold: the key-prefix bin (of `bits` bits below `shift`)
// holding the k-th largest token among those matching prefix `pre` above it.
__device__ void sel_count_level(const float *row, int V, int shift, int nbins, uint32_t pre,
                                int pre_shift, SelShared &sh) {
    for (int b = threadIdx.x; b < nbins; b += SEL_THREADS) sh.u.r.mass[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < V; i += SEL_THREADS) {
        const uint32_t k = g4_sample_key(row[i]);
        if ((k >> pre_shift) == pre) atomicAdd(&sh.u.r.mass[(k >> shift) & (nbins - 1)], 1ull);
    }
    __syncthreads();
}

__global__ void __launch_bounds__(SEL_THREADS)
    lg_select(const float *logits, int V, const int32_t *counter, int32_t *next, RowWs *rws) {
    g4_pdl_wait();
    g4_pdl_trigger();
    __shared__ SelShared sh;
    const int t = blockIdx.x;
    RowWs *rw = &rws[t];
    const g4_sample_params p = rw->p; // (lg_pass1 copied the row's sampler)
    if (!sampling(p)) return; // lg_pass1 wrote the greedy id
    const float mx = rw->best_v;
    const float *row = logits + (size_t)t * V;
    const double inv_t = __ddiv_rn(1.0, (double)p.temperature);
    const uint64_t seed = (uint64_t)p.seed_lo | (uint64_t)p.seed_hi << 32;
    const uint64_t bits = g4_sample_u64(seed, (uint64_t)(uint32_t)counter[t]);
    const bool topk = topk_on(p, V);
    int id = -1;
    if (isnan(mx)) goto reset; // lg_pass1 wrote -1
    {
        // The key at or above which every token that can be kept lies (kk: the top-k threshold
        // once known exactly), and whether those tokens fit the shared sort.
        uint32_t edge = 0, kk = 0;
        bool gather = V <= SEL_CAP;
        if (!gather && topk) {
            // level 0 counts from lg_pass1
            for (int b = threadIdx.x; b < NB0; b += SEL_THREADS) sh.u.r.mass[b] = rw->cnt0[b];
            __syncthreads();
            const unsigned long long target = (unsigned long long)(p.top_k - 1);
            unsigned long long above;
            const int b0 = sel_bin(sh.u.r.mass, NB0, target, sh, &above);
            unsigned long long n_ge = above + sh.u.r.mass[b0];
            __syncthreads();
            edge = (uint32_t)b0 << 21;
            if (n_ge <= SEL_CAP) {
                gather = true;
            } else {
                sel_count_level(row, V, 10, NB1, (uint32_t)b0, 21, sh);
                unsigned long long a1;
                const int b1 = sel_bin(sh.u.r.mass, NB1, target - above, sh, &a1);
                above += a1;
                n_ge = above + sh.u.r.mass[b1];
                __syncthreads();
                edge |= (uint32_t)b1 << 10;
                if (n_ge <= SEL_CAP) {
                    gather = true;
                } else {
                    const uint32_t pre = ((uint32_t)b0 << 11) | (uint32_t)b1;
                    sel_count_level(row, V, 0, NB2, pre, 10, sh);
                    unsigned long long a2;
                    const int b2 = sel_bin(sh.u.r.mass, NB2, target - above, sh, &a2);
                    above += a2;
                    n_ge = above + sh.u.r.mass[b2];
                    __syncthreads();
                    edge = kk = (pre << 10) | (uint32_t)b2;
                    gather = n_ge <= SEL_CAP;
                }
            }
        }
        if (gather) {
            // Every token with key >= edge into shared memory, sorted by (key desc, id asc):
            // the reference's order; then its algorithm on the list.
            if (threadIdx.x == 0) sh.found[2] = 0;
            __syncthreads();
            for (int i = threadIdx.x; i < V; i += SEL_THREADS) {
                const uint32_t k = g4_sample_key(row[i]);
                if (k >= edge) {
                    const int slot = atomicAdd(&sh.found[2], 1);
                    if (slot < SEL_CAP)
                        sh.u.c.cand[slot] = ((unsigned long long)k << 32) | (uint32_t)~(uint32_t)i;
                }
            }
            __syncthreads();
            const int n = min(sh.found[2], SEL_CAP);
            int n2 = 1;
            while (n2 < n) n2 <<= 1;
            for (int i = n + threadIdx.x; i < n2; i += SEL_THREADS) sh.u.c.cand[i] = 0;
            __syncthreads();
            for (int k = 2; k <= n2; k <<= 1)
                for (int j = k >> 1; j > 0; j >>= 1) {
                    for (int i = threadIdx.x; i < n2; i += SEL_THREADS) {
                        const int ixj = i ^ j;
                        if (ixj > i) {
                            const unsigned long long a = sh.u.c.cand[i], b = sh.u.c.cand[ixj];
                            if ((a < b) == ((i & k) == 0)) sh.u.c.cand[i] = b, sh.u.c.cand[ixj] = a;
                        }
                    }
                    __syncthreads();
                }
            // top-k: every token with key >= the k-th's
            int m = n;
            if (topk) {
                const uint32_t kth = (uint32_t)(sh.u.c.cand[p.top_k - 1] >> 32);
                if (threadIdx.x == 0) sh.found[3] = n;
                __syncthreads();
                for (int i = threadIdx.x; i < n; i += SEL_THREADS)
                    if ((uint32_t)(sh.u.c.cand[i] >> 32) < kth &&
                        (i == 0 || (uint32_t)(sh.u.c.cand[i - 1] >> 32) >= kth))
                        sh.found[3] = i;
                __syncthreads();
                m = sh.found[3];
            }
            // inclusive prefix sums of the weights (2 per thread)
            unsigned long long w2[2], total;
            for (int e = 0; e < 2; e++) {
                const int j = 2 * threadIdx.x + e;
                w2[e] = j < m ? g4_sample_weight(g4_sample_key_value((uint32_t)(sh.u.c.cand[j] >> 32)),
                                                 mx, inv_t)
                              : 0;
            }
            unsigned long long ex = sel_scan(w2[0] + w2[1], sh, &total);
            for (int e = 0; e < 2; e++) {
                ex += w2[e];
                sh.u.c.acc[2 * threadIdx.x + e] = ex;
            }
            __syncthreads();
            unsigned long long z = total;
            // top-p: the prefix up to the token holding its point
            if (p.top_p < 1.0f) {
                const unsigned long long tp = g4_sample_top_p_point(p.top_p, z);
                for (int j = threadIdx.x; j < m; j += SEL_THREADS)
                    if (sh.u.c.acc[j] > tp && (j == 0 || sh.u.c.acc[j - 1] <= tp)) sh.found[3] = j;
                __syncthreads();
                m = sh.found[3] + 1;
                z = sh.u.c.acc[m - 1];
                __syncthreads();
            }
            const unsigned long long r = g4_sample_point(bits, z);
            for (int j = threadIdx.x; j < m; j += SEL_THREADS)
                if (sh.u.c.acc[j] > r && (j == 0 || sh.u.c.acc[j - 1] <= r))
                    sh.found[3] = (int)~(uint32_t)(sh.u.c.cand[j] & 0xffffffffu);
            __syncthreads();
            id = sh.found[3];
        } else {
            // Radix descent on the weights of the tokens with key >= kk.
            unsigned long long *h0 = sh.u.r.h0, z = 0;
            if (!topk) { // lg_mass made the level-0 histogram and the total
                for (int b = threadIdx.x; b < NB0; b += SEL_THREADS) h0[b] = rw->mass0[b];
                z = rw->z;
                __syncthreads();
            } else { // a top-k set above SEL_CAP: weigh it here
                for (int b = threadIdx.x; b < NB0; b += SEL_THREADS) h0[b] = 0;
                __syncthreads();
                unsigned long long mine = 0;
                for (int i = threadIdx.x; i < V; i += SEL_THREADS) {
                    const float x = row[i];
                    const uint32_t k = g4_sample_key(x);
                    if (k >= kk) {
                        const unsigned long long w = g4_sample_weight(x, mx, inv_t);
                        mine += w;
                        if (w) atomicAdd(&h0[k >> 21], w);
                    }
                }
                sel_scan(mine, sh, &z);
            }
            unsigned long long zk = z;
            if (p.top_p < 1.0f) {
                const Point cut = sel_point(row, V, kk, mx, inv_t, h0,
                                            g4_sample_top_p_point(p.top_p, z), sh);
                zk = cut.above + (unsigned long long)(cut.rank + 1) * cut.w;
            }
            id = sel_point(row, V, kk, mx, inv_t, h0, g4_sample_point(bits, zk), sh).id;
        }
        if (threadIdx.x == 0) next[t] = id;
    }
reset: // the histograms and the total for the next launch
    for (int b = threadIdx.x; b < NB0; b += SEL_THREADS) rw->cnt0[b] = 0, rw->mass0[b] = 0;
    if (threadIdx.x == 0) rw->z = 0;
}

__global__ void lg_softcap(float *x, size_t n, float cap) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = cap * tanhf(x[i] / cap);
}

} // namespace

extern "C" const char *g4_logits_supported(int V) {
    if (V < 1 || V >= (1 << 24))
        return "a vocabulary of 1 .. 2^24 - 1 tokens (the draw sums 2^40-scaled integer weights "
               "over the row in 64 bits)";
    return NULL;
}

extern "C" size_t g4_logits_workspace(int rows, int V) {
    (void)V; // (a row's partials are sized for the most CTAs any V gives: LG_BLOCKS_MAX)
    return lg_align(sizeof(RowWs) * (size_t)rows);
}

extern "C" void g4_logits_softcap(float *logits, int rows, int V, float cap, cudaStream_t stream) {
    const size_t n = (size_t)rows * V;
    if (n == 0 || !(cap > 0)) return;
    size_t b = (n + 255) / 256;
    lg_softcap<<<(unsigned)(b < 4096 ? b : 4096), 256, 0, stream>>>(logits, n, cap);
    G4_CUDA_LAUNCH_CHECK();
}

// The three launches for one sampler (params) or a table of one per row (ptab).
static void lg_sample(const char *op, int32_t *next, float *logits, int rows, int V, float cap,
                      const g4_sample_params *params, const uint64_t *ptab, const int32_t *counter,
                      void *workspace, size_t workspace_bytes, cudaStream_t stream) {
    const char *why = g4_logits_supported(V);
    if (why) {
        fprintf(stderr, "g4cu: internal error: %s: V = %d: the kernel takes %s\n", op, V, why);
        abort();
    }
    G4K_REQUIRE(rows >= 0 && next && logits && (params || ptab) && counter, op);
    G4K_REQUIRE(workspace && workspace_bytes >= g4_logits_workspace(rows, V), op);
    if (rows == 0) return;
    const int nb = lg_blocks(V);
    RowWs *rws = static_cast<RowWs *>(workspace);
    const int vec = V % 8 == 0 && ((uintptr_t)logits & 15) == 0;
    g4_pdl_launch(lg_pass1, dim3(nb, rows), dim3(LG_THREADS), 0, stream, logits, V, cap, params,
                  ptab, next, rws, vec);
    g4_pdl_launch(lg_mass, dim3(nb, rows), dim3(LG_THREADS), 0, stream, (const float *)logits, V,
                  params, ptab, rws);
    g4_pdl_launch(lg_select, dim3(rows), dim3(SEL_THREADS), 0, stream, (const float *)logits, V,
                  counter, next, rws);
}

extern "C" void g4_logits_sample(int32_t *next, float *logits, int rows, int V, float cap,
                                 const g4_sample_params *params, const int32_t *counter,
                                 void *workspace, size_t workspace_bytes, cudaStream_t stream) {
    G4K_REQUIRE(params, "g4_logits_sample");
    lg_sample("g4_logits_sample", next, logits, rows, V, cap, params, nullptr, counter, workspace,
              workspace_bytes, stream);
}

extern "C" void g4_logits_sample_rows(int32_t *next, float *logits, int rows, int V, float cap,
                                      const uint64_t *params_tab, const int32_t *counter,
                                      void *workspace, size_t workspace_bytes,
                                      cudaStream_t stream) {
    G4K_REQUIRE(params_tab, "g4_logits_sample_rows");
    lg_sample("g4_logits_sample_rows", next, logits, rows, V, cap, nullptr, params_tab, counter,
              workspace, workspace_bytes, stream);
}
