// g4cu_eval_ppl.c: g4cu_perplexity (include/g4cu_eval.h), the work of `g4cu perplexity`.
// Perplexity of a text, in llama-perplexity's conventions (llama.cpp tools/perplexity): the text
// is tokenized once with <bos> first; it is cut into floor(n / ctx) non-overlapping chunks of ctx
// tokens (at most `chunks`); each chunk runs with its first token replaced by <bos>, from an
// empty KV cache, and is scored on its second half: the logits at positions ctx/2 .. ctx-2
// predict the tokens at ctx/2+1 .. ctx-1 (ctx - 1 - ctx/2 tokens a chunk). A text of fewer than
// 2 * ctx tokens is refused, as llama.cpp does. Statistics: fidelity/ppl.h.
//
// save_logits F (--save-logits) writes the base run's scored distributions; kl_base F
// (--kl-base) reads them, runs the same tokens (from F; the text, when given, must tokenize to
// them) and reports KL divergence, same top p and RMS delta-p against them. F's layout
// (little-endian), version 1:
//   [0, 64) header: char magic[8] "G4PPLLP\n"; u32 version 1; u32 ctx; u32 n_vocab;
//           u32 n_chunks; u32 n_scored (per chunk, ctx - 1 - ctx/2); u32 0;
//           u64 tokenizer fingerprint (FNV-1a 64 of the tokenizer.json bytes);
//           u64 package fingerprint (FNV-1a 64 of genai_config.json then decoder/model.onnx);
//           u64 tokens fingerprint (FNV-1a 64 of the int32 tokens below); u64 0
//   i32 tokens[n_chunks * ctx]      (as tokenized: chunk starts are not replaced by <bos>)
//   n_chunks * n_scored rows, each: i32 top1; f32 nll; f32 scale; f32 min_log_prob;
//           u16 q[n_vocab] (+ u16 0 when n_vocab is odd): log p_i = scale * q_i + min_log_prob
//           over [max-16, max], llama.cpp's 16-bit scheme (fidelity/ppl.h g4_ppl_pack_row)
// A mismatch of ctx, vocabulary, tokenizer or tokens is refused with a one-line error.
//
// Progress: through the caller's callback (the command draws it); nothing is printed here.
#include <g4cu_eval.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_internal.h"
#include "base/progress.h"
#include "engine/text_model.h"
#include "fidelity/ppl.h"
#include "kernels/backend_select.h"
#include "loader/tokenizer.h"

#define PPL_MAGIC "G4PPLLP\n"
#define PPL_VERSION 1u
#define PPL_HEADER 64

typedef struct {
    uint32_t ctx, n_vocab, n_chunks, n_scored;
    uint64_t tok_fp, pkg_fp, ids_fp;
} ppl_header;

static uint64_t fnv64(uint64_t h, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}
#define FNV_SEED 1469598103934665603ull

static int file_fp(const char *path, uint64_t *h) {
    char *data;
    size_t n;
    int rc = g4_read_file(path, &data, &n);
    if (rc) return rc;
    *h = fnv64(*h, data, n);
    free(data);
    return G4_OK;
}

static void put_u32(uint8_t *b, uint32_t v) {
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> 8 * i);
}
static void put_u64(uint8_t *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> 8 * i);
}
static uint32_t get_u32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static uint64_t get_u64(const uint8_t *b) {
    return (uint64_t)get_u32(b) | (uint64_t)get_u32(b + 4) << 32;
}

static void header_pack(const ppl_header *h, uint8_t *b) {
    memset(b, 0, PPL_HEADER);
    memcpy(b, PPL_MAGIC, 8);
    put_u32(b + 8, PPL_VERSION);
    put_u32(b + 12, h->ctx);
    put_u32(b + 16, h->n_vocab);
    put_u32(b + 20, h->n_chunks);
    put_u32(b + 24, h->n_scored);
    put_u64(b + 32, h->tok_fp);
    put_u64(b + 40, h->pkg_fp);
    put_u64(b + 48, h->ids_fp);
}

