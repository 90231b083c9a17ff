// g4cu quantize PKG_F16 OUT [--keep PATTERN]... [--threads N]
//                [--keep-auto BYTES --calib TEXT [--tokenizer F] [--calib-tokens N]
//                 [--backend cpu|cuda]] [--imatrix --calib TEXT]:
// k-quant the decoder's linears into a Q4 (MatMulNBits) package, the way Olive made the published
// "Q4_K_M" packages (quant/q4_writer.h). OUT must not exist; it appears only when complete.
// --keep-auto BYTES also keeps fp16 the linears whose 4 bits cost the most KL per byte, within
// BYTES more decoder data than the all-Q4 package (fidelity/keep_auto.h): a sensitivity run
// (eval/sensitivity.h, on --backend, default cpu) on the first --calib-tokens (256) tokens of TEXT (<bos> first; the
// package's tokenizer.json unless --tokenizer) ranks them. The chosen names are printed.
// --imatrix: the activation-aware k-quant (llama.cpp's imatrix): one forward of the calibration
// tokens measures the mean x^2 of every linear's input channels (eval/sensitivity.h
// g4_imatrix_run), which weighs each block's least-squares search (kquant.h
// g4_q4_quantize_imp); the package is still plain MatMulNBits, the same bytes in size.
// OUT must not lie inside PKG_F16. The work goes to OUT.tmp-<pid> beside it; a run that is
// killed leaves that directory, and the next quantize to the same OUT removes those whose process
// is gone. Unchanged files are copied (reflinked where the file system can), never hard-linked.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kernels/backend_select.h"
#include "engine/text_model.h"
#include "fidelity/keep_auto.h"
#include "fidelity/sensitivity.h"
#include "loader/tokenizer.h"
#include "quant/q4.h"
#include "quant/q4_writer.h"
#include "tools/cli.h"

// The first n_max tokens (with <bos>) of the text file (its first 64 KiB, cut back to a whole
// UTF-8 character).
static int calib_ids(const char *path, const char *tok_path, int n_max, int32_t **ids, int *n) {
    char *text;
    size_t len;
    int rc = g4_read_file(path, &text, &len);
    if (rc) return rc;
    if (len > 65536) {
        len = 65536;
        while (len > 0 && ((unsigned char)text[len] & 0xC0) == 0x80) len--;
    }
    g4_tokenizer *tok;
    if ((rc = g4_tokenizer_open(tok_path, &tok))) {
        free(text);
        return rc;
    }
    g4_ids v = {0};
    rc = g4_tokenizer_encode(tok, text, len, 1, &v);
    g4_tokenizer_close(tok);
    free(text);
    if (!rc && v.n < 8)
        rc = g4_fail(G4_EUSER, "%s: --calib gives only %zu tokens (at least 8 needed)", path, v.n);
    if (rc) {
        g4_error_prefix("%s", path);
        g4_ids_free(&v);
        return rc;
    }
    *n = v.n < (size_t)n_max ? (int)v.n : n_max;
    *ids = g4_malloc(sizeof(int32_t) * (size_t)*n);
    for (int i = 0; i < *n; i++) (*ids)[i] = v.v[i];
    g4_ids_free(&v);
    return G4_OK;
}

