// ops.h: the one op interface the engine is written against, and the two backends behind it.
//
// The engine (engine/) calls `be->op(be, ...)` and never knows whether the CPU reference
// (kernels/ref/*.c, plain C, fp32 activations: the oracle) or our CUDA kernels (kernels/*.cu,
// fp16 activations) run it. Buffers live where the backend computes (host memory for the CPU
// backend, device memory for CUDA); every value that changes per step (positions, lengths) is
// passed in a buffer, never as a scalar argument, so a CUDA backend step can be captured in a
// graph and replayed.
//
// Shapes are written [rows, cols], row-major and contiguous. "tokens" (T) is the row count of the
// activations in one call: the prompt length in prefill, 1 in decode.
//
// Backend handles. g4_backend_cpu() / g4_backend_cuda() return a backend's root handle: the op
// table, used to place weights (alloc, upload, prepare_linear) and for work tied to no text
// state. exec_new makes a handle of its own for one state (engine/text_model.h): the same op
// table and memory, its own queue (a CUDA stream) and the workspaces that state's forwards use,
// sized when it is made, so that two states run side by side and each captured graph refers to
// its own buffers only. The root handle's workspaces (used only by callers that run ops on it
// directly) grow on first use, outside a graph capture.
#ifndef G4_OPS_H
#define G4_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ref/sample_math.h" // g4_sample_params
#include "quant/linear.h"         // g4_linear: the weight a linear op takes

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    G4_F32 = 0,
    G4_F16 = 1,
    G4_BF16 = 2,
    G4_I32 = 3,
} g4_type;

size_t g4_type_size(g4_type t);
const char *g4_type_name(g4_type t);

// An activation or other buffer on a backend: [rows, cols], row-major, contiguous.
typedef struct {
    void *data;
    g4_type type;
    int rows, cols;
} g4_buf;

typedef struct g4_backend g4_backend;

// The post-norm residual add that add_norm_linear runs before its linear (see there).
typedef struct {
    const g4_buf *h_in; // F32 [T, H] the residual stream before the add
    g4_buf *h_out;      // F32 [T, H] after it
    const g4_buf *r;    // act type [T, H] the block's output, normed and added
    const void *w;      // fp16 [H] its norm's weight
    const void *scale;  // fp16 scalar (the layer scalar) or NULL for 1
    float eps;
    int next_norm;      // 1: the linear reads rmsnorm(h_out) * next_w; 0: h_out itself
    const void *next_w; // fp16 [H] (next_norm) or NULL for no scale
} g4_add_norm;
// The per-row KV caches of a row-batched op (qkv_prep_rows, attention_rows; see there). The
// tables are in backend memory; a backend reads them on its own queue.
typedef struct {
    const void *k, *v; // uint64 [T]: row t's K / V cache base pointers (backend memory)
    const g4_buf *cap; // I32 [T]: the rows of row t's caches
} g4_kv_rows;
struct g4_text_config_s;   // loader/model_config.h
struct g4_vision_config_s; // loader/model_config.h
struct g4_audio_config_s;  // loader/model_config.h

// The op table. Every op asserts the types and shapes it supports (one table per backend).
struct g4_backend {
    const char *name; // "cpu", "cuda"
    int host_memory;  // 1 when buffers are plain host memory (weights may be used in place)
    g4_type act_type; // type of compute activations (CPU: F32, CUDA: F16)
    g4_type kv_type;  // type of the KV cache

    // Optional: G4_OK when the backend's kernels take every shape of this text model, else a
    // user error naming the first op and shape they do not and what the op takes (checked at
    // model load; the CUDA ops' launchers assert the same supported() predicates, kernels/*.cuh).
    int (*check_text)(g4_backend *be, const struct g4_text_config_s *cfg);

