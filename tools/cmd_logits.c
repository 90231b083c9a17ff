// g4cu logits PKG --ids 2,5,17 [--image F [--image-tokens N]] [--audio F] [--backend cpu|cuda]
//                --out F.npy
// Teacher-forced prefill of the ids; writes float32 [seq, vocab] soft-capped logits. With media,
// the image / audio front end and tower make the soft tokens that replace the image / audio
// placeholder ids. One placeholder id of a kind, alone (not between <|image> and <image|>),
// stands for the whole block, as the chat template's one <|image|> does: it is expanded as HF's
// processor (and generate) expands it, to <|image> + n x <|image|> + <image|> (the same for
// audio), the begin / end ids from the tokenizer (--tokenizer, default the package's). Ids that
// already hold the n placeholders are used as they are; any other count is an error that gives n.
// --image-tokens is the image's soft-token budget (HF's max_soft_tokens: 70, 140, 280, 560 or
// 1120; default the package's image_processor.json).
// --decode-from N (issue 35: does the one-token decode path compute what the prefill does, on
// the same backend?): ids[0, N) go in as generate's prompt, each later id as one of generate's
// decode steps (g4cu_eval.h decode_from), and --out gets those rows; the plain prefill of the
// same ids runs on the same backend and loaded model (or --against F.npy is read: another
// backend's, HF's)
// and one line compares the decode rows with it, as `g4cu compare` measures (rel err = ||dec -
// ref|| / ||ref|| over those rows), plus row N - 1 as generate's last prompt step computes it
// (the token generate picks first), and whether each step's sampled id (the device sample op)
// is the argmax of the row it capped. A measurement: exit 0 whatever it finds, 1 on errors.
// On the public C API (include/g4cu_eval.h: g4cu_eval_logits, g4cu_eval_write_npy).
#include <g4cu_eval.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tools/cli.h"

static int argmax_row(const float *x, int V) {
    int a = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[a]) a = i;
    return a;
}

// Row d against row p over V entries: the sums of (d - p)^2 into *rn and of p^2 into *rd; with
// max_abs, the largest |d - p| there and *nan = 1 where a difference is NaN.
static void row_err(const float *d, const float *p, int V, double *rn, double *rd,
                    double *max_abs, int *nan) {
    *rn = *rd = 0;
    for (int i = 0; i < V; i++) {
        const double e = (double)d[i] - p[i];
        *rn += e * e, *rd += (double)p[i] * p[i];
        if (!max_abs) continue;
        if (e != e) *nan = 1; // (then rel err is NaN too)
        else if (fabs(e) > *max_abs) *max_abs = fabs(e);
    }
}

// One line: decode rows [r0, rows) of dec against the same rows of ref ([rows, V] both), and
// step (row r0 - 1 as generate's step computes it; NULL: none) against ref's row r0 - 1.
static void decode_summary(FILE *f, const char *backend, const char *ref_name, const float *dec,
                           const float *ref, const float *step, const int32_t *sampled, int rows,
                           int r0, int V) {
    fprintf(f, "decode vs %s (%s): ", ref_name, backend);
    if (r0 >= rows) {
        fprintf(f, "no decode rows (decode-from at the end)");
    } else {
        double num = 0, den = 0, worst = -1, max_abs = 0;
        int worst_r = r0, same = 0, first = -1, fd = 0, fp = 0, nan = 0;
        double gap = 0;
        for (int r = r0; r < rows; r++) {
            const float *d = dec + (size_t)r * V, *p = ref + (size_t)r * V;
            double rn, rd;
            row_err(d, p, V, &rn, &rd, &max_abs, &nan);
            num += rn, den += rd;
            const double rr = rd > 0 ? sqrt(rn / rd) : sqrt(rn);
            if (rr > worst) worst = rr, worst_r = r;
            const int ad = argmax_row(d, V), ap = argmax_row(p, V);
            if (ad == ap) same++;
            else if (first < 0) first = r, fd = ad, fp = ap, gap = (double)p[ap] - p[ad];
        }
        const int m = rows - r0;
        fprintf(f, "rows %d..%d (%d rows): rel err %.3e (worst row %d %.3e), max abs %.4g, "
                "argmax equal %d of %d", r0, rows - 1, m, den > 0 ? sqrt(num / den) : sqrt(num),
                worst_r, worst, nan ? NAN : max_abs, same, m);
        if (first >= 0)
            fprintf(f, " (first differing row %d: decode %d %s %d, %s gap %.4g)", first, fd,
                    ref_name, fp, ref_name, gap);
    }
    if (step && r0 >= 1) {
        const float *p = ref + (size_t)(r0 - 1) * V;
        double rn, rd;
        row_err(step, p, V, &rn, &rd, NULL, NULL);
        fprintf(f, "; row %d as generate's prompt step: rel err %.3e, argmax %d (%s %d)", r0 - 1,
                rd > 0 ? sqrt(rn / rd) : sqrt(rn), argmax_row(step, V), ref_name,
                argmax_row(p, V));
    }
    if (sampled && step && r0 >= 1) { // the sample op against the argmax of each row it capped
        int same = 0, first = -1, fs = 0, fa = 0;
        for (int r = r0 - 1; r < rows; r++) {
            const int a = argmax_row(r == r0 - 1 ? step : dec + (size_t)r * V, V);
            if (sampled[r] == a) same++;
            else if (first < 0) first = r, fs = sampled[r], fa = a;
        }
        fprintf(f, "; sampled id = its row's argmax on %d of %d", same, rows - r0 + 1);
        if (first >= 0) fprintf(f, " (first not: row %d, sampled %d, argmax %d)", first, fs, fa);
    }
    fputc('\n', f);
}

