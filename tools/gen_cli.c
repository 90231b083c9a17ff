// gen_cli.c: options, running and printing shared by the generate, asr and vqa commands.
#include "tools/gen_cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend_select.h"
#include "tools/cli.h"

void g4_gen_cli_init(g4_gen_cli *o, const char *cmd) {
    memset(o, 0, sizeof *o);
    o->cmd = cmd;
    o->backend = "cpu";
    g4_gen_params_default(&o->gen);
}

void g4_gen_cli_free(g4_gen_cli *o) {
    for (int i = 0; i < o->n_stop; i++) free(o->stop[i]);
    for (int i = 0; i < o->n_ignore; i++) free(o->ignore[i]);
}

// A stop string as typed: \n, \r, \t and \\ stand for the characters (so that --stop "\n\n"
// works without shell quoting tricks); any other backslash stays as it is.
static char *unescape(const char *s) {
    char *out = g4_malloc(strlen(s) + 1), *w = out;
    for (; *s; s++) {
        if (s[0] == '\\' && s[1]) {
            char c = s[1] == 'n'    ? '\n'
                     : s[1] == 't'  ? '\t'
                     : s[1] == 'r'  ? '\r'
                     : s[1] == '\\' ? '\\'
                                    : 0;
            if (c) {
                *w++ = c;
                s++;
                continue;
            }
        }
        *w++ = *s;
    }
    *w = 0;
    return out;
}

static int parse_float(const char *cmd, const char *opt, const char *s, double lo, double hi,
                       float *out) {
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || errno || !isfinite(v) || v < lo || v > hi) {
        g4_cli_usage_error(cmd, "%s expects a number in [%g, %g], got '%s'", opt, lo, hi,
                           s ? s : "");
        return 0;
    }
    *out = (float)v;
    return 1;
}

int g4_gen_cli_option(g4_gen_cli *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    static const char *const with_value[] = {
        "--max-new", "--stop", "--ignore-stop", "--eos",     "--temperature", "--top-k",
        "--top-p",   "--seed", "--system",      "--backend", "--tokenizer",   "--prefill-chunk"};
    int known = !strcmp(a, "--json") || !strcmp(a, "--ple-host");
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
        if (!strcmp(a, with_value[k])) {
            if (!v) {
                g4_cli_usage_error(o->cmd, "%s needs a value", a);
                return -1;
            }
            known = 1;
        }
    if (!known) return 0;
    long long n;
    if (!strcmp(a, "--json")) {
        o->json = 1;
        return 1;
    }
    if (!strcmp(a, "--ple-host")) {
        o->ple_host = 1;
        return 1;
    }
    (*i)++;
    if (!o->sampling_opt &&
        (!strcmp(a, "--top-k") || !strcmp(a, "--top-p") || !strcmp(a, "--seed")))
        o->sampling_opt = a;
    if (!strcmp(a, "--max-new")) {
        if (!g4_cli_int(o->cmd, a, v, 1, 1 << 24, &n)) return -1;
        o->gen.max_new = (int)n;
    } else if (!strcmp(a, "--prefill-chunk")) {
        if (!g4_cli_int(o->cmd, a, v, 1, 1 << 20, &n)) return -1;
        o->gen.prefill_chunk = (int)n;
    } else if (!strcmp(a, "--stop") || !strcmp(a, "--ignore-stop")) {
        int is_stop = !strcmp(a, "--stop");
        if ((is_stop ? o->n_stop : o->n_ignore) == G4_GEN_CLI_MAX_LIST) {
            g4_cli_usage_error(o->cmd, "more than %d %s options", G4_GEN_CLI_MAX_LIST, a);
            return -1;
        }
        char *s = unescape(v);
        if (!*s) {
            free(s);
            g4_cli_usage_error(o->cmd, "%s: the string is empty", a);
            return -1;
        }
        if (is_stop)
            o->stop[o->n_stop++] = s;
        else
            o->ignore[o->n_ignore++] = s;
    } else if (!strcmp(a, "--eos")) {
        if (o->n_eos == G4_GEN_CLI_MAX_LIST) {
            g4_cli_usage_error(o->cmd, "more than %d --eos options", G4_GEN_CLI_MAX_LIST);
            return -1;
        }
        if (!g4_cli_int(o->cmd, a, v, 0, 0x7fffffff, &n)) return -1;
        o->eos[o->n_eos++] = (int)n;
    } else if (!strcmp(a, "--temperature")) {
        if (!parse_float(o->cmd, a, v, 0, 1e6, &o->gen.sampler.temperature)) return -1;
    } else if (!strcmp(a, "--top-k")) {
        if (!g4_cli_int(o->cmd, a, v, 0, 0x7fffffff, &n)) return -1;
        o->gen.sampler.top_k = (int)n;
    } else if (!strcmp(a, "--top-p")) {
        if (!parse_float(o->cmd, a, v, 1e-9, 1, &o->gen.sampler.top_p)) return -1;
    } else if (!strcmp(a, "--seed")) {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 10);
        if (!*v || *end || errno || v[0] == '-') {
            g4_cli_usage_error(o->cmd, "--seed expects a non-negative integer, got '%s'", v);
            return -1;
        }
        o->gen.seed = s;
    } else if (!strcmp(a, "--system")) {
        o->system = v;
    } else if (!strcmp(a, "--backend")) {
        o->backend = v;
    } else if (!strcmp(a, "--tokenizer")) {
        o->tokenizer = v;
    }
    return 1;
}

