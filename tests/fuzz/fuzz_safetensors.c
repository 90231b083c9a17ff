// fuzz_safetensors.c: libFuzzer target for the .safetensors header reader (fidelity/safetensors.h):
// parse, then read the last element of every tensor it accepted.
#include "fidelity/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    g4_safetensors *st;
    if (g4_safetensors_parse(data, size, "fuzz.safetensors", &st) != G4_OK) return 0;
    double sink = 0;
    for (int i = 0; i < st->n_tensors; i++)
        if (st->tensors[i].numel) sink += g4_tensor_get(&st->tensors[i], st->tensors[i].numel - 1);
    (void)sink;
    g4_safetensors_close(st);
    return 0;
}
