// quad_form.h: the quadratic forms x^T H x of a set of vectors under one symmetric K x K matrix
// (issue 33). The one place the layer-output error of a quantized linear is summed:
// e = sum_n d_n^T H d_n = ||X dW||^2 with H = X^T X and d_n a column of dW (methods.h
// g4_q4_out_err: GPTQ's held-out damping score and the equalize search), and the fidelity
// report's per-linear error (fidelity/linear_error.c: the reference columns w_n and every test
// package's d_n).
//
// Precision: the vectors, H's row sums and the totals are double (H's floats widened exactly).
// The damping search needs it: GPTQ leaves d in H's small directions, so d^T H d is a sum with
// cancellation and float row sums (the report's old kernel) could reorder a near tie.
#ifndef G4_QUANT_QUAD_FORM_H
#define G4_QUANT_QUAD_FORM_H

// Writes vector v (0 <= v < n) of the set into x[K]; tmp[K] is scratch of the calling thread.
typedef void (*g4_quad_vec_fn)(void *ctx, int v, double *x, float *tmp);

// out[v] = x_v^T H x_v for v < n, H [K, K] row-major floats, symmetric (only its upper triangle
// and diagonal are read). Vectors go G4_QUAD_LANES at a time through one pass over H's upper
// triangle (sum_a x_a (H_aa x_a + 2 sum_{b>a} H_ab x_b), two rows of H sharing each load of the
// vectors); groups of them run on g4_threads() threads. Each out[v] is computed the same way
// whatever its group or thread, so the values do not depend on the thread count. vec is called
// once per vector, from the worker threads (it must be safe to call concurrently).
// Errors (G4_EUSER): K < 1, n < 0, H, vec or out NULL with n > 0.
#define G4_QUAD_LANES 8
int g4_quad_forms(const float *H, int K, int n, g4_quad_vec_fn vec, void *ctx, double *out);

#endif
