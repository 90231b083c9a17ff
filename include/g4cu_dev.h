// g4cu_dev.h: the developer part of the public C API (libg4cu.so, beside include/g4cu.h):
// checking a port or a quantization: the package's tensor table, the front ends' features,
// quantizing, layer-by-layer comparison against HF dumps, benchmarks. These are what the
// `g4cu inspect`, `features`, `quantize`, `compare` and `bench` commands run: each command
// parses its options into a params struct (with a _default() function) and makes one call.
//
// Errors as in g4cu.h: G4CU_OK, G4CU_EUSER (bad input, named in the message) or G4CU_EINTERNAL,
// one line for g4cu_last_error(). A verdict (inconsistencies found, a comparison over its
// tolerance) is not an error: it comes back in an out parameter.
//
// Printing: the library never writes to stdout or stderr by itself. Each call that reports
// takes the FILE *s to write to (the command passes stdout for its report and stderr for
// progress); the text written is the command's output, byte for byte.
#ifndef G4CU_DEV_H
#define G4CU_DEV_H

#include <g4cu.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

// --- inspect: the package's tensor table and derived config ----------------------------------
typedef struct {
    const char *tensor; // NULL: the whole package; else that tensor's details and statistics
    int summary;        // 1: components and totals only (no tensor tables)
    int json;           // 1: one JSON object instead of text (below)
} g4cu_dev_inspect_params;
// The JSON object, one line:
//   package, model_type, components: {name: null | {onnx, producer, ir_version, nodes,
//     initializers, external_initializers, constants, external_bytes, inline_bytes,
//     dtypes: {dtype: {count, bytes}}, inputs: [{name, dtype, shape: [int | "symbol"]}],
//     outputs: [name], tensors (not with summary): [{name, dtype, shape, nbytes, location?,
//     offset?}]}},
//   text: the derived decoder config (per_layer: [...], rope: [...]), image_processor, vision,
//   audio_features, audio (absent when the package has none), issues: [string], consistent.
// With tensor: {name, component, dtype, shape, numel, nbytes, external, location?, offset?,
//   packed_4bit, stats?: {finite, nan, inf, min, max, mean, abs_mean}}.
void g4cu_dev_inspect_params_default(g4cu_dev_inspect_params *p); // all off

// Opens the package in dir (which validates every tensor and cross-checks the configs), reads
// every weight for NaN/Inf and writes what it holds to out: the components, dtypes, inputs,
// outputs, tensor tables, the derived text/vision/audio configs, then the inconsistencies that
// do not stop opening (overlapping data, non-finite weights). *n_issues: how many of those
// (0 with p->tensor; n_issues may be NULL). p NULL: the defaults. Errors: a package that does
// not open, a tensor not found (G4CU_EUSER).
int g4cu_dev_inspect(const char *dir, const g4cu_dev_inspect_params *p, FILE *out, int *n_issues);

// --- features: the front ends' output ----------------------------------------------------------
typedef struct {
    const char *image; // an image file (PNG, JPEG): the vision front end
    const char *audio; // or a sound file: the audio front end (exactly one of the two)
    const char *out;   // NULL: none; else also writes what the tower would get, as .npy:
                       // image: pixel_values float32 [patches, patch_dim] and
                       // <out>.positions.npy int32 [patches, 2] (x = column, y = row);
                       // audio: input_features float32 [frames, n_mel] and <out>.mask.npy
                       // int32 [frames] (<out> less a trailing ".npy")
} g4cu_dev_features_params;
void g4cu_dev_features_params_default(g4cu_dev_features_params *p); // none set

// Runs the front end of the package in dir (its image_processor.json or
// audio_feature_extraction.json) on the file and writes to out the input and output shapes and
// the soft-token count (and the files written). Errors: not exactly one of image and audio, a
// package without that processor, a file that does not decode, an output that cannot be written
// (all G4CU_EUSER).
int g4cu_dev_features(const char *dir, const g4cu_dev_features_params *p, FILE *out);