// Row record bytes: 16 of head, then n_vocab u16 padded to 4 bytes.
static size_t row_bytes(uint32_t V) { return 16 + 2 * (size_t)(V + (V & 1)); }

// Reads F's header and tokens; every field checked against the file's size.
static int base_open(const char *path, FILE **f, ppl_header *h, int32_t **ids) {
    // Through g4_open_input: a regular file, and remembered as an input, so that --json or
    // --save-logits naming it are refused instead of overwriting the saved base run.
    int fd;
    uint64_t fsize;
    int rc = g4_open_input(path, G4_NO_MAX_BYTES, &fd, &fsize);
    if (rc) return rc;
    if (!(*f = fdopen(fd, "rb"))) {
        close(fd);
        return g4_fail(G4_EUSER, "%s: cannot open: %s", path, strerror(errno));
    }
    uint8_t b[PPL_HEADER];
    if (fread(b, 1, PPL_HEADER, *f) != PPL_HEADER || memcmp(b, PPL_MAGIC, 8))
        return g4_fail(G4_EUSER, "%s: not a g4cu perplexity --save-logits file (no %s magic)",
                       path, "G4PPLLP");
    if (get_u32(b + 8) != PPL_VERSION)
        return g4_fail(G4_EUSER, "%s: --save-logits file version %u, this g4cu reads version %u",
                       path, get_u32(b + 8), PPL_VERSION);
    h->ctx = get_u32(b + 12);
    h->n_vocab = get_u32(b + 16);
    h->n_chunks = get_u32(b + 20);
    h->n_scored = get_u32(b + 24);
    h->tok_fp = get_u64(b + 32);
    h->pkg_fp = get_u64(b + 40);
    h->ids_fp = get_u64(b + 48);
    if (h->ctx < 4 || h->ctx > (1u << 24) || h->n_scored != h->ctx - 1 - h->ctx / 2 ||
        !h->n_vocab || h->n_vocab > (1u << 24) || !h->n_chunks || h->n_chunks > (1u << 24))
        return g4_fail(G4_EUSER, "%s: header: ctx %u, vocab %u, chunks %u, scored %u are not "
                       "consistent", path, h->ctx, h->n_vocab, h->n_chunks, h->n_scored);
    const size_t n_ids = (size_t)h->ctx * h->n_chunks;
    const double want = PPL_HEADER + 4.0 * n_ids +
                        (double)h->n_chunks * h->n_scored * (double)row_bytes(h->n_vocab);
    if (fseeko(*f, 0, SEEK_END) || (double)ftello(*f) != want || fseeko(*f, PPL_HEADER, SEEK_SET))
        return g4_fail(G4_EUSER, "%s: %lld bytes, but its header (ctx %u, vocab %u, %u chunks) "
                       "needs %.0f", path, (long long)ftello(*f), h->ctx, h->n_vocab,
                       h->n_chunks, want);
    *ids = g4_malloc(sizeof(int32_t) * n_ids);
    uint8_t *raw = g4_malloc(4 * n_ids);
    size_t got = fread(raw, 4, n_ids, *f);
    for (size_t i = 0; i < got; i++) (*ids)[i] = (int32_t)get_u32(raw + 4 * i);
    free(raw);
    if (got != n_ids) return g4_fail(G4_EUSER, "%s: truncated token list", path);
    if (fnv64(FNV_SEED, *ids, 4 * n_ids) != h->ids_fp)
        return g4_fail(G4_EUSER, "%s: the token list does not match its fingerprint", path);
    return G4_OK;
}

static void row_head_pack(const g4_ppl_row_head *h, uint8_t *b) {
    uint32_t u[4];
    memcpy(&u[0], &h->top1, 4);
    memcpy(&u[1], &h->nll, 4);
    memcpy(&u[2], &h->scale, 4);
    memcpy(&u[3], &h->min_log_prob, 4);
    for (int i = 0; i < 4; i++) put_u32(b + 4 * i, u[i]);
}

