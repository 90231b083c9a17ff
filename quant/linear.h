// linear.h: a linear layer's weight as the packages store it (fp16, or MatMulNBits Q4; bound
// from a package by quant/q4.h, run by a backend's linear op, kernels/ops.h).
#ifndef G4_LINEAR_H
#define G4_LINEAR_H

// y = x @ W for a linear weight stored as the packages store it (no bias unless given).
typedef enum {
    G4_W_F16 = 0, // fp16 [in, out] row-major: the package's "<name>.weight_t" layout
    G4_W_Q4 = 1,  // MatMulNBits 4-bit, block 32: q uint8 [out, in/32, 16] (element 2j in the low
                  // nibble of byte j), scales fp16 [out, in/32], zero points uint8
                  // [out, ceil(in/32/2)] (block 2j in the low nibble), w = (q - zp) * scale
} g4_weight_kind;

typedef struct {
    g4_weight_kind kind;
    int in, out;         // K, N
    int block;           // Q4 block size along K (32); 0 for fp16
    const void *w;       // fp16 [in, out] | Q4 q
    const void *scales;  // Q4 only
    const void *zp;      // Q4 only
    const void *bias;    // fp16 [out], or NULL
    const void *packed;  // backend-private repacked layout (CUDA), or NULL
    // ClippableLinear (vision/audio towers): y = clamp(clamp(x, in_lo, in_hi) @ W, out_lo, out_hi)
    // (x itself is left unchanged; a clipped linear never accumulates)
    int clipped;
    float in_lo, in_hi, out_lo, out_hi;
} g4_linear;

#endif
