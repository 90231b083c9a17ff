// chat_tools.c: tool declarations and tool calls in Gemma-4's format (see chat_tools.h). The
// renderer follows the E2B template's macros format_function_declaration, format_parameters
// and format_argument (tests/fixtures/chat/gemma4_e2b_chat_template.jinja) step by step.
#include "engine/chat_tools.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/base.h"
#include "base/str.h"

#define Q "<|\"|>" // the template's string quote (a special token)

// Jinja's truthiness of a JSON value (absent: false).
static int truthy(const cJSON *v) {
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return 0;
    if (cJSON_IsString(v)) return v->valuestring[0] != 0;
    if (cJSON_IsNumber(v)) return v->valuedouble != 0;
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) return v->child != NULL;
    return 1;
}

// An object's members in Jinja's dictsort order (case-blind keys, stable); *n of them.
static const cJSON **dictsort(const cJSON *o, int *n) {
    *n = cJSON_GetArraySize(o);
    const cJSON **m = g4_calloc((size_t)*n + 1, sizeof *m);
    int k = 0;
    for (const cJSON *c = o->child; c; c = c->next) {
        int i = k++;
        while (i > 0 && strcasecmp(m[i - 1]->string, c->string) > 0) {
            m[i] = m[i - 1];
            i--;
        }
        m[i] = c;
    }
    return m;
}

// Python's str() of a JSON number: an integer as one, else the shortest repr.
static void put_number(g4_sb *b, double v) {
    char buf[40];
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, sizeof buf, "%lld", (long long)v);
    } else {
        for (int p = 1; p <= 17; p++) {
            snprintf(buf, sizeof buf, "%.*g", p, v);
            if (strtod(buf, NULL) == v) break;
        }
    }
    g4_sb_puts(b, buf);
}

static void put_upper(g4_sb *b, const char *s) {
    for (; *s; s++) g4_sb_putc(b, (char)toupper((unsigned char)*s));
}

static void format_argument(g4_sb *b, const cJSON *a, int escape_keys) {
    if (!a || cJSON_IsNull(a)) {
        g4_sb_puts(b, "null");
    } else if (cJSON_IsString(a)) {
        g4_sb_puts(b, Q);
        g4_sb_puts(b, a->valuestring);
        g4_sb_puts(b, Q);
    } else if (cJSON_IsBool(a)) {
        g4_sb_puts(b, cJSON_IsTrue(a) ? "true" : "false");
    } else if (cJSON_IsObject(a)) {
        int n;
        const cJSON **m = dictsort(a, &n);
        g4_sb_putc(b, '{');
        for (int i = 0; i < n; i++) {
            if (i) g4_sb_putc(b, ',');
            if (escape_keys) g4_sb_puts(b, Q);
            g4_sb_puts(b, m[i]->string);
            if (escape_keys) g4_sb_puts(b, Q);
            g4_sb_putc(b, ':');
            format_argument(b, m[i], escape_keys);
        }
        g4_sb_putc(b, '}');
        free(m);
    } else if (cJSON_IsArray(a)) {
        g4_sb_putc(b, '[');
        for (const cJSON *c = a->child; c; c = c->next) {
            format_argument(b, c, escape_keys);
            if (c->next) g4_sb_putc(b, ',');
        }
        g4_sb_putc(b, ']');
    } else {
        put_number(b, a->valuedouble);
    }
}

static void put_required(g4_sb *b, const cJSON *req) {
    g4_sb_puts(b, "required:[");
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        g4_sb_puts(b, Q);
        g4_sb_puts(b, cJSON_IsString(r) ? r->valuestring : "");
        g4_sb_puts(b, Q);
        if (r->next) g4_sb_putc(b, ',');
    }
    g4_sb_putc(b, ']');
}

// The template's `{%- if add_comma %},{%- else -%}{%- set add_comma = true -%}{% endif -%}`.
static void comma(g4_sb *b, int *add) {
    if (*add)
        g4_sb_putc(b, ',');
    else
        *add = 1;
}

static const char *type_of(const cJSON *v) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
    return cJSON_IsString(t) ? t->valuestring : "";
}

