// serve_sampling.c: `g4cu serve`'s sampling fields and logprobs (see serve_sampling.h).
#include "tools/serve_sampling.h"

#include "tools/serve_guard.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int refuse(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return 0;
}

// A number field in [lo, hi] (absent or null: *v untouched, 1).
static int num(const cJSON *root, const char *key, double lo, double hi, int integer, double *v,
               int *present, char *err, size_t n) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, key);
    *present = x && !cJSON_IsNull(x);
    if (!*present) return 1;
    if (!cJSON_IsNumber(x)) return refuse(err, n, "\"%s\": expected a number", key);
    if (!(x->valuedouble >= lo && x->valuedouble <= hi) ||
        (integer && x->valuedouble != floor(x->valuedouble)))
        return refuse(err, n, "\"%s\" %g: expected %s in [%g, %g]", key, x->valuedouble,
                      integer ? "an integer" : "a number", lo, hi);
    *v = x->valuedouble;
    return 1;
}

static int response_format(const cJSON *rf, g4cu_request *rq, ss_fields *f, char *err, size_t n) {
    if (!rf || cJSON_IsNull(rf)) return 1;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
    if (!cJSON_IsObject(rf) || !cJSON_IsString(type))
        return refuse(err, n, "\"response_format\": expected an object with a \"type\"");
    const char *t = type->valuestring;
    if (!strcmp(t, "text")) return 1;
    if (!strcmp(t, "json_object")) {
        rq->json = G4CU_JSON_OBJECT;
        return 1;
    }
    if (strcmp(t, "json_schema"))
        return refuse(err, n, "response_format.type \"%s\": expected text, json_object or "
                              "json_schema",
                      t);
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(js, "schema");
    if (!cJSON_IsObject(js))
        return refuse(err, n, "response_format.json_schema: expected an object");
    const cJSON *strict = cJSON_GetObjectItemCaseSensitive(js, "strict");
    if (strict && !cJSON_IsNull(strict) && !cJSON_IsBool(strict))
        return refuse(err, n, "response_format.json_schema.strict: expected a boolean");
    if (sc && !cJSON_IsObject(sc) && !cJSON_IsBool(sc))
        return refuse(err, n, "response_format.json_schema.schema: expected a schema object");
    // strict or not, the output follows the schema (the decoding is always constrained)
    f->schema = sc ? cJSON_PrintUnformatted(sc) : strdup("{}");
    if (!f->schema) { // (answered 503)
        serve_guard_set_oom();
        return refuse(err, n, "out of memory");
    }
    rq->json = G4CU_JSON_SCHEMA;
    rq->json_schema = f->schema;
    return 1;
}

static int logit_bias(const cJSON *lb, g4cu_request *rq, ss_fields *f, char *err, size_t n) {
    if (!lb || cJSON_IsNull(lb)) return 1;
    if (!cJSON_IsObject(lb))
        return refuse(err, n, "\"logit_bias\": expected an object of token id -> bias");
    const int cnt = cJSON_GetArraySize(lb);
    if (cnt > SS_MAX_BIAS)
        return refuse(err, n, "\"logit_bias\": %d entries: at most %d", cnt, SS_MAX_BIAS);
    f->bias_ids = calloc((size_t)cnt + 1, sizeof *f->bias_ids);
    f->bias_vals = calloc((size_t)cnt + 1, sizeof *f->bias_vals);
    if (!f->bias_ids || !f->bias_vals) { // (answered 503; ss_free frees them)
        serve_guard_set_oom();
        return refuse(err, n, "out of memory");
    }
    int k = 0;
    for (const cJSON *e = lb->child; e; e = e->next, k++) {
        char *end;
        const long id = strtol(e->string, &end, 10);
        if (!e->string[0] || *end || id < 0 || id > 0x7fffffff)
            return refuse(err, n, "\"logit_bias\": key \"%s\": expected a token id", e->string);
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= -100 && e->valuedouble <= 100))
            return refuse(err, n, "\"logit_bias\" of token %ld: expected a number in [-100, 100]",
                          id);
        f->bias_ids[k] = (int32_t)id;
        f->bias_vals[k] = (float)e->valuedouble;
    }
    rq->logit_bias_ids = f->bias_ids;
    rq->logit_bias = f->bias_vals;
    rq->n_logit_bias = k;
    return 1;
}