static void stream_stdout(void *ctx, const char *text, size_t len) {
    (void)ctx;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

static void params_from(g4_gen_cli *o, g4_gen_params *p) {
    *p = o->gen;
    p->stop = (const char *const *)o->stop;
    p->n_stop = o->n_stop;
    p->ignore_stop = (const char *const *)o->ignore;
    p->n_ignore_stop = o->n_ignore;
    p->eos = o->eos;
    p->n_eos = o->n_eos;
    if (!o->json) p->on_text = stream_stdout;
}

// Audio cut to the tower's window, said on stderr (one line per file).
static void report_cuts(const g4_gen_cli *o, const g4_media_cut *cuts, int n) {
    for (int i = 0; i < n; i++)
        fprintf(stderr,
                "g4cu %s: %s: %.1f s of audio, only the first %.1f s were used (the audio "
                "tower's window; long-form audio is not supported yet)\n",
                o->cmd, cuts[i].path, cuts[i].seconds, cuts[i].used_seconds);
}

static void print_result(const g4_gen_cli *o, const g4_gen_result *r, int has_text,
                         const g4_media_cut *cuts, int n_cuts) {
    if (!o->json) {
        if (has_text)
            printf("\n");
        else { // no tokenizer: the ids are all there is to print
            for (size_t i = 0; i < r->tokens.n; i++) printf("%s%d", i ? "," : "", r->tokens.v[i]);
            printf("\n");
        }
        return;
    }
    cJSON *j = cJSON_CreateObject();
    if (has_text)
        cJSON_AddStringToObject(j, "text", r->text ? r->text : "");
    else
        cJSON_AddNullToObject(j, "text");
    cJSON *toks = cJSON_AddArrayToObject(j, "tokens");
    for (size_t i = 0; i < r->tokens.n; i++)
        cJSON_AddItemToArray(toks, cJSON_CreateNumber(r->tokens.v[i]));
    cJSON_AddNumberToObject(j, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(j, "new_tokens", (double)r->tokens.n);
    cJSON_AddStringToObject(j, "stop_reason", g4_stop_reason_name(r->stop));
    if (r->stop == G4_STOP_EOS)
        cJSON_AddNumberToObject(j, "stop_token", r->stop_id);
    else
        cJSON_AddNullToObject(j, "stop_token");
    if (r->stop_string)
        cJSON_AddStringToObject(j, "stop_string", r->stop_string);
    else
        cJSON_AddNullToObject(j, "stop_string");
    cJSON_AddNumberToObject(j, "max_new", r->max_new);
    cJSON_AddStringToObject(j, "backend", o->backend);
    cJSON_AddNumberToObject(j, "prefill_ms", r->prefill_ms);
    cJSON_AddNumberToObject(j, "prefill_tok_s", r->prefill_tok_s);
    cJSON_AddNumberToObject(j, "decode_ms", r->decode_ms);
    cJSON_AddNumberToObject(j, "decode_tok_s", r->decode_tok_s);
    cJSON *cut = cJSON_AddArrayToObject(j, "audio_truncated"); // files cut to the tower's window
    for (int i = 0; i < n_cuts; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "file", cuts[i].path);
        cJSON_AddNumberToObject(c, "seconds", cuts[i].seconds);
        cJSON_AddNumberToObject(c, "used_seconds", cuts[i].used_seconds);
        cJSON_AddItemToArray(cut, c);
    }
    char *s = cJSON_PrintUnformatted(j);
    printf("%s\n", s);
    free(s);
    cJSON_Delete(j);
}

// The backend by name with the placement options applied.
static int open_backend(const g4_gen_cli *o, g4_backend **be) {
    int rc = g4_backend_by_name(o->backend, be);
    if (rc) return rc;
    if (o->ple_host && !(*be)->alloc_mapped)
        return g4_fail(G4_EUSER, "%s: --ple-host needs a GPU backend (--backend cuda)", o->cmd);
    (*be)->ple_host = o->ple_host;
    return G4_OK;
}

// The sampling options mean nothing without sampling: refused rather than ignored.
static int check_options(const g4_gen_cli *o) {
    if (o->sampling_opt && !(o->gen.sampler.temperature > 0))
        return g4_cli_usage_error(o->cmd,
                                  "%s only applies when sampling: add --temperature T (T > 0); "
                                  "without it generation is greedy",
                                  o->sampling_opt);
    return 0;
}

int g4_gen_cli_run(g4_gen_cli *o, const char *pkg_dir, const g4_prompt *pr) {
    if (check_options(o)) return 1;
    g4_pipeline *pl;
    g4_backend *be;
    int rc = open_backend(o, &be);
    if (!rc) rc = g4_pipeline_open(pkg_dir, be, o->tokenizer, &pl);
    if (rc) return g4_cli_fail(rc);
    g4_gen_params p;
    params_from(o, &p);
    g4_gen_result r;
    rc = g4_pipeline_generate(pl, pr, &p, &r);
    if (!rc) {
        print_result(o, &r, 1, pl->cuts, pl->n_cuts);
        fflush(stdout);
        report_cuts(o, pl->cuts, pl->n_cuts);
    } else if (!o->json)
        fflush(stdout);
    g4_gen_result_free(&r);
    g4_pipeline_close(pl);
    return rc ? g4_cli_fail(rc) : 0;
}

int g4_gen_cli_run_ids(g4_gen_cli *o, const char *pkg_dir, const int32_t *ids, int n) {
    if (check_options(o)) return 1;
    g4_backend *be;
    g4_package *pkg = NULL;
    g4_text_model *m = NULL;
    g4_tokenizer *tok = NULL;
    char *tok_path = NULL;
    g4_gen_result r = {0};
    int rc;
    if ((rc = open_backend(o, &be)) || (rc = g4_package_open(pkg_dir, &pkg)))
        goto done;
    // The tokenizer is optional here: without one the ids are printed instead of text.
    tok_path = o->tokenizer ? g4_strdup(o->tokenizer) : g4_path_join(pkg_dir, "tokenizer.json");
    if ((o->tokenizer || g4_is_file(tok_path)) && (rc = g4_tokenizer_open(tok_path, &tok)))
        goto done;
    if (!tok && o->n_stop) {
        rc = g4_fail(G4_EUSER,
                     "--stop needs a tokenizer: %s has no tokenizer.json; pass "
                     "--tokenizer F",
                     pkg_dir);
        goto done;
    }
    if ((rc = g4_text_model_load(pkg, be, &m))) goto done;
    g4_gen_params p;
    params_from(o, &p);
    if (!tok) p.on_text = NULL;
    if ((rc = g4_generate(m, tok, ids, n, NULL, &p, &r))) goto done;
    print_result(o, &r, tok != NULL, NULL, 0);
done:
    g4_gen_result_free(&r);
    g4_text_model_free(m);
    g4_tokenizer_close(tok);
    free(tok_path);
    g4_package_close(pkg);
    return rc ? g4_cli_fail(rc) : 0;
}
