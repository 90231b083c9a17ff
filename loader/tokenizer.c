// tokenizer.c: loading a tokenizer.json (see tokenizer.h) and the id <-> piece lookups.
// model.vocab and model.merges are read by tokenizer_vocab.c; everything else (added tokens,
// normalizer, pre-tokenizer, decoder, post-processor, model options) through cJSON here.
#include <stdio.h>
#include <stdlib.h>
#include <utf8proc.h>

#include "loader/json.h"
#include "loader/tokenizer_impl.h"

// --- small containers ---------------------------------------------------------------------
void g4_ids_push(g4_ids *a, int id) {
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 64;
        a->v = g4_realloc(a->v, a->cap * sizeof *a->v);
    }
    a->v[a->n++] = id;
}

void g4_ids_free(g4_ids *a) {
    free(a->v);
    memset(a, 0, sizeof *a);
}

static tok_str arena_add(g4_tokenizer *t, const char *s, size_t n) {
    if (t->arena_len + n + 1 > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 4096;
        while (cap < t->arena_len + n + 1) cap *= 2;
        t->arena = g4_realloc(t->arena, cap);
        t->arena_cap = cap;
    }
    tok_str r = {(uint32_t)t->arena_len, (uint32_t)n};
    if (n) memcpy(t->arena + t->arena_len, s, n);
    t->arena_len += n;
    return r;
}

uint64_t tok_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; // FNV-1a, then a final mix for the low bits
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 32);
}

static uint32_t pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n) c *= 2;
    return (uint32_t)c;
}

int64_t tok_index_build(tok_index *ix, const g4_tokenizer *t, const tok_str *strs, size_t count) {
    uint32_t cap = pow2_at_least((uint64_t)count * 2 + 1);
    ix->slot = g4_calloc(cap, sizeof *ix->slot);
    ix->mask = cap - 1;
    int64_t dup = -1;
    for (size_t k = 0; k < count; k++) {
        if (strs[k].len == TOK_NONE) continue;
        const char *s = tok_s(t, strs[k]);
        uint64_t h = tok_hash(s, strs[k].len), tag = h >> 32 << 32;
        uint32_t i = (uint32_t)h & ix->mask;
        int present = 0;
        for (; ix->slot[i]; i = (i + 1) & ix->mask) {
            if ((ix->slot[i] >> 32 << 32) != tag) continue;
            const tok_str *o = &strs[(uint32_t)ix->slot[i] - 1];
            if (o->len == strs[k].len && memcmp(tok_s(t, *o), s, o->len) == 0) {
                present = 1;
                break;
            }
        }
        if (present) {
            if (dup < 0) dup = (int64_t)k;
            continue;
        }
        ix->slot[i] = tag | ((uint64_t)k + 1);
    }
    return dup;
}

int64_t tok_index_find(const tok_index *ix, const g4_tokenizer *t, const tok_str *strs,
                       const char *s, size_t n) {
    if (!ix->slot) return -1;
    uint64_t h = tok_hash(s, n), tag = h >> 32 << 32;
    for (uint32_t i = (uint32_t)h & ix->mask; ix->slot[i]; i = (i + 1) & ix->mask) {
        if ((ix->slot[i] >> 32 << 32) != tag) continue;
        uint32_t k = (uint32_t)ix->slot[i] - 1;
        if (strs[k].len == n && memcmp(tok_s(t, strs[k]), s, n) == 0) return k;
    }
    return -1;
}