static void format_parameters(g4_sb *b, const cJSON *props, int filter_keys) {
    static const char *const standard[] = {"description", "type", "properties", "required",
                                           "nullable"};
    int n, first = 1;
    const cJSON **m = dictsort(props, &n);
    for (int i = 0; i < n; i++) {
        const cJSON *v = m[i];
        int std = 0;
        for (int k = 0; k < 5; k++) std |= !strcmp(v->string, standard[k]);
        if (filter_keys && std) continue;
        if (!first) g4_sb_putc(b, ',');
        first = 0;
        g4_sb_puts(b, v->string);
        g4_sb_puts(b, ":{");
        int add = 0;
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(v, "description");
        if (truthy(desc)) {
            g4_sb_puts(b, "description:" Q);
            g4_sb_puts(b, cJSON_IsString(desc) ? desc->valuestring : "");
            g4_sb_puts(b, Q);
            add = 1;
        }
        const char *t = type_of(v);
        if (!strcasecmp(t, "string")) {
            const cJSON *en = cJSON_GetObjectItemCaseSensitive(v, "enum");
            if (truthy(en)) {
                comma(b, &add);
                g4_sb_puts(b, "enum:");
                format_argument(b, en, 1);
            }
        } else if (!strcasecmp(t, "array")) {
            const cJSON *items = cJSON_GetObjectItemCaseSensitive(v, "items");
            if (cJSON_IsObject(items) && items->child) {
                comma(b, &add);
                g4_sb_puts(b, "items:{");
                int ni, f2 = 1;
                const cJSON **im = dictsort(items, &ni);
                for (int k = 0; k < ni; k++) {
                    const cJSON *iv = im[k];
                    if (cJSON_IsNull(iv)) continue;
                    if (!f2) g4_sb_putc(b, ',');
                    f2 = 0;
                    if (!strcmp(iv->string, "properties")) {
                        g4_sb_puts(b, "properties:{");
                        if (cJSON_IsObject(iv)) format_parameters(b, iv, 0);
                        g4_sb_putc(b, '}');
                    } else if (!strcmp(iv->string, "required")) {
                        put_required(b, iv);
                    } else if (!strcmp(iv->string, "type") && cJSON_IsString(iv)) {
                        g4_sb_puts(b, "type:" Q);
                        put_upper(b, iv->valuestring);
                        g4_sb_puts(b, Q);
                    } else if (!strcmp(iv->string, "type") && cJSON_IsArray(iv)) {
                        g4_sb_puts(b, "type:[");
                        for (const cJSON *c = iv->child; c; c = c->next) {
                            g4_sb_puts(b, Q);
                            put_upper(b, cJSON_IsString(c) ? c->valuestring : "");
                            g4_sb_puts(b, Q);
                            if (c->next) g4_sb_putc(b, ',');
                        }
                        g4_sb_putc(b, ']');
                    } else {
                        g4_sb_puts(b, iv->string);
                        g4_sb_putc(b, ':');
                        format_argument(b, iv, 1);
                    }
                }
                free(im);
                g4_sb_putc(b, '}');
            }
        }
        if (truthy(cJSON_GetObjectItemCaseSensitive(v, "nullable"))) {
            comma(b, &add);
            g4_sb_puts(b, "nullable:true");
        }
        if (!strcasecmp(t, "object")) {
            const cJSON *pp = cJSON_GetObjectItemCaseSensitive(v, "properties");
            comma(b, &add);
            g4_sb_puts(b, "properties:{");
            if (cJSON_IsObject(pp))
                format_parameters(b, pp, 0);
            else
                format_parameters(b, v, 1);
            g4_sb_putc(b, '}');
            const cJSON *req = cJSON_GetObjectItemCaseSensitive(v, "required");
            if (truthy(req)) {
                comma(b, &add);
                put_required(b, req);
            }
        }
        comma(b, &add);
        g4_sb_puts(b, "type:" Q);
        put_upper(b, t);
        g4_sb_puts(b, Q "}");
    }
    free(m);
}