static void row_head_unpack(const uint8_t *b, g4_ppl_row_head *h) {
    uint32_t u[4];
    for (int i = 0; i < 4; i++) u[i] = get_u32(b + 4 * i);
    memcpy(&h->top1, &u[0], 4);
    memcpy(&h->nll, &u[1], 4);
    memcpy(&h->scale, &u[2], 4);
    memcpy(&h->min_log_prob, &u[3], 4);
}

// The run's inputs: the package and the caller's params, by the names the code was written with.
typedef struct {
    const char *pkg_dir, *text, *tok_path, *backend, *save, *base;
    long long ctx, chunks;
    g4cu_ppl_progress_fn progress;
    void *user;
} ppl_args;

int g4cu_perplexity_write_json(const char *path, const char *dir,
                               const g4cu_perplexity_params *p,
                               const g4cu_perplexity_result *s) {
    if (!path || !dir || !p || !s)
        return g4_fail(G4_EUSER, "g4cu_perplexity_write_json: a NULL argument");
    char buf[4096];
    int n = snprintf(buf, sizeof buf,
                     "{\n \"package\": \"%s\",\n \"backend\": \"%s\",\n \"ctx\": %u,\n"
                     " \"chunks\": %u,\n \"scored_tokens\": %zu,\n \"ppl\": %.9g,\n"
                     " \"ppl_stderr\": %.9g,\n \"seconds\": %.3f",
                     dir, p->backend ? p->backend : "cpu", (unsigned)s->ctx,
                     (unsigned)s->n_chunks, s->n_scored, s->ppl, s->ppl_stderr, s->seconds);
    if (s->has_kl)
        n += snprintf(buf + n, sizeof buf - (size_t)n,
                      ",\n \"kl_base\": \"%s\",\n \"ppl_base\": %.9g,\n \"kld_mean\": %.9g,\n"
                      " \"kld_mean_stderr\": %.9g,\n \"kld_median\": %.9g,\n"
                      " \"kld_p99\": %.9g,\n \"kld_p999\": %.9g,\n \"kld_max\": %.9g,\n"
                      " \"same_top\": %.9g,\n \"same_top_stderr\": %.9g,\n"
                      " \"rms_dp\": %.9g,\n \"rms_dp_stderr\": %.9g,\n \"mean_dp\": %.9g",
                      p->kl_base ? p->kl_base : "", s->ppl_base, s->kld_mean, s->kld_mean_stderr,
                      s->kld_median, s->kld_p99, s->kld_p999, s->kld_max, s->same_top,
                      s->same_top_stderr, s->rms_dp, s->rms_dp_stderr, s->mean_dp);
    n += snprintf(buf + n, sizeof buf - (size_t)n, "\n}\n");
    return g4_api_code(g4_write_file_atomic(path, buf, (size_t)n));
}

// The tokens of the text (with <bos>), or NULL: a user error names the file.
static int tokenize_text(const char *path, const g4_tokenizer *tok, g4_ids *ids) {
    char *text;
    size_t n;
    int rc = g4_read_file(path, &text, &n);
    if (rc) return rc;
    rc = g4_tokenizer_encode(tok, text, n, 1, ids);
    free(text);
    if (rc) g4_error_prefix("%s", path);
    return rc;
}