// --- merge map ------------------------------------------------------------------------------
static uint64_t mix64(uint64_t x) { // splitmix64 finaliser
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void merge_alloc(tok_merge_map *m, uint64_t cap) {
    m->e = g4_calloc(cap, sizeof *m->e);
    m->mask = cap - 1;
    m->n = 0;
}

static void merge_rehash(tok_merge_map *m, uint64_t cap) {
    tok_merge_map big;
    merge_alloc(&big, cap);
    for (uint64_t i = 0; m->e && i <= m->mask; i++)
        if (m->e[i].key) {
            uint64_t j = mix64(m->e[i].key) & big.mask;
            while (big.e[j].key) j = (j + 1) & big.mask;
            big.e[j] = m->e[i];
            big.n++;
        }
    free(m->e);
    *m = big;
}

void tok_merge_reserve(tok_merge_map *m, uint64_t n) {
    uint64_t cap = 1 << 12;
    while (cap < n * 2) cap *= 2;
    if (!m->e || cap > m->mask + 1) merge_rehash(m, cap);
}

void tok_merge_put(tok_merge_map *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t merged) {
    if (!m->e) merge_alloc(m, 1 << 12);
    if ((uint64_t)(m->n + 1) * 2 > m->mask + 1) merge_rehash(m, (m->mask + 1) * 2); // load < 1/2
    uint64_t key = ((uint64_t)a << 32 | b) + 1;
    uint64_t i = mix64(key) & m->mask;
    while (m->e[i].key && m->e[i].key != key) i = (i + 1) & m->mask;
    if (!m->e[i].key) m->n++;
    // A pair listed twice keeps its last rank: HF collects the list into a HashMap.
    m->e[i] = (tok_merge_entry){key, rank, merged};
}

int tok_merge_get(const tok_merge_map *m, uint32_t a, uint32_t b, uint32_t *rank,
                  uint32_t *merged) {
    if (!m->e) return 0;
    uint64_t key = ((uint64_t)a << 32 | b) + 1;
    for (uint64_t i = mix64(key) & m->mask; m->e[i].key; i = (i + 1) & m->mask)
        if (m->e[i].key == key) {
            *rank = m->e[i].rank;
            *merged = m->e[i].merged;
            return 1;
        }
    return 0;
}

// --- character classes ------------------------------------------------------------------------
int tok_is_space(int32_t cp) {
    // The Unicode White_Space property (PropList.txt), which utf8proc does not expose.
    return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
           cp == 0x205f || cp == 0x3000;
}

int tok_is_word(int32_t cp) {
    // Rust regex \w = Alphabetic + M + Nd + Pc + Join_Control. Alphabetic is approximated by the
    // letter categories and Nl (it also holds a few Other_Alphabetic symbols such as circled
    // letters): only the single_word rule of added tokens uses this.
    if (cp == 0x200c || cp == 0x200d) return 1;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
        return 1;
    default:
        return 0;
    }
}

static int valid_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k =
            utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) return 0;
        i += (size_t)k;
    }
    return 1;
}

// --- reading the configuration through cJSON ----------------------------------------------------
// A string member of obj (what = path for messages); *out borrowed from the cJSON tree.
static int cfg_str(const g4_tokenizer *t, const cJSON *obj, const char *key, const char *what,
                   int required, const char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) {
        if (required)
            return g4_fail(G4_EUSER, "%s: %s.%s is missing (expected a string)", t->name, what,
                           key);
        return G4_OK;
    }
    if (!cJSON_IsString(v))
        return g4_fail(G4_EUSER, "%s: %s.%s: expected a string, found %s", t->name, what, key,
                       g4_json_type_name(v));
    if (!valid_utf8(v->valuestring, strlen(v->valuestring)))
        return g4_fail(G4_EUSER, "%s: %s.%s: invalid UTF-8", t->name, what, key);
    *out = v->valuestring;
    return G4_OK;
}

static int cfg_bool(const g4_tokenizer *t, const cJSON *obj, const char *key, const char *what,
                    int def, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = def;
    if (!v || cJSON_IsNull(v)) return G4_OK;
    if (!cJSON_IsBool(v))
        return g4_fail(G4_EUSER, "%s: %s.%s: expected true or false, found %s", t->name, what, key,
                       g4_json_type_name(v));
    *out = cJSON_IsTrue(v);
    return G4_OK;
}

static int cfg_int(const g4_tokenizer *t, const cJSON *obj, const char *key, const char *what,
                   int lo, int hi, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int64_t)v->valuedouble ||
        v->valuedouble < lo || v->valuedouble > hi)
        return g4_fail(G4_EUSER, "%s: %s.%s: expected an integer in [%d, %d], found %s", t->name,
                       what, key, lo, hi,
                       v && cJSON_IsNumber(v) ? "another number" : g4_json_type_name(v));
    *out = (int)v->valuedouble;
    return G4_OK;
}

static int cfg_type(const g4_tokenizer *t, const cJSON *obj, const char *what, const char **type) {
    if (!cJSON_IsObject(obj))
        return g4_fail(G4_EUSER, "%s: %s: expected an object or null, found %s", t->name, what,
                       g4_json_type_name(obj));
    return cfg_str(t, obj, "type", what, 1, type);
}