int ss_parse(const cJSON *root, g4cu_request *rq, ss_fields *f, int stream, char *err,
             size_t n_err) {
    memset(f, 0, sizeof *f);
    f->n = 1;
    double v = 0;
    int has;
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
    if (lp && !cJSON_IsNull(lp) && !cJSON_IsBool(lp))
        return refuse(err, n_err, "\"logprobs\": expected a boolean");
    rq->logprobs = cJSON_IsTrue(lp);
    if (!num(root, "top_logprobs", 0, G4CU_MAX_TOP_LOGPROBS, 1, &v, &has, err, n_err)) return 0;
    if (has && !rq->logprobs && v > 0)
        return refuse(err, n_err, "\"top_logprobs\": needs \"logprobs\": true");
    if (has) rq->top_logprobs = (int)v;
    if (!num(root, "presence_penalty", -2, 2, 0, &v, &has, err, n_err)) return 0;
    if (has) rq->presence_penalty = (float)v;
    if (!num(root, "frequency_penalty", -2, 2, 0, &v, &has, err, n_err)) return 0;
    if (has) rq->frequency_penalty = (float)v;
    if (!num(root, "repetition_penalty", 0, 10, 0, &v, &has, err, n_err)) return 0;
    if (has) {
        if (v <= 0) return refuse(err, n_err, "\"repetition_penalty\" 0: expected > 0 (1: off)");
        rq->repetition_penalty = (float)v;
    }
    if (!num(root, "min_p", 0, 1, 0, &v, &has, err, n_err)) return 0;
    if (has) rq->min_p = (float)v;
    if (!num(root, "n", 1, SS_MAX_N, 1, &v, &has, err, n_err)) return 0;
    if (has) f->n = (int)v;
    if (f->n > 1 && stream)
        return refuse(err, n_err, "\"n\" %d: more than one choice is not streamed (stream: "
                                  "false)",
                      f->n);
    if (!logit_bias(cJSON_GetObjectItemCaseSensitive(root, "logit_bias"), rq, f, err, n_err) ||
        !response_format(cJSON_GetObjectItemCaseSensitive(root, "response_format"), rq, f, err,
                         n_err))
        return 0;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    const cJSON *choice = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    const int no_tools = !tools || cJSON_IsNull(tools) ||
                         (cJSON_IsArray(tools) && !cJSON_GetArraySize(tools));
    const int absent = !choice || cJSON_IsNull(choice);
    const int none = cJSON_IsString(choice) && !strcmp(choice->valuestring, "none");
    const int aut = cJSON_IsString(choice) && !strcmp(choice->valuestring, "auto");
    if (!absent && !none && !aut)
        return refuse(err, n_err, "\"tool_choice\": only \"auto\" or \"none\" are supported "
                                  "(the model decides whether to call)");
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools))
        return refuse(err, n_err, "\"tools\": expected an array");
    if (!no_tools && !none) {
        if (stream)
            return refuse(err, n_err, "\"tools\": not with stream (calls are not streamed yet)");
        f->tools = cJSON_PrintUnformatted(tools);
        if (!f->tools) { // (answered 503)
            serve_guard_set_oom();
            return refuse(err, n_err, "out of memory");
        }
        rq->tools_json = f->tools;
    }
    if (cJSON_GetObjectItemCaseSensitive(root, "functions"))
        return refuse(err, n_err, "\"functions\": function calls are not supported");
    return 1;
}

void ss_free(ss_fields *f) {
    free(f->schema);
    free(f->tools);
    free(f->bias_ids);
    free(f->bias_vals);
    memset(f, 0, sizeof *f);
}

// {"token", "logprob", "bytes"} of one token (its bytes as text: invalid UTF-8 as U+FFFD).
static cJSON *token_entry(g4cu_model *m, int32_t id, float logprob) {
    char buf[512];
    size_t len = 0;
    if (g4cu_token_bytes(m, id, buf, sizeof buf, &len)) len = 0;
    if (len > sizeof buf) len = sizeof buf;
    cJSON *o = cJSON_CreateObject();
    char text[sizeof buf * 3 + 1];
    if (!o) return NULL; // (out of memory: the entry is left out)
    size_t k = 0;
    for (size_t i = 0; i < len;) { // copy valid UTF-8, U+FFFD for each bad byte
        const unsigned char c = (unsigned char)buf[i];
        size_t need = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2
                                   : (c & 0xf8) == 0xf0 ? 3 : 9;
        int ok = c < 0x80 || (c >= 0xc2 && c <= 0xf4);
        for (size_t j = 1; ok && j <= need; j++)
            ok = i + j < len && ((unsigned char)buf[i + j] & 0xc0) == 0x80;
        if (ok && c) {
            memcpy(text + k, buf + i, need + 1);
            k += need + 1;
            i += need + 1;
        } else {
            memcpy(text + k, "\xef\xbf\xbd", 3);
            k += 3;
            i++;
        }
    }
    text[k] = 0;
    cJSON_AddStringToObject(o, "token", text);
    cJSON_AddNumberToObject(o, "logprob", isfinite(logprob) ? logprob : -9999.0);
    cJSON *b = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; i < len; i++)
        cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)buf[i]));
    return o;
}