// --- quantize: a Q4 package from an fp16 one (as llama_model_quantize) -----------------------
typedef struct {
    const char *const *keep;   // glob patterns (fnmatch) on weight names: matching linears stay
    int n_keep;                // fp16 (with or without the component prefix); default none
    long long keep_auto_bytes; // >= 0: also keep fp16 the linears whose 4 bits cost the most KL
                               // per byte, within this many more bytes of decoder data than the
                               // all-Q4 package (needs calib); -1 (default): off
    int imatrix;               // 1: activation-aware k-quant from calib (default 0); the same
                               // as method "imatrix"
    const char *method;        // "kquant" (NULL, the default: byte-identical to onnxruntime's
                               // k-quant), "rtn", "imatrix", "gptq", "fit" or "gptq_imx" (README:
                               // quantize methods); all but kquant and rtn need calib
    int gptq_act_order;        // gptq, gptq_imx: visit input channels by decreasing X^T X
                               // diagonal (0)
    int equalize;              // 1: activation-aware equalization before the method (AWQ-style,
                               // quant/equalize.h): per group of linears sharing an input
                               // (q|k|v, gate|up, down, lm_head) input-channel scales folded
                               // exactly into the norm (down: up's output columns), alpha searched
                               // per group; needs calib; not with keep / keep_auto_bytes (0)
    const char *calib;         // calibration text file (its first 64 KiB, or 16 bytes a
                               // calibration token where that is more) for the above
    const char *tokenizer;     // tokenizer.json for calib (NULL: the package's)
    int calib_tokens;          // calibration tokens, <bos> first, 8 to 2^20, used by every
                               // run; 0 (default): each run's own: 16,384 for the imatrix /
                               // X^T X runs (methods imatrix, gptq, fit, gptq_imx; equalize),
                               // 256 for keep_auto_bytes' sensitivity ranking (both given: the
                               // ranking on the first 256 of the 16,384); a text with fewer
                               // gives all it has (the report says so)
    int calib_ctx;             // imatrix, gptq, fit, gptq_imx, equalize: the calibration tokens
                               // run as windows of this many, each a fresh sequence with <bos>
                               // first (8 to 2^20; at least the tokens: one sequence); 0
                               // (default): windows of 512 (the sensitivity ranking: always
                               // one sequence)
    const char *backend;       // the calibration runs' backend, "cpu" or "cuda" (default "cpu")
    int n_threads;             // quantizer and sensitivity threads (0: the CPU backend's)
    FILE *progress;            // progress bars and one-line notices (NULL, the default: none)
} g4cu_dev_quantize_params;
void g4cu_dev_quantize_params_default(g4cu_dev_quantize_params *p);

// k-quants the decoder's linears of the fp16 package in into the Q4 (MatMulNBits) package out
// (which must not exist nor lie inside in; it is written to out.tmp-<pid> and renamed when
// complete, stale temporaries of dead processes removed; unchanged files copied or reflinked).
// Writes to report the linears keep_auto_bytes picked (name, KL, bytes, "sensitivity on N
// tokens"), the calibration line of the method (imatrix: "importance of N linears", gptq / fit /
// gptq_imx: "X^T X of N linears", each "from T tokens in windows of W" or "in one sequence",
// with "(all the text gives: fewer than the default 16384)" where the text ran out), the
// summary (linears quantized, weights, kept, decoder bytes) and, for a calibrated method,
// "calibrated: N of M weights". p NULL: the defaults. Errors: a package that does not open, an
// existing out, a calibration text with under 8 tokens, an unknown method, calib given without
// keep_auto_bytes or a calibrated method or the other way, gptq_act_order without gptq or
// gptq_imx, calib_tokens or calib_ctx out of range, calib_ctx without a calibrated method
// (G4CU_EUSER).
int g4cu_dev_quantize(const char *in, const char *out, const g4cu_dev_quantize_params *p,
                      FILE *report);

