// q4.h: the packages' INT4 linear weights (com.microsoft MatMulNBits, 4 bit, asymmetric, fp16
// scales, packed uint8 zero points): layout, binding from a package, scalar dequantization.
//
// The fp16 packages store a linear's weight as "<name>.weight_t", W [K = in, N = out], row-major.
// The "Q4_K_M" packages (Olive OnnxKQuantQuantization) replace it by three tensors, quantized per
// output column n in blocks of B consecutive k (B = block_size = 32; block b holds k = B*b ..
// B*b+B-1; a K that is not a multiple of B zero-pads its last block):
//
//   "<W>_Q4"          uint8 [N, kb, B/2]          kb = ceil(K / B)
//       row n:   | blob 0 (B/2 bytes) | blob 1 | ... | blob kb-1 |
//       blob b, byte j:    bit  7 6 5 4   3 2 1 0
//                              q[2j+1]     q[2j]      q[i] = code of W[B*b + i][n], 0..15
//
//   "<W>_scales"      fp16  [N * kb]              scale of block b of column n: [n * kb + b]
//
//   "<W>_zero_point"  uint8 [N * ceil(kb / 2)]    row n has ceil(kb/2) bytes:
//       byte j of row n:   bit  7 6 5 4   3 2 1 0
//                             zp[2j+1]    zp[2j]      zero point of block 2j+1 / 2j, 0..15;
//                                                     for odd kb the last high nibble is padding
//                                                     (Olive writes 8, the op's default zp)
//
//   W[k][n] = (q - zp) * scale,  b = k / B,  q = nibble k % B of blob b of row n
//            (low nibble of byte (k % B) / 2 when k is even, high nibble when k is odd)
//
// onnxruntime's own quantizer (neural_compressor k_quant / RTN path) writes the same bytes under
// other names ("<W>_Q4G32", "<W>_scale", "<W>_zp") with 2-D scales [N, kb] and zero points
// [N, ceil(kb/2)]; the op accepts both shapes and so do we. Sources: onnxruntime
// docs/ContribOperators.md (MatMulNBits); Olive olive/passes/onnx/kquant_quantization.py;
// ../shared/spec/onnx-package-format.md section 5.
#ifndef G4_Q4_H
#define G4_Q4_H

#include <stdint.h>

#include "loader/package.h"
#include "quant/linear.h"

// The one block size our kernels implement (checked at bind time, never assumed silently).
#define G4_Q4_BLOCK 32

// --- geometry and nibble helpers ----------------------------------------------------------------

// Blocks along K: ceil(K / block).
static inline int g4_q4_kblocks(int K, int block) {
    return (K + block - 1) / block;
}
// Bytes of one column's packed zero points: ceil(kb / 2).
static inline int g4_q4_zp_row_bytes(int kb) {
    return (kb + 1) / 2;
}

// Element i of a packed 4-bit array: low nibble of byte i/2 for even i, high nibble for odd i.
static inline int g4_q4_nibble(const uint8_t *p, uint64_t i) {
    return (p[i >> 1] >> ((i & 1) * 4)) & 15;
}
static inline void g4_q4_set_nibble(uint8_t *p, uint64_t i, int v) {
    const int sh = (int)(i & 1) * 4;
    p[i >> 1] = (uint8_t)((p[i >> 1] & ~(15 << sh)) | ((v & 15) << sh));
}

// Byte sizes / counts of the three tensors of a [K, N] weight.
typedef struct {
    int kb;            // blocks per column
    uint64_t q_bytes;  // N * kb * block/2
    uint64_t n_scales; // N * kb (fp16 each)
    uint64_t zp_bytes; // N * ceil(kb/2)
} g4_q4_shape;
g4_q4_shape g4_q4_shape_of(int K, int N, int block);

// codes[block] (0..15) -> blob[block/2]; and back.
void g4_q4_pack_block(const uint8_t *codes, int block, uint8_t *blob);
void g4_q4_unpack_block(const uint8_t *blob, int block, uint8_t *codes);
// One column's zero points zp[kb] (0..15) -> row[ceil(kb/2)]; odd kb pads the high nibble with 8.
void g4_q4_pack_zp_row(const uint8_t *zp, int kb, uint8_t *row);
void g4_q4_unpack_zp_row(const uint8_t *row, int kb, uint8_t *zp);

// --- binding ------------------------------------------------------------------------------------

// Binds the Q4 form of linear `weight_name` (its fp16 name, without the component prefix, e.g.
// "model.layers.0.mlp.up_proj.weight_t") from component c:
//   B = "<name>_Q4" (Olive) or "<name>_Q4G32" (onnxruntime's quantizer), found through
//   g4_component_find (so an identical copy stored once under another layer's name is found too);
//   the com.microsoft MatMulNBits node(s) reading B as input 1 (found by op type and inputs, never
//   by node name) give scales (input 2), zero points (input 3, optional: default 8), g_idx
//   (input 4: must be absent) and bias (input 5, optional, fp16 [N]);
//   attributes K and N (required; equal to the expected K, N unless those are <= 0), bits == 4,
//   block_size a power of two >= 16 and == G4_Q4_BLOCK (what the kernels support),
//   weight_prepacked 0; accuracy_level ignored. Every tensor's dtype and shape is checked.
// Fills out (kind G4_W_Q4) with pointers into the mapped package. Errors name the component file,
// the tensor or node, and what was expected.
int g4_q4_linear_get(const g4_component *c, const char *weight_name, int K, int N, g4_linear *out);

// A linear in either form: fp16 "<name>" [K, N] when present, else the Q4 form above (a package
// written with `g4cu quantize --keep` mixes both).
int g4_linear_get(const g4_component *c, const char *weight_name, int K, int N, g4_linear *out);

// --- scalar dequantization (the definition the kernels are tested against) ----------------------

// Column n of W (output feature n): col[K] = W[0..K-1][n].
void g4_q4_dequant_col(const g4_linear *w, int n, float *col);
// Row k of W (input feature k): row[N] = W[k][0..N-1].
void g4_q4_dequant_row(const g4_linear *w, int k, float *row);
// The whole weight: dst [K, N] row-major fp32 (the fp16 package's orientation).
void g4_q4_dequant(const g4_linear *w, float *dst);

#endif
