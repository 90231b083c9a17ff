// g4cu quantize PKG_F16 OUT [--keep PATTERN]... [--threads N]
//                [--keep-auto BYTES --calib TEXT [--tokenizer F] [--calib-tokens N]
//                 [--backend cpu|cuda]] [--method kquant|rtn|imatrix|gptq|fit|gptq_imx
//                 [--act-order] [--calib-ctx N]] [--imatrix --calib TEXT] [--equalize]:
// quantize the decoder's linears into a Q4 (MatMulNBits) package; by default k-quant, the way
// Olive made the published "Q4_K_M" packages (byte-identical). OUT must not exist; it appears
// only when complete.
// --keep-auto BYTES also keeps fp16 the linears whose 4 bits cost the most KL per byte, within
// BYTES more decoder data than the all-Q4 package: a sensitivity run (on --backend, default cpu)
// on the first --calib-tokens (default 256) tokens of TEXT (<bos> first; the package's
// tokenizer.json unless --tokenizer) ranks them. The chosen names are printed.
// --imatrix: the activation-aware k-quant (llama.cpp's imatrix): one forward of the calibration
// tokens measures the mean x^2 and mean x of every linear's input channels, and a second (X^T X)
// the 32 leading directions of their covariance where the tokens are at least 4 K
// (G4_IMATRIX_RANK: r for every linear, 0: none), which weigh each
// block's search for its stored scale / zero point; the package is still plain MatMulNBits,
// the same bytes in size.
// --method: how each block's scale, zero point and codes are chosen (quant/methods.h): kquant,
// rtn (round-to-nearest), imatrix (= --imatrix), gptq (from each linear's X^T X on --calib;
// --act-order), fit (each block's scale and zero point against the layer-output error on
// --calib). Every method writes the same layout and size.
// --equalize: activation-aware equalization before the method (quant/equalize.h): per group of
// linears sharing an input, each input channel's weights scaled by s and the 1/s folded into
// the norm that makes the input (down_proj: into up_proj's output columns), alpha of
// s = rms^alpha searched per group against the method's layer-output error on --calib.
// --calib-tokens N / --calib-ctx N, when not given, follow the run (g4cu_dev.h calib_tokens):
// the imatrix / X^T X runs (--method imatrix, gptq, fit, gptq_imx; --imatrix; --equalize) read
// 16,384 tokens as windows of 512 (each a fresh sequence, <bos> first, as perplexity's chunks;
// N at least the tokens: one sequence), the --keep-auto ranking 256 tokens; given, every run
// uses them. The report prints the tokens and windows used.
// OUT must not lie inside PKG_F16. The work goes to OUT.tmp-<pid> beside it; a run that is
// killed leaves that directory, and the next quantize to the same OUT removes those whose process
// is gone. Unchanged files are copied (reflinked where the file system can), never hard-linked.
// On the public C API (include/g4cu_dev.h: g4cu_dev_quantize).
// SIGINT / SIGTERM mid-run remove OUT.tmp-<pid> before the process ends (see stop_main).
#include <ftw.h>
#include <g4cu_dev.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/parallel.h"
#include "tools/cli.h"

// --- an interrupted run leaves nothing ------------------------------------------------------
// SIGINT and SIGTERM are blocked in every thread (the quantizer's are made after) and taken by
// one thread with sigwait, so the removal runs as ordinary code, not in a signal handler. The
// main thread, should the run fail under it (its files vanishing), waits for that thread
// instead of exiting first; the signal then ends the process as it would have (a shell sees the
// SIGINT). A signal after the rename leaves the complete OUT.
static sigset_t stop_sigs;
static char *stop_work_dir;   // OUT.tmp-<pid>: where g4cu_dev_quantize works (g4cu_dev.h)
static atomic_int stop_taken; // the signal being handled, 0 while none

static int stop_rm(const char *path, const struct stat *st, int flag, struct FTW *f) {
    (void)st;
    (void)f;
    (flag == FTW_DP ? rmdir : unlink)(path); // (an entry that vanished under us is fine)
    return 0;
}