static int run(const ppl_args *a, g4cu_perplexity_result *out) {
    g4_backend *be = NULL;
    g4_package *p = NULL;
    g4_tokenizer *tok = NULL;
    g4_text_model *m = NULL;
    g4_text_state *st = NULL;
    g4_ids ids = {0};
    int32_t *base_ids = NULL, *chunk = NULL;
    FILE *base = NULL;
    g4_out_file save_out = {.fd = -1}, *save = NULL; // --save-logits (save: while open)
    char *tok_path = NULL;
    float *logits = NULL;
    uint8_t *row = NULL;
    g4_ppl_stats stats = {0};
    ppl_header h = {0};
    int rc;
    const double t0 = g4_progress_now();

    if ((rc = g4_package_open(a->pkg_dir, &p))) goto done;
    tok_path = a->tok_path ? strdup(a->tok_path) : g4_path_join(a->pkg_dir, "tokenizer.json");
    if (!a->tok_path && !g4_is_file(tok_path)) {
        rc = g4_fail(G4_EUSER, "%s: the package has no tokenizer.json (give --tokenizer F)",
                     a->pkg_dir);
        goto done;
    }
    if ((rc = g4_tokenizer_open(tok_path, &tok))) goto done;
    const int bos = g4_tokenizer_id(tok, "<bos>", 5);
    if (bos != p->text.bos_id) {
        rc = g4_fail(G4_EUSER, "%s: '<bos>' is id %d, but the package's bos_token_id is %d",
                     tok_path, bos, p->text.bos_id);
        goto done;
    }
    h.tok_fp = FNV_SEED;
    h.pkg_fp = FNV_SEED;
    char *cfg = g4_path_join(a->pkg_dir, "genai_config.json");
    rc = file_fp(tok_path, &h.tok_fp);
    if (!rc) rc = file_fp(cfg, &h.pkg_fp);
    free(cfg);
    if (!rc) rc = file_fp(g4_package_component(p, G4_COMP_DECODER)->onnx_path, &h.pkg_fp);
    if (rc) goto done;
    const int V = p->text.vocab;
    h.ctx = (uint32_t)a->ctx;
    h.n_vocab = (uint32_t)V;
    h.n_scored = h.ctx - 1 - h.ctx / 2;
    if (a->ctx > p->text.context_length) {
        rc = g4_fail(G4_EUSER, "--ctx %lld: the package %s has a context of %d", a->ctx,
                     a->pkg_dir, p->text.context_length);
        goto done;
    }
    if (a->text && (rc = tokenize_text(a->text, tok, &ids))) goto done;

    if (a->base) {
        ppl_header bh = {0};
        if ((rc = base_open(a->base, &base, &bh, &base_ids))) goto done;
        if (bh.ctx != h.ctx) {
            rc = g4_fail(G4_EUSER, "%s: made with --ctx %u, this run has --ctx %u", a->base,
                         bh.ctx, h.ctx);
            goto done;
        }
        if (bh.n_vocab != h.n_vocab) {
            rc = g4_fail(G4_EUSER, "%s: made with a vocabulary of %u, the package %s has %u",
                         a->base, bh.n_vocab, a->pkg_dir, h.n_vocab);
            goto done;
        }
        if (bh.tok_fp != h.tok_fp) {
            rc = g4_fail(G4_EUSER, "%s: made with another tokenizer (fingerprint %016llx, %s "
                         "is %016llx)", a->base, (unsigned long long)bh.tok_fp, tok_path,
                         (unsigned long long)h.tok_fp);
            goto done;
        }
        const size_t nb = (size_t)bh.ctx * bh.n_chunks;
        if (a->text && (ids.n < nb || memcmp(ids.v, base_ids, 4 * nb))) {
            rc = g4_fail(G4_EUSER, "%s: made from another text (its %u chunks of %u tokens are "
                         "not the first tokens of %s)", a->base, bh.n_chunks, bh.ctx, a->text);
            goto done;
        }
        h.n_chunks = bh.n_chunks;
        h.ids_fp = bh.ids_fp;
        g4_ids_free(&ids);
        for (size_t i = 0; i < nb; i++) g4_ids_push(&ids, base_ids[i]);
    } else {
        if (ids.n < 2 * (size_t)a->ctx) {
            rc = g4_fail(G4_EUSER, "%s: tokenizes to only %zu tokens; perplexity with --ctx "
                         "%lld needs at least %lld (two chunks of ctx tokens)", a->text, ids.n,
                         a->ctx, 2 * a->ctx);
            goto done;
        }
        h.n_chunks = (uint32_t)(ids.n / (size_t)a->ctx);
    }
    if (a->chunks && (uint32_t)a->chunks < h.n_chunks) h.n_chunks = (uint32_t)a->chunks;
    for (size_t i = 0; i < (size_t)h.n_chunks * h.ctx; i++)
        if (ids.v[i] < 0 || ids.v[i] >= V) {
            rc = g4_fail(G4_EUSER, "%s: token id %d at %zu is outside the package's vocabulary "
                         "of %d", a->base ? a->base : tok_path, ids.v[i], i, V);
            goto done;
        }
    if (!a->base) h.ids_fp = fnv64(FNV_SEED, ids.v, 4 * (size_t)h.n_chunks * h.ctx);

    // The output is opened once every input has been read (the text, the tokenizer, the
    // package): --save-logits naming one of them is refused, never overwritten; a FIFO or
    // /dev/stdout is streamed to in place.
    if (a->save) {
        if ((rc = g4_out_open(a->save, &save_out))) goto done;
        save = &save_out;
        uint8_t hb[PPL_HEADER];
        header_pack(&h, hb);
        const size_t nt = (size_t)h.n_chunks * h.ctx;
        uint8_t *raw = g4_malloc(4 * nt);
        for (size_t i = 0; i < nt; i++) put_u32(raw + 4 * i, (uint32_t)ids.v[i]);
        rc = g4_out_write(save, hb, PPL_HEADER);
        if (!rc) rc = g4_out_write(save, raw, 4 * nt);
        free(raw);
        if (rc) goto done;
    }

    const int piece = h.ctx < 256 ? (int)h.ctx : 256; // rows per forward call
    if ((rc = g4_backend_by_name(a->backend, &be)) || (rc = g4_text_model_load(p, be, &m)) ||
        (rc = g4_text_state_new(m, (int)h.ctx, piece, &st)))
        goto done;
    logits = g4_malloc(sizeof(float) * (size_t)piece * (size_t)V);
    row = g4_malloc(row_bytes(h.n_vocab));
    chunk = g4_malloc(sizeof(int32_t) * h.ctx);
    const int first = (int)h.ctx / 2;
    if (a->progress) a->progress(a->user, 0, (int)h.n_chunks, 0, g4_progress_now() - t0);
    for (uint32_t c = 0; c < h.n_chunks; c++) {
        memcpy(chunk, ids.v + (size_t)c * h.ctx, sizeof(int32_t) * h.ctx);
        chunk[0] = bos;
        g4_text_state_reset(st);
        for (int s0 = 0; s0 < (int)h.ctx; s0 += piece) {
            const int T = (int)h.ctx - s0 < piece ? (int)h.ctx - s0 : piece;
            if ((rc = g4_text_forward(st, chunk + s0, T, NULL, logits, 1))) goto done;
            for (int r = 0; r < T; r++) {
                const int pos = s0 + r;
                if (pos < first || pos > (int)h.ctx - 2) continue;
                const float *lr = logits + (size_t)r * V;
                const int next = ids.v[(size_t)c * h.ctx + (size_t)pos + 1];
                g4_ppl_row_head rh;
                uint16_t *q = (uint16_t *)(void *)(row + 16);
                if (save) {
                    const double nll = g4_ppl_pack_row(lr, (size_t)V, next, &rh, q);
                    g4_ppl_add_nll(&stats, nll);
                    if (h.n_vocab & 1) q[V] = 0;
                    row_head_pack(&rh, row);
                    // q is stored little-endian: convert in place on a big-endian host
                    for (int i = 0; i < V; i++) {
                        uint16_t v = q[i];
                        row[16 + 2 * i] = (uint8_t)v, row[17 + 2 * i] = (uint8_t)(v >> 8);
                    }
                    if ((rc = g4_out_write(save, row, row_bytes(h.n_vocab)))) goto done;
                } else if (base) {
                    if (fread(row, 1, row_bytes(h.n_vocab), base) != row_bytes(h.n_vocab)) {
                        rc = g4_fail(G4_EUSER, "%s: truncated at chunk %u", a->base, c);
                        goto done;
                    }
                    row_head_unpack(row, &rh);
                    for (int i = 0; i < V; i++)
                        q[i] = (uint16_t)(row[16 + 2 * i] | row[17 + 2 * i] << 8);
                    if (rh.top1 < 0 || rh.top1 >= V) {
                        rc = g4_fail(G4_EUSER, "%s: chunk %u: top-1 id %d outside [0, %d)",
                                     a->base, c, rh.top1, V);
                        goto done;
                    }
                    g4_ppl_row_cmp cmp = g4_ppl_compare_row(lr, (size_t)V, next, &rh, q);
                    g4_ppl_add_nll(&stats, cmp.nll);
                    g4_ppl_add_cmp(&stats, &cmp, rh.nll);
                } else {
                    g4_ppl_add_nll(&stats, g4_ppl_logsumexp(lr, (size_t)V, NULL) - lr[next]);
                }
            }
        }
        if (a->progress) {
            g4_ppl_summary sm = g4_ppl_summarize(&(g4_ppl_stats){.n = stats.n,
                                                                 .sum_nll = stats.sum_nll,
                                                                 .sum_nll2 = stats.sum_nll2});
            a->progress(a->user, (int)c + 1, (int)h.n_chunks, sm.ppl, g4_progress_now() - t0);
        }
    }
    if (save) {
        save = NULL;
        if ((rc = g4_out_commit(&save_out))) goto done;
    }
    g4_ppl_summary s = g4_ppl_summarize(&stats);
    *out = (g4cu_perplexity_result){.n_chunks = (int)h.n_chunks,
                                    .ctx = (int)h.ctx,
                                    .n_scored = s.n,
                                    .ppl = s.ppl,
                                    .ppl_stderr = s.ppl_unc,
                                    .has_kl = s.kl_rows > 0,
                                    .seconds = g4_progress_now() - t0};
    if (s.kl_rows) {
        out->ppl_base = s.ppl_base, out->ppl_base_stderr = s.ppl_base_unc;
        out->kld_mean = s.kld_mean, out->kld_mean_stderr = s.kld_unc;
        out->kld_median = s.kld_median, out->kld_p99 = s.kld_p99;
        out->kld_p999 = s.kld_p999, out->kld_max = s.kld_max;
        out->same_top = s.same_top, out->same_top_stderr = s.same_top_unc;
        out->rms_dp = s.rms_dp, out->rms_dp_stderr = s.rms_dp_unc, out->mean_dp = s.dp_mean;
    }
done:
    if (save) g4_out_abort(save);
    if (base) fclose(base);
    free(tok_path);
    free(base_ids);
    free(chunk);
    free(logits);
    free(row);
    g4_ids_free(&ids);
    g4_ppl_stats_free(&stats);
    g4_text_state_free(st);
    g4_text_model_free(m);
    g4_tokenizer_close(tok);
    g4_package_close(p);
    return rc;
}