    // --- execution contexts (optional: NULL on the CPU, whose ops keep no state) ------------
    // A handle for one text state of cfg with a KV cache of kv_rows rows and up to max_rows
    // rows per forward (see the top of this file): NULL when out of memory. Its workspaces are
    // allocated here, never by its forwards. exec_free releases it (after its queue is idle).
    g4_backend *(*exec_new)(g4_backend *be, const struct g4_text_config_s *cfg, int kv_rows,
                            int max_rows);
    void (*exec_free)(g4_backend *ex);
    // Optional (NULL on the CPU): sizes ex's workspaces for the row-batched ops (qkv_prep_rows,
    // attention_rows, sample_rows) over up to `rows` rows of cfg, outside a capture, so graphs
    // of a batch step captured after it (one per row count) never see a workspace grow.
    void (*exec_reserve_rows)(g4_backend *ex, const struct g4_text_config_s *cfg, int rows);
    // Optional (NULL: one form): tells the handle ex that the one-token forwards it enqueues
    // next see `keys` keys of context, and returns their form class, 0 or 1 (1: kernels that
    // have a long-range form take it; CUDA: the decode attention's merge inside its split
    // kernel on layers without a window). A captured graph replays the form of its capture, so
    // the engine keeps one graph a class and calls this before each step.
    int (*set_keys)(g4_backend *ex, int keys);
    // Allocations of backend memory made so far through any handle of this backend (alloc,
    // alloc_mapped and the backend's own workspaces): a test counts them around requests.
    uint64_t (*alloc_count)(g4_backend *be);

    // --- memory ---------------------------------------------------------------------------
    void *(*alloc)(g4_backend *be, size_t bytes); // NULL when out of memory (callers report it)
    void (*free)(g4_backend *be, void *p);
    void (*upload)(g4_backend *be, void *dst, const void *src, size_t bytes);   // host -> be
    void (*download)(g4_backend *be, void *dst, const void *src, size_t bytes); // be -> host
    void (*sync)(g4_backend *be);
    // Optional (NULL on the CPU): pinned host memory the backend's kernels read in place over
    // the bus (mapped, write-combined), for a table of which a step touches a few rows; NULL
    // when the host cannot pin it.
    void *(*alloc_mapped)(g4_backend *be, size_t bytes);
    void (*free_mapped)(g4_backend *be, void *p);
    // Converts a buffer between types (F32 <-> F16 <-> BF16), same shape.
    void (*convert)(g4_backend *be, g4_buf *dst, const g4_buf *src);

    // --- linear algebra -----------------------------------------------------------------------
    // y[T, out] = x[T, in] @ W (+ bias); when accumulate, y += x @ W instead (residual add).
    void (*linear)(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *w, int accumulate);
    // Optional (NULL on the CPU): places a linear weight bound from the package (host pointers
    // into the mapped files) in the backend's own layout (device memory; Q4 repacked for the
    // kernels into w->packed) and rewrites w's pointers; release_linear frees what it made.
    int (*prepare_linear)(g4_backend *be, g4_linear *w);
    void (*release_linear)(g4_backend *be, g4_linear *w);
    // y[T, N] = gelu_tanh(x @ Wg) * (x @ Wu): the gated MLP's first half in one op.
    void (*linear_gelu_mul)(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_linear *wg,
                            const g4_linear *wu);

