// text_model.h: the Gemma-4 text model (embedding + PLE + decoder) on a backend, kept apart from
// the per-request state as whisper.cpp / llama.cpp keep model and context apart.
//
// Model (g4_text_model): the weights bound by name from a package, the configs and the backend's
// root handle, placed once by g4_text_model_load_opts under load options (where the per-layer
// embedding table lives) and never written again: any number of states may use one model at
// the same time.
//
// State (g4_text_state): everything one request mutates, allocated when the state is made and
// reused by every request after it without allocating: the KV cache, the activations (for at
// most max_tokens rows per call), the staged ids / positions, the sampler parameters and the
// chosen token (in backend memory, so a captured step reads them from there), the soft-token
// rows of the request's media, its own backend handle (kernels/ops.h exec_new: a CUDA stream
// and the decode workspaces) and, on backends with graphs, the captured decode step. The two
// exceptions, both documented at their functions: a request larger than the state grows it
// (g4_text_state_reserve), and media rows beyond what the state holds grow its soft buffer.
//
// One decode step for every caller (g4_text_step): the forward of the new rows, then the sample
// op of kernels/ops.h on the last row (soft-cap + greedy or sampled, on the backend): only the
// chosen id crosses to the host. With T = 1 on a backend with graphs the whole step is one
// graph captured when the state is made and replayed with the id and position staged.
// Every forward goes through the op table of kernels/ops.h, so the same code runs on the CPU
// reference backend and on CUDA.
#ifndef G4_TEXT_MODEL_H
#define G4_TEXT_MODEL_H

#include "engine/weights.h"
#include "kernels/ops.h"
#include "loader/package.h"

typedef struct {
    g4_linear q;            // [H, heads*hd]
    g4_linear k, v;         // [H, kv*hd] (only layers that own a KV cache)
    // [H, (heads + 2 kv) * hd]: q | k | v side by side along N, a copy (owners only; in == 0
    // where not built, or when G4_QKV=0 at load): a one-token forward's one linear for the
    // three (issue 30)
    g4_linear qkv;
    g4_linear o;            // [heads*hd, H]
    g4_linear gate, up;     // [H, ffn]
    g4_linear down;         // [ffn, H]
    g4_linear ple_gate;     // [H, P]
    g4_linear ple_proj;     // [P, H]
    const void *input_norm; // fp16 [H] (and the four below)
    const void *post_attn_norm;
    const void *pre_ff_norm;
    const void *post_ff_norm;
    const void *post_ple_norm;
    const void *q_norm;       // fp16 [hd]
    const void *k_norm;       // fp16 [hd] (owners only)
    const void *layer_scalar; // fp16 [1]
} g4_text_layer;

typedef struct g4_text_model {
    const g4_package *pkg;
    const g4_text_config *cfg;
    g4_backend *be;
    const void *embed_tokens;   // fp16 [V, H]
    const void *embed_ple;      // fp16 [V_ple, L*P] (on the backend, or ple_mapped)
    void *ple_mapped;           // the same table in pinned host memory (load option ple_host)
    g4_linear ple_model_proj;   // [H, L*P]
    const void *ple_proj_norm;  // fp16 [P]
    g4_text_layer *layers;      // [L]
    const void *final_norm;     // fp16 [H]
    g4_linear lm_head;          // [H, V]
    const float *inv_freq[G4_MAX_ROPE]; // backend memory, [head_dim/2] per rope table
    uint64_t weight_bytes;      // bytes of weights placed on the backend
    uint64_t host_bytes;        // bytes of weights the backend reads from pinned host memory
    g4_binder bind;             // the backend copies of the weights (engine/weights.h)
} g4_text_model;

// Called with every named intermediate of a forward (for layer-by-layer comparison). Names
// match the reference dumps: "embeds", "per_layer_inputs" [T, L*P], "layer_<i>", "q_<i>",
// "k_<i>", "v_<i>" (q/k after norm + RoPE, v after its norm), "final_norm", "logits". The
// buffer lives on the backend (download before reading).
typedef void (*g4_text_hook)(void *ctx, const char *name, g4_backend *be, const g4_buf *b);

