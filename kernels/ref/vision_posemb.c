// vision_posemb.c: reference vision patch position embedding add (spec 4.2; HF
// Gemma4VisionPatchEmbedder._position_embeddings): h[i] += T[0][x_i] + T[1][y_i].
#include "base/base.h"
#include "kernels/ref/ref.h"

int ref_vision_posemb_add(float *h, const uint16_t *table, int table_rows, const int32_t *pos_xy,
                          int N, int D) {
    g4_ref_init();
    for (int i = 0; i < N; i++) {
        const int px = pos_xy[2 * i], py = pos_xy[2 * i + 1];
        if (px == -1 && py == -1) continue; // padding patch: HF adds a zero embedding
        if (px < 0 || py < 0 || px >= table_rows || py >= table_rows)
            return g4_fail(G4_EUSER,
                           "vision position embedding: patch %d at (%d, %d), expected "
                           "coordinates in [0, %d)",
                           i, px, py, table_rows);
        const uint16_t *tx = table + (size_t)px * D;
        const uint16_t *ty = table + ((size_t)table_rows + py) * D;
        for (int d = 0; d < D; d++) h[(size_t)i * D + d] += ref_h2f(tx[d]) + ref_h2f(ty[d]);
    }
    return G4_OK;
}