// {"String": "x"} -> x. Regex patterns are refused: HF runs them through Oniguruma, whose
// semantics we do not reproduce, and Gemma's file has none.
static int cfg_pattern(g4_tokenizer *t, const cJSON *obj, const char *what, tok_str *out) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(obj, "pattern");
    if (!cJSON_IsObject(p))
        return g4_fail(G4_EUSER, "%s: %s.pattern: expected {\"String\": ...}, found %s", t->name,
                       what, g4_json_type_name(p));
    if (cJSON_GetObjectItemCaseSensitive(p, "Regex"))
        return g4_fail(G4_EUSER, "%s: %s.pattern: Regex patterns are not supported (only String)",
                       t->name, what);
    const char *s;
    char w[256];
    snprintf(w, sizeof w, "%s.pattern", what);
    int rc = cfg_str(t, p, "String", w, 1, &s);
    if (rc) return rc;
    if (!*s)
        return g4_fail(G4_EUSER, "%s: %s.pattern: the empty string is not supported", t->name,
                       what);
    *out = arena_add(t, s, strlen(s));
    return G4_OK;
}

static int read_normalizer(g4_tokenizer *t, const cJSON *n, const char *what) {
    if (!n || cJSON_IsNull(n)) return G4_OK;
    const char *type;
    int rc = cfg_type(t, n, what, &type);
    if (rc) return rc;
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        if (!cJSON_IsArray(list))
            return g4_fail(G4_EUSER, "%s: %s.normalizers: expected an array, found %s", t->name,
                           what, g4_json_type_name(list));
        int k = 0;
        for (const cJSON *e = list->child; e; e = e->next, k++) {
            char w[256];
            snprintf(w, sizeof w, "%s.normalizers[%d]", what, k);
            if ((rc = read_normalizer(t, e, w))) return rc;
        }
        return G4_OK;
    }
    tok_norm_step st = {0};
    const char *s;
    if (!strcmp(type, "Replace")) {
        st.kind = TOK_NORM_REPLACE;
        if ((rc = cfg_pattern(t, n, what, &st.pattern))) return rc;
        if ((rc = cfg_str(t, n, "content", what, 1, &s))) return rc;
        st.content = arena_add(t, s, strlen(s));
    } else if (!strcmp(type, "Prepend")) {
        st.kind = TOK_NORM_PREPEND;
        if ((rc = cfg_str(t, n, "prepend", what, 1, &s))) return rc;
        st.content = arena_add(t, s, strlen(s));
    } else {
        return g4_fail(G4_EUSER,
                       "%s: %s: normalizer type '%s' is not supported (expected "
                       "Replace, Prepend or Sequence)",
                       t->name, what, type);
    }
    t->norm = g4_realloc(t->norm, (size_t)(t->n_norm + 1) * sizeof *t->norm);
    t->norm[t->n_norm++] = st;
    return G4_OK;
}

static int read_pre_tokenizer(g4_tokenizer *t, const cJSON *p, const char *what) {
    if (!p || cJSON_IsNull(p)) return G4_OK;
    const char *type;
    int rc = cfg_type(t, p, what, &type);
    if (rc) return rc;
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
        if (!cJSON_IsArray(list))
            return g4_fail(G4_EUSER, "%s: %s.pretokenizers: expected an array, found %s", t->name,
                           what, g4_json_type_name(list));
        int k = 0;
        for (const cJSON *e = list->child; e; e = e->next, k++) {
            char w[256];
            snprintf(w, sizeof w, "%s.pretokenizers[%d]", what, k);
            if ((rc = read_pre_tokenizer(t, e, w))) return rc;
        }
        return G4_OK;
    }
    if (strcmp(type, "Split"))
        return g4_fail(G4_EUSER,
                       "%s: %s: pre-tokenizer type '%s' is not supported (expected "
                       "Split or Sequence)",
                       t->name, what, type);
    tok_split_step st = {0};
    if ((rc = cfg_pattern(t, p, what, &st.pattern))) return rc;
    const char *b;
    if ((rc = cfg_str(t, p, "behavior", what, 1, &b))) return rc;
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                        "MergedWithNext", "Contiguous"};
    int found = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(b, names[i])) found = i;
    if (found < 0)
        return g4_fail(G4_EUSER,
                       "%s: %s.behavior: unknown value '%s' (expected Removed, "
                       "Isolated, MergedWithPrevious, MergedWithNext or Contiguous)",
                       t->name, what, b);
    st.behavior = (tok_split_behavior)found;
    if ((rc = cfg_bool(t, p, "invert", what, 0, &st.invert))) return rc;
    t->split = g4_realloc(t->split, (size_t)(t->n_split + 1) * sizeof *t->split);
    t->split[t->n_split++] = st;
    return G4_OK;
}