typedef struct g4_text_state {
    g4_text_model *m; // (read only)
    g4_backend *be;   // the state's own handle (m->be's exec_new), or m->be on the CPU
    int own_be;       // 1 when be is the state's (exec_free at the end)
    int capacity;     // KV rows (context length of this state)
    int max_tokens;   // rows per forward call
    int logit_rows;   // rows of logits a forward can return (all_logits needs T <= this)
    int eager;        // 1: the decode step is never captured (it runs op by op)
    int n_past;       // tokens already in the KV cache
    g4_buf *kc, *vc; // [n_kv_layers] caches [capacity, kv*hd]
    // activations, [max_tokens, ...]; used as [T, ...] views
    g4_buf h;      // F32 [T, H] residual stream
    g4_buf h2;     // F32 [min(T, 8), H]: the other residual buffer of a fused forward
    g4_buf *hcur;  // the residual buffer a forward is at: &h, or &h2 after a fused add
    g4_buf x;      // act [T, H] normed input of a sublayer
    g4_buf q;      // act [T, heads*hd_max]
    g4_buf k, v;   // act [T, kv*hd_max]
    g4_buf qkv;    // act [1, (heads + 2 kv) * hd_max]: a one-token forward's q | k | v (qkv_on)
    g4_buf attn;   // act [T, heads*hd_max]
    g4_buf o;      // act [T, H] sublayer output before its post-norm
    g4_buf mlp;    // act [T, ffn_max]
    g4_buf ple;    // act [T, L*P] per-layer inputs
    g4_buf pg;     // act [T, P]
    g4_buf py;     // act [1, H]: a one-token PLE block's output (ple_fused; not o, which its add
                   // reads while the fused kernel's other clusters store y)
    g4_buf io;     // I32 [2 * max_tokens]: a call's ids then its positions, staged in one copy
    g4_buf ids;    // I32 [T] view of io (the lookup ids: placeholders replaced by the pad id)
    g4_buf pos;    // I32 [T] view of io after the ids
    int32_t *host_io; // host staging of io [2 * max_tokens]
    g4_buf smap;   // I32 [max_tokens]: soft-token row of each placeholder row, -1 elsewhere
    g4_buf logits; // F32 [logit_rows, V]
    g4_buf samp;   // the sampler (g4_sample_params, 8 x I32) the sample op reads
    g4_buf next;   // I32 [1]: the token the last step chose
    g4_buf soft;   // F32 [soft_rows, H]: the request's soft tokens (g4_text_state_soft_rows)
    g4_text_hook hook;
    void *hook_ctx;
    // The captured decode step (backends with graphs, not eager), or NULL: graph[f] for the
    // form class f the backend's set_keys gives the step's key count (graph[1] NULL where the
    // backend has one form: set_keys NULL, or its long-range form switched off).
    void *graph[2];
    // Issue 30's consumer-side fusion (on unless G4_FUSE=0 in the environment, read at state
    // creation; forwards of <= h2.rows rows without a hook): each block's post-norm residual
    // add runs in the next linear's op (add_norm_linear), which reads one residual buffer and
    // writes the other, instead of add_rmsnorm_next on its own.
    int fuse_norm;
    int fuse; // this forward fuses
    // Issue 30: a one-token forward computes q, k and v of a KV-owning layer as one linear over
    // the layer's q|k|v weight (views of s->qkv), its pending add applied once; on unless
    // G4_QKV=0 in the environment (read at state creation). Prefill keeps the three linears.
    int qkv_on;
    // Issue 30: the head preparation inside the decode attention (ops.h qkv_attention, _rows),
    // one launch fewer a layer: for the batch step's rows (attn_fused: on unless G4_FUSE_ATTN=0)
    // and for a one-token forward (attn_fused_one: only with G4_FUSE_ATTN=1, measured 1.4%
    // slower in the graph-replayed step, bench/RESULTS.md); never when a layer hook wants the
    // prepared q, k, v. Read at state creation.
    int attn_fused, attn_fused_one;
    // Issue 30 stage 2: a one-token forward (not a batch step's rows) runs each MLP block as one
    // op (ops.h mlp_block: on CUDA with Q4 weights one persistent launch), its pending add in it
    // as add_norm_linear's; only with G4_PERSIST_MLP=1 (read at state creation) until measured.
    int persist_mlp;
    // Issue 30: a one-token forward (not a batch step's rows, no hook) runs each per-layer-input
    // block as one op (ops.h ple_block: on CUDA with Q4 or fp16 weights one launch of thread-block
    // clusters) into py, its pending add in it; only with G4_PLE_FUSED=1 (read at state
    // creation) until measured on the GPU.
    int ple_fused;
    struct {  // the add a block ended with, not applied yet (pending.r.data != NULL)
        g4_buf r;
        const void *w, *scale, *next_w;
        int next_norm;
    } pending;
    // During g4_text_batch_step(_rows) only: the sequence of each row (NULL otherwise), each
    // row's position (host_pos, [max_tokens], made at the first batch step of s) and whether
    // the step has prompt rows (rows that sample nothing: never the fused qkv_attention_rows,
    // whose k, v store happens inside the attention, per CTA, so another row of the same
    // sequence could read its key before it is stored).
    struct g4_text_state *const *rows;
    int32_t *host_pos;
    int rows_prompt;
    int bnext; // a sequence in a batch step: the next position given to its rows (scratch)
    // The batch step's per-row tables (a batch's own state; made at its first batch step):
    // for n rows, uint64 [2 * n_kv_layers + 1][n] (KV slot j's K cache pointers at 2j, its V
    // at 2j + 1, then each row's sampler) followed by I32 [n] (each row's cache rows), staged
    // on the host (host_tab) and uploaded in one copy a step. The row-batched ops use them
    // unless G4_BATCH_ROWS=0 (read at state creation: then one op call per row, the earlier path).
    void *tab;
    uint64_t *host_tab;
    int batch_rows_ops;
    // The batch step captured per row count (unless G4_BATCH_GRAPH=0 at state creation, a backend
    // with graphs and exec_reserve_rows, the row-batched ops): bgraph[n] replays the step of n
    // rows with the ids, positions and tables staged; a count is captured the second time it
    // is stepped (the first runs eager: it loads the kernels). NULL: no batch graphs.
    void **bgraph;
    uint8_t *bseen; // [max_tokens + 1]: row counts stepped once
    int batch_graph;
} g4_text_state;