// --- compare: layer-by-layer agreement reports (fidelity/report.h) ---------------------------
typedef enum {
    // g4cu_dev_compare(PKG, REF.npz): runs the package on the HF dump's input_ids and compares
    // every intermediate the dump holds (embeddings, per-layer inputs, q/k/v, each layer's
    // output, final norm, logits) by name, each against a named tolerance (the backend's, or
    // tol_from's); passes when every tensor is within it and none is missing. With an image
    // or audio in the prompt, each per-token tensor is also reported on its text, image and
    // audio rows (information: the verdict stays the whole tensor's).
    G4CU_DEV_COMPARE_DUMP = 0,
    // g4cu_dev_compare(PKG_REF, PKG_TEST): one model in two precisions on the same ids, one
    // after the other; per tensor rel err, cosine, max abs err; the logits' KL(p_ref || p_test)
    // per position and top-1 agreement. Passes when both runs are finite with the same shapes
    // (and, with max_kl >= 0, the mean KL is at most max_kl).
    G4CU_DEV_COMPARE_PACKAGES = 1,
    // g4cu_dev_compare(PKG_F16, NULL): each decoder linear k-quantized to 4 bits alone, in
    // memory, ranked by the KL it causes (top, layers, only filter them). Always passes.
    G4CU_DEV_COMPARE_SENSITIVITY = 2,
    // g4cu_dev_compare(PKG_F16, NULL) with tests[n_tests]: which linears each quantization
    // helps (fidelity/linear_error.h): for every decoder linear of every test package (the same
    // model, Q4 by some method, some linears perhaps kept fp16), its relative layer-output error
    // e = tr(dW^T H dW) / tr(W^T H W), H = X^T X of the reference's inputs on calib_tokens
    // tokens of calib; ratios against tests[0]; summaries by kind and by layer. md, json, svg,
    // tsv and svg_kind write the tables and charts. Always passes.
    G4CU_DEV_COMPARE_LINEAR_ERROR = 3,
} g4cu_dev_compare_mode;

typedef struct {
    g4cu_dev_compare_mode mode; // default G4CU_DEV_COMPARE_DUMP
    const char *backend;        // "cpu" (default) or "cuda"
    const int32_t *ids;         // packages / sensitivity: the input ids[n_ids] (copied) ...
    int n_ids;
    const char *prompt;          // ... or a text, <bos> first (not both)
    const char *tokenizer;       // prompt's tokenizer.json or a directory holding one (NULL: the
                                 // first package's)
    const char *tol_from;        // dump: per-tensor tolerances from an HF lower-precision dump
    const char *md, *json, *svg; // reports also written (NULL: none); checked before the run
    double max_kl;               // packages: the KL gate (< 0, the default: none)
    int top;                     // sensitivity: only the first `top` linears in pass 3 (0: all)
    const int *layers;           // sensitivity: only linears in these layers (none: all) ...
    int n_layers;
    const char *const *only; // ... or matching one of these globs (fnmatch; none: all)
    int n_only;
    int n_threads;  // sensitivity quantizer threads (0: the CPU backend's)
    FILE *progress; // progress of the forwards (NULL, the default: none)
    // linear error: the test packages (1 to 64; tests[0] the baseline of the ratios), the
    // calibration text (its first calib_tokens tokens, <bos> first, 8 to 2^20, default 256, as
    // g4cu_dev_quantize reads it; tokenizer as above), a TSV table and a per-kind SVG (NULL:
    // none)
    const char *const *tests;
    int n_tests;
    const char *calib;
    int calib_tokens;
    const char *tsv, *svg_kind;
} g4cu_dev_compare_params;
void g4cu_dev_compare_params_default(g4cu_dev_compare_params *p);

// Runs the comparison p->mode names on a and b (above) and writes its report (the table, the
// KL summary, the verdict line) to report; *pass: 1 when it passed, else 0 (pass may be NULL).
// p is needed (the mode).
// Errors: a package or dump that does not open, different models, bad ids or prompt, options of
// another mode, an unwritable report file (all G4CU_EUSER).
int g4cu_dev_compare(const char *a, const char *b, const g4cu_dev_compare_params *p, FILE *report,
                     int *pass);