    // --- norms and elementwise --------------------------------------------------------------
    // y = x / sqrt(mean(x^2) + eps) * w over each group of `group` columns (group = cols for a
    // row norm, head_dim for per-head norms); w fp16 [group] or NULL (no scale). y may alias x.
    void (*rmsnorm)(g4_backend *be, g4_buf *y, const g4_buf *x, const void *w, int group,
                    float eps);
    // h = (h + rmsnorm(x) * w) * scale: a post-norm residual add; scale is a device/host fp16
    // scalar pointer (the layer_scalar) or NULL for 1. h is F32 (the residual stream).
    void (*add_rmsnorm)(g4_backend *be, g4_buf *h, const g4_buf *x, const void *w, float eps,
                        const void *scale);
    // h = (h + rmsnorm(x) * w) * scale as add_rmsnorm, then the input of the next op from the
    // new h in the same pass: next = rmsnorm(h) * next_w (next_w fp16 [cols], or NULL for no
    // scale) when next_norm, else next = h converted to next's type (a copy).
    void (*add_rmsnorm_next)(g4_backend *be, g4_buf *h, const g4_buf *x, const void *w, float eps,
                             const void *scale, g4_buf *next, int next_norm, const void *next_w);
    // add_rmsnorm_next out of place, then the linear that reads its output, as one op (issue
    // 30's consumer-side fusion: a backend may compute the norms in the linear kernel's prologue
    // instead of a kernel of their own):
    //   a->h_out = (a->h_in + rmsnorm(a->r) * a->w) * a->scale        (F32 [T, H])
    //   x        = a->next_norm ? rmsnorm(h_out) * a->next_w : h_out  (act type [T, H])
    //   y        = x @ W, or gelu_tanh(x @ W) * (x @ Wu) when wu      ([T, N])
    //   y        = gelu_tanh(y) * mul[:, mul_col0 : mul_col0 + N] when mul (the PLE gate)
    // Every output is written as by the two ops apart (x too: later linears may read it).
    // h_out may be h_in only on a backend that does not fuse (the CPU); a fused kernel reads
    // h_in in every block, so h_out must be another buffer (the engine alternates two).
    void (*add_norm_linear)(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *y,
                            const g4_linear *w, const g4_linear *wu, const g4_buf *mul,
                            int mul_col0);
    // The gated MLP block as one op (issue 30 stage 2: a backend may run it as one persistent
    // launch whose phases hand over through device counters):
    //   (a given) the add-norm of add_norm_linear: a->h_out, and x = its output
    //   mlp = gelu_tanh(x @ Wg) * (x @ Wu)          (act type [T, F])
    //   y   = mlp @ Wd                              ([T, H], y's type as linear, not accumulated)
    // a NULL: x is the input as is. Every output is written as by the ops apart (add_norm_linear
    // or linear_gelu_mul, then linear): x, mlp and y, and h_out when a is given. y may be a->r
    // (the engine writes the block's output over the attention output its add reads).
    void (*mlp_block)(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *mlp, g4_buf *y,
                      const g4_linear *wg, const g4_linear *wu, const g4_linear *wd);
    // The per-layer-input block as one op (issue 30: on CUDA, one token with Q4 or fp16 weights,
    // one launch of thread-block clusters, kernels/ple_block.cu):
    //   (a given) the add-norm of add_norm_linear: a->h_out, and x = its output
    //   pg = gelu_tanh(x @ Wg) * ple[:, ple_col0 : ple_col0 + P]   (act type [T, P])
    //   y  = pg @ Wp                                                ([T, H], y's type as linear)
    // a NULL: x is the input as is. Every output is written as by the ops apart (add_norm_linear
    // with its multiplier, or linear then gelu_mul; then linear): x, pg and y, and h_out when a
    // is given. y must be a buffer of its own (not a->r, h_in, h_out, x or pg): a fused kernel's
    // CTAs may still read r and h_in while others store y. Any T (CUDA fuses one row only).
    void (*ple_block)(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *pg, g4_buf *y,
                      const g4_linear *wg, const g4_linear *wp, const g4_buf *ple, int ple_col0);
    // y[T, n] = gelu_tanh(a[T, n]) * b[T, b_col0 : b_col0 + n] (b may be wider than a: the
    // per-layer-input slice of layer l is columns l*P .. l*P+P of the PLE buffer).
    void (*gelu_mul)(g4_backend *be, g4_buf *y, const g4_buf *a, const g4_buf *b, int b_col0);
    // x *= s elementwise.
    void (*scale)(g4_backend *be, g4_buf *x, float s);
    // y += x elementwise.
    void (*add)(g4_backend *be, g4_buf *y, const g4_buf *x);

    // --- attention ----------------------------------------------------------------------------
    // The attention block's head preparation, one op (CUDA: one launch). In place on
    // q[T, n_heads * hd]: q = rope(rmsnorm_hd(q) * q_w). When k and v are given (the layer owns
    // its KV): k = rope(rmsnorm_hd(k) * k_w) and v = rmsnorm_hd(v) (no weight) are stored in the
    // caches [capacity, n_kv * hd] at rows pos[t] (k and v themselves may be left as they were).
    // RoPE: pair (j, j + hd/2) turns by pos[t] * inv_freq[j] (inv_freq backend float [hd/2]; a
    // zero frequency leaves its pair as is); pos I32 [T].
    void (*qkv_prep)(g4_backend *be, g4_buf *q, g4_buf *k, g4_buf *v, g4_buf *kcache,
                     g4_buf *vcache, const void *q_w, const void *k_w, const g4_buf *pos,
                     const float *inv_freq, int n_heads, int n_kv, int head_dim, float eps);
    // out[T, n_heads * head_dim] = softmax(q k^T * scale + mask) v over cache rows
    // 0..pos[t] (causal), and only the last `window` of them when window > 0 (sliding: keys
    // with pos[t] - window < key <= pos[t]). n_heads query heads share each of n_kv heads.
    void (*attention)(g4_backend *be, g4_buf *out, const g4_buf *q, const g4_buf *kcache,
                      const g4_buf *vcache, const g4_buf *pos, int n_heads, int n_kv,
                      int head_dim, int window, float scale);

