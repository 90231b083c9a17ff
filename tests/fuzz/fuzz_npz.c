// fuzz_npz.c: libFuzzer target for the .npz (zip + zlib) and .npy readers of fidelity/npy.h: parse
// the archive, then inflate and parse every member; the input is also tried as a bare .npy.
#include <stdlib.h>

#include "fidelity/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    g4_npz *z;
    if (g4_npz_parse(data, size, "fuzz.npz", &z) == G4_OK) {
        for (int i = 0; i < g4_npz_count(z); i++) {
            const g4_array *a;
            if (g4_npz_get_index(z, i, &a) == G4_OK && a->numel) {
                float f;
                g4_tensor t = g4_array_view(a);
                f = (float)g4_tensor_get(&t, a->numel - 1);
                (void)f;
            }
        }
        g4_npz_close(z);
    }
    g4_array a;
    if (g4_npy_parse(data, size, "fuzz.npy", "fuzz", &a) == G4_OK) g4_array_free(&a);
    return 0;
}