// --- bench: the model and the kernels ----------------------------------------------------------
typedef struct {
    const char *backend;   // "cuda" (default) or "cpu"
    int ple_host;          // 1: load with the per-layer embedding table in pinned host memory
                           // (CUDA only); default 0
    int reps;              // repetitions of each measurement, 1 to 100000 (default 20)
    const char *json;      // NULL: none; else the results as JSON, keyed "f16" / "q4" by the
                           // decoder's weights (a repeated kind "_2", "_3")
    const char *format;    // NULL: none; "md", "csv" or "json": a table of every measurement's
                           // mean and sample sd over the reps, written to `table`
    const char *hf_dir;    // NULL: no peer; else HF transformers is timed on this checkpoint
                           // too (tools/python/bench_hf.py, run without a shell) and the
                           // ratios written; the peer is checked before the benchmark
    const char *hf_script; // the peer script (NULL: bench_hf.py found from the binary:
                           // <exe dir>/../tools/python/, then <exe dir>/../share/g4cu/python/);
                           // the interpreter: $G4_PYTHON, else python3 on PATH
    FILE *progress;        // each measurement's line as it is measured (NULL, the default:
                           // none): a CPU run takes minutes before its summary line
    const char *filter;    // NULL (the default): every measurement; else only the rows whose
                           // test name contains it ("pp128": pp128, tg128 @ pp128, ttft pp128,
                           // ...), and only the measurements that make such a row; the others
                           // are -1 in the json and left out of the summary line. Not with hf_dir
    const char *batch_rows; // NULL (the default): the rows above; else a list "N[,N...]" (1 to
                            // 4096 each): instead of them, for each N, N sequences each with a
                            // 128-token prompt of its own decoded together for 128 greedy steps
                            // (the continuous-batching step, engine/batch.h's decode: N = 1 is
                            // the one-state step): step ms, per-stream and total tok/s (medians
                            // of reps runs after a warm-up), in the json as "batch_rows". Not
                            // with hf_dir or filter
} g4cu_dev_bench_params;
void g4cu_dev_bench_params_default(g4cu_dev_bench_params *p);

// Benchmarks each of the packages pkgs[0, n_pkgs) (1 to 4) on the backend: prefill tok/s at
// 128, 512, 2048 tokens (and longer where the context allows), time to first token, greedy and
// sampled decode through the path `g4cu generate` runs, decode after long prompts, the vision
// and audio towers, the PLE table in host memory. Medians of reps runs after a warm-up (ms and
// tok/s); writes one line per package (and "wrote F") to out, the -o table to table. The
// child's own messages (the HF peer) go to the process's stderr. p NULL: the defaults.
// Errors: a package that does not open, ple_host without a GPU backend, an unwritable json,
// a peer that does not start or fails (G4CU_EUSER).
int g4cu_dev_bench_model(const char *const *pkgs, int n_pkgs, const g4cu_dev_bench_params *p,
                         FILE *out, FILE *table);

typedef struct {
    const char *filter; // only the kernels whose op or shape contains it (NULL: all)
    int reps;           // timed graph replays of each (median), 1 to 100000 (default 20)
    const char *json;   // NULL: none; else the rows as a JSON array (written atomically)
    FILE *progress;     // a progress bar over the areas (NULL, the default: none)
} g4cu_dev_bench_kernels_params;
void g4cu_dev_bench_kernels_params_default(g4cu_dev_bench_kernels_params *p);

// The CUDA devices usable now (0: none, and *why, when why is not NULL, says why: a static
// string; NULL when there are devices).
int g4cu_dev_cuda_device_count(const char **why);
// Writes the CUDA runtime the library was built with and, for cuBLAS and cuDNN (the kernel
// bench's baselines, loaded on first use: a CPU run never maps them), the headers' version and
// the loaded library's with where it was found, or why it could not be loaded; one line each
// ("CUDA: none ..." in a build without CUDA). Errors: out NULL (G4CU_EUSER).
int g4cu_dev_gpu_libraries(FILE *out);
// Times our kernels (GEMM, attention, the other ops, convolutions) against the H200's copy and
// bf16 ceilings and their cuBLAS/cuDNN baselines; writes the device line, the ceilings and
// each area's table (ms, GB/s, % of copy, TFLOP/s, % of peak, baseline ms and ratio) to out.
// p NULL: the defaults. Errors: no usable CUDA device (G4CU_EINTERNAL), an unwritable json
// (G4CU_EUSER).
int g4cu_dev_bench_kernels(const g4cu_dev_bench_kernels_params *p, FILE *out);
// The persistent step skeleton's CPU cost model (no GPU): its calibration, model against the
// session-30 H100 rows and timeline, the predicted step of the bench's plans and, with grid, the
// best `top` plan options of a grid (~30 s), for Q4 and f16. Errors: out NULL, top < 1
// (G4CU_EUSER).
int g4cu_dev_step_model(FILE *out, int grid, int top);

#ifdef __cplusplus
}
#endif

#endif
