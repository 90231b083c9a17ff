// gen_cli.c: options, running and printing shared by the generate, asr and vqa commands, on the
// public API (include/g4cu.h).
#include "tools/gen_cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "tools/cli.h"

#define G4_STR_(x) #x
#define G4_STR(x)  G4_STR_(x)
const g4_opt g4_gen_cli_opts[] = {
    {"--max-new", "N", "new tokens at most (default " G4_STR(G4CU_DEFAULT_MAX_TOKENS) ")"},
    {"--stop", "S", "stop at this string (repeatable; \\n \\t \\r \\\\ escapes; default: none)"},
    {"--ignore-stop", "S", "a stop string that does not stop (repeatable; default: none)"},
    {"--eos", "ID", "an end-of-sequence id (repeatable; default: the package's generation config)"},
    {"--ignore-eos", NULL, "go on past EOS until --max-new (default: stop at EOS)"},
    {"--temperature", "T", "sampling temperature; 0 is greedy argmax (default 0)"},
    {"--top-k", "K", "sample from the K most likely tokens; 0 keeps all (default 0)"},
    {"--top-p", "P", "nucleus sampling mass in (0, 1] (default 1)"},
    {"--seed", "N", "sampling seed (default: a fresh one, printed on stderr and in --json)"},
    {"--system", "S", "a system turn (default: none)"},
    {"--backend", "B", "cpu or cuda (default cpu)"},
    {"--ple-host", NULL, "cuda: the per-layer embedding table in pinned host memory (default off)"},
    {"--tokenizer", "F", "tokenizer.json (default: the package's)"},
    {"--prefill-chunk", "N", "prompt rows per prefill forward (default: the state's capacity)"},
    {"--json", NULL, "one JSON object: text, tokens, stop reason, timings (default: text)"},
    {NULL, NULL, NULL}};

void g4_gen_cli_init(g4_gen_cli *o, const char *cmd) {
    memset(o, 0, sizeof *o);
    o->cmd = cmd;
    o->backend = "cpu";
    g4cu_request_default(&o->rq);
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
    const g4_opt *t = g4_gen_cli_opts;
    while (t->name && strcmp(a, t->name)) t++;
    if (!t->name) return 0;
    if (t->value && !v) {
        g4_cli_usage_error(o->cmd, "%s needs a value", a);
        return -1;
    }
    long long n;
    if (!strcmp(a, "--json")) {
        o->json = 1;
        return 1;
    }
    if (!strcmp(a, "--ple-host")) {
        o->ple_host = 1;
        return 1;
    }
    if (!strcmp(a, "--ignore-eos")) {
        o->rq.ignore_eos = 1;
        return 1;
    }
    (*i)++;
    if (!o->sampling_opt &&
        (!strcmp(a, "--top-k") || !strcmp(a, "--top-p") || !strcmp(a, "--seed")))
        o->sampling_opt = a;
    if (!strcmp(a, "--max-new")) {
        if (!g4_cli_int(o->cmd, a, v, 1, 1 << 24, &n)) return -1;
        o->rq.max_tokens = (int)n;
    } else if (!strcmp(a, "--prefill-chunk")) {
        if (!g4_cli_int(o->cmd, a, v, 1, 1 << 20, &n)) return -1;
        o->rq.prefill_chunk = (int)n;
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
        o->eos[o->n_eos++] = (int32_t)n;
    } else if (!strcmp(a, "--temperature")) {
        if (!parse_float(o->cmd, a, v, 0, 1e6, &o->rq.temperature)) return -1;
    } else if (!strcmp(a, "--top-k")) {
        if (!g4_cli_int(o->cmd, a, v, 0, 0x7fffffff, &n)) return -1;
        o->rq.top_k = (int)n;
    } else if (!strcmp(a, "--top-p")) {
        if (!parse_float(o->cmd, a, v, 1e-9, 1, &o->rq.top_p)) return -1;
    } else if (!strcmp(a, "--seed")) {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 10);
        if (!*v || *end || errno || v[0] == '-') {
            g4_cli_usage_error(o->cmd, "--seed expects a non-negative integer, got '%s'", v);
            return -1;
        }
        o->rq.seed = s;
        o->seed_given = 1;
    } else if (!strcmp(a, "--system")) {
        o->system = v;
    } else if (!strcmp(a, "--backend")) {
        o->backend = v;
    } else if (!strcmp(a, "--tokenizer")) {
        o->tokenizer = v;
    }
    return 1;
}

static int stream_stdout(void *user, const char *text, size_t len) {
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;
}

void g4_gen_cli_request(const g4_gen_cli *o, g4cu_request *rq) {
    *rq = o->rq;
    rq->system = o->system;
    rq->system_as_parts = 1;
    rq->stop = (const char *const *)o->stop;
    rq->n_stop = o->n_stop;
    rq->ignore_stop = (const char *const *)o->ignore;
    rq->n_ignore_stop = o->n_ignore;
    rq->eos = o->eos;
    rq->n_eos = o->n_eos;
    if (!o->json) rq->on_text = stream_stdout;
}

