// capture.h: run a package's text model on token ids and keep every named intermediate on the
// host (the engine's hook names: "embeds", "per_layer_inputs", "q_<i>", "k_<i>", "v_<i>",
// "layer_<i>", "final_norm", "logits"), so two runs (f16 and Q4 packages) can be compared one
// after the other without holding both models in memory.
#ifndef G4_CAPTURE_H
#define G4_CAPTURE_H

#include <stdint.h>

#include "kernels/ops.h"

typedef struct {
    char *name;
    int rows, cols; // as the engine's buffer: [T, width]
    float *data;    // host float32 [rows, cols]
} g4_capture_item;

typedef struct {
    g4_capture_item *items; // in the order the forward produced them
    int n, cap;
    int vocab;    // the text model's vocabulary (logits width)
    int n_layers; // decoder layers
    int hidden;   // text width
} g4_capture;

// Opens pkg_dir, loads its text model on be, runs one teacher-forced prefill of ids[n] and
// records every intermediate; the model and package are closed before returning. Errors name
// the package, tensor or value.
int g4_capture_run(const char *pkg_dir, g4_backend *be, const int32_t *ids, int n, g4_capture *out);
// The item called name, or NULL.
const g4_capture_item *g4_capture_find(const g4_capture *c, const char *name);
void g4_capture_free(g4_capture *c);

#endif