// Load options (g4_text_model_load_opts; all zero: the defaults).
typedef struct {
    // Keep the per-layer embedding table (the largest, 4.7 GB in E2B, touched one row per
    // token) in pinned host memory that the kernels read in place (backends with alloc_mapped;
    // a user error elsewhere), not in device memory.
    int ple_host;
} g4_text_load_opts;

// Binds every text weight of pkg (fp16 or Q4) and places it on be (under o; NULL: defaults).
// Errors name the tensor; a model the backend's kernels cannot run is refused here with the op,
// the shape and what the op takes (be->check_text).
int g4_text_model_load_opts(const g4_package *pkg, g4_backend *be, const g4_text_load_opts *o,
                            g4_text_model **out);
int g4_text_model_load(const g4_package *pkg, g4_backend *be, g4_text_model **out);
void g4_text_model_free(g4_text_model *m);

// State options (g4_text_state_new_opts).
typedef struct {
    int capacity;   // KV rows (<= the model's context)
    int max_tokens; // rows per forward call (the prefill chunk)
    int logit_rows; // rows of logits g4_text_forward can return (0: max_tokens; generation
                    // needs 1, and 1 saves max_tokens x V floats)
    int eager;      // 1: never capture the decode step in a graph (tests compare with it;
                    // G4_EAGER=1 in the environment does it for every state)
} g4_text_state_opts;

// A request state (see the top). Its decode graph, on backends with graphs, is captured here
// (after one warm-up step), so that no request pays for it.
int g4_text_state_new_opts(g4_text_model *m, const g4_text_state_opts *o, g4_text_state **out);
// The same with logit_rows = max_tokens.
int g4_text_state_new(g4_text_model *m, int capacity, int max_tokens, g4_text_state **out);
void g4_text_state_free(g4_text_state *s);
static inline void g4_text_state_reset(g4_text_state *s) { s->n_past = 0; }
// Makes the state hold at least `capacity` KV rows (at most the model's context): nothing when
// it does; else its KV cache is allocated anew (larger) and its graph recaptured, the only
// allocation a request can cause besides media rows (g4_text_state_soft_rows). Resets n_past.
int g4_text_state_reserve(g4_text_state *s, int capacity);
// The sampler of the following steps (greedy when s->temperature <= 0): written to the
// state's parameter buffer, which the (captured) sample op reads.
typedef struct {
    float temperature; // <= 0: greedy
    int top_k;         // 0: no top-k
    float top_p;       // >= 1: no top-p
} g4_sampler;
void g4_text_state_set_sampler(g4_text_state *s, const g4_sampler *smp, uint64_t seed);