    // --- row-batched attention (a batch decode step: row t is a sequence of its own) ---------
    // Per-row caches (kv): row t of q / k / v / out / pos belongs to its own sequence, whose
    // caches [kv->cap[t], n_kv * hd] (kv_type) start at kv->k[t] and kv->v[t]: tables of T
    // pointers in backend memory (uint64), built by the engine once a step for every KV slot
    // and uploaded in one copy, so the op launches once for all rows (and a graph replays it
    // with new tables staged). A table of pointers, not a shared pool with a slot index: each
    // sequence keeps the cache its own one-row step reads and writes (g4_text_step, its
    // graph), so a row moves between the batch and a step alone without a copy.
    //   qkv_prep_rows: qkv_prep of each row t alone (q[t], k[t], v[t], pos[t]) with its k and
    //     v stored in row t's caches at row pos[t] (a pos[t] outside [0, cap[t]) stores nothing).
    //   attention_rows: attention of each row t alone over row t's caches (rows 0..pos[t], the
    //     last `window` of them when window > 0), pos[t] < cap[t].
    void (*qkv_prep_rows)(g4_backend *be, g4_buf *q, g4_buf *k, g4_buf *v, const g4_kv_rows *kv,
                          const void *q_w, const void *k_w, const g4_buf *pos,
                          const float *inv_freq, int n_heads, int n_kv, int head_dim, float eps);
    void (*attention_rows)(g4_backend *be, g4_buf *out, const g4_buf *q, const g4_kv_rows *kv,
                           const g4_buf *pos, int n_heads, int n_kv, int head_dim, int window,
                           float scale);

    // --- the head preparation fused into the decode attention (issue 30: one launch fewer a
    // layer) -------------------------------------------------------------------------------------
    //   qkv_attention: qkv_prep then attention, for ONE token (q->rows == 1): out as attention
    //     gives it, the caches as qkv_prep leaves them; q, k and v are left unspecified (CUDA
    //     leaves them as they were: the preparation happens inside the attention kernel).
    //   qkv_attention_rows: qkv_prep_rows then attention_rows (each row one token of its own).
    void (*qkv_attention)(g4_backend *be, g4_buf *out, g4_buf *q, g4_buf *k, g4_buf *v,
                          g4_buf *kcache, g4_buf *vcache, const void *q_w, const void *k_w,
                          const g4_buf *pos, const float *inv_freq, int n_heads, int n_kv,
                          int head_dim, float eps, int window, float scale);
    void (*qkv_attention_rows)(g4_backend *be, g4_buf *out, g4_buf *q, g4_buf *k, g4_buf *v,
                               const g4_kv_rows *kv, const void *q_w, const void *k_w,
                               const g4_buf *pos, const float *inv_freq, int n_heads, int n_kv,
                               int head_dim, float eps, int window, float scale);

    // --- embedding and logits -------------------------------------------------------------
    // The per-layer inputs from the projection of the merged embeddings, in place on
    // ple[T, L*D] (= x @ W_plmp): ple = (rmsnorm_D(ple * proj_scale) * norm_w
    // + table[ids[t]] * tok_scale) * out_scale, table fp16 [table_rows, L*D], norm_w fp16 [D].
    void (*ple_inputs)(g4_backend *be, g4_buf *ple, const void *table, int table_rows,
                       const g4_buf *ids, const void *norm_w, int D, float proj_scale,
                       float tok_scale, float out_scale, float eps);
    // y[T, cols] = table[ids[t]] * scale (table fp16 [rows, cols] in backend or pinned host
    // memory; ids I32 [T]); ids outside [0, rows) are an error checked by the caller.
    void (*embed)(g4_backend *be, g4_buf *y, const void *table, int table_rows, const g4_buf *ids,
                  float scale);
    // x = c * tanh(x / c) elementwise (c > 0). Nothing else (the next token: `sample`).
    void (*softcap)(g4_backend *be, g4_buf *x, float c);
    // The next token of each row of logits [rows, V] (F32, in place): x = cap * tanh(x / cap)
    // when cap > 0, then next[r] (I32 [rows]) = ref_sample_row(row r, params, counter[r])
    // (kernels/ref/ref.h): greedy or temperature / top-k / top-p / draw in HF's order, with the
    // exact arithmetic of kernels/ref/sample_math.h, so every backend picks the same id from the
    // same logits; -1 for a row holding a NaN. params: a g4_sample_params in backend memory;
    // counter I32 [rows]: the draw index of each row (the engine passes the row's position).
    // Only `next` crosses to the host.
    void (*sample)(g4_backend *be, g4_buf *next, g4_buf *logits, float cap, const void *params,
                   const g4_buf *counter);
    // sample with a sampler per row: row r of logits is drawn with *params[r] (params: a table
    // of rows pointers in backend memory, uint64, each to a g4_sample_params in backend memory)
    // at its own draw index counter[r]; otherwise exactly `sample` on each row alone.
    void (*sample_rows)(g4_backend *be, g4_buf *next, g4_buf *logits, float cap, const void *params,
                        const g4_buf *counter);
    // dst[t] = src[idx[t]] (F32 rows of dst->cols) for each row t of dst with idx[t] >= 0 (idx
    // I32 [dst->rows], each < src->rows); other rows keep their values. Places soft tokens at
    // their placeholders' embedding rows (and picks an audio clip's valid frames), on the
    // backend.
    void (*scatter_rows)(g4_backend *be, g4_buf *dst, const g4_buf *src, const g4_buf *idx);