static int read_decoder(g4_tokenizer *t, const cJSON *d, const char *what) {
    const char *type;
    int rc = cfg_type(t, d, what, &type);
    if (rc) return rc;
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(d, "decoders");
        if (!cJSON_IsArray(list))
            return g4_fail(G4_EUSER, "%s: %s.decoders: expected an array, found %s", t->name, what,
                           g4_json_type_name(list));
        int k = 0;
        for (const cJSON *e = list->child; e; e = e->next, k++) {
            char w[256];
            snprintf(w, sizeof w, "%s.decoders[%d]", what, k);
            if ((rc = read_decoder(t, e, w))) return rc;
        }
        return G4_OK;
    }
    tok_dec_step st = {0};
    if (!strcmp(type, "Replace")) {
        st.kind = TOK_DEC_REPLACE;
        const char *s;
        if ((rc = cfg_pattern(t, d, what, &st.pattern))) return rc;
        if ((rc = cfg_str(t, d, "content", what, 1, &s))) return rc;
        st.content = arena_add(t, s, strlen(s));
    } else if (!strcmp(type, "ByteFallback")) {
        st.kind = TOK_DEC_BYTE_FALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        st.kind = TOK_DEC_FUSE;
    } else if (!strcmp(type, "Strip")) {
        st.kind = TOK_DEC_STRIP;
        const char *s;
        if ((rc = cfg_str(t, d, "content", what, 1, &s))) return rc;
        utf8proc_int32_t cp;
        size_t sl = strlen(s);
        if (utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)sl, &cp) !=
                (utf8proc_ssize_t)sl ||
            sl == 0)
            return g4_fail(G4_EUSER, "%s: %s.content: expected one character, got '%s'", t->name,
                           what, s);
        st.strip_char = (uint32_t)cp;
        if ((rc = cfg_int(t, d, "start", what, 0, 1 << 20, &st.strip_start))) return rc;
        if ((rc = cfg_int(t, d, "stop", what, 0, 1 << 20, &st.strip_stop))) return rc;
    } else {
        return g4_fail(G4_EUSER,
                       "%s: %s: decoder type '%s' is not supported (expected Replace, "
                       "ByteFallback, Fuse, Strip or Sequence)",
                       t->name, what, type);
    }
    t->dec = g4_realloc(t->dec, (size_t)(t->n_dec + 1) * sizeof *t->dec);
    t->dec[t->n_dec++] = st;
    return G4_OK;
}

// TemplateProcessing: the ids of the special tokens before and after $A in "single".
static int read_post_processor(g4_tokenizer *t, const cJSON *p) {
    if (!p || cJSON_IsNull(p)) return G4_OK;
    const char *type;
    int rc = cfg_type(t, p, "post_processor", &type);
    if (rc) return rc;
    if (strcmp(type, "TemplateProcessing"))
        return g4_fail(G4_EUSER,
                       "%s: post_processor: type '%s' is not supported (expected "
                       "TemplateProcessing or null)",
                       t->name, type);
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(p, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(p, "special_tokens");
    if (!cJSON_IsArray(single))
        return g4_fail(G4_EUSER, "%s: post_processor.single: expected an array, found %s", t->name,
                       g4_json_type_name(single));
    int seen_a = 0, k = 0;
    for (const cJSON *e = single->child; e; e = e->next, k++) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        const cJSON *sq = cJSON_GetObjectItemCaseSensitive(e, "Sequence");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(sp ? sp : sq, "id");
        if (!cJSON_IsString(id))
            return g4_fail(G4_EUSER,
                           "%s: post_processor.single[%d]: expected {\"SpecialToken\": "
                           "{\"id\": ...}} or {\"Sequence\": {\"id\": \"A\"}}",
                           t->name, k);
        if (sq) {
            if (strcmp(id->valuestring, "A") || seen_a)
                return g4_fail(G4_EUSER,
                               "%s: post_processor.single[%d]: expected one "
                               "sequence A, got '%s'",
                               t->name, k, id->valuestring);
            seen_a = 1;
            continue;
        }
        const cJSON *entry = cJSON_GetObjectItemCaseSensitive(specials, id->valuestring);
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(entry, "ids");
        if (!cJSON_IsArray(ids))
            return g4_fail(G4_EUSER, "%s: post_processor.special_tokens: no ids for '%s'", t->name,
                           id->valuestring);
        for (const cJSON *v = ids->child; v; v = v->next) {
            if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int)v->valuedouble ||
                v->valuedouble < 0 || v->valuedouble >= t->n_vocab)
                return g4_fail(G4_EUSER,
                               "%s: post_processor.special_tokens['%s'].ids: expected "
                               "ids in [0, %d)",
                               t->name, id->valuestring, t->n_vocab);
            g4_ids_push(seen_a ? &t->suffix : &t->prefix, (int)v->valuedouble);
        }
    }
    if (!seen_a)
        return g4_fail(G4_EUSER, "%s: post_processor.single: no {\"Sequence\": {\"id\": \"A\"}}",
                       t->name);
    return G4_OK;
}

