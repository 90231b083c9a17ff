// fuzz_onnx.c: libFuzzer target for the ONNX protobuf parser and tensor-table validation.
// External locations resolve against a directory that does not exist, so every external
// tensor must fail cleanly; inline tensors are validated and read.
#include "loader/onnx_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    g4_onnx_model *m = NULL;
    if (g4_onnx_parse(data, size, "fuzz.onnx", "/nonexistent-g4-fuzz", &m) == G4_OK) {
        volatile double sink = 0;
        for (int i = 0; i < m->n_tensors; i++) {
            const g4_tensor *t = &m->tensors[i];
            if (t->numel && t->dtype != G4_DT_UINT4 && t->dtype != G4_DT_INT4)
                sink += g4_tensor_get(t, t->numel - 1);
        }
        for (int i = 0; i < m->n_nodes; i++)
            for (int k = 0; k < m->nodes[i].n_inputs; k++) {
                const g4_node *c[2];
                g4_onnx_consumers(m, m->nodes[i].inputs[k], c, 2);
                g4_onnx_producer(m, m->nodes[i].inputs[k]);
            }
        (void)sink;
        g4_onnx_close(m);
    }
    return 0;
}