    // --- graphs (optional; NULL on the CPU) ---------------------------------------------------
    // Everything enqueued between graph_begin and graph_end becomes one graph; graph_launch
    // replays it (inputs staged in device buffers beforehand); graph_free destroys it.
    void (*graph_begin)(g4_backend *be);
    void *(*graph_end)(g4_backend *be);
    void (*graph_launch)(g4_backend *be, void *graph);
    void (*graph_free)(g4_backend *be, void *graph);

    void *ctx; // the handle's execution context (CUDA: its stream and workspaces)

    // --- vision and audio towers (spec 4.2-4.6, 5.3-5.6; semantics = kernels/ref/ref.h) -----
    // A backend that lacks them leaves them NULL; the towers check at load (g4_*_tower_load).
    // Row masks (valid frames) are I32 buffers of 0/1.

    // x = min(max(x, lo), hi) elementwise (torch.clamp: NaN stays NaN).
    void (*clamp)(g4_backend *be, g4_buf *x, float lo, float hi);
    // y = x * sigmoid(x) elementwise (SiLU). y may alias x.
    void (*silu)(g4_backend *be, g4_buf *y, const g4_buf *x);
    // y[T, C] = x[:, :C] * sigmoid(x[:, C:]) for x [T, 2C] (GLU over the last dim).
    void (*glu)(g4_backend *be, g4_buf *y, const g4_buf *x);
    // y[cols, rows] = x[rows, cols] transposed (same type; y must not alias x).
    void (*transpose)(g4_backend *be, g4_buf *y, const g4_buf *x);
    // In place on x[T, n_heads * head_dim]: the vision 2-D RoPE. Dims [0, hd/2) of each head
    // rotate by the x position, [hd/2, hd) by the y position, pairs (j, j + hd/4) at angle
    // pos * inv_freq[j]; pos_xy I32 [T, 2] = (x, y); inv_freq backend float [hd/4].
    void (*rope_2d)(g4_backend *be, g4_buf *x, int n_heads, int head_dim, const g4_buf *pos_xy,
                    const float *inv_freq);
    // out[N, n_heads * hd] = softmax(q k^T * scale) v per head over all N rows of k/v
    // (bidirectional, no mask: the engine passes only real patches; one KV head per head).
    void (*attention_bidir)(g4_backend *be, g4_buf *out, const g4_buf *q, const g4_buf *k,
                            const g4_buf *v, int n_heads, int head_dim, float scale);
    // h[N, D] += table[0][x_i] + table[1][y_i]: the vision position embedding. table fp16
    // [2, table_rows, D]; pos_xy I32 [N, 2], every coordinate in [0, table_rows) (the caller
    // checks: out-of-range is a user error there, an assert here).
    void (*vision_posemb)(g4_backend *be, g4_buf *h, const void *table, int table_rows,
                          const g4_buf *pos_xy);
    // out[n_bins, D] (n_bins = out->rows) = for each bin the sum of its patches x[i] / k^2,
    // times scale; patch i at pos_xy[i] = (x, y) goes to bin x/k + ((max x + 1)/k) (y/k). Every
    // patch must fall in a bin < n_bins (the caller checks).
    void (*vision_pool)(g4_backend *be, g4_buf *out, const g4_buf *x, const g4_buf *pos_xy, int k,
                        float scale);
    // One audio subsampling layer (batch 1, channels last): x [H*W, C_in] (row h*W + w holds
    // pixel (h, w)'s channels) with input rows h where valid[h] == 0 zeroed (valid I32 [H] or
    // NULL), conv 3x3 stride 2 pad 1 (w fp16 [C_out, C_in, 3, 3] as stored, no bias), LayerNorm
    // over the C_out channels (ln_w fp16 [C_out], no bias), ReLU -> y [Ho*Wo, C_out],
    // Ho = (H+1)/2, Wo = (W+1)/2. Channels last because input_proj_linear reads each output
    // row of Wo pixels as (pixel, channel) pairs: y viewed [Ho, Wo*C_out] is its input as is.
    void (*sscp_conv)(g4_backend *be, g4_buf *y, const g4_buf *x, const g4_buf *valid,
                      const void *w, const void *ln_w, int H, int W, float eps);
    // y[T, C] = causal depthwise conv1d over time, kernel K, left pad K - 1, no bias; w fp16
    // [C, K]. y must not alias x.
    void (*dwconv1d_causal)(g4_backend *be, g4_buf *y, const g4_buf *x, const void *w, int K);
    // Gemma-4 audio attention (ref_audio_attention): out[T, n_heads * hd] from the projection
    // outputs q, k, v [T, n_heads * hd]; rel [>= band, n_heads * hd] = relative_k_proj of the
    // sinusoid of distance d in row d; per_dim_scale backend float [hd] (the raw parameter);
    // valid I32 [T] or NULL. Key u is visible to query t iff 0 <= t - u < band and valid[u];
    // logits are soft-capped at logit_cap, masked ones set to invalid_logit over HF's blocks of
    // `chunk` queries.
    void (*audio_attention)(g4_backend *be, g4_buf *out, const g4_buf *q, const g4_buf *k,
                            const g4_buf *v, const g4_buf *rel, const float *per_dim_scale,
                            const g4_buf *valid, int n_heads, int head_dim, int chunk, int band,
                            float logit_cap, float invalid_logit);
    // Optional: G4_OK when the tower ops' kernels take every shape of this vision tower (with
    // pooling kernel pool_k) / audio tower, else a user error naming the first op and shape
    // they do not and what the op takes (checked at tower load, so an unsupported model is
    // refused up front instead of aborting in the middle of a forward).
    int (*check_vision)(g4_backend *be, const struct g4_vision_config_s *cfg, int pool_k);
    int (*check_audio)(g4_backend *be, const struct g4_audio_config_s *cfg);
};

