// text_model.h: the Gemma-4 text model (embedding + PLE + decoder) on a backend.
//
// g4_text_model holds the weights bound by name from a package (immutable after load); a
// g4_text_state holds everything one request mutates: the KV cache, the activations (allocated
// once, for at most max_tokens rows per call) and the position. Several states may share one
// model. Every forward goes through the op table of kernels/ops.h, so the same code runs on the
// CPU reference backend and on CUDA.
#ifndef G4_TEXT_MODEL_H
#define G4_TEXT_MODEL_H

#include "kernels/ops.h"
#include "loader/package.h"

typedef struct {
    g4_linear q;            // [H, heads*hd]
    g4_linear k, v;         // [H, kv*hd] (only layers that own a KV cache)
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
    void *ple_mapped;           // the same table in pinned host memory (be->ple_host), or NULL
    g4_linear ple_model_proj;   // [H, L*P]
    const void *ple_proj_norm;  // fp16 [P]
    g4_text_layer *layers;      // [L]
    const void *final_norm;     // fp16 [H]
    g4_linear lm_head;          // [H, V]
    const float *inv_freq[G4_MAX_ROPE]; // backend memory, [head_dim/2] per rope table
    uint64_t weight_bytes;      // bytes of weights placed on the backend
    uint64_t host_bytes;        // bytes of weights the backend reads from pinned host memory
    uint64_t oom_bytes;         // bytes that did not fit (load fails when non-zero)
    void **owned;               // backend allocations (uploads, aligned copies)
    int n_owned;
} g4_text_model;

// Called with every named intermediate of a forward (for layer-by-layer comparison). Names
// match the reference dumps: "embeds", "per_layer_inputs" [T, L*P], "layer_<i>", "q_<i>",
// "k_<i>", "v_<i>" (q/k after norm + RoPE, v after its norm), "final_norm", "logits". The
// buffer lives on the backend (download before reading).
typedef void (*g4_text_hook)(void *ctx, const char *name, g4_backend *be, const g4_buf *b);

typedef struct g4_text_state {
    g4_text_model *m;
    g4_backend *be;
    int capacity;   // KV rows (context length of this state)
    int max_tokens; // rows per forward call
    int n_past;     // tokens already in the KV cache
    g4_buf *kc, *vc; // [n_kv_layers] caches [capacity, kv*hd]
    // activations, [max_tokens, ...]; used as [T, ...] views
    g4_buf h;      // F32 [T, H] residual stream
    g4_buf x;      // act [T, H] normed input of a sublayer
    g4_buf q;      // act [T, heads*hd_max]
    g4_buf k, v;   // act [T, kv*hd_max]
    g4_buf attn;   // act [T, heads*hd_max]
    g4_buf o;      // act [T, H] sublayer output before its post-norm
    g4_buf mlp;    // act [T, ffn_max]
    g4_buf ple;    // act [T, L*P] per-layer inputs
    g4_buf pg;     // act [T, P]
    g4_buf ids;    // I32 [T]
    g4_buf pos;    // I32 [T]
    g4_buf logits; // F32 [T, V]
    g4_text_hook hook;
    void *hook_ctx;
    void *graph;     // captured greedy decode step (backends with graphs), or NULL
    int eager_steps; // greedy steps run before capture (the first sizes the workspaces)
} g4_text_state;

// Binds every text weight of pkg (fp16 or Q4) and places it on be. Errors name the tensor.
int g4_text_model_load(const g4_package *pkg, g4_backend *be, g4_text_model **out);
void g4_text_model_free(g4_text_model *m);

// A request state with a KV cache of `capacity` rows and room for max_tokens rows per call.
int g4_text_state_new(g4_text_model *m, int capacity, int max_tokens, g4_text_state **out);
void g4_text_state_free(g4_text_state *s);
static inline void g4_text_state_reset(g4_text_state *s) { s->n_past = 0; }

// Soft tokens (image/audio features already projected to the text width) that replace the
// placeholder ids' embedding rows, in order of appearance.
typedef struct {
    const float *rows; // host float [n, H]
    int n;
} g4_soft_tokens;

// Runs T tokens at positions n_past .. n_past+T-1 (T <= max_tokens, n_past + T <= capacity).
// Writes logits to logits_out (host, [T, V] when all_logits, else the last row [V]) if not
// NULL; advances n_past. Placeholder ids (the config's image/audio token ids) take their
// embedding rows from soft (which must hold exactly that many rows).
int g4_text_forward(g4_text_state *s, const int32_t *ids, int T, const g4_soft_tokens *soft,
                    float *logits_out, int all_logits);

// One greedy decode step: feeds `id` at position n_past and returns the argmax of the soft-capped
// logits in *next. On backends with graphs (CUDA) the whole step is captured once and replayed
// (ids and position staged in device buffers; only 4 bytes come back). Not with a hook set.
int g4_text_decode_greedy(g4_text_state *s, int32_t id, int32_t *next);

#endif