// The reference logits of --against: float32 [rows, V] (the decode's shape), malloc'ed.
static int read_against(const char *path, int rows, int V, float **out) {
    int r, c;
    int rc = g4cu_eval_read_npy(path, out, &r, &c);
    if (rc) return rc;
    if (r != rows || c != V) {
        g4cu_free(*out);
        *out = NULL;
        return g4_fail(G4_EUSER, "%s: logits [%d, %d], expected [%d, %d] (the decode's rows, "
                       "vocab)", path, r, c, rows, V);
    }
    return G4_OK;
}

static int cmd_logits(int argc, char **argv) {
    const char *pkg_dir = NULL, *ids_s = NULL, *out = NULL, *backend = "cpu", *image = NULL,
               *audio = NULL, *tok_path = NULL, *against = NULL, *prefill_out = NULL,
               *step_out = NULL, *sampled_out = NULL;
    long long image_tokens = 0, decode_from = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ids") && i + 1 < argc) ids_s = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
        else if (!strcmp(argv[i], "--image") && i + 1 < argc) image = argv[++i];
        else if (!strcmp(argv[i], "--audio") && i + 1 < argc) audio = argv[++i];
        else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_path = argv[++i];
        else if (!strcmp(argv[i], "--against") && i + 1 < argc) against = argv[++i];
        else if (!strcmp(argv[i], "--prefill-out") && i + 1 < argc) prefill_out = argv[++i];
        else if (!strcmp(argv[i], "--step-out") && i + 1 < argc) step_out = argv[++i];
        else if (!strcmp(argv[i], "--sampled-out") && i + 1 < argc) sampled_out = argv[++i];
        else if (!strcmp(argv[i], "--decode-from")) {
            if (!g4_cli_int("logits", "--decode-from", i + 1 < argc ? argv[++i] : NULL, 1,
                            1 << 30, &decode_from))
                return 1;
        }
        else if (!strcmp(argv[i], "--image-tokens")) {
            if (!g4_cli_int("logits", "--image-tokens", i + 1 < argc ? argv[++i] : NULL, 1,
                            1 << 20, &image_tokens))
                return 1;
        } else if (argv[i][0] == '-') return g4_cli_usage_error("logits", "unknown option '%s'", argv[i]);
        else if (!pkg_dir) pkg_dir = argv[i];
        else return g4_cli_usage_error("logits", "unexpected argument '%s'", argv[i]);
    }
    if (!pkg_dir || !ids_s || !out)
        return g4_cli_usage_error("logits", "needs PKG, --ids and --out");
    if (image_tokens && !image) return g4_cli_usage_error("logits", "--image-tokens needs --image");
    if ((against || prefill_out || step_out || sampled_out) && !decode_from)
        return g4_cli_usage_error("logits", "--against, --prefill-out, --step-out and "
                                            "--sampled-out need --decode-from");
    if (against && prefill_out)
        return g4_cli_usage_error("logits", "--prefill-out writes the prefill --against replaces: "
                                            "not both");
    int32_t *ids;
    int n, rc;
    if ((rc = g4_check_output(out)) || (prefill_out && (rc = g4_check_output(prefill_out))) ||
        (step_out && (rc = g4_check_output(step_out))) ||
        (sampled_out && (rc = g4_check_output(sampled_out))))
        return g4_cli_fail(rc); // before the work, not after it
    if ((rc = g4_cli_parse_ids(ids_s, &ids, &n))) return g4_cli_fail(rc);
    g4cu_eval_logits_params lp;
    g4cu_eval_logits_params_default(&lp);
    lp.backend = backend;
    lp.tokenizer = tok_path;
    lp.image = image;
    lp.image_tokens = (int)image_tokens;
    lp.audio = audio;
    float *logits = NULL, *step = NULL, *ref = NULL; // [rows, vocab], [vocab], [rows, vocab]
    int32_t *sampled = NULL;                          // [rows]
    int rows, vocab;
    lp.decode_from = (int)decode_from;
    lp.step_logits = decode_from ? &step : NULL;
    lp.sampled = decode_from ? &sampled : NULL;
    lp.prefill_logits = decode_from && !against ? &ref : NULL; // (one load for both)
    rc = g4cu_eval_logits(pkg_dir, ids, n, &lp, &logits, &rows, &vocab);
    if (!rc) rc = g4cu_eval_write_npy(out, logits, rows, vocab);
    if (!rc && step_out) rc = g4cu_eval_write_npy(step_out, step, 1, vocab);
    if (!rc && sampled_out) { // float32 [rows, 1] (ids are exact in a float below 2^24)
        float *f = g4_malloc(sizeof(float) * (size_t)rows);
        for (int r = 0; r < rows; r++) f[r] = (float)sampled[r];
        rc = g4cu_eval_write_npy(sampled_out, f, rows, 1);
        free(f);
    }
    if (!rc && decode_from) {
        // the decode rows are the last n - N (a lone placeholder before N moved it)
        const int r0 = rows - (n - (int)decode_from);
        if (against) rc = read_against(against, rows, vocab, &ref);
        else if (prefill_out) rc = g4cu_eval_write_npy(prefill_out, ref, rows, vocab);
        if (!rc)
            decode_summary(stdout, backend, against ? against : "prefill", logits, ref, step,
                           sampled, rows, r0, vocab);
    }
    free(ids);
    g4cu_free(logits);
    g4cu_free(step);
    g4cu_free(sampled);
    free(ref); // (g4cu_free is free; ref is either)
    return rc ? g4_cli_fail(rc) : 0;
}