static int read_model_options(g4_tokenizer *t, const cJSON *m, const char **unk) {
    const char *type, *s;
    int rc;
    if ((rc = cfg_str(t, m, "type", "model", 0, &type))) return rc;
    if (type && strcmp(type, "BPE"))
        return g4_fail(G4_EUSER, "%s: model.type is '%s'; only BPE is supported", t->name, type);
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    if (dropout && !cJSON_IsNull(dropout) &&
        !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return g4_fail(G4_EUSER,
                       "%s: model.dropout: expected null or 0 (BPE dropout makes "
                       "encoding random)",
                       t->name);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        if ((rc = cfg_str(t, m, affixes[i], "model", 0, &s))) return rc;
        if (s && *s)
            return g4_fail(G4_EUSER, "%s: model.%s is '%s'; only null is supported", t->name,
                           affixes[i], s);
    }
    if ((rc = cfg_str(t, m, "unk_token", "model", 0, unk))) return rc;
    if ((rc = cfg_bool(t, m, "fuse_unk", "model", 0, &t->fuse_unk))) return rc;
    if ((rc = cfg_bool(t, m, "byte_fallback", "model", 0, &t->byte_fallback))) return rc;
    return cfg_bool(t, m, "ignore_merges", "model", 0, &t->ignore_merges);
}

static void grow_ids(g4_tokenizer *t, int n_ids) {
    if (n_ids <= t->n_vocab) return;
    t->model = g4_realloc(t->model, (size_t)n_ids * sizeof *t->model);
    for (int i = t->n_vocab; i < n_ids; i++) t->model[i] = (tok_str){0, TOK_NONE};
    t->n_vocab = n_ids;
}