// The CPU reference backend (always available).
g4_backend *g4_backend_cpu(void);
// The CUDA backend, or NULL with *why set when no GPU is usable.
g4_backend *g4_backend_cuda(const char **why);

// Helpers over a backend.
g4_buf g4_buf_new(g4_backend *be, g4_type type, int rows, int cols);
void g4_buf_free(g4_backend *be, g4_buf *b);
size_t g4_buf_bytes(const g4_buf *b);
// A [rows, cols] view of the first rows x cols elements of b's storage (no copy).
g4_buf g4_buf_view(const g4_buf *b, int rows, int cols);
// Copies b (any float type) to host memory as float32 [rows * cols].
void g4_buf_to_host_f32(g4_backend *be, const g4_buf *b, float *dst);
// The block ops as the ops apart, through be's own ops (a backend's mlp_block / ple_block where
// it does not fuse, and the CPU reference of the fused forms): mlp_block = add_norm_linear (or
// linear_gelu_mul when a is NULL) then linear; ple_block = add_norm_linear with the multiplier
// (or linear then gelu_mul) then linear.
void g4_mlp_block_apart(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *mlp, g4_buf *y,
                        const g4_linear *wg, const g4_linear *wu, const g4_linear *wd);
void g4_ple_block_apart(g4_backend *be, const g4_add_norm *a, g4_buf *x, g4_buf *pg, g4_buf *y,
                        const g4_linear *wg, const g4_linear *wp, const g4_buf *ple, int ple_col0);

#ifdef __cplusplus
}
#endif

#endif