// Audio cut to the tower's window, said on stderr (one line per file).
static void report_cuts(const g4_gen_cli *o, const g4cu_result *r) {
    for (int i = 0; i < r->n_cuts; i++)
        fprintf(stderr,
                "g4cu %s: %s: %.1f s of audio, only the first %.1f s were used (the audio "
                "tower's window; `g4cu asr PKG FILE` of one file transcribes all of it)\n",
                o->cmd, r->cuts[i].path, r->cuts[i].seconds, r->cuts[i].used_seconds);
}

// input / id (either NULL): the batch forms' keys of the JSON line (the file, the item's id).
// A result without text (a model without a tokenizer) prints its ids.
static void print_result(const g4_gen_cli *o, const g4cu_result *r, const char *input,
                         const cJSON *id) {
    if (!o->json) {
        if (r->text)
            printf("\n");
        else { // no tokenizer: the ids are all there is to print
            for (int i = 0; i < r->n_tokens; i++) printf("%s%d", i ? "," : "", r->tokens[i]);
            printf("\n");
        }
        return;
    }
    cJSON *j = cJSON_CreateObject();
    if (input) cJSON_AddStringToObject(j, "input", input);
    if (id) cJSON_AddItemToObject(j, "id", cJSON_Duplicate(id, 1));
    if (r->text)
        cJSON_AddStringToObject(j, "text", r->text);
    else
        cJSON_AddNullToObject(j, "text");
    cJSON *toks = cJSON_AddArrayToObject(j, "tokens");
    for (int i = 0; i < r->n_tokens; i++)
        cJSON_AddItemToArray(toks, cJSON_CreateNumber(r->tokens[i]));
    cJSON_AddNumberToObject(j, "prompt_tokens", r->n_prompt_tokens);
    cJSON_AddNumberToObject(j, "new_tokens", r->n_tokens);
    cJSON_AddStringToObject(j, "stop_reason", r->stop_reason);
    if (r->stop_token >= 0)
        cJSON_AddNumberToObject(j, "stop_token", r->stop_token);
    else
        cJSON_AddNullToObject(j, "stop_token");
    if (r->stop_string)
        cJSON_AddStringToObject(j, "stop_string", r->stop_string);
    else
        cJSON_AddNullToObject(j, "stop_string");
    cJSON_AddNumberToObject(j, "max_new", r->max_new);
    if (o->rq.temperature > 0) { // an integer always (cJSON would write a seed ending in 0 as 6.8e+15)
        char num[24];
        snprintf(num, sizeof num, "%llu", (unsigned long long)o->rq.seed);
        cJSON_AddRawToObject(j, "seed", num);
    }
    cJSON_AddStringToObject(j, "backend", o->backend);
    cJSON_AddNumberToObject(j, "prefill_ms", r->prefill_ms);
    cJSON_AddNumberToObject(j, "prefill_tok_s", r->prefill_tok_s);
    cJSON_AddNumberToObject(j, "decode_ms", r->decode_ms);
    cJSON_AddNumberToObject(j, "decode_tok_s", r->decode_tok_s);
    cJSON *cut = cJSON_AddArrayToObject(j, "audio_truncated"); // files cut to the tower's window
    for (int i = 0; i < r->n_cuts; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "file", r->cuts[i].path ? r->cuts[i].path : "");
        cJSON_AddNumberToObject(c, "seconds", r->cuts[i].seconds);
        cJSON_AddNumberToObject(c, "used_seconds", r->cuts[i].used_seconds);
        cJSON_AddItemToArray(cut, c);
    }
    char *s = cJSON_PrintUnformatted(j);
    printf("%s\n", s);
    free(s);
    cJSON_Delete(j);
}

// The sampling options mean nothing without sampling: refused rather than ignored.
static int check_options(const g4_gen_cli *o) {
    if (o->sampling_opt && !(o->rq.temperature > 0))
        return g4_cli_usage_error(o->cmd,
                                  "%s only applies when sampling: add --temperature T (T > 0); "
                                  "without it generation is greedy",
                                  o->sampling_opt);
    return 0;
}

int g4_gen_cli_open(g4_gen_cli *o, const char *pkg_dir, int text_only, g4cu_model **m,
                    g4cu_state **s) {
    *m = NULL;
    *s = NULL;
    if (check_options(o)) return 1;
    if (o->rq.temperature > 0 && !o->seed_given) { // a fresh sample each run, said how to repeat
        uint64_t v = 0;
        if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) v = (uint64_t)time(NULL);
        o->rq.seed = v & ((1ull << 53) - 1); // (exact as a JSON number)
        o->seed_given = 1;
        fprintf(stderr, "g4cu %s: seed %llu (drawn; --seed %llu repeats this sample)\n", o->cmd,
                (unsigned long long)o->rq.seed, (unsigned long long)o->rq.seed);
    }
    // (the CPU backend has no pinned host memory; a name that is no backend: the load says so)
    if (o->ple_host && !strcmp(o->backend, "cpu"))
        return g4_cli_fail(
            g4_fail(G4_EUSER, "%s: --ple-host needs a GPU backend (--backend cuda)", o->cmd));
    g4cu_model_params mp;
    g4cu_model_params_default(&mp);
    mp.backend = o->backend;
    mp.tokenizer_path = o->tokenizer;
    mp.ple_host = o->ple_host;
    mp.text_only = text_only;
    int rc = g4cu_model_load(pkg_dir, &mp, m);
    if (!rc && (rc = g4cu_state_new(*m, s))) {
        g4cu_model_free(*m);
        *m = NULL;
    }
    return rc ? g4_cli_fail(rc) : 0;
}

