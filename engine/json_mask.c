// json_mask.c: the JSON schema subset, its byte-level machine and the token mask (see
// json_mask.h).
#include "engine/json_mask.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

// --- the compiled schema -----------------------------------------------------------------------
enum { N_ANY, N_OBJECT, N_ARRAY, N_STRING, N_NUMBER, N_INTEGER, N_LITERAL };

typedef struct {
    int kind;
    int free_keys;  // N_OBJECT: any keys, any values (no properties declared)
    int n;          // properties (N_OBJECT) or literals (N_LITERAL)
    char **names;   // [n] property names / literal texts
    size_t *lens;   // [n]
    int *prop;      // [n] each property's node
    uint64_t required;
    int items; // N_ARRAY: the items' node
} node;

struct g4_json_schema {
    node *nodes;
    int n_nodes, cap;
    int root, any, str, tfn; // the root; any value; any string; true / false / null
};

static int add_node(g4_json_schema *s, int kind) {
    if (s->n_nodes == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->nodes = realloc(s->nodes, sizeof(node) * (size_t)s->cap);
        if (!s->nodes) abort();
    }
    memset(&s->nodes[s->n_nodes], 0, sizeof(node));
    s->nodes[s->n_nodes].kind = kind;
    return s->n_nodes++;
}

static void add_name(node *nd, const char *text, size_t len) {
    nd->names = realloc(nd->names, sizeof(char *) * (size_t)(nd->n + 1));
    nd->lens = realloc(nd->lens, sizeof(size_t) * (size_t)(nd->n + 1));
    nd->prop = realloc(nd->prop, sizeof(int) * (size_t)(nd->n + 1));
    if (!nd->names || !nd->lens || !nd->prop) abort();
    nd->names[nd->n] = g4_malloc(len + 1);
    memcpy(nd->names[nd->n], text, len);
    nd->names[nd->n][len] = 0;
    nd->lens[nd->n] = len;
    nd->prop[nd->n] = -1;
    nd->n++;
}

static const char *const annotations[] = {"title",    "description", "default",
                                          "examples", "$schema",     "$comment"};
static const char *const keywords[] = {"type",  "properties", "required", "additionalProperties",
                                       "items", "enum",       "const"};

