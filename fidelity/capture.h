// capture.h: run a package's text model on token ids and keep every named intermediate on the
// host (the engine's hook names: "embeds", "per_layer_inputs", "q_<i>", "k_<i>", "v_<i>",
// "layer_<i>", "final_norm", "logits"), so two runs (f16 and Q4 packages) can be compared one
// after the other without holding both models in memory.
#ifndef G4_CAPTURE_H
#define G4_CAPTURE_H

#include <stdint.h>

#include "fidelity/compare.h"
#include "kernels/ops.h"
#include "loader/model_config.h"

typedef struct {
    char *name;
    int rows, cols; // as the engine's buffer: [T, width]
    float *data;    // host float32 [rows, cols]
    int *pos;       // a per-token tensor (the text model's forward, one row a prompt position:
                    // embeddings, per-layer inputs, q/k/v, layers, final norm, logits): the
                    // position of each row [rows] (a dump's row subset keeps its own); NULL
                    // for anything else (the towers' tensors, logits_argmax: ids, judged apart)
} g4_capture_item;

typedef struct {
    g4_capture_item *items; // in the order the forward produced them
    int n, cap;
    int vocab;           // the text model's vocabulary (logits width)
    int n_layers;        // decoder layers
    int hidden;          // text width
    int n_tokens;        // the prompt's positions (the forward's tokens)
    unsigned char *span; // [n_tokens] each position's G4_SPAN_* kind, from the ids the forward
                         // took (the config's placeholder ids, as the engine maps soft tokens);
                         // NULL when the prompt has no image or audio soft token
} g4_capture;

// Opens pkg_dir, loads its text model on be, runs one teacher-forced prefill of ids[n] and
// records every intermediate; the model and package are closed before returning. Errors name
// the package, tensor or value.
int g4_capture_run(const char *pkg_dir, g4_backend *be, const int32_t *ids, int n, g4_capture *out);
// After a forward of ids[n] that added items first.. c->n: marks those with n rows per-token
// (pos = 0..n-1), sets n_tokens and, when ids hold placeholders (g4_placeholder_of), span.
void g4_capture_mark_tokens(g4_capture *c, int first, const g4_text_config *cfg, const int32_t *ids,
                            int n);
// The item called name, or NULL.
const g4_capture_item *g4_capture_find(const g4_capture *c, const char *name);
void g4_capture_free(g4_capture *c);

#endif