static int read_added_tokens(g4_tokenizer *t, const cJSON *list) {
    if (!list || cJSON_IsNull(list)) return G4_OK;
    if (!cJSON_IsArray(list))
        return g4_fail(G4_EUSER, "%s: added_tokens: expected an array, found %s", t->name,
                       g4_json_type_name(list));
    int n = cJSON_GetArraySize(list), k = 0, rc;
    t->added = g4_calloc((size_t)n + 1, sizeof *t->added);
    for (const cJSON *e = list->child; e; e = e->next, k++) {
        char w[64];
        snprintf(w, sizeof w, "added_tokens[%d]", k);
        if (!cJSON_IsObject(e))
            return g4_fail(G4_EUSER, "%s: %s: expected an object, found %s", t->name, w,
                           g4_json_type_name(e));
        tok_added a = {0};
        const char *content;
        if ((rc = cfg_int(t, e, "id", w, 0, TOK_MAX_IDS - 1, &a.id))) return rc;
        if ((rc = cfg_str(t, e, "content", w, 1, &content))) return rc;
        if ((rc = cfg_bool(t, e, "special", w, 0, &a.special))) return rc;
        if ((rc = cfg_bool(t, e, "normalized", w, !a.special, &a.normalized))) return rc;
        if ((rc = cfg_bool(t, e, "lstrip", w, 0, &a.lstrip))) return rc;
        if ((rc = cfg_bool(t, e, "rstrip", w, 0, &a.rstrip))) return rc;
        if ((rc = cfg_bool(t, e, "single_word", w, 0, &a.single_word))) return rc;
        size_t len = strlen(content);
        if (len == 0) continue; // HF ignores empty added tokens
        // HF gives an added token the model's id for its content when there is one; a file
        // where the two disagree was edited by hand, and we refuse it rather than guess.
        int mid = tok_model_id(t, content, len);
        if (mid >= 0 && mid != a.id)
            return g4_fail(G4_EUSER, "%s: %s: '%s' has id %d but model.vocab gives it id %d",
                           t->name, w, content, a.id, mid);
        if (mid < 0 && a.id < t->n_vocab && t->model[a.id].len != TOK_NONE)
            return g4_fail(G4_EUSER, "%s: %s: id %d of '%s' is already the piece '%.*s'", t->name,
                           w, a.id, content, (int)t->model[a.id].len, tok_s(t, t->model[a.id]));
        a.content = arena_add(t, content, len);
        t->added[t->n_added++] = a;
    }
    // Ids, duplicates and the per-id tables.
    for (int i = 0; i < t->n_added; i++) grow_ids(t, t->added[i].id + 1);
    // Content -> added token (g4_tokenizer_id), which also finds repeated contents.
    t->added_contents = g4_malloc((size_t)(t->n_added + 1) * sizeof *t->added_contents);
    for (int i = 0; i < t->n_added; i++) t->added_contents[i] = t->added[i].content;
    int64_t dup = tok_index_build(&t->added_index, t, t->added_contents, (size_t)t->n_added);
    if (dup >= 0)
        return g4_fail(G4_EUSER, "%s: added_tokens: '%.*s' appears twice", t->name,
                       (int)t->added[dup].content.len, tok_s(t, t->added[dup].content));
    t->added_of_id = g4_malloc((size_t)t->n_vocab * sizeof *t->added_of_id);
    t->special = g4_calloc((size_t)t->n_vocab, 1);
    for (int i = 0; i < t->n_vocab; i++) t->added_of_id[i] = -1;
    for (int i = 0; i < t->n_added; i++) {
        if (t->added_of_id[t->added[i].id] >= 0)
            return g4_fail(G4_EUSER, "%s: added_tokens: id %d is given to '%.*s' and '%.*s'",
                           t->name, t->added[i].id,
                           (int)t->added[t->added_of_id[t->added[i].id]].content.len,
                           tok_s(t, t->added[t->added_of_id[t->added[i].id]].content),
                           (int)t->added[i].content.len, tok_s(t, t->added[i].content));
        t->added_of_id[t->added[i].id] = i;
    }
    return G4_OK;
}

// decode's skip_special drops an id when the string it decodes from is the content of a special
// added token (HF's is_special_token(token)). For a special token with normalized=true that
// string is its normalized form (HF 0.23's simple_id_to_token), which is usually not a special
// content, so HF keeps such tokens: the rule is reproduced as is. Needs the patterns.
static void mark_special(g4_tokenizer *t) {
    tok_str *sc = g4_malloc((size_t)(t->n_added + 1) * sizeof *sc);
    int n = 0;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].special) sc[n++] = t->added[i].content;
    tok_index ix = {0};
    tok_index_build(&ix, t, sc, (size_t)n);
    // Only added tokens can match: a model piece spelled like a special token has that token's
    // id (read_added_tokens checks it), so decode sees the added token there.
    for (int i = 0; i < t->n_added; i++) {
        const tok_added *a = &t->added[i];
        if (tok_index_find(&ix, t, sc, tok_s(t, a->pattern), a->pattern.len) >= 0)
            t->special[a->id] = 1;
    }
    free(ix.slot);
    free(sc);
}

