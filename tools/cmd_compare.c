// g4cu compare: layer-by-layer agreement reports, in three modes:
//
//   g4cu compare PKG REF.npz [--backend B]
//       runs the package on the dump's input_ids and compares every intermediate the dump holds
//       (embeddings, per-layer inputs, q/k/v, each layer's output, final norm, logits) by name,
//       each against a named tolerance; exit 1 when any tensor is over it or missing. With
//       media (image / audio placeholder ids in the dump's input_ids) each per-token decoder
//       tensor is also reported on its text, image and audio rows (a second table, md, json).
//   g4cu compare PKG_REF PKG_TEST (--ids 2,5,17 | --prompt TEXT [--tokenizer F]) [--backend B]
//                [--max-kl X]
//       fidelity of a test package (Q4, mixed precision) against a reference (f16): both run on
//       the same ids, one after the other (the reference's intermediates are kept on the host,
//       its model freed before the test package loads); per tensor rel err, cosine, max abs
//       err, and the logits' KL(p_ref || p_test) per position and top-1 agreement. Exit 1 when
//       the test run has non-finite values, or with --max-kl when the mean KL is above X.
//   g4cu compare PKG_F16 --sensitivity (--ids ... | --prompt ...) [--sensitivity-top N]
//                [--layers 0-3,7] [--only GLOB]... [--threads N]
//       each decoder linear quantized alone, in memory; ranked by the KL.
//   g4cu compare PKG_F16 PKG_Q4... --linear-error --calib TEXT [--calib-tokens N]
//                [--tokenizer F] [--tsv F] [--svg-kind F]
//       which linears each quantization helps: every decoder linear's layer-output error
//       e = tr(dW^T H dW) / tr(W^T H W) in each Q4 package (H = X^T X of the f16 model's inputs
//       on the calibration text, as `quantize --method gptq` builds it), ratios against the
//       first Q4 package, summaries by kind and by layer (fidelity/linear_error.h). An option
//       of compare, not of quantize or perplexity: it is a reference against tests, as the
//       packages mode, and writes the same --md / --json / --svg reports. A package whose
//       other decoder weights differ from the f16 one's (quantize --equalize: the norms) is
//       refused: its linears read other inputs.
//
// Every mode also writes --md F (Markdown), --json F (all numbers) and --svg F (rel err, or KL,
// per layer; log scale). On the public C API (include/g4cu_dev.h: g4cu_dev_compare).
#include <g4cu_dev.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/parallel.h"
#include "tools/cli.h"

typedef struct {
    const char **pos; // [argc]
    int n_pos;
    const char *backend, *ids_s, *prompt, *tokenizer, *md, *json, *svg, *tol_from;
    const char *calib, *tsv, *svg_kind;
    int sensitivity, linear_error;
    long long top, threads, calib_tokens;
    const char **only;
    int n_only;
    int *layers;
    int n_layers;
    double max_kl; // < 0: no gate
} opts;

static const char *cmd = "compare";

// "0-3,7" -> layer indices (appended to o->layers).
static int parse_layers(const char *s, opts *o) {
    const char *p = s;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || a < 0 || a > 100000) goto bad;
        if (*end == '-') {
            const char *q = end + 1;
            b = strtol(q, &end, 10);
            if (end == q || b < a || b > 100000) goto bad;
        }
        if (*end && *end != ',') goto bad;
        for (long l = a; l <= b; l++) {
            o->layers = g4_realloc(o->layers, sizeof(int) * (size_t)(o->n_layers + 1));
            o->layers[o->n_layers++] = (int)l;
        }
        p = *end ? end + 1 : end;
    }
    if (o->n_layers) return G4_OK;
bad:
    return g4_fail(G4_EUSER, "--layers '%s': expected layers and ranges such as 0-3,7", s);
}