// Soft tokens (image/audio features already projected to the text width) that replace the
// placeholder ids' embedding rows, in order of appearance: row k of `rows` is the k-th.
typedef struct {
    g4_buf rows; // F32 [>= n, H] in backend memory (a state's soft buffer, or the caller's)
    int n;
} g4_soft_tokens;
// A view of n rows of the state's soft buffer for the towers to write into (grown when it
// holds fewer: an allocation, the only one a media request adds). Valid until the next call.
int g4_text_state_soft_rows(g4_text_state *s, int n, g4_soft_tokens *out);

// Runs T tokens at positions n_past .. n_past+T-1 (T <= max_tokens, n_past + T <= capacity).
// Writes soft-capped logits to logits_out (host, [T, V] when all_logits (T <= logit_rows), else
// the last row [V]) if not NULL; advances n_past. Placeholder ids (the config's image/audio
// token ids) take their embedding rows from soft (which must hold exactly that many rows).
int g4_text_forward(g4_text_state *s, const int32_t *ids, int T, const g4_soft_tokens *soft,
                    float *logits_out, int all_logits);

// The one decode step: runs T tokens as g4_text_forward does, then picks the next token from
// the last row with the state's sampler (the sample op: its draw index is the row's position,
// so a seed gives the same tokens every run) and returns it in *next. T = 1 without soft
// tokens or a hook replays the state's captured graph where there is one (only the id and the
// position go in, only *next comes out). A NaN in the logits is an internal error.
int g4_text_step(g4_text_state *s, const int32_t *ids, int T, const g4_soft_tokens *soft,
                 int32_t *next);

// --- a batch of sequences in one decode step -------------------------------------------------
// One decode step over n sequences, one new token each: rows[r] (a state of s's model, holding
// its sequence's KV cache at rows 0..n_past) takes ids[r] at position rows[r]->n_past. s is
// the batch's own state (made with max_tokens and logit_rows >= n, eager): its activations hold
// the n rows, so every linear runs once with M = n rows through the op table (both backends),
// while the head preparation and the decode attention of every row run in one op call a layer
// (qkv_prep_rows, attention_rows: each row over its own cache at its own position, through
// tables of the rows' cache pointers staged once a step). Each row's next token comes from one
// sample_rows call: its own logits row with its own state's sampler and seed, drawn at its own
// position, into next[r]; each row's n_past advances by one. A row computes exactly what
// g4_text_step(rows[r], &ids[r], 1, ...) computes from the same cache wherever the backend's
// ops are row-independent (the CPU reference is). The step runs op by op, or (unless G4_BATCH_GRAPH=0
// at s's creation, a backend with graphs) from a graph captured per row count the second time
// that count is stepped. G4_BATCH_ROWS=0: one qkv_prep / attention / sample call per row.
// Hooks are not called.
int g4_text_batch_step(g4_text_state *s, g4_text_state *const *rows, const int32_t *ids, int n,
                       int32_t *next);

// 1 when a state of m takes the batch step's row-batched ops (qkv_prep_rows, attention_rows,
// sample_rows on its backend, and not G4_BATCH_ROWS=0): what a state made now sets in
// batch_rows_ops, and what the batch's prompt rows need (engine/batch.h).
int g4_text_batch_rows_ops(const g4_text_model *m);

// The batch step with prompt rows (engine/batch.h: a round of the batch, by default; not with
// G4_BATCH_PROMPT_ROWS=0): several rows may belong to one sequence, so a round's prompt tokens
// go through the same forward as the decode rows. Rows [0, n_logits) are each the LAST row of a
// distinct sequence and sample its next token into next[0..n_logits) (as g4_text_batch_step's
// rows); rows [n_logits, n) only store their k, v (a prompt's rows before its last, or a prompt
// chunk that does not end the prompt). A sequence given k rows takes positions n_past ..
// n_past + k - 1: its rows after n_logits in their order, then its row before n_logits (when it
// has one) last; its n_past advances by k. Every row's k, v is stored before any row's
// attention reads (qkv_prep_rows, then attention_rows), so a row of a prompt attends to the
// rows of the same prompt before it, as a prefill forward does. Needs the row-batched ops (not
// G4_BATCH_ROWS=0) when n_logits < n; the step runs op by op (no graph) then. n_logits == n:
// exactly g4_text_batch_step. Rows of text only (no soft tokens).
int g4_text_batch_step_rows(g4_text_state *s, g4_text_state *const *rows, const int32_t *ids, int n,
                            int n_logits, int32_t *next);

#endif
