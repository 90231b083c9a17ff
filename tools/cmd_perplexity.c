// g4cu perplexity PKG --text FILE --ctx N [--tokenizer F] [--chunks N] [--backend cpu|cuda]
//                    [--save-logits F | --kl-base F] [--json F]
// Perplexity of a text, in llama-perplexity's conventions (llama.cpp tools/perplexity); the
// work and the --save-logits file's layout: g4cu_perplexity (include/g4cu_eval.h,
// api/g4cu_eval_ppl.c). --save-logits F writes the base run's scored distributions; --kl-base F
// reads them, runs the same tokens and reports KL divergence, same top p and RMS delta-p.
//
// Progress: a bar on a terminal; otherwise a plain line on stderr every 5 seconds.
// On the public C API (include/g4cu_eval.h).
#include <g4cu_eval.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "base/progress.h"
#include "tools/cli.h"

typedef struct {
    g4_progress bar;
    int tty;
    double last_line; // seconds since the run began, of the last plain line
} ppl_progress;

static void on_chunk(void *user, int done, int total, double ppl, double seconds) {
    ppl_progress *pr = user;
    if (!done) {
        pr->tty = isatty(2);
        g4_progress_start(&pr->bar, pr->tty ? stderr : NULL, "perplexity", total, 0);
        pr->last_line = 0;
        return;
    }
    g4_progress_step(&pr->bar);
    if (!pr->tty && (seconds - pr->last_line >= 5 || done == total)) {
        fprintf(stderr, "perplexity: chunk %d/%d  ppl %.4f  %.0f s\n", done, total, ppl, seconds);
        pr->last_line = seconds;
    }
    if (done == total) g4_progress_end(&pr->bar);
}

static int cmd_perplexity(int argc, char **argv) {
    g4cu_perplexity_params a;
    g4cu_perplexity_params_default(&a);
    const char *pkg_dir = NULL, *json = NULL;
    long long ctx = 0, chunks = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--text") && v) a.text = argv[++i];
        else if (!strcmp(o, "--tokenizer") && v) a.tokenizer = argv[++i];
        else if (!strcmp(o, "--backend") && v) a.backend = argv[++i];
        else if (!strcmp(o, "--save-logits") && v) a.save_logits = argv[++i];
        else if (!strcmp(o, "--kl-base") && v) a.kl_base = argv[++i];
        else if (!strcmp(o, "--json") && v) json = argv[++i];
        else if (!strcmp(o, "--ctx")) {
            if (!g4_cli_int("perplexity", "--ctx", ++i < argc ? argv[i] : NULL, 4, 1 << 20, &ctx))
                return 1;
        } else if (!strcmp(o, "--chunks")) {
            if (!g4_cli_int("perplexity", "--chunks", ++i < argc ? argv[i] : NULL, 1, 1 << 24,
                            &chunks))
                return 1;
        } else if (o[0] == '-') return g4_cli_usage_error("perplexity", "unknown option '%s'", o);
        else if (!pkg_dir) pkg_dir = o;
        else return g4_cli_usage_error("perplexity", "unexpected argument '%s'", o);
    }
    if (!pkg_dir || !ctx || (!a.text && !a.kl_base))
        return g4_cli_usage_error("perplexity", "needs PKG, --ctx and --text (or --kl-base)");
    if (a.save_logits && a.kl_base)
        return g4_cli_usage_error("perplexity", "--save-logits and --kl-base exclude each other");
    if (!a.backend) a.backend = "cpu";
    a.ctx = (int)ctx;
    a.chunks = (int)chunks;
    // --json is checked before the run, against the inputs (not found to be the --kl-base
    // file or the text only when the run is over)
    if (json) {
        const char *ins[3] = {a.text, a.kl_base, a.tokenizer};
        for (int k = 0; k < 3; k++) {
            int fd;
            uint64_t size;
            if (ins[k] && g4_open_input(ins[k], G4_NO_MAX_BYTES, &fd, &size) == G4_OK) close(fd);
        }
        int rc = g4_check_output(json);
        if (rc) return g4_cli_fail(rc);
    }
    ppl_progress pr = {0};
    a.progress = on_chunk;
    a.user = &pr;
    g4cu_perplexity_result s;
    int rc = g4cu_perplexity(pkg_dir, &a, &s);
    if (rc) return g4_cli_fail(rc);
    printf("perplexity: %d chunks of %d tokens, %zu scored, backend %s\n", s.n_chunks, s.ctx,
           s.n_scored, a.backend);
    printf("PPL = %.4f +/- %.5f\n", s.ppl, s.ppl_stderr);
    if (s.has_kl) {
        printf("PPL(base) = %.4f +/- %.5f\n", s.ppl_base, s.ppl_base_stderr);
        printf("Mean KLD = %.6f +/- %.6f\n", s.kld_mean, s.kld_mean_stderr);
        printf("Median KLD = %.6f\n99.0%% KLD = %.6f\n99.9%% KLD = %.6f\nMaximum KLD = %.6f\n",
               s.kld_median, s.kld_p99, s.kld_p999, s.kld_max);
        printf("Same top p = %.3f +/- %.3f %%\n", 100 * s.same_top, 100 * s.same_top_stderr);
        printf("RMS dp = %.3f +/- %.3f %%\n", 100 * s.rms_dp, 100 * s.rms_dp_stderr);
    }
    if (json && (rc = g4cu_perplexity_write_json(json, pkg_dir, &a, &s))) return g4_cli_fail(rc);
    return 0;
}

// The options, with their defaults: the help and the accepted list (tools/cli.h).
static const g4_opt perplexity_opts[] = {
    {"--text", "F", "the text to score (required unless --kl-base has the tokens)"},
    {"--ctx", "N", "tokens per chunk (required)"},
    {"--tokenizer", "F", "tokenizer.json (default: the package's)"},
    {"--chunks", "N", "score at most N chunks (default: all)"},
    {"--backend", "B", "cpu or cuda (default cpu)"},
    {"--save-logits", "F", "save the scored distributions as a KL base (default: none)"},
    {"--kl-base", "F", "KL divergence, same top p, RMS dp against a saved base run"},
    {"--json", "F", "also write the results as JSON (default: none)"},
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_perplexity = {
    "perplexity", cmd_perplexity,
    "PKG --text F --ctx N [--tokenizer F] [--chunks N] [--backend cpu|cuda] [--save-logits F | "
    "--kl-base F] [--json F]   llama-perplexity's PPL; KL divergence vs a saved base run",
    perplexity_opts, NULL};