static void *stop_main(void *arg) {
    (void)arg;
    int sig;
    if (sigwait(&stop_sigs, &sig)) return NULL;
    atomic_store(&stop_taken, sig);
    // Again while it is there: the writer may add a file between the walk and the rmdir.
    for (int i = 0; i < 100 && access(stop_work_dir, F_OK) == 0; i++)
        nftw(stop_work_dir, stop_rm, 16, FTW_DEPTH | FTW_PHYS);
    const int left = access(stop_work_dir, F_OK) == 0;
    fprintf(stderr, "g4cu: quantize: %s: %s %s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
            left ? "could not remove" : "stopped; no output written, removed", stop_work_dir);
    signal(sig, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &stop_sigs, NULL);
    raise(sig);
    _exit(128 + sig); // (not reached)
}

// Starts the thread that takes SIGINT / SIGTERM for the run writing out (none when the parent
// ignores both); 0 when it cannot.
static int stop_start(const char *out) {
    char *o = g4_strdup(out);
    for (size_t n = strlen(o); n > 1 && o[n - 1] == '/'; n--) o[n - 1] = 0; // as the writer does
    stop_work_dir = g4_sprintf("%s.tmp-%ld", o, (long)getpid());
    free(o);
    sigemptyset(&stop_sigs);
    for (int sig = SIGINT; sig; sig = sig == SIGINT ? SIGTERM : 0) {
        struct sigaction now;
        // one ignored by the parent (a shell's background job) stays ignored
        if (sigaction(sig, NULL, &now) == 0 && now.sa_handler != SIG_IGN)
            sigaddset(&stop_sigs, sig);
    }
    if (!sigismember(&stop_sigs, SIGINT) && !sigismember(&stop_sigs, SIGTERM)) return 1;
    pthread_t t;
    if (pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL) || pthread_create(&t, NULL, stop_main, NULL)) {
        pthread_sigmask(SIG_UNBLOCK, &stop_sigs, NULL);
        return 0;
    }
    pthread_detach(t);
    return 1;
}

static int cmd_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *calib = NULL, *tok_path = NULL, *backend = "cpu";
    long long auto_bytes = -1, calib_tokens = 0, calib_ctx = 0; // 0: not given (the defaults)
    int use_imatrix = 0, act_order = 0, equalize = 0;
    const char *method = NULL;
    g4cu_dev_quantize_params qp;
    g4cu_dev_quantize_params_default(&qp);
    const char **keep = g4_calloc((size_t)argc, sizeof(char *));
    int n_keep = 0;
    const int threads = g4_threads(); // --threads N, G4_THREADS (tools/cli_global.c)
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--keep")) {
            if (++i >= argc) {
                free(keep);
                return g4_cli_usage_error("quantize", "--keep needs a pattern");
            }
            keep[n_keep++] = argv[i];
        } else if (!strcmp(argv[i], "--keep-auto") || !strcmp(argv[i], "--calib-tokens")) {
            int is_auto = !strcmp(argv[i], "--keep-auto");
            if (!g4_cli_int("quantize", argv[i], i + 1 < argc ? argv[i + 1] : NULL, is_auto ? 0 : 8,
                            is_auto ? (1ll << 50) : (1 << 20),
                            is_auto ? &auto_bytes : &calib_tokens)) {
                free(keep);
                return 1;
            }
            i++;
        } else if ((!strcmp(argv[i], "--calib") || !strcmp(argv[i], "--tokenizer") ||
                    !strcmp(argv[i], "--backend") || !strcmp(argv[i], "--method")) &&
                   i + 1 < argc) {
            const char *o = argv[i++];
            *(!strcmp(o, "--calib")     ? &calib
              : !strcmp(o, "--backend") ? &backend
              : !strcmp(o, "--method")  ? &method
                                        : &tok_path) = argv[i];
        } else if (!strcmp(argv[i], "--calib-ctx")) {
            if (!g4_cli_int("quantize", argv[i], i + 1 < argc ? argv[i + 1] : NULL, 8, 1 << 20,
                            &calib_ctx)) {
                free(keep);
                return 1;
            }
            i++;
        } else if (!strcmp(argv[i], "--act-order")) {
            act_order = 1;
        } else if (!strcmp(argv[i], "--imatrix")) {
            use_imatrix = 1;
        } else if (!strcmp(argv[i], "--equalize")) {
            equalize = 1;
        } else if (argv[i][0] == '-') {
            free(keep);
            return g4_cli_usage_error("quantize", "unknown option '%s'", argv[i]);
        } else if (!in) {
            in = argv[i];
        } else if (!out) {
            out = argv[i];
        } else {
            free(keep);
            return g4_cli_usage_error("quantize", "unexpected argument '%s'", argv[i]);
        }
    }
    if (!in || !out) {
        free(keep);
        return g4_cli_usage_error("quantize", "expected PKG_F16 OUT");
    }
    const int calibrated = use_imatrix || equalize ||
                           (method && (!strcmp(method, "imatrix") || !strcmp(method, "gptq") ||
                                       !strcmp(method, "fit") || !strcmp(method, "gptq_imx")));
    if ((auto_bytes >= 0 || calibrated) != (calib != NULL)) {
        free(keep);
        return g4_cli_usage_error("quantize", "--keep-auto BYTES and --imatrix need --calib TEXT "
                                              "(and --calib one of them; so do --method imatrix, "
                                              "gptq, fit and gptq_imx, and --equalize)");
    }
    if (calib_ctx && !calibrated) {
        free(keep);
        return g4_cli_usage_error("quantize",
                                  "--calib-ctx needs --method imatrix, gptq, fit or gptq_imx, "
                                  "or --equalize");
    }
    qp.keep = keep;
    qp.n_keep = n_keep;
    qp.keep_auto_bytes = auto_bytes;
    qp.calib = calib;
    qp.tokenizer = tok_path;
    qp.calib_tokens = (int)calib_tokens;
    qp.calib_ctx = (int)calib_ctx;
    qp.backend = backend;
    qp.imatrix = use_imatrix;
    qp.method = method;
    qp.gptq_act_order = act_order;
    qp.equalize = equalize;
    qp.n_threads = threads;
    qp.progress = stderr;
    if (!stop_start(out))
        fprintf(stderr,
                "g4cu: quantize: cannot start the SIGINT watcher: an interrupted run "
                "leaves %s\n",
                stop_work_dir);
    int rc = g4cu_dev_quantize(in, out, &qp, stdout);
    if (atomic_load(&stop_taken))
        for (;;) pause(); // the signal thread removes the work and ends the process
    free(keep);
    return rc ? g4_cli_fail(rc) : 0;
}