static int type_matches(const char *type, const cJSON *v) {
    if (!strcmp(type, "string")) return cJSON_IsString(v);
    if (!strcmp(type, "number")) return cJSON_IsNumber(v);
    if (!strcmp(type, "integer"))
        return cJSON_IsNumber(v) && v->valuedouble == (double)(long long)v->valuedouble;
    if (!strcmp(type, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(type, "null")) return cJSON_IsNull(v);
    if (!strcmp(type, "object")) return cJSON_IsObject(v);
    if (!strcmp(type, "array")) return cJSON_IsArray(v);
    return 0;
}

static int compile(g4_json_schema *s, const cJSON *j, int level, const char *where, int *out);

// enum / const: a literal node of the values' compact texts (each checked against type).
static int compile_literals(g4_json_schema *s, const cJSON *vals, int one, const char *type,
                            const char *where, int *out) {
    const int id = add_node(s, N_LITERAL);
    const cJSON *v;
    int k = 0;
    for (v = one ? vals : vals->child; v; v = one ? NULL : v->next, k++) {
        if (s->nodes[id].n == G4_JSON_MAX_SET)
            return g4_fail(G4_EUSER, "json_schema%s: enum has more than %d values", where,
                           G4_JSON_MAX_SET);
        if (type && !type_matches(type, v))
            return g4_fail(G4_EUSER, "json_schema%s: %s value %d is not of type \"%s\"", where,
                           one ? "const" : "enum", k + 1, type);
        char *t = cJSON_PrintUnformatted(v);
        if (!t) abort();
        add_name(&s->nodes[id], t, strlen(t));
        free(t);
    }
    if (!s->nodes[id].n) return g4_fail(G4_EUSER, "json_schema%s: enum is empty", where);
    *out = id;
    return G4_OK;
}

static int compile_object(g4_json_schema *s, const cJSON *j, int level, const char *where,
                          int *out) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(j, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(j, "required");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(j, "additionalProperties");
    if (props && !cJSON_IsObject(props))
        return g4_fail(G4_EUSER, "json_schema%s: properties: expected an object", where);
    if (add && !cJSON_IsBool(add))
        return g4_fail(G4_EUSER, "json_schema%s: additionalProperties: only true or false are "
                                 "supported",
                       where);
    if (req && !cJSON_IsArray(req))
        return g4_fail(G4_EUSER, "json_schema%s: required: expected an array of names", where);
    const int id = add_node(s, N_OBJECT);
    const int n_props = props ? cJSON_GetArraySize(props) : 0;
    if (n_props > G4_JSON_MAX_SET)
        return g4_fail(G4_EUSER, "json_schema%s: more than %d properties", where, G4_JSON_MAX_SET);
    if (!n_props) s->nodes[id].free_keys = !cJSON_IsFalse(add);
    int k = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next, k++) {
        const char *name = p->string;
        for (const char *c = name; *c; c++)
            if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
                return g4_fail(G4_EUSER, "json_schema%s: property \"%s\": names with quotes, "
                                         "backslashes or control characters are not supported",
                               where, name);
        for (int i = 0; i < k; i++)
            if (!strcmp(s->nodes[id].names[i], name))
                return g4_fail(G4_EUSER, "json_schema%s: property \"%s\" is declared twice", where,
                               name);
        add_name(&s->nodes[id], name, strlen(name));
        char *sub = g4_sprintf("%s.properties.%s", where, name);
        int child, rc = compile(s, p, level + 1, sub, &child);
        free(sub);
        if (rc) return rc;
        s->nodes[id].prop[k] = child;
    }
    const cJSON *r;
    cJSON_ArrayForEach(r, req) {
        if (!cJSON_IsString(r))
            return g4_fail(G4_EUSER, "json_schema%s: required: expected strings", where);
        int found = -1;
        for (int i = 0; i < s->nodes[id].n; i++)
            if (!strcmp(s->nodes[id].names[i], r->valuestring)) found = i;
        if (found < 0)
            return g4_fail(G4_EUSER, "json_schema%s: required \"%s\" is not in properties", where,
                           r->valuestring);
        s->nodes[id].required |= 1ull << found;
    }
    *out = id;
    return G4_OK;
}