// The id of the special token spelled s, or -1 when the tokenizer has none.
static int32_t special_id(const g4cu_tokenizer *t, const char *s) {
    int32_t *ids = NULL, id = -1;
    int n = 0;
    if (!g4cu_tokenizer_encode(t, s, strlen(s), 0, &ids, &n) && n == 1) id = ids[0];
    g4cu_free(ids);
    return id;
}

// ids[0, n) as text (special tokens left out), cut before the first of the request's stop
// strings, into msg[key]. 0: out of memory or a decoding error.
static int add_decoded(cJSON *msg, const char *key, const g4cu_tokenizer *t, const int32_t *ids,
                       int n, const char *const *stop, int n_stop) {
    char *text = NULL;
    size_t len = 0;
    if (n > 0 && g4cu_tokenizer_decode(t, ids, n, 1, &text, &len)) return 0;
    size_t cut = len;
    for (int k = 0; k < n_stop && text; k++) {
        const size_t sl = strlen(stop[k]);
        for (size_t at = 0; sl && at + sl <= cut; at++)
            if (!memcmp(text + at, stop[k], sl)) {
                cut = at;
                break;
            }
    }
    if (text) text[cut] = 0;
    const int ok = cJSON_AddStringToObject(msg, key, text ? text : "") != NULL;
    g4cu_free(text);
    return ok;
}

// A generation that opened Gemma-4's thought channel (<|channel>): the answer is what follows
// the last <channel|>, and nothing while the channel never closed (what `g4cu eval` scores, as
// the Olive adapter decodes; eval/runner.c response_text); the thought goes in
// reasoning_content, where vLLM's and llama-server's reasoning parsers put it. 1 when the
// channel was opened and msg got both fields; 0 when it was not (or a field could not be made).
static int thought_channel(cJSON *msg, const g4cu_result *r, const g4cu_tokenizer *t,
                           const char *const *stop, int n_stop) {
    const int32_t soc = t ? special_id(t, "<|channel>") : -1;
    const int32_t eoc = t ? special_id(t, "<channel|>") : -1;
    int first_soc = -1, last_eoc = -1;
    for (int i = 0; soc >= 0 && i < r->n_tokens; i++) {
        if (r->tokens[i] == soc && first_soc < 0) first_soc = i;
        if (r->tokens[i] == eoc) last_eoc = i;
    }
    if (first_soc < 0) return 0;
    const int thought_end = last_eoc > first_soc ? last_eoc : r->n_tokens;
    if (!add_decoded(msg, "content", t, r->tokens + last_eoc + 1,
                     last_eoc < 0 ? 0 : r->n_tokens - last_eoc - 1, stop, n_stop))
        return 0;
    if (!add_decoded(msg, "reasoning_content", t, r->tokens + first_soc + 1,
                     thought_end - first_soc - 1, stop, n_stop)) {
        cJSON_DeleteItemFromObject(msg, "content");
        return 0;
    }
    return 1;
}

void ss_message(cJSON *msg, const g4cu_result *r, unsigned long long id, const g4cu_tokenizer *t,
                const char *const *stop, int n_stop) {
    if (r->n_tool_calls && !r->text_len)
        cJSON_AddNullToObject(msg, "content");
    else if (r->n_tool_calls || !thought_channel(msg, r, t, stop, n_stop))
        cJSON_AddStringToObject(msg, "content", r->text);
    if (!r->n_tool_calls) return;
    cJSON *calls = cJSON_AddArrayToObject(msg, "tool_calls");
    for (int k = 0; k < r->n_tool_calls; k++) {
        cJSON *c = cJSON_CreateObject(), *fn;
        char cid[64];
        snprintf(cid, sizeof cid, "call_%llu_%d", id, k);
        cJSON_AddStringToObject(c, "id", cid);
        cJSON_AddStringToObject(c, "type", "function");
        fn = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(fn, "name", r->tool_calls[k].name);
        cJSON_AddStringToObject(fn, "arguments", r->tool_calls[k].arguments);
        cJSON_AddItemToArray(calls, c);
    }
}

cJSON *ss_logprobs(g4cu_model *m, const g4cu_token_logprob *lp, size_t n, int top) {
    cJSON *o = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(o, "content");
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        if (g4cu_token_bytes(m, lp[i].id, NULL, 0, &len) || !len) continue; // end of turn
        cJSON *e = token_entry(m, lp[i].id, lp[i].logprob);
        cJSON *t = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int k = 0; k < lp[i].n_top && k < top; k++)
            cJSON_AddItemToArray(t, token_entry(m, lp[i].top_id[k], lp[i].top_logprob[k]));
        cJSON_AddItemToArray(content, e);
    }
    cJSON_AddNullToObject(o, "refusal");
    return o;
}
