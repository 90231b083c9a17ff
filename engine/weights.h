// weights.h: the one weight binder of the text decoder and the towers: weights bound by name
// from a package component, checked (dtype, exact shape) and placed on a backend, with the
// ClippableLinear bounds of the towers; and the towers' hook type.
//
// A linear named "<base>" is the package's "<base>.weight_t" (fp16 [in, out]) or its Q4 form;
// a clipped linear also has the four scalars "<base>.input_min", ".input_max", ".output_min",
// ".output_max" (HF Gemma4ClippableLinear buffers: y = clamp(clamp(x, in) @ W, out)).
#ifndef G4_WEIGHTS_H
#define G4_WEIGHTS_H

#include "kernels/ops.h"
#include "loader/package.h"

// Called with every named intermediate of a tower forward (names in vision_tower.h /
// audio_tower.h); the buffer lives on the backend. Same signature as g4_text_hook.
typedef void (*g4_tower_hook)(void *ctx, const char *name, g4_backend *be, const g4_buf *b);

// Calls hook (if set) with "<name>_<l>" (l >= 0) or "<name>".
void g4_tower_emit(g4_tower_hook hook, void *ctx, g4_backend *be, const char *name, int l,
                   const g4_buf *b);

// A tower's activations kept between runs (issue 22: a run's device allocations and frees,
// cudaFree synchronizing, and its pageable input upload cost milliseconds on the H200): each
// buffer grows to the largest request so far and is freed with the tower. One run holds them
// at a time; a run that finds them busy (another thread's) gets its own for the call.
enum { G4_TOWER_WS_MAX = 24 };
typedef struct {
    g4_type type;
    int rows, cols;
} g4_ws_shape;
typedef struct {
    void *data[G4_TOWER_WS_MAX]; // backend memory
    size_t bytes[G4_TOWER_WS_MAX];
    void *host; // the input's upload staging: pinned where the backend maps host memory
    size_t host_bytes;
    int host_mapped;
    int busy; // 1 while a run holds them (__atomic_exchange_n)
} g4_tower_ws;

// Views out[i] of shape[i] (i < n) and host staging of host_bytes for one run: ws's buffers
// (grown where too small) or, when another run holds ws, those of *own (zeroed by the caller),
// allocated on be. Returns the workspace to hand to g4_tower_ws_done, NULL when be is out of
// memory (nothing then held; the caller reports it).
g4_tower_ws *g4_tower_ws_take(g4_backend *be, g4_tower_ws *ws, g4_tower_ws *own,
                              const g4_ws_shape *shape, int n, size_t host_bytes, g4_buf *out);
// Ends the run that took `used` (ws, or the own workspace, which is freed).
void g4_tower_ws_done(g4_backend *be, g4_tower_ws *ws, g4_tower_ws *used);
// Frees what ws holds (the tower's free).
void g4_tower_ws_free(g4_backend *be, g4_tower_ws *ws);

// A clipped linear and its package name (for reports and for tests that set other bounds).
typedef struct {
    char name[96]; // "<base>", e.g. "encoder.layers.0.self_attn.q_proj"
    g4_linear *lin;
} g4_named_linear;

// Binds weights of a component (g4_binder_component switches to another: the text model binds
// from the embedding and the decoder) and keeps what it allocated on the backend. A backend
// allocation that fails (out of memory) is counted in oom_bytes and leaves a NULL pointer; the
// model checks g4_binder_oom() once everything is bound.
typedef struct {
    g4_backend *be;
    const g4_component *c;
    void **owned; // backend allocations (uploads, aligned copies)
    int n_owned;
    g4_linear **prepared; // linears the backend laid out itself (prepare_linear), to release
    int n_prepared;
    uint64_t weight_bytes;    // bytes placed on the backend
    uint64_t oom_bytes;       // bytes that did not fit
    g4_named_linear *clipped; // the clipped linears bound so far, in binding order
    int n_clipped;
} g4_binder;

void g4_binder_init(g4_binder *b, g4_backend *be, const g4_component *c);
// Later binds read from component c.
void g4_binder_component(g4_binder *b, const g4_component *c);
// Releases the backend copies (prepared linears and allocations).
void g4_binder_free(g4_binder *b);
// G4_EUSER naming `what` when some weights did not fit on the backend, else G4_OK.
int g4_binder_oom(const g4_binder *b, const char *what);

// A backend allocation of `bytes` that g4_binder_free releases (NULL when out of memory).
void *g4_binder_alloc(g4_binder *b, size_t bytes);
// Host bytes placed on the backend (in place when the backend computes in host memory and the
// data is aligned to `align`, else a copy; NULL when out of memory).
const void *g4_binder_place(g4_binder *b, const void *data, size_t bytes, size_t align);

// An fp16 tensor `name` with exactly these dims, placed on the backend.
int g4_bind_f16(g4_binder *b, const char *name, int ndim, const int64_t *dims, const void **out);
// An fp16 vector [n].
int g4_bind_vec(g4_binder *b, const char *name, int64_t n, const void **out);
// Linear "<base>" [in, out] (see above), laid out by the backend's prepare_linear when it has
// one; clipped: the four bounds are required and recorded. bias_name: an fp16 [out] bias
// tensor, or NULL for the linear's own (a Q4 MatMulNBits node's bias input) if it has one.
int g4_bind_linear(g4_binder *b, const char *base, int in, int out, int clipped,
                   const char *bias_name, g4_linear *w);
// One linear [in, sum(outs)] whose output columns are those of linears bases[0 .. n) side by
// side (y = x @ [W0 | W1 | ...]; n <= G4_CAT_MAX), a new copy placed on the backend (the parts
// stay as bound). Each part is bound as g4_bind_linear binds it (errors name the tensor); when
// the parts differ in kind (fp16 / Q4) or block, or one has a bias, nothing is built: w stays
// zeroed (w->in == 0) and G4_OK is returned. A Q4 part without zero points takes the default 8.
enum { G4_CAT_MAX = 4 };
int g4_bind_linear_cat(g4_binder *b, const char *const *bases, int n, int in, const int *outs,
                       g4_linear *w);
// 1 when "<base>.input_min" exists (the export kept HF's clip buffers).
int g4_has_clip_bounds(const g4_component *c, const char *base);

#endif