static int compile(g4_json_schema *s, const cJSON *j, int level, const char *where, int *out) {
    if (level > G4_JSON_MAX_NEST)
        return g4_fail(G4_EUSER, "json_schema%s: nested deeper than %d levels", where,
                       G4_JSON_MAX_NEST);
    if (cJSON_IsTrue(j)) {
        *out = s->any;
        return G4_OK;
    }
    if (!cJSON_IsObject(j))
        return g4_fail(G4_EUSER, "json_schema%s: expected a schema object", where);
    for (const cJSON *k = j->child; k; k = k->next) {
        int known = 0;
        for (size_t i = 0; i < sizeof keywords / sizeof *keywords; i++)
            known |= !strcmp(k->string, keywords[i]);
        for (size_t i = 0; i < sizeof annotations / sizeof *annotations; i++)
            known |= !strcmp(k->string, annotations[i]);
        if (!known)
            return g4_fail(G4_EUSER,
                           "json_schema%s: keyword \"%s\" is not supported (supported: type, "
                           "properties, required, additionalProperties, items, enum, const)",
                           where, k->string);
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(j, "enum");
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(j, "const");
    if (type && !cJSON_IsString(type))
        return g4_fail(G4_EUSER, "json_schema%s: type: expected one type name (type lists are "
                                 "not supported)",
                       where);
    const char *t = type ? type->valuestring : NULL;
    static const char *const types[] = {"object",  "array",   "string", "number",
                                        "integer", "boolean", "null"};
    int ti = -1;
    for (int i = 0; t && i < 7; i++)
        if (!strcmp(t, types[i])) ti = i;
    if (t && ti < 0) return g4_fail(G4_EUSER, "json_schema%s: type \"%s\" is not a type", where, t);
    if (en && cn) return g4_fail(G4_EUSER, "json_schema%s: both enum and const", where);
    if (en && !cJSON_IsArray(en))
        return g4_fail(G4_EUSER, "json_schema%s: enum: expected an array", where);
    if (en || cn) return compile_literals(s, en ? en : cn, cn != NULL, t, where, out);
    if (ti == 0 || (ti < 0 && (cJSON_GetObjectItemCaseSensitive(j, "properties"))))
        return compile_object(s, j, level, where, out);
    if (ti == 1) {
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(j, "items");
        int child = s->any;
        if (items) {
            char *sub = g4_sprintf("%s.items", where);
            int rc = compile(s, items, level + 1, sub, &child);
            free(sub);
            if (rc) return rc;
        }
        const int id = add_node(s, N_ARRAY);
        s->nodes[id].items = child;
        *out = id;
        return G4_OK;
    }
    switch (ti) {
    case 2:
        *out = s->str;
        return G4_OK;
    case 3:
        *out = add_node(s, N_NUMBER);
        return G4_OK;
    case 4:
        *out = add_node(s, N_INTEGER);
        return G4_OK;
    case 5:
    case 6: {
        const int id = add_node(s, N_LITERAL);
        if (ti == 5) {
            add_name(&s->nodes[id], "true", 4);
            add_name(&s->nodes[id], "false", 5);
        } else {
            add_name(&s->nodes[id], "null", 4);
        }
        *out = id;
        return G4_OK;
    }
    }
    *out = s->any; // no type: any value
    return G4_OK;
}

void g4_json_schema_free(g4_json_schema *s) {
    if (!s) return;
    for (int i = 0; i < s->n_nodes; i++) {
        for (int k = 0; k < s->nodes[i].n; k++) free(s->nodes[i].names[k]);
        free(s->nodes[i].names);
        free(s->nodes[i].lens);
        free(s->nodes[i].prop);
    }
    free(s->nodes);
    free(s);
}

int g4_json_schema_compile(const char *text, size_t len, g4_json_schema **out) {
    *out = NULL;
    g4_json_schema *s = g4_calloc(1, sizeof *s);
    s->any = add_node(s, N_ANY);
    s->str = add_node(s, N_STRING);
    s->tfn = add_node(s, N_LITERAL);
    add_name(&s->nodes[s->tfn], "true", 4);
    add_name(&s->nodes[s->tfn], "false", 5);
    add_name(&s->nodes[s->tfn], "null", 4);
    int rc = G4_OK;
    if (!text) {
        s->root = add_node(s, N_OBJECT);
        s->nodes[s->root].free_keys = 1;
    } else {
        cJSON *j = cJSON_ParseWithLength(text, len);
        if (!j)
            rc = g4_fail(G4_EUSER, "json_schema: not valid JSON");
        else
            rc = compile(s, j, 0, "", &s->root);
        cJSON_Delete(j);
    }
    if (rc) {
        g4_json_schema_free(s);
        return rc;
    }
    *out = s;
    return G4_OK;
}

// --- the machine -------------------------------------------------------------------------------
enum { F_VALUE, F_OBJ, F_ARR, F_STR, F_NUM, F_LIT };
enum { O_START, O_KEY, O_COLON, O_AFTER, O_NEXT };                    // F_OBJ
enum { A_START, A_AFTER, A_NEXT };                                    // F_ARR
enum { S_IN, S_ESC, S_HEX, S_U8, S_LOW_BS, S_LOW_U };                 // F_STR
enum { N_SIGN, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };   // F_NUM
enum { FEED_NO = 0, FEED_OK = 1, FEED_AGAIN = 2 };                    // step results

void g4_json_start(const g4_json_schema *sc, g4_json_state *st) {
    memset(st, 0, offsetof(g4_json_state, f) + sizeof(g4_json_frame));
    st->sc = sc;
    st->depth = 1;
    st->f[0].kind = F_VALUE;
    st->f[0].node = (int16_t)sc->root;
}

void g4_json_copy(g4_json_state *dst, const g4_json_state *src) {
    memcpy(dst, src, offsetof(g4_json_state, f) + sizeof(g4_json_frame) * (size_t)src->depth);
}

static int is_ws(int c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

static int ws(g4_json_frame *f) {
    if (f->ws >= G4_JSON_MAX_WS) return FEED_NO;
    f->ws++;
    return FEED_OK;
}

// The value of the top frame is complete.
static int pop(g4_json_state *st) {
    if (--st->depth == 0) st->done = 1;
    return FEED_OK;
}

static int push(g4_json_state *st, int kind, int nd) {
    if (st->depth == G4_JSON_MAX_DEPTH) return 0;
    g4_json_frame *f = &st->f[st->depth++];
    memset(f, 0, sizeof *f);
    f->kind = (uint8_t)kind;
    f->node = (int16_t)nd;
    return 1;
}

static uint64_t all_of(int n) { return n >= 64 ? ~0ull : (1ull << n) - 1; }

// Starts the value of node nd in frame f (an F_VALUE) at its first byte c.
static int value_start(g4_json_state *st, g4_json_frame *f, int c) {
    const g4_json_schema *sc = st->sc;
    const node *nd = &sc->nodes[f->node];
    int kind = nd->kind, lit = f->node;
    if (kind == N_ANY) {
        kind = c == '{'                    ? N_OBJECT
               : c == '['                  ? N_ARRAY
               : c == '"'                  ? N_STRING
               : c == '-' || is_digit(c)   ? N_NUMBER
                                           : N_LITERAL;
        lit = sc->tfn;
    }
    const int16_t self = f->node;
    memset(f, 0, sizeof *f);
    switch (kind) {
    case N_OBJECT:
        if (c != '{' || st->depth >= G4_JSON_MAX_DEPTH - 1) return FEED_NO;
        f->kind = F_OBJ;
        f->node = nd->kind == N_ANY ? -1 : self; // -1: any keys, any values
        return FEED_OK;
    case N_ARRAY:
        if (c != '[' || st->depth >= G4_JSON_MAX_DEPTH - 1) return FEED_NO;
        f->kind = F_ARR;
        f->node = (int16_t)(nd->kind == N_ANY ? sc->any : nd->items);
        return FEED_OK;
    case N_STRING:
        if (c != '"') return FEED_NO;
        f->kind = F_STR;
        return FEED_OK;
    case N_NUMBER:
    case N_INTEGER:
        if (c != '-' && !is_digit(c)) return FEED_NO;
        f->kind = F_NUM;
        f->a = kind == N_INTEGER;
        f->sub = c == '-' ? N_SIGN : c == '0' ? N_ZERO : N_INT;
        return FEED_OK;
    default: // N_LITERAL: fed its first byte as any other
        f->kind = F_LIT;
        f->node = (int16_t)lit;
        f->set = all_of(sc->nodes[lit].n);
        return FEED_AGAIN;
    }
}

static int obj_step(g4_json_state *st, g4_json_frame *f, int c) {
    const node *nd = f->node >= 0 ? &st->sc->nodes[f->node] : NULL;
    const int free_keys = !nd || nd->free_keys;
    switch (f->sub) {
    case O_START:
    case O_NEXT:
        if (is_ws(c)) return ws(f);
        f->ws = 0;
        if (c == '}' && f->sub == O_START) {
            if (nd && (nd->required & ~f->seen)) return FEED_NO;
            return pop(st);
        }
        if (c != '"') return FEED_NO;
        if (free_keys) {
            f->sub = O_COLON;
            if (!push(st, F_STR, 0)) return FEED_NO;
            st->f[st->depth - 1].key = 1; // a key: its hash goes into f->seen
            st->f[st->depth - 1].set = 0xcbf29ce484222325ull;
            return FEED_OK;
        }
        f->sub = O_KEY;
        f->set = all_of(nd->n) & ~f->seen;
        f->pos = 0;
        return f->set ? FEED_OK : FEED_NO;
    case O_KEY: {
        if (c == '"') {
            for (int i = 0; i < nd->n; i++)
                if ((f->set >> i & 1) && nd->lens[i] == f->pos) {
                    f->key = (int16_t)i;
                    f->seen |= 1ull << i;
                    f->sub = O_COLON;
                    return FEED_OK;
                }
            return FEED_NO;
        }
        uint64_t next = 0;
        for (int i = 0; i < nd->n; i++)
            if ((f->set >> i & 1) && nd->lens[i] > f->pos &&
                (unsigned char)nd->names[i][f->pos] == c)
                next |= 1ull << i;
        if (!next) return FEED_NO;
        f->set = next;
        f->pos++;
        return FEED_OK;
    }
    case O_COLON:
        if (is_ws(c)) return ws(f);
        if (c != ':') return FEED_NO;
        f->ws = 0;
        f->sub = O_AFTER;
        return push(st, F_VALUE, free_keys ? st->sc->any : nd->prop[f->key]) ? FEED_OK : FEED_NO;
    default: // O_AFTER
        if (is_ws(c)) return ws(f);
        f->ws = 0;
        if (c == '}') {
            if (nd && (nd->required & ~f->seen)) return FEED_NO;
            return pop(st);
        }
        if (c != ',') return FEED_NO;
        if (!free_keys && !(all_of(nd->n) & ~f->seen)) return FEED_NO; // no key left
        f->sub = O_NEXT;
        return FEED_OK;
    }
}

static int arr_step(g4_json_state *st, g4_json_frame *f, int c) {
    if (is_ws(c)) return ws(f);
    f->ws = 0;
    if (c == ']' && f->sub != A_NEXT) return pop(st);
    if (f->sub == A_AFTER) {
        if (c != ',') return FEED_NO;
        f->sub = A_NEXT;
        return FEED_OK;
    }
    f->sub = A_AFTER;
    return push(st, F_VALUE, f->node) ? FEED_AGAIN : FEED_NO;
}

static int hexval(int c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int str_step(g4_json_state *st, g4_json_frame *f, int c) {
    switch (f->sub) {
    case S_ESC:
        if (c == 'u') {
            f->sub = S_HEX;
            f->pos = 4;
            f->a = 0;
            return FEED_OK;
        }
        if (!strchr("\"\\/bfnrt", c) || !c) return FEED_NO;
        f->sub = S_IN;
        return FEED_OK;
    case S_HEX: {
        // \u escapes pair their surrogates (a high D800-DBFF, then \u and a low DC00-DFFF;
        // a lone one is refused at its second digit, so no prefix is a dead end). a: 1 a low
        // one is due, 2 this one starts with D, 4 it is a high one.
        if (!hexval(c)) return FEED_NO;
        const int idx = 4 - f->pos, v = is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
        if (idx == 0 && (f->a & 1) && v != 0xd) return FEED_NO;
        if (idx == 0 && v == 0xd) f->a |= 2;
        if (idx == 1 && (f->a & 2)) {
            if ((f->a & 1) != (v >= 0xc)) return FEED_NO;
            if (v >= 0x8 && v <= 0xb) f->a |= 4;
        }
        if (--f->pos == 0) f->sub = (f->a & 4) ? S_LOW_BS : S_IN;
        return FEED_OK;
    }
    case S_LOW_BS:
        if (c != '\\') return FEED_NO;
        f->sub = S_LOW_U;
        return FEED_OK;
    case S_LOW_U:
        if (c != 'u') return FEED_NO;
        f->sub = S_HEX;
        f->pos = 4;
        f->a = 1;
        return FEED_OK;
    case S_U8: // a continuation byte in [a, b]
        if (c < f->a || c > f->b) return FEED_NO;
        f->a = 0x80, f->b = 0xbf;
        if (--f->pos == 0) f->sub = S_IN;
        return FEED_OK;
    }
    if (c == '"') {
        if (f->key) { // free keys: one bit of its hash per key, so no key comes twice (a
            // different key may rarely be refused too; it can always grow instead)
            g4_json_frame *obj = &st->f[st->depth - 2];
            const uint64_t bit = 1ull << (f->set >> 58);
            if (obj->seen & bit) return FEED_NO;
            obj->seen |= bit;
        }
        return pop(st);
    }
    if (f->key) f->set = (f->set ^ (uint64_t)c) * 0x100000001b3ull; // FNV-1a of its bytes
    if (c == '\\') {
        f->sub = S_ESC;
        return FEED_OK;
    }
    if (c < 0x20) return FEED_NO;
    if (c < 0x80) return FEED_OK;
    // UTF-8 (RFC 3629 table 3-7): the lead byte fixes the count and the first continuation's
    // range (no overlong forms, no surrogates, nothing past U+10FFFF)
    f->a = 0x80, f->b = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) f->pos = 1;
    else if (c == 0xe0) f->pos = 2, f->a = 0xa0;
    else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) f->pos = 2;
    else if (c == 0xed) f->pos = 2, f->b = 0x9f;
    else if (c == 0xf0) f->pos = 3, f->a = 0x90;
    else if (c >= 0xf1 && c <= 0xf3) f->pos = 3;
    else if (c == 0xf4) f->pos = 3, f->b = 0x8f;
    else return FEED_NO;
    f->sub = S_U8;
    return FEED_OK;
}

static int num_can_end(const g4_json_frame *f) {
    return f->sub == N_ZERO || f->sub == N_INT || f->sub == N_FRAC || f->sub == N_EXP;
}

static int num_step(g4_json_state *st, g4_json_frame *f, int c) {
    const int d = is_digit(c);
    switch (f->sub) {
    case N_SIGN:
        if (!d) return FEED_NO;
        f->sub = c == '0' ? N_ZERO : N_INT;
        return FEED_OK;
    case N_ZERO:
    case N_INT:
        if (d && f->sub == N_INT) return FEED_OK;
        if (c == '.' && !f->a) return f->sub = N_DOT, FEED_OK;
        if ((c == 'e' || c == 'E') && !f->a) return f->sub = N_E, FEED_OK;
        break;
    case N_DOT:
        return d ? (f->sub = N_FRAC, FEED_OK) : FEED_NO;
    case N_FRAC:
        if (d) return FEED_OK;
        if (c == 'e' || c == 'E') return f->sub = N_E, FEED_OK;
        break;
    case N_E:
        if (c == '+' || c == '-') return f->sub = N_ESIGN, FEED_OK;
        return d ? (f->sub = N_EXP, FEED_OK) : FEED_NO;
    case N_ESIGN:
        return d ? (f->sub = N_EXP, FEED_OK) : FEED_NO;
    case N_EXP:
        if (d) return FEED_OK;
        break;
    }
    if (!num_can_end(f)) return FEED_NO;
    pop(st); // the number ended before c: c belongs to the enclosing value
    return st->done ? FEED_NO : FEED_AGAIN;
}

// Whether a literal of the set is complete at pos.
static int lit_complete(const node *nd, const g4_json_frame *f) {
    for (int i = 0; i < nd->n; i++)
        if ((f->set >> i & 1) && nd->lens[i] == f->pos) return 1;
    return 0;
}

static int lit_step(g4_json_state *st, g4_json_frame *f, int c) {
    const node *nd = &st->sc->nodes[f->node];
    uint64_t next = 0, longer = 0;
    for (int i = 0; i < nd->n; i++)
        if ((f->set >> i & 1) && nd->lens[i] > f->pos &&
            (unsigned char)nd->names[i][f->pos] == c) {
            next |= 1ull << i;
            if (nd->lens[i] > (size_t)f->pos + 1u) longer |= 1ull << i;
        }
    if (next) {
        f->set = next;
        f->pos++;
        if (!longer) return pop(st); // complete, nothing longer (a number may still grow)
        return FEED_OK;
    }
    if (!lit_complete(nd, f)) return FEED_NO;
    pop(st); // e.g. enum [1, 12] after "1": c belongs to the enclosing value
    return st->done ? FEED_NO : FEED_AGAIN;
}

static int step(g4_json_state *st, int c) {
    if (st->done || st->depth < 1) return FEED_NO;
    g4_json_frame *f = &st->f[st->depth - 1];
    switch (f->kind) {
    case F_VALUE:
        if (is_ws(c)) return ws(f);
        return value_start(st, f, c);
    case F_OBJ:
        return obj_step(st, f, c);
    case F_ARR:
        return arr_step(st, f, c);
    case F_STR:
        return str_step(st, f, c);
    case F_NUM:
        return num_step(st, f, c);
    default:
        return lit_step(st, f, c);
    }
}

int g4_json_feed(g4_json_state *st, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int r;
        while ((r = step(st, b[i])) == FEED_AGAIN) {
        }
        if (r == FEED_NO) return 0;
        st->n_bytes++;
    }
    return 1;
}