int g4_gen_cli_run_on(const g4_gen_cli *o, g4cu_state *s, const g4cu_request *rq) {
    g4cu_result r;
    int rc = g4cu_generate(s, rq, &r);
    if (!rc) {
        print_result(o, &r, NULL, NULL);
        fflush(stdout);
        report_cuts(o, &r);
    } else if (!o->json)
        fflush(stdout);
    g4cu_result_free(&r);
    return rc ? g4_cli_fail(rc) : 0;
}

int g4_gen_cli_run(g4_gen_cli *o, const char *pkg_dir, const g4cu_media *media, int n_media,
                   const char *text) {
    g4cu_model *m;
    g4cu_state *s;
    int code = g4_gen_cli_open(o, pkg_dir, 0, &m, &s);
    if (code) return code;
    g4cu_request rq;
    g4_gen_cli_request(o, &rq);
    rq.media = media;
    rq.n_media = n_media;
    rq.text = text;
    code = g4_gen_cli_run_on(o, s, &rq);
    g4cu_state_free(s);
    g4cu_model_free(m);
    return code;
}

int g4_gen_cli_run_ids(g4_gen_cli *o, const char *pkg_dir, const int32_t *ids, int n) {
    g4cu_model *m;
    g4cu_state *s;
    int code = g4_gen_cli_open(o, pkg_dir, 1, &m, &s);
    if (code) return code;
    g4cu_request rq;
    g4_gen_cli_request(o, &rq);
    rq.system = NULL; // (refused with --ids already)
    g4cu_result r = {0};
    int rc;
    // The tokenizer is optional here: without one the ids are printed instead of text.
    if (!g4cu_model_has_tokenizer(m) && o->n_stop) {
        rc = g4_fail(G4_EUSER,
                     "--stop needs a tokenizer: %s has no tokenizer.json; pass "
                     "--tokenizer F",
                     pkg_dir);
    } else {
        if (!g4cu_model_has_tokenizer(m)) rq.on_text = NULL;
        if (!(rc = g4cu_generate_ids(s, ids, n, &rq, &r))) print_result(o, &r, NULL, NULL);
    }
    g4cu_result_free(&r);
    g4cu_state_free(s);
    g4cu_model_free(m);
    return rc ? g4_cli_fail(rc) : 0;
}

int g4_gen_cli_run_batch(g4_gen_cli *o, const char *pkg_dir, const g4_gen_cli_item *items,
                         int n) {
    g4cu_model *m;
    g4cu_state *s;
    int code = g4_gen_cli_open(o, pkg_dir, 0, &m, &s), rc;
    if (code) return code;
    for (int i = 0; i < n; i++) {
        const g4_gen_cli_item *it = &items[i];
        if (!o->json) {
            printf("==> %s <==\n", it->input);
            fflush(stdout);
        }
        g4cu_request rq;
        g4_gen_cli_request(o, &rq);
        rq.media = &it->media;
        rq.n_media = 1;
        rq.text = it->text;
        g4cu_result r = {0};
        rc = it->error ? g4_fail(G4_EUSER, "%s", it->error) : g4cu_generate(s, &rq, &r);
        const char *err = g4cu_last_error();
        if (!rc) {
            print_result(o, &r, it->input, it->id);
            fflush(stdout);
            report_cuts(o, &r);
        } else {
            // Said on stderr and, with --json, in the input's own line; the rest go on.
            const int c = rc == G4CU_EINTERNAL ? 2 : 1;
            if (c > code) code = c;
            if (o->json) {
                cJSON *j = cJSON_CreateObject();
                cJSON_AddStringToObject(j, "input", it->input);
                if (it->id) cJSON_AddItemToObject(j, "id", cJSON_Duplicate(it->id, 1));
                cJSON_AddStringToObject(j, "error", err);
                char *js = cJSON_PrintUnformatted(j);
                printf("%s\n", js);
                free(js);
                cJSON_Delete(j);
            } else {
                printf("\n");
            }
            fflush(stdout);
            if (strstr(err, it->input)) // the message names the file already
                fprintf(stderr, "g4cu %s: %s\n", o->cmd, err);
            else
                fprintf(stderr, "g4cu %s: %s: %s\n", o->cmd, it->input, err);
        }
        g4cu_result_free(&r);
    }
    g4cu_state_free(s);
    g4cu_model_free(m);
    return code;
}