// The two matchers: normalized=false tokens on raw text, normalized=true ones (their content
// through the normalizer) on normalized text. HF lists special tokens before the others, which
// decides between two tokens whose patterns coincide.
static int build_matchers(g4_tokenizer *t) {
    for (int i = 0; i < t->n_added; i++) {
        tok_added *a = &t->added[i];
        if (!a->normalized) {
            a->pattern = a->content;
            continue;
        }
        size_t n;
        char *p = tok_normalize(t, tok_s(t, a->content), a->content.len, &n);
        if (n == 0) {
            free(p);
            return g4_fail(G4_EUSER, "%s: added token '%.*s' normalizes to the empty string",
                           t->name, (int)a->content.len, tok_s(t, a->content));
        }
        a->pattern = arena_add(t, p, n);
        free(p);
    }
    for (int norm = 0; norm < 2; norm++) {
        tok_matcher *m = norm ? &t->norm_matcher : &t->raw_matcher;
        m->pat = g4_malloc((size_t)(t->n_added + 1) * sizeof *m->pat);
        m->added = g4_malloc((size_t)(t->n_added + 1) * sizeof *m->added);
        m->lengths = g4_malloc((size_t)(t->n_added + 1) * sizeof *m->lengths);
        for (int pass = 0; pass < 2; pass++) // specials first, then the others, in file order
            for (int i = 0; i < t->n_added; i++) {
                const tok_added *a = &t->added[i];
                if (a->normalized != norm || a->special != !pass) continue;
                m->pat[m->n] = a->pattern;
                m->added[m->n++] = i;
                uint8_t b0 = (uint8_t)tok_s(t, a->pattern)[0];
                m->first[b0 >> 3] |= (uint8_t)(1u << (b0 & 7));
                int len = (int)a->pattern.len, known = 0;
                for (int k = 0; k < m->n_lengths; k++) known |= m->lengths[k] == len;
                if (!known) m->lengths[m->n_lengths++] = len;
            }
        for (int i = 1; i < m->n_lengths; i++) // insertion sort, longest first
            for (int k = i; k > 0 && m->lengths[k] > m->lengths[k - 1]; k--) {
                int x = m->lengths[k];
                m->lengths[k] = m->lengths[k - 1];
                m->lengths[k - 1] = x;
            }
        tok_index_build(&m->index, t, m->pat, (size_t)m->n); // a repeated pattern: the first wins
    }
    return G4_OK;
}

// What the model options need from the vocabulary: byte pieces and the unk token.
static void find_byte_and_unk_ids(g4_tokenizer *t, const char *unk) {
    for (int b = 0; b < 256; b++) { // "<0x%02X>", as HF's format!("<{:#04X}>")
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_id[b] = tok_model_id(t, name, 6);
    }
    t->unk_id = -1;
    if (unk) {
        t->unk_id = tok_model_id(t, unk, strlen(unk));
        t->unk_missing = t->unk_id < 0;
    }
}

// Truncation would cut a long prompt and fixed padding would lengthen a short one: refused.
// Padding to the longest of a batch (what HF saves after enable_padding()) changes nothing for
// one text, so it is accepted.
static int check_truncation_padding(const char *name, const cJSON *root) {
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(root, "truncation");
    if (tr && !cJSON_IsNull(tr))
        return g4_fail(G4_EUSER, "%s: truncation: expected null (g4cu never truncates a prompt)",
                       name);
    const cJSON *pad = cJSON_GetObjectItemCaseSensitive(root, "padding");
    if (!pad || cJSON_IsNull(pad)) return G4_OK;
    const cJSON *strategy = cJSON_GetObjectItemCaseSensitive(pad, "strategy");
    const cJSON *multiple = cJSON_GetObjectItemCaseSensitive(pad, "pad_to_multiple_of");
    if (!cJSON_IsString(strategy) || strcmp(strategy->valuestring, "BatchLongest") ||
        (multiple && !cJSON_IsNull(multiple)))
        return g4_fail(G4_EUSER,
                       "%s: padding: expected null or BatchLongest without "
                       "pad_to_multiple_of (fixed padding would change the ids of one text)",
                       name);
    return G4_OK;
}