int g4_json_can_end(const g4_json_state *st) {
    if (st->done) return 1;
    if (st->depth != 1) return 0;
    const g4_json_frame *f = &st->f[0];
    if (f->kind == F_NUM) return num_can_end(f);
    if (f->kind == F_LIT) return lit_complete(&st->sc->nodes[f->node], f);
    return 0;
}

// --- the vocabulary's bytes and the mask -------------------------------------------------------
static const g4_vocab_bytes *sort_vb; // (qsort has no context argument; sorting is serialised)

static int cmp_tokens(const void *a, const void *b) {
    const int x = *(const int32_t *)a, y = *(const int32_t *)b;
    const uint32_t lx = sort_vb->off[x + 1] - sort_vb->off[x];
    const uint32_t ly = sort_vb->off[y + 1] - sort_vb->off[y];
    const int c = memcmp(sort_vb->bytes + sort_vb->off[x], sort_vb->bytes + sort_vb->off[y],
                         lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

// Whether b[0..n) is string content any string state accepts whole: bytes 0x20-0x7f other
// than '"' and '\\', and whole UTF-8 characters (the same table as str_step).
static int plain_bytes(const uint8_t *b, uint32_t n) {
    if (!n) return 0;
    for (uint32_t i = 0; i < n;) {
        const int c = b[i];
        if (c < 0x80) {
            if (c < 0x20 || c == '"' || c == '\\' || c == 0x7f) return 0;
            i++;
            continue;
        }
        int need, lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) need = 1;
        else if (c == 0xe0) need = 2, lo = 0xa0;
        else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) need = 2;
        else if (c == 0xed) need = 2, hi = 0x9f;
        else if (c == 0xf0) need = 3, lo = 0x90;
        else if (c >= 0xf1 && c <= 0xf3) need = 3;
        else if (c == 0xf4) need = 3, hi = 0x8f;
        else return 0;
        if (i + (uint32_t)need >= n) return 0; // a character cut at the token's end
        for (int k = 1; k <= need; k++) {
            const int d = b[i + (uint32_t)k];
            if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xbf)) return 0;
        }
        i += (uint32_t)need + 1;
    }
    return 1;
}