// The options, with their defaults: the help and the accepted list (tools/cli.h).
static const g4_opt logits_opts[] = {
    {"--ids", "I,..", "the prompt token ids (required)"},
    {"--out", "F.npy", "where the float32 [seq, vocab] logits go (required)"},
    {"--backend", "B", "cpu or cuda (default cpu)"},
    {"--image", "F", "an image whose soft tokens go at the image placeholder ids"},
    {"--image-tokens", "N", "--image: soft tokens per image (default: the package's)"},
    {"--audio", "F", "an audio file whose soft tokens go at the audio placeholder ids"},
    {"--tokenizer", "F", "media: where a lone placeholder's begin / end ids come from (default: "
                         "the package's)"},
    {"--decode-from", "N", "ids[N..] as one-token decode steps after a prefill of ids[0..N) "
                           "(generate's path); prints decode vs prefill on this backend"},
    {"--against", "F.npy", "--decode-from: compare with these [rows, vocab] logits instead"},
    {"--prefill-out", "F.npy", "--decode-from: also write the plain prefill's logits"},
    {"--step-out", "F.npy", "--decode-from: row N-1 as generate's prompt step, [1, vocab]"},
    {"--sampled-out", "F.npy", "--decode-from: the id each step sampled, float32 [rows, 1] (-1 "
                               "before N-1)"},
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_logits = {"logits", cmd_logits,
                              "PKG --ids 2,5,17 [--image F [--image-tokens N]] [--audio F] "
                              "[--tokenizer F] [--backend cpu|cuda] [--decode-from N [--against "
                              "F.npy]] --out F.npy   float32 [seq, vocab] logits of "
                              "a teacher-forced prefill (media: soft tokens at the placeholder "
                              "ids; one placeholder id is expanded as generate does)",
    logits_opts, NULL};