int g4_tokenizer_parse(const char *js, size_t n, const char *name, g4_tokenizer **out) {
    *out = NULL;
    g4_tokenizer *t = g4_calloc(1, sizeof *t);
    t->name = g4_strdup(name);
    size_t vocab[2], merges[2];
    int rc = tok_read_big_sections(t, js, n, vocab, merges);
    if (!rc && vocab[0] == SIZE_MAX)
        rc = g4_fail(G4_EUSER, "%s: model.vocab is missing (expected a BPE model)", name);
    if (!rc && merges[0] == SIZE_MAX)
        rc = g4_fail(G4_EUSER, "%s: model.merges is missing (expected a BPE model)", name);
    g4_json j = {0};
    if (!rc) { // the document without its two big values, for cJSON
        int merges_first = merges[0] < vocab[0];
        const size_t *a = merges_first ? merges : vocab, *b = merges_first ? vocab : merges;
        size_t len = n - (a[1] - a[0]) - (b[1] - b[0]) + 4;
        char *rest = g4_malloc(len + 1), *p = rest;
        memcpy(p, js, a[0]), p += a[0];
        memcpy(p, merges_first ? "[]" : "{}", 2), p += 2;
        memcpy(p, js + a[1], b[0] - a[1]), p += b[0] - a[1];
        memcpy(p, merges_first ? "{}" : "[]", 2), p += 2;
        memcpy(p, js + b[1], n - b[1]), p += n - b[1];
        *p = 0;
        rc = g4_json_parse(rest, len, name, &j);
        free(rest);
    }
    const cJSON *root = j.root, *model = NULL;
    if (!rc) {
        model = cJSON_GetObjectItemCaseSensitive(root, "model");
        if (!cJSON_IsObject(model))
            rc = g4_fail(G4_EUSER, "%s: model: expected an object, found %s", name,
                         g4_json_type_name(model));
    }
    if (!rc) rc = check_truncation_padding(name, root);
    const char *unk = NULL;
    if (!rc) rc = read_model_options(t, model, &unk);
    if (!rc) find_byte_and_unk_ids(t, unk);
    if (!rc)
        rc = read_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), "normalizer");
    if (!rc)
        rc = read_pre_tokenizer(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"),
                                "pre_tokenizer");
    if (!rc) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "decoder");
        t->has_decoder = d && !cJSON_IsNull(d);
        if (t->has_decoder) rc = read_decoder(t, d, "decoder");
    }
    if (!rc) rc = read_added_tokens(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"));
    if (!rc && !t->added_of_id) { // no added tokens: the per-id tables are still needed
        t->added_of_id = g4_malloc((size_t)(t->n_vocab + 1) * sizeof *t->added_of_id);
        t->special = g4_calloc((size_t)t->n_vocab + 1, 1);
        for (int i = 0; i < t->n_vocab; i++) t->added_of_id[i] = -1;
    }
    if (!rc) rc = build_matchers(t);
    if (!rc) mark_special(t);
    if (!rc) rc = read_post_processor(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"));
    if (j.root) g4_json_close(&j);
    if (rc) {
        g4_tokenizer_close(t);
        return rc;
    }
    *out = t;
    return G4_OK;
}

int g4_tokenizer_open(const char *path, g4_tokenizer **out) {
    g4_mapped_file f;
    *out = NULL;
    int rc = g4_map_file_max(path, G4_MAX_TOKENIZER_BYTES, &f);
    if (rc) return rc;
    rc = g4_tokenizer_parse(f.data ? (const char *)f.data : "", (size_t)f.size, path, out);
    g4_unmap_file(&f);
    return rc;
}

static void matcher_free(tok_matcher *m) {
    free(m->lengths);
    free(m->pat);
    free(m->added);
    free(m->index.slot);
}

void g4_tokenizer_close(g4_tokenizer *t) {
    if (!t) return;
    free(t->name);
    free(t->arena);
    free(t->model);
    free(t->model_index.slot);
    free(t->added_of_id);
    free(t->special);
    free(t->merges.e);
    free(t->added);
    free(t->added_contents);
    free(t->added_index.slot);
    matcher_free(&t->raw_matcher);
    matcher_free(&t->norm_matcher);
    free(t->norm);
    free(t->split);
    free(t->dec);
    g4_ids_free(&t->prefix);
    g4_ids_free(&t->suffix);
    free(t);
}

// --- lookups ------------------------------------------------------------------------------------
int g4_tokenizer_n_vocab(const g4_tokenizer *t) {
    return t->n_vocab;
}
int g4_tokenizer_n_merges(const g4_tokenizer *t) {
    return t->n_merges;
}
int g4_tokenizer_n_added(const g4_tokenizer *t) {
    return t->n_added;
}

int g4_tokenizer_id(const g4_tokenizer *t, const char *piece, size_t len) {
    int64_t a = tok_index_find(&t->added_index, t, t->added_contents, piece, len);
    if (a >= 0) return t->added[a].id;
    return tok_model_id(t, piece, len);
}

const char *g4_tokenizer_piece(const g4_tokenizer *t, int id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    // An added token reads as what its matcher looks for: the content, or for normalized=true
    // the content through the normalizer (as HF 0.23's id_to_token / decode).
    tok_str s = t->added_of_id[id] >= 0 ? t->added[t->added_of_id[id]].pattern : t->model[id];
    if (s.len == TOK_NONE) return NULL;
    if (len) *len = s.len;
    return tok_s(t, s);
}

int g4_tokenizer_is_special(const g4_tokenizer *t, int id) {
    return id >= 0 && id < t->n_vocab && t->special[id];
}