static void vb_sort(g4_vocab_bytes *v) {
    v->plain = g4_malloc((size_t)v->n + 1);
    for (int i = 0; i < v->n; i++)
        v->plain[i] = (uint8_t)plain_bytes(v->bytes + v->off[i], v->off[i + 1] - v->off[i]);
    v->order = g4_malloc(sizeof(int32_t) * (size_t)(v->n + 1));
    v->n_sorted = 0;
    v->max_len = 0;
    for (int i = 0; i < v->n; i++) {
        const int len = (int)(v->off[i + 1] - v->off[i]);
        if (!len) continue;
        v->order[v->n_sorted++] = i;
        if (len > v->max_len) v->max_len = len;
    }
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    sort_vb = v;
    qsort(v->order, (size_t)v->n_sorted, sizeof(int32_t), cmp_tokens);
    pthread_mutex_unlock(&mu);
}

int g4_vocab_bytes_from(int n, const uint32_t *off, const uint8_t *bytes, g4_vocab_bytes *out) {
    memset(out, 0, sizeof *out);
    if (n < 1 || off[0] != 0)
        return g4_fail(G4_EUSER, "vocab bytes: %d tokens from offset %u: expected >= 1 from 0", n,
                       n > 0 ? off[0] : 0);
    for (int i = 0; i < n; i++)
        if (off[i + 1] < off[i])
            return g4_fail(G4_EUSER, "vocab bytes: offset of token %d goes backwards", i + 1);
    out->n = n;
    out->off = g4_malloc(sizeof(uint32_t) * (size_t)(n + 1));
    memcpy(out->off, off, sizeof(uint32_t) * (size_t)(n + 1));
    out->bytes = g4_malloc(off[n] + 1u);
    memcpy(out->bytes, bytes, off[n]);
    vb_sort(out);
    return G4_OK;
}