static int declaration(g4_sb *b, const cJSON *tool, int i) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    if (!cJSON_IsObject(tool) || !cJSON_IsObject(fn) || !cJSON_IsString(name) ||
        !name->valuestring[0])
        return g4_fail(G4_EUSER, "tools[%d]: expected {\"type\": \"function\", \"function\": "
                                 "{\"name\": ...}}",
                       i);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tool, "type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "function")))
        return g4_fail(G4_EUSER, "tools[%d].type: only \"function\" is supported", i);
    for (const char *c = name->valuestring; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '_' && *c != '-' && *c != '.')
            return g4_fail(G4_EUSER, "tools[%d].function.name \"%s\": expected letters, digits, "
                                     "'_', '-' or '.'",
                           i, name->valuestring);
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params))
        return g4_fail(G4_EUSER, "tools[%d].function.parameters: expected an object", i);
    if (cJSON_GetObjectItemCaseSensitive(fn, "response"))
        return g4_fail(G4_EUSER, "tools[%d].function.response is not supported", i);
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
    g4_sb d = {0};
    g4_sb_puts(&d, "declaration:");
    g4_sb_puts(&d, name->valuestring);
    g4_sb_puts(&d, "{description:" Q);
    if (cJSON_IsString(desc)) g4_sb_puts(&d, desc->valuestring);
    g4_sb_puts(&d, Q);
    if (truthy(params)) {
        g4_sb_puts(&d, ",parameters:{");
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(params, "required");
        if (truthy(props) && cJSON_IsObject(props)) {
            g4_sb_puts(&d, "properties:{");
            format_parameters(&d, props, 0);
            g4_sb_puts(&d, "},");
        }
        if (truthy(req)) {
            put_required(&d, req);
            g4_sb_putc(&d, ',');
        }
        if (truthy(cJSON_GetObjectItemCaseSensitive(params, "type"))) {
            g4_sb_puts(&d, "type:" Q);
            put_upper(&d, type_of(params));
            g4_sb_puts(&d, Q "}");
        }
    }
    g4_sb_putc(&d, '}');
    // | trim
    char *s = g4_sb_take(&d);
    size_t a = 0, e = strlen(s);
    while (a < e && isspace((unsigned char)s[a])) a++;
    while (e > a && isspace((unsigned char)s[e - 1])) e--;
    g4_sb_puts(b, "<|tool>");
    g4_sb_put(b, s + a, e - a);
    g4_sb_puts(b, "<tool|>");
    free(s);
    return G4_OK;
}

int g4_chat_tools_render(const char *tools_json, size_t len, char **out) {
    *out = NULL;
    cJSON *t = cJSON_ParseWithLength(tools_json, len);
    if (!cJSON_IsArray(t)) {
        cJSON_Delete(t);
        return g4_fail(G4_EUSER, "tools: expected a JSON array of tools");
    }
    g4_sb b = {0};
    int i = 0, rc = G4_OK;
    for (const cJSON *c = t->child; c && !rc; c = c->next, i++) rc = declaration(&b, c, i);
    cJSON_Delete(t);
    if (rc) {
        g4_sb_free(&b);
        return rc;
    }
    *out = g4_sb_take(&b);
    return G4_OK;
}

// --- calls ---------------------------------------------------------------------------------------
typedef struct {
    const char *p, *end, *start;
} cur;

static int at(const cur *c, const char *s) {
    const size_t n = strlen(s);
    return (size_t)(c->end - c->p) >= n && !memcmp(c->p, s, n);
}

static cJSON *parse_value(cur *c, int depth);

static char *until(cur *c, const char *stop) { // the text up to stop (consumed), or NULL
    const size_t n = strlen(stop);
    for (const char *q = c->p; q + n <= c->end; q++)
        if (!memcmp(q, stop, n)) {
            char *s = g4_malloc((size_t)(q - c->p) + 1);
            memcpy(s, c->p, (size_t)(q - c->p));
            s[q - c->p] = 0;
            c->p = q + n;
            return s;
        }
    return NULL;
}

static cJSON *parse_object(cur *c, int depth) {
    cJSON *o = cJSON_CreateObject();
    c->p++; // '{'
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return o;
    }
    for (;;) {
        char *key;
        if (at(c, Q)) {
            c->p += strlen(Q);
            key = until(c, Q);
            if (!key || c->p >= c->end || *c->p != ':') break;
            c->p++;
        } else {
            key = until(c, ":");
            if (!key || !key[0] || strpbrk(key, "{}[],\"")) {
                free(key);
                break;
            }
        }
        cJSON *v = parse_value(c, depth + 1);
        if (!v) {
            free(key);
            break;
        }
        cJSON_AddItemToObject(o, key, v);
        free(key);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        if (c->p < c->end && *c->p == '}') {
            c->p++;
            return o;
        }
        break;
    }
    cJSON_Delete(o);
    return NULL;
}