static int cmd_compare(int argc, char **argv) {
    opts o = {.backend = "cpu", .max_kl = -1, .calib_tokens = -1};
    o.threads = g4_threads(); // --threads N, G4_THREADS (tools/cli_global.c)
    o.only = g4_calloc((size_t)argc, sizeof(char *));
    o.pos = g4_calloc((size_t)argc, sizeof(char *));
    int rc = 1, n_ids = 0;
    int32_t *ids = NULL;
    // Options that take a string.
    struct {
        const char *name;
        const char **dst;
    } str_opts[] = {{"--backend", &o.backend},
                    {"--ids", &o.ids_s},
                    {"--prompt", &o.prompt},
                    {"--tokenizer", &o.tokenizer},
                    {"--md", &o.md},
                    {"--json", &o.json},
                    {"--svg", &o.svg},
                    {"--tol-from", &o.tol_from},
                    {"--calib", &o.calib},
                    {"--tsv", &o.tsv},
                    {"--svg-kind", &o.svg_kind}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        size_t k = 0;
        while (k < sizeof str_opts / sizeof str_opts[0] && strcmp(a, str_opts[k].name)) k++;
        if (k < sizeof str_opts / sizeof str_opts[0]) {
            if (!v) {
                g4_cli_usage_error(cmd, "%s needs a value", a);
                goto done;
            }
            *str_opts[k].dst = argv[++i];
        } else if (!strcmp(a, "--sensitivity")) {
            o.sensitivity = 1;
        } else if (!strcmp(a, "--linear-error")) {
            o.linear_error = 1;
        } else if (!strcmp(a, "--calib-tokens")) {
            if (!g4_cli_int(cmd, a, v, 8, 1 << 20, &o.calib_tokens)) goto done;
            i++;
        } else if (!strcmp(a, "--sensitivity-top")) {
            if (!g4_cli_int(cmd, a, v, 1, 1000000, &o.top)) goto done;
            i++;
        } else if (!strcmp(a, "--only") && v) {
            o.only[o.n_only++] = argv[++i];
        } else if (!strcmp(a, "--layers") && v) {
            if (parse_layers(argv[++i], &o)) {
                rc = g4_cli_fail(G4_EUSER);
                goto done;
            }
        } else if (!strcmp(a, "--max-kl") && v) {
            char *end;
            o.max_kl = strtod(argv[++i], &end);
            if (*end || !(o.max_kl >= 0)) {
                g4_cli_usage_error(cmd, "--max-kl expects a number >= 0, got '%s'", v);
                goto done;
            }
        } else if (!strcmp(a, "--only") || !strcmp(a, "--layers") || !strcmp(a, "--max-kl")) {
            g4_cli_usage_error(cmd, "%s needs a value", a);
            goto done;
        } else if (a[0] == '-' && a[1]) {
            g4_cli_usage_error(cmd, "unknown option '%s'", a);
            goto done;
        } else { // (more than 2 without --linear-error: refused below)
            o.pos[o.n_pos++] = a;
        }
    }
    const int sens_opts = o.top || o.n_layers || o.n_only;
    if (o.sensitivity && o.linear_error) {
        g4_cli_usage_error(cmd, "--sensitivity and --linear-error exclude each other");
        goto done;
    }
    if (o.linear_error != (o.calib || o.tsv || o.svg_kind || o.calib_tokens >= 0)) {
        g4_cli_usage_error(cmd, o.linear_error ? "--linear-error needs --calib TEXT"
                                               : "--calib, --calib-tokens, --tsv and --svg-kind "
                                                 "need --linear-error");
        goto done;
    }
    if (o.linear_error && (o.n_pos < 2 || o.n_pos > 65)) {
        g4_cli_usage_error(cmd, "--linear-error takes PKG_F16 and 1 to 64 Q4 packages");
        goto done;
    }
    if (o.linear_error && (sens_opts || o.ids_s || o.prompt || o.max_kl >= 0 || o.tol_from)) {
        g4_cli_usage_error(cmd, "--linear-error reads --calib: no --ids, --prompt, --max-kl, "
                                "--tol-from or --sensitivity options");
        goto done;
    }
    if (!o.linear_error && o.n_pos > 2) {
        g4_cli_usage_error(cmd, "unexpected argument '%s'", o.pos[2]);
        goto done;
    }
    if (!o.linear_error && (o.sensitivity ? o.n_pos != 1 : o.n_pos != 2)) {
        g4_cli_usage_error(cmd, o.sensitivity ? "--sensitivity takes one package (PKG_F16)"
                                              : "needs PKG REF.npz or PKG_REF PKG_TEST");
        goto done;
    }
    if (!o.sensitivity && sens_opts) {
        g4_cli_usage_error(cmd, "--sensitivity-top, --layers and --only need --sensitivity");
        goto done;
    }
    const int dump = !o.sensitivity && !o.linear_error && !g4_is_dir(o.pos[1]);
    if (dump && (o.ids_s || o.prompt || o.max_kl >= 0)) {
        g4_cli_usage_error(cmd, "with an HF dump the input is the dump's input_ids (no --ids, "
                                "--prompt or --max-kl)");
        goto done;
    }
    // The reports' targets are checked before the run, not found unwritable after it.
    const char *outs[5] = {o.md, o.json, o.svg, o.tsv, o.svg_kind};
    for (int k = 0; k < 5; k++)
        if (outs[k] && (rc = g4_check_output(outs[k]))) {
            rc = g4_cli_fail(rc);
            goto done;
        }
    if (o.ids_s && o.prompt) {
        rc = g4_cli_fail(g4_fail(G4_EUSER, "give --ids or --prompt, not both"));
        goto done;
    }
    if (o.ids_s && (rc = g4_cli_parse_ids(o.ids_s, &ids, &n_ids))) {
        rc = g4_cli_fail(rc);
        goto done;
    }
    g4cu_dev_compare_params p;
    g4cu_dev_compare_params_default(&p);
    p.mode = o.linear_error  ? G4CU_DEV_COMPARE_LINEAR_ERROR
             : o.sensitivity ? G4CU_DEV_COMPARE_SENSITIVITY
             : dump          ? G4CU_DEV_COMPARE_DUMP
                             : G4CU_DEV_COMPARE_PACKAGES;
    if (o.linear_error) {
        p.tests = o.pos + 1;
        p.n_tests = o.n_pos - 1;
        p.calib = o.calib;
        if (o.calib_tokens > 0) p.calib_tokens = (int)o.calib_tokens;
        p.tsv = o.tsv;
        p.svg_kind = o.svg_kind;
    }
    p.backend = o.backend;
    p.ids = ids;
    p.n_ids = n_ids;
    p.prompt = o.prompt;
    p.tokenizer = o.tokenizer;
    p.tol_from = o.tol_from;
    p.md = o.md;
    p.json = o.json;
    p.svg = o.svg;
    p.max_kl = o.max_kl;
    p.top = (int)o.top;
    p.layers = o.layers;
    p.n_layers = o.n_layers;
    p.only = o.only;
    p.n_only = o.n_only;
    p.n_threads = (int)o.threads;
    p.progress = stderr;
    int pass = 0;
    rc = g4cu_dev_compare(o.pos[0], o.sensitivity || o.linear_error ? NULL : o.pos[1], &p, stdout,
                          &pass);
    rc = rc ? g4_cli_fail(rc) : !pass;
done:
    free(ids);
    free(o.only);
    free(o.pos);
    free(o.layers);
    return rc;
}