static int hexdig(int c) {
    return is_digit(c) ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int g4_vocab_bytes_build(const g4_tokenizer *tok, g4_vocab_bytes *out) {
    memset(out, 0, sizeof *out);
    const int n = g4_tokenizer_n_vocab(tok);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        size_t len = 0;
        if (g4_tokenizer_piece(tok, i, &len)) total += len;
    }
    if (total > 0xffffffffu)
        return g4_fail(G4_EUSER, "vocab bytes: %zu bytes of pieces: expected < 4 GiB", total);
    out->n = n;
    out->off = g4_malloc(sizeof(uint32_t) * (size_t)(n + 1));
    out->bytes = g4_malloc(total + 1);
    uint32_t at = 0;
    for (int i = 0; i < n; i++) {
        out->off[i] = at;
        size_t len = 0;
        const char *p = g4_tokenizer_piece(tok, i, &len);
        if (!p || g4_tokenizer_is_special(tok, i)) continue;
        if (len == 6 && !memcmp(p, "<0x", 3) && p[5] == '>' && hexdig(p[3]) >= 0 &&
            hexdig(p[4]) >= 0) { // byte fallback
            out->bytes[at++] = (uint8_t)(hexdig(p[3]) * 16 + hexdig(p[4]));
            continue;
        }
        for (size_t k = 0; k < len; k++) {
            if (k + 2 < len && !memcmp(p + k, "\xe2\x96\x81", 3)) { // ▁ -> ' ' (shorter)
                out->bytes[at++] = ' ';
                k += 2;
            } else {
                out->bytes[at++] = (uint8_t)p[k];
            }
        }
    }
    out->off[n] = at;
    vb_sort(out);
    return G4_OK;
}