static cJSON *parse_value(cur *c, int depth) {
    if (depth > 32 || c->p >= c->end) return NULL;
    if (at(c, Q)) {
        c->p += strlen(Q);
        char *s = until(c, Q);
        if (!s) return NULL;
        cJSON *v = cJSON_CreateString(s);
        free(s);
        return v;
    }
    if (*c->p == '{') return parse_object(c, depth);
    if (*c->p == '[') {
        cJSON *a = cJSON_CreateArray();
        c->p++;
        if (c->p < c->end && *c->p == ']') {
            c->p++;
            return a;
        }
        for (;;) {
            cJSON *v = parse_value(c, depth + 1);
            if (!v) break;
            cJSON_AddItemToArray(a, v);
            if (c->p < c->end && *c->p == ',') {
                c->p++;
                continue;
            }
            if (c->p < c->end && *c->p == ']') {
                c->p++;
                return a;
            }
            break;
        }
        cJSON_Delete(a);
        return NULL;
    }
    if (at(c, "true")) return c->p += 4, cJSON_CreateTrue();
    if (at(c, "false")) return c->p += 5, cJSON_CreateFalse();
    if (at(c, "null")) return c->p += 4, cJSON_CreateNull();
    char num[64];
    size_t n = 0;
    while (c->p + n < c->end && n < sizeof num - 1 && strchr("+-0123456789.eE", c->p[n]) &&
           c->p[n])
        n++;
    if (!n) return NULL;
    memcpy(num, c->p, n);
    num[n] = 0;
    char *e;
    const double v = strtod(num, &e);
    if (*e || !isfinite(v)) return NULL;
    c->p += n;
    return cJSON_CreateNumber(v);
}

int g4_tool_call_parse(const char *text, size_t len, char **name, char **arguments_json) {
    *name = *arguments_json = NULL;
    cur c = {text, text + len, text};
    if (!at(&c, "call:"))
        return g4_fail(G4_EUSER, "tool call: expected \"call:NAME{...}\" at byte 0");
    c.p += 5;
    const char *n0 = c.p;
    while (c.p < c.end && (isalnum((unsigned char)*c.p) || strchr("_-.", *c.p)) && *c.p) c.p++;
    if (c.p == n0 || c.p >= c.end || *c.p != '{')
        return g4_fail(G4_EUSER, "tool call: expected a name and '{' at byte %ld",
                       (long)(c.p - text));
    const char *n1 = c.p;
    cJSON *args = parse_object(&c, 0);
    if (!args || c.p != c.end) {
        const long at_byte = (long)(c.p - text);
        cJSON_Delete(args);
        return g4_fail(G4_EUSER, "tool call: malformed arguments (at byte %ld)", at_byte);
    }
    *name = g4_malloc((size_t)(n1 - n0) + 1);
    memcpy(*name, n0, (size_t)(n1 - n0));
    (*name)[n1 - n0] = 0;
    *arguments_json = cJSON_PrintUnformatted(args);
    cJSON_Delete(args);
    if (!*arguments_json) abort();
    return G4_OK;
}

int g4_tool_calls_extract(const g4_tokenizer *t, const int *ids, int n, g4_tool_call **calls,
                          int *n_calls, char **text, size_t *text_len) {
    *calls = NULL;
    *n_calls = 0;
    *text = NULL;
    *text_len = 0;
    const int open = g4_tokenizer_id(t, "<|tool_call>", 12);
    const int close = g4_tokenizer_id(t, "<tool_call|>", 12);
    if (open < 0 || close < 0)
        return g4_fail(G4_EUSER, "tool calls: the tokenizer has no <|tool_call> / <tool_call|>");
    int *rest = g4_malloc(sizeof(int) * ((size_t)n + 1));
    int n_rest = 0, rc = G4_OK;
    for (int i = 0; i < n && !rc; i++) {
        int e = -1;
        if (ids[i] == open)
            for (int k = i + 1; k < n && e < 0; k++)
                if (ids[k] == close) e = k;
        if (e < 0) {
            rest[n_rest++] = ids[i];
            continue;
        }
        char *body = NULL, *name = NULL, *args = NULL;
        size_t len = 0;
        rc = g4_tokenizer_decode(t, ids + i + 1, (size_t)(e - i - 1), 0, &body, &len);
        if (!rc && !g4_tool_call_parse(body, len, &name, &args)) {
            *calls = realloc(*calls, sizeof(g4_tool_call) * (size_t)(*n_calls + 1));
            if (!*calls) abort();
            (*calls)[(*n_calls)++] = (g4_tool_call){name, args};
            i = e;
        } else {
            rest[n_rest++] = ids[i];
        }
        free(body);
    }
    if (!rc && *n_calls) rc = g4_tokenizer_decode(t, rest, (size_t)n_rest, 1, text, text_len);
    free(rest);
    if (rc) {
        g4_tool_calls_free(*calls, *n_calls);
        *calls = NULL;
        *n_calls = 0;
    }
    return rc;
}

void g4_tool_calls_free(g4_tool_call *calls, int n) {
    for (int i = 0; i < n; i++) {
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(calls);
}