// The options, with their defaults: the help and the accepted list (tools/cli.h).
static const g4_opt compare_opts[] = {
    {"--ids", "I,..", "the prompt token ids (f16 vs Q4, --sensitivity)"},
    {"--prompt", "T", "a chat prompt instead of --ids (needs a tokenizer)"},
    {"--tokenizer", "F", "tokenizer.json for --prompt (default: the package's)"},
    {"--sensitivity", NULL, "rank the decoder linears by the KL 4 bits cause"},
    {"--sensitivity-top", "N", "--sensitivity: how many to print (default: all)"},
    {"--layers", "L", "--sensitivity: only these layers, as 0-3,7 (default: all)"},
    {"--only", "GLOB", "--sensitivity: only linears matching GLOB (repeatable; default: all)"},
    {"--linear-error", NULL, "PKG_F16 PKG_Q4...: each linear's layer-output error per package"},
    {"--calib", "TEXT", "--linear-error: calibration text (X^T X of each linear's inputs)"},
    {"--calib-tokens", "N", "--linear-error: calibration tokens (default 256)"},
    {"--tsv", "F", "--linear-error: also write the table as TSV (default: none)"},
    {"--svg-kind", "F", "--linear-error: also an SVG of e per layer by kind (default: none)"},
    {"--max-kl", "X", "fail (exit 1) when the mean KL exceeds X (default: no gate)"},
    {"--backend", "B", "cpu or cuda (default cpu)"},
    {"--tol-from", "F", "per-tensor tolerances from an HF lower-precision dump (default: fixed)"},
    {"--md", "F", "also write a Markdown report (default: none)"},
    {"--json", "F", "also write a JSON report (default: none)"},
    {"--svg", "F", "also write an SVG error plot (default: none)"},
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_compare = {
    "compare", cmd_compare,
    "PKG REF.npz | PKG_REF PKG_TEST --ids I,.. | PKG_F16 --sensitivity --ids I,.. "
    "[--prompt T [--tokenizer F]] [--sensitivity-top N] [--layers 0-3,7] [--only GLOB] "
    "[--threads N] [--max-kl X] [--backend cpu|cuda] [--tol-from HF_LOWER.npz] [--md F] [--json F] "
    "[--svg F] | PKG_F16 PKG_Q4... --linear-error --calib TEXT [--calib-tokens N] [--tsv F] "
    "[--svg-kind F]   "
    "layer-by-layer reports vs an HF dump, f16 vs Q4 fidelity (KL), per-linear Q4 sensitivity, "
    "per-linear layer-output error of Q4 packages",
    compare_opts, NULL};