void g4_vocab_bytes_free(g4_vocab_bytes *v) {
    free(v->off);
    free(v->bytes);
    free(v->order);
    free(v->plain);
    memset(v, 0, sizeof *v);
}

int g4_json_mask(const g4_json_state *st, const g4_vocab_bytes *vb, uint8_t *allowed, int V,
                 g4_json_state *scratch) {
    memset(allowed, 0, (size_t)V);
    g4_json_copy(&scratch[0], st);
    int ok_len = 0, died = 0, count = 0; // the last token walked: bytes fed, whether it failed
    const uint8_t *prev = NULL;
    int prev_len = 0;
    // inside a string (not an escape or a UTF-8 sequence) plain tokens are accepted as they
    // are; the walk skips them (prev stays the last token walked, whose states scratch holds)
    const g4_json_frame *top = st->depth > 0 ? &st->f[st->depth - 1] : NULL;
    const int in_string = !st->done && top && top->kind == F_STR && top->sub == S_IN;
    for (int k = 0; k < vb->n_sorted; k++) {
        const int id = vb->order[k];
        if (in_string && vb->plain[id]) {
            if (id < V) allowed[id] = 1, count++;
            continue;
        }
        const uint8_t *b = vb->bytes + vb->off[id];
        const int len = (int)(vb->off[id + 1] - vb->off[id]);
        int lcp = 0;
        while (lcp < len && lcp < prev_len && b[lcp] == prev[lcp]) lcp++;
        prev = b;
        prev_len = len;
        if (died && lcp > ok_len) continue; // shares the prefix that failed
        int i = lcp < ok_len ? lcp : ok_len;
        died = 0;
        for (; i < len; i++) {
            g4_json_copy(&scratch[i + 1], &scratch[i]);
            if (!g4_json_feed(&scratch[i + 1], b + i, 1)) {
                died = 1;
                break;
            }
        }
        ok_len = i;
        if (!died && id < V) {
            allowed[id] = 1;
            count++;
        }
    }
    return count;
}