// Appends to keep[] the names of the linears --keep-auto picks (new strings in *owned).
// The calibration runs: --keep-auto's sensitivity ranking (budget >= 0) and --imatrix's
// activation importance (im != NULL), on one loaded model.
static int calibrate(const char *pkg_dir, const char *backend, const char *calib,
                     const char *tok_path, int n_tokens,
                     long long budget, int threads, const char ***keep, int *n_keep,
                     char ***owned, int *n_owned, g4_imatrix *im) {
    g4_package *p = NULL;
    g4_text_model *m = NULL;
    g4_sens_row *rows = NULL;
    int32_t *ids = NULL;
    int n = 0, n_rows = 0, n_q4 = 0, rc;
    g4_backend *be = NULL;
    char *tp = tok_path ? g4_strdup(tok_path) : g4_path_join(pkg_dir, "tokenizer.json");
    if ((rc = calib_ids(calib, tp, n_tokens, &ids, &n)) ||
        (rc = g4_backend_by_name(backend, &be)) || (rc = g4_package_open(pkg_dir, &p)) ||
        (rc = g4_text_model_load(p, be, &m)))
        goto done;
    if (im) {
        if ((rc = g4_imatrix_run(m, ids, n, im))) goto done;
        printf("imatrix: activation importance of %d linears from %d tokens of %s\n", im->n, n,
               calib);
    }
    if (budget < 0) goto done;
    g4_sens_opts so = {0};
    so.n_threads = threads;
    so.progress = stderr;
    if ((rc = g4_sensitivity_run(m, ids, n, &so, &rows, &n_rows, &n_q4))) goto done;
    int *picked = g4_calloc((size_t)n_rows, sizeof(int));
    uint64_t used = 0;
    int kept = g4_keep_auto_pick(rows, n_rows, (uint64_t)budget, G4_Q4_BLOCK, picked, &used);
    *owned = g4_malloc(sizeof(char *) * (size_t)(kept > 0 ? kept : 1));
    *keep = g4_realloc(*keep, sizeof(char *) * (size_t)(*n_keep + kept + 1));
    printf("keep-auto: %d linears kept fp16 for %llu of %lld extra bytes (sensitivity on %d "
           "tokens of %s):\n", kept, (unsigned long long)used, budget, n, calib);
    for (int i = 0; i < n_rows; i++) {
        if (!picked[i]) continue;
        printf("  %-52s KL %.4e  +%llu bytes\n", rows[i].name, rows[i].kl_mean,
               (unsigned long long)g4_keep_auto_extra_bytes(rows[i].K, rows[i].N, G4_Q4_BLOCK));
        (*owned)[(*n_owned)++] = g4_strdup(rows[i].name);
        (*keep)[(*n_keep)++] = (*owned)[*n_owned - 1];
    }
    free(picked);
done:
    free(tp);
    free(ids);
    free(rows);
    g4_text_model_free(m);
    g4_package_close(p);
    return rc;
}

static int cmd_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *calib = NULL, *tok_path = NULL, *backend = "cpu";
    long long auto_bytes = -1, calib_tokens = 256;
    int use_imatrix = 0;
    const char **keep = g4_calloc((size_t)argc, sizeof(char *));
    int n_keep = 0;
    long long threads = sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1) threads = 1;
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
                            is_auto ? (1ll << 50) : (1 << 20), is_auto ? &auto_bytes : &calib_tokens)) {
                free(keep);
                return 1;
            }
            i++;
        } else if ((!strcmp(argv[i], "--calib") || !strcmp(argv[i], "--tokenizer") ||
                    !strcmp(argv[i], "--backend")) && i + 1 < argc) {
            const char *o = argv[i++];
            *(!strcmp(o, "--calib") ? &calib : !strcmp(o, "--backend") ? &backend : &tok_path) =
                argv[i];
        } else if (!strcmp(argv[i], "--imatrix")) {
            use_imatrix = 1;
        } else if (!strcmp(argv[i], "--threads")) {
            if (!g4_cli_int("quantize", "--threads", i + 1 < argc ? argv[++i] : NULL, 1, 1024,
                            &threads)) {
                free(keep);
                return 1;
            }
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
    if ((auto_bytes >= 0 || use_imatrix) != (calib != NULL)) {
        free(keep);
        return g4_cli_usage_error("quantize", "--keep-auto BYTES and --imatrix need --calib TEXT "
                                  "(and --calib one of them)");
    }
    char **owned = NULL;
    int n_owned = 0, rc = G4_OK;
    g4_imatrix im = {0};
    if (calib)
        rc = calibrate(in, backend, calib, tok_path, (int)calib_tokens, auto_bytes, (int)threads,
                       &keep, &n_keep, &owned, &n_owned, use_imatrix ? &im : NULL);
    g4_q4_write_opts o = {keep, n_keep, G4_Q4_BLOCK, (int)threads, stderr, stderr,
                          (const char *const *)im.names, (const float *const *)im.imp, im.n};
    g4_q4_write_stats st;
    if (!rc) rc = g4_q4_write_package(in, out, &o, &st);
    free(keep);
    g4_imatrix_free(&im);
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    if (rc) return g4_cli_fail(rc);
    printf("%s: %d linears quantized to 4 bits (block %d, %d weights), %d kept fp16; decoder data "
           "%llu bytes\n",
           out, st.n_quantized, G4_Q4_BLOCK, st.n_weights, st.n_kept,
           (unsigned long long)st.data_bytes);
    g4_q4_write_stats_free(&st);
    return 0;
}

const g4_cmd g4_cmd_quantize = {
    "quantize", cmd_quantize,
    "PKG_F16 OUT [--keep PATTERN]... [--threads N] [--keep-auto BYTES --calib TEXT "
    "[--tokenizer F] [--calib-tokens N] [--backend cpu|cuda]] [--imatrix --calib TEXT]   k-quant the decoder into a Q4 package (--keep-auto: "
    "the most KL per byte stays fp16; work in OUT.tmp-<pid>, renamed when complete; unchanged "
    "files are copied or reflinked, never hard-linked)"};