// The options, with their defaults: the help and the accepted list (tools/cli.h).
static const g4_opt quantize_opts[] = {
    {"--keep", "PATTERN", "linears matching PATTERN stay fp16 (repeatable; default: none)"},
    {"--keep-auto", "BYTES", "keep fp16 the linears with the most KL per byte, within BYTES"},
    {"--calib", "TEXT",
     "calibration text for --keep-auto, --imatrix, --equalize and the calibrated methods"},
    {"--tokenizer", "F", "tokenizer.json for --calib (default: the package's)"},
    {"--calib-tokens", "N",
     "calibration tokens (default: 16384 for imatrix, gptq, fit, gptq_imx and --equalize; 256 "
     "for --keep-auto's ranking)"},
    {"--calib-ctx", "N",
     "calibrated methods: the calibration tokens in windows of N, <bos> first (default 512; N "
     ">= the tokens: one sequence)"},
    {"--backend", "B", "cpu or cuda for the calibration runs (default cpu)"},
    {"--imatrix", NULL, "activation-aware k-quant from --calib (default off)"},
    {"--method", "M",
     "kquant (default), rtn, imatrix, gptq, fit or gptq_imx (README: quantize methods)"},
    {"--act-order", NULL, "gptq, gptq_imx: channels by decreasing X^T X diagonal (default off)"},
    {"--equalize", NULL,
     "per-channel input scales folded into the norms before the method, alpha searched per "
     "group (AWQ-style; needs --calib; default off)"},
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_quantize = {
    "quantize", cmd_quantize,
    "PKG_F16 OUT [--keep PATTERN]... [--threads N] [--keep-auto BYTES --calib TEXT "
    "[--tokenizer F] [--calib-tokens N] [--backend cpu|cuda]] [--imatrix --calib TEXT] "
    "[--method kquant|rtn|imatrix|gptq|fit|gptq_imx [--act-order] [--calib-ctx N]] "
    "[--equalize --calib TEXT]   quantize "
    "the decoder into a Q4 package (--keep-auto: "
    "the most KL per byte stays fp16; the calibrated methods and --equalize read 16,384 --calib "
    "tokens in windows of 512 unless --calib-tokens / --calib-ctx, --keep-auto's ranking 256; "
    "work in OUT.tmp-<pid>, renamed when complete; unchanged files are copied or reflinked, "
    "never hard-linked)",
    quantize_opts, NULL};
