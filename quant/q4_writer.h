// q4_writer.h: write a Q4 package from an fp16 one (what `g4cu quantize` runs).
//
// The decoder's linears become com.microsoft MatMulNBits exactly as Olive's
// OnnxKQuantQuantization writes them (olive/passes/onnx/kquant_quantization.py): every MatMul
// whose B is a 2-D initializer W [K, N] (the "*.weight_t" linears, lm_head included) is replaced,
// in place, by a node named "<old name>_Q4" with inputs [A, W_Q4, W_scales, W_zero_point],
// attributes K, N, bits = 4, block_size (no accuracy_level); its output is renamed
// "<old output>_Q4" (with every reader and value_info entry) unless it is a graph output; the
// three tensors are k-quantized (kquant.h) and appended to the initializers in node order (a
// weight read by several MatMuls is quantized once and shared); W is dropped once nothing reads
// it. The rest of the graph is left as it is: fields g4's onnx.proto subset does not name are
// carried through as protobuf-c unknown fields. Initializers are then laid out by onnx_ir's rule
// (ext_layout.h) into "<model>.data". The other components and the JSON files are copied (reflinked
// where the file system can), never hard-linked: an in-place edit of the Q4 package must not
// change the f16 one. The output directory appears only when complete: everything is written to
// "<out>.tmp-<pid>" beside it, reopened and checked, then renamed; a run that was killed leaves
// that directory, and the next run for the same output removes those whose process is gone.
#ifndef G4_Q4_WRITER_H
#define G4_Q4_WRITER_H

#include <stdint.h>
#include <stdio.h>

#include "loader/onnx_model.h"
#include "quant/methods.h"

// One weight's MatMulNBits arrays (q4.h layout), made before the write.
typedef struct {
    char *name; // "model.layers.0.mlp.up_proj.weight_t" (with or without the component prefix)
    int K, N;
    uint8_t *q;       // [N, kb, block/2]
    uint16_t *scales; // [N * kb] fp16
    uint8_t *zp;      // [N * ceil(kb/2)]
} g4_q4_arrays;
// New (uninitialised) arrays of a [K, N] weight at G4_Q4_BLOCK; name copied (NULL: none).
g4_q4_arrays g4_q4_arrays_new(const char *name, int K, int N);
void g4_q4_arrays_free(g4_q4_arrays *a); // frees the members, not a

// An fp16 initializer written with new bytes (`g4cu quantize --equalize`: a norm weight the
// equalization's 1/s is folded into, quant/equalize.h).
typedef struct {
    const char *name;     // matched as imp_names are (with or without the component prefix)
    const uint16_t *data; // [n] fp16
    int n;
    int fold; // 1: a fold target (a norm): its node's first output must be read by MatMuls only
} g4_q4_repl;

typedef struct {
    const char *const *keep; // glob patterns (fnmatch) on weight names: matching linears stay fp16;
    int n_keep;              //   a pattern matches the name with or without the component prefix
    int block;               // block size along K (G4_Q4_BLOCK = 32)
    int n_threads;           // quantizer threads (>= 1)
    FILE *progress;          // progress of the weights (base/progress.h; NULL: none)
    FILE *log;               // one-line notices (a stale temporary directory removed); NULL: none
    // activation-aware k-quant (kquant.h g4_q4_quantize_imx): the importance imp[i][K] of the
    // linear imp_names[i] (matched with or without the component prefix); others plain
    const char *const *imp_names;
    const float *const *imp;
    const float *const *imp_mean; // NULL, or imp_mean[i][K]: each channel's mean x (kquant.h
                                  // g4_q4_quantize_imx)
    int n_imp;
    // the method of the weights with neither an importance nor pre-made arrays: G4_QM_KQUANT
    // (0, the default) or G4_QM_RTN (methods.h)
    g4_qmethod method;
    // weights already quantized (gptq, fit: made from calibration runs before the write):
    // pre[i] is written for the weight pre[i].name (matched as imp_names); K and N must match
    const g4_q4_arrays *pre;
    int n_pre;
    // fp16 initializers replaced (g4_q4_repl): each must exist as fp16 of n elements and be read
    // by exactly one node (the exporter stores identical initializers once: a shared norm would
    // fold into another layer too), and a fold target's node's first output must be read by
    // MatMuls only (the linears the fold is for); else an error
    const g4_q4_repl *repl;
    int n_repl;
} g4_q4_write_opts;

typedef struct {
    int n_quantized;     // MatMul nodes turned into MatMulNBits
    int n_weights;       // distinct weights quantized
    int n_kept;          // MatMul nodes left fp16 by a --keep pattern
    int n_calibrated;    // distinct weights quantized with calibration data (an importance or
                         // pre-made arrays); the rest by o->method alone
    int n_replaced;      // fp16 initializers written with o->repl's bytes
    uint64_t data_bytes; // size of the written model's external data file
    char **names;        // [n_weights] quantized weight names (as in the file), for checks
} g4_q4_write_stats;

void g4_q4_write_stats_free(g4_q4_write_stats *st);

// Rewrites model src (opened from disk) into out_dir/out_name + out_dir/out_name.data.
int g4_q4_write_model(const g4_onnx_model *src, const char *out_dir, const char *out_name,
                      const g4_q4_write_opts *o, g4_q4_write_stats *st);

// Writes the Q4 package out_dir (which must not exist, nor lie inside pkg_dir) from the fp16
// package pkg_dir.
int g4_q4_write_package(const char *pkg_dir, const char *out_dir, const g4_q4_write_opts *o,
                        g4_q4_write_stats *st);

#endif