void g4cu_perplexity_params_default(g4cu_perplexity_params *p) { memset(p, 0, sizeof *p); }

int g4cu_perplexity(const char *dir, const g4cu_perplexity_params *p,
                    g4cu_perplexity_result *out) {
    if (!out) return g4_api_code(g4_fail(G4_EUSER, "g4cu_perplexity: out is NULL"));
    memset(out, 0, sizeof *out);
    if (!dir || !p) return g4_fail(G4_EUSER, "g4cu_perplexity: needs a package and params");
    if (p->ctx < 4 || p->ctx > 1 << 20)
        return g4_fail(G4_EUSER, "g4cu_perplexity: ctx %d: expected 4 to %d", p->ctx, 1 << 20);
    if (p->chunks < 0) return g4_fail(G4_EUSER, "g4cu_perplexity: chunks %d < 0", p->chunks);
    if (!p->text && !p->kl_base)
        return g4_fail(G4_EUSER, "g4cu_perplexity: needs a text (or a kl_base)");
    if (p->save_logits && p->kl_base)
        return g4_fail(G4_EUSER, "g4cu_perplexity: save_logits and kl_base exclude each other");
    const ppl_args a = {dir,         p->text,     p->tokenizer, p->backend ? p->backend : "cpu",
                        p->save_logits, p->kl_base, p->ctx,     p->chunks,
                        p->progress, p->user};
    int rc = run(&a, out);
    if (rc) memset(out, 0, sizeof *out);
    return g4_api_code(rc);
}
