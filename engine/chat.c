// chat.c: the E2B chat template (see chat.h) rendered as text or as token ids.
//
// Both outputs come from one walk over the template's parts (walk()): fixed text, the
// trimmed messages, and special tokens. As ids, adjacent text parts are joined and tokenized
// together, and each special token is pushed by its id: the same ids as tokenizing the whole
// expanded string, because the tokenizer cuts special tokens out before anything else.
#include "engine/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "base/str.h"

int g4_chat_tokens_find(const g4_tokenizer *tok, const char *what, g4_chat_tokens *out) {
    struct {
        const char *name;
        int *id;
        int required;
    } t[] = {
        {"<bos>", &out->bos, 1},          {"<|turn>", &out->turn_open, 1},
        {"<turn|>", &out->turn_close, 1}, {"<|image>", &out->boi, 0},
        {"<|image|>", &out->image, 0},    {"<image|>", &out->eoi, 0},
        {"<|audio>", &out->boa, 0},       {"<|audio|>", &out->audio, 0},
        {"<audio|>", &out->eoa, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        *t[i].id = g4_tokenizer_id(tok, t[i].name, strlen(t[i].name));
        if (*t[i].id < 0 && t[i].required)
            return g4_fail(G4_EUSER,
                           "%s: no '%s' token (expected a Gemma-4 tokenizer.json with the chat "
                           "template's special tokens)",
                           what, t[i].name);
    }
    return G4_OK;
}

// --- the walk ---------------------------------------------------------------------------------
typedef enum {
    SP_BOS,
    SP_TURN_OPEN,
    SP_TURN_CLOSE,
    SP_BOI,
    SP_IMAGE,
    SP_EOI,
    SP_BOA,
    SP_AUDIO,
    SP_EOA
} special;
static const char *const special_name[] = {"<bos>",    "<|turn>",   "<turn|>",
                                           "<|image>", "<|image|>", "<image|>",
                                           "<|audio>", "<|audio|>", "<audio|>"};

typedef struct {
    int expand; // 1: media as bracket + N placeholders + bracket (ids); 0: one placeholder
    g4_sb text; // text not yet flushed
    // ids mode
    const g4_tokenizer *tok;
    g4_chat_tokens ct;
    g4_ids *out;
} walker;

// Tokenizes the pending text (ids mode) and appends it; in text mode the text simply stays.
static int flush(walker *w) {
    if (!w->tok || w->text.n == 0) return G4_OK;
    g4_ids ids = {0};
    int rc = g4_tokenizer_encode(w->tok, w->text.p, w->text.n, 0, &ids);
    // (<|video|> too: the tokenizer has it, the engine takes no video, and a placeholder with
    // no medium behind it would reach the model as a bare soft-token slot)
    const int video = g4_tokenizer_id(w->tok, "<|video|>", 9);
    for (size_t i = 0; rc == G4_OK && i < ids.n; i++) {
        int id = ids.v[i];
        if ((id == w->ct.image && id >= 0) || (id == w->ct.audio && id >= 0) ||
            (id == video && id >= 0))
            rc = g4_fail(G4_EUSER,
                         "prompt text contains the media placeholder token '%s' itself; pass "
                         "images and audio as media, not as text",
                         id == w->ct.image ? "<|image|>" : id == w->ct.audio ? "<|audio|>" : "<|video|>");
        else
            g4_ids_push(w->out, id);
    }
    g4_ids_free(&ids);
    g4_sb_free(&w->text);
    return rc;
}

static int put_special(walker *w, special s) {
    if (!w->tok) {
        g4_sb_puts(&w->text, special_name[s]);
        return G4_OK;
    }
    int rc = flush(w);
    if (rc) return rc;
    const int ids[] = {w->ct.bos, w->ct.turn_open, w->ct.turn_close, w->ct.boi, w->ct.image,
                       w->ct.eoi, w->ct.boa,       w->ct.audio,      w->ct.eoa};
    if (ids[s] < 0)
        return g4_fail(G4_EUSER,
                       "the tokenizer has no '%s' token, which a prompt with this media needs",
                       special_name[s]);
    g4_ids_push(w->out, ids[s]);
    return G4_OK;
}

// Appends Python's s.strip() of a message (what Jinja's trim filter does).
static int put_trimmed(walker *w, const char *s, const char *what) {
    if (!s) return G4_OK;
    int rc = g4_py_check_utf8(s, what);
    if (rc) return rc;
    char *t = g4_py_strip(s);
    g4_sb_puts(&w->text, t);
    free(t);
    return G4_OK;
}

static int put_media(walker *w, special open, special ph, special close, int n) {
    int rc;
    if (!w->expand) return put_special(w, ph);
    if ((rc = put_special(w, open))) return rc;
    for (int i = 0; i < n; i++)
        if ((rc = put_special(w, ph))) return rc;
    return put_special(w, close);
}

// --- a conversation (the template's message loop; see chat.h) ----------------------------------
// A JSON value as the template's format_argument writes it (Python's str() of a number; keys
// in dictsort order: case-insensitive, stable).
static void put_argument(g4_sb *b, const cJSON *v, int escape_keys) {
    if (cJSON_IsNull(v)) {
        g4_sb_puts(b, "null");
    } else if (cJSON_IsString(v)) {
        g4_sb_puts(b, "<|\"|>");
        g4_sb_puts(b, v->valuestring);
        g4_sb_puts(b, "<|\"|>");
    } else if (cJSON_IsBool(v)) {
        g4_sb_puts(b, cJSON_IsTrue(v) ? "true" : "false");
    } else if (cJSON_IsNumber(v)) {
        char num[64];
        const double d = v->valuedouble;
        if (d == (double)(long long)d && d > -9.007199254740992e15 && d < 9.007199254740992e15)
            snprintf(num, sizeof num, "%lld", (long long)d);
        else // the shortest form that reads back the same, as Python's repr
            for (int prec = 1; prec <= 17; prec++) {
                snprintf(num, sizeof num, "%.*g", prec, d);
                if (strtod(num, NULL) == d) break;
            }
        g4_sb_puts(b, num);
    } else if (cJSON_IsArray(v)) {
        g4_sb_putc(b, '[');
        for (const cJSON *e = v->child; e; e = e->next) {
            put_argument(b, e, escape_keys);
            if (e->next) g4_sb_putc(b, ',');
        }
        g4_sb_putc(b, ']');
    } else if (cJSON_IsObject(v)) {
        int n = cJSON_GetArraySize(v), k = 0;
        const cJSON **kv = g4_calloc((size_t)n + 1, sizeof *kv);
        for (const cJSON *e = v->child; e; e = e->next) { // insertion sort: stable
            int at = k++;
            while (at > 0 && strcasecmp(kv[at - 1]->string, e->string) > 0) kv[at] = kv[at - 1], at--;
            kv[at] = e;
        }
        g4_sb_putc(b, '{');
        for (int i = 0; i < n; i++) {
            if (i) g4_sb_putc(b, ',');
            if (escape_keys) g4_sb_puts(b, "<|\"|>");
            g4_sb_puts(b, kv[i]->string);
            if (escape_keys) g4_sb_puts(b, "<|\"|>");
            g4_sb_putc(b, ':');
            put_argument(b, kv[i], escape_keys);
        }
        g4_sb_putc(b, '}');
        free(kv);
    }
}

// <|tool_call>call:NAME{k:v,...}<tool_call|>
static int put_call(walker *w, const g4_chat_tool_call *c, int i) {
    if (!c->name || !c->name[0])
        return g4_fail(G4_EUSER, "tool call %d: expected a function name", i + 1);
    int rc = g4_py_check_utf8(c->name, "a tool call's name");
    if (!rc && c->arguments) rc = g4_py_check_utf8(c->arguments, "a tool call's arguments");
    if (rc) return rc;
    cJSON *args = c->arguments ? cJSON_Parse(c->arguments) : NULL;
    if (c->arguments && !cJSON_IsObject(args)) {
        cJSON_Delete(args);
        return g4_fail(G4_EUSER, "tool call %d (%s): arguments: expected a JSON object", i + 1,
                       c->name);
    }
    g4_sb_puts(&w->text, "<|tool_call>call:");
    g4_sb_puts(&w->text, c->name);
    g4_sb_putc(&w->text, '{');
    const int n = args ? cJSON_GetArraySize(args) : 0;
    if (n) { // the top level's keys, sorted, unescaped: the object's own form without its braces
        g4_sb o = {0};
        put_argument(&o, args, 0);
        g4_sb_put(&w->text, o.p + 1, o.n - 2);
        g4_sb_free(&o);
    }
    g4_sb_puts(&w->text, "}<tool_call|>");
    cJSON_Delete(args);
    return G4_OK;
}

// The template's strip_thinking: the text outside <|channel>...<channel|>, trimmed.
static int put_model_text(walker *w, const char *s) {
    if (!s) return G4_OK;
    int rc = g4_py_check_utf8(s, "an assistant message");
    if (rc) return rc;
    g4_sb keep = {0};
    for (const char *p = s;;) {
        const char *close = strstr(p, "<channel|>");
        const size_t n = close ? (size_t)(close - p) : strlen(p);
        const char *open = memmem(p, n, "<|channel>", 10);
        g4_sb_put(&keep, p, open ? (size_t)(open - p) : n);
        if (!close) break;
        p = close + 10;
    }
    g4_sb_putc(&keep, 0);
    char *t = g4_py_strip(keep.p);
    g4_sb_puts(&w->text, t);
    free(t);
    g4_sb_free(&keep);
    return G4_OK;
}

static int walk_messages(walker *w, const g4_chat_request *r) {
    const g4_chat_message *m = r->messages;
    int rc, at = 0; // media_tokens used
    enum { PREV_NONE, PREV_CALL, PREV_RESPONSE } prev = PREV_NONE;
    int prev_model = 0; // the last non-tool message was a model message
    for (int i = 0; i < r->n_messages; i++) {
        if (m[i].role == G4_CHAT_TOOL) {
            if (m[i].n_images || m[i].n_audio)
                return g4_fail(G4_EUSER, "message %d: a tool message with media", i + 1);
            continue;
        }
        const int model = m[i].role == G4_CHAT_MODEL;
        prev = PREV_NONE;
        if (!(model && prev_model)) {
            if ((rc = put_special(w, SP_TURN_OPEN))) return rc;
            g4_sb_puts(&w->text, model ? "model\n" : "user\n");
        }
        for (int k = 0; k < m[i].n_tool_calls; k++) {
            if (!model) return g4_fail(G4_EUSER, "message %d: tool calls in a user message", i + 1);
            if ((rc = put_call(w, &m[i].tool_calls[k], k))) return rc;
            prev = PREV_CALL;
        }
        int responded = 0;
        for (int j = i + 1; m[i].n_tool_calls && j < r->n_messages && m[j].role == G4_CHAT_TOOL; j++) {
            const char *name = m[j].name ? m[j].name : "unknown";
            for (int k = 0; k < m[i].n_tool_calls; k++)
                if (m[i].tool_calls[k].id && m[j].tool_call_id &&
                    !strcmp(m[i].tool_calls[k].id, m[j].tool_call_id))
                    name = m[i].tool_calls[k].name;
            if ((rc = g4_py_check_utf8(name, "a tool message's name")) ||
                (m[j].text && (rc = g4_py_check_utf8(m[j].text, "a tool message"))))
                return rc;
            g4_sb_puts(&w->text, "<|tool_response>response:");
            g4_sb_puts(&w->text, name);
            g4_sb_puts(&w->text, "{value:<|\"|>");
            g4_sb_puts(&w->text, m[j].text ? m[j].text : "");
            g4_sb_puts(&w->text, "<|\"|>}<tool_response|>");
            responded = 1;
            prev = PREV_RESPONSE;
        }
        if (m[i].n_images < 0 || m[i].n_audio < 0 ||
            m[i].n_images + m[i].n_audio > r->n_media_tokens - at)
            return g4_fail(G4_EUSER, "message %d: %d images and %d audio clips, but %d media "
                                     "items are left",
                           i + 1, m[i].n_images, m[i].n_audio, r->n_media_tokens - at);
        if (model && (m[i].n_images || m[i].n_audio))
            return g4_fail(G4_EUSER, "message %d: an assistant message with media", i + 1);
        for (int k = 0; k < m[i].n_images + m[i].n_audio; k++, at++) {
            const int img = k < m[i].n_images;
            if (r->media_tokens[at] < 0)
                return g4_fail(G4_EUSER, "media %d: %d soft tokens (expected >= 0)", at + 1,
                               r->media_tokens[at]);
            rc = img ? put_media(w, SP_BOI, SP_IMAGE, SP_EOI, r->media_tokens[at])
                     : put_media(w, SP_BOA, SP_AUDIO, SP_EOA, r->media_tokens[at]);
            if (rc) return rc;
        }
        const size_t before = w->text.n;
        rc = model ? put_model_text(w, m[i].text) : put_trimmed(w, m[i].text, "a user message");
        if (rc) return rc;
        const int content = w->text.n > before || m[i].n_images || m[i].n_audio;
        int next = -1; // the next non-tool message
        for (int k = i + 1; k < r->n_messages && next < 0; k++)
            if (m[k].role != G4_CHAT_TOOL) next = k;
        const int continues =
            model && next >= 0 && m[next].role == G4_CHAT_MODEL && (!m[i].n_tool_calls || responded);
        if (prev == PREV_CALL && !responded) {
            g4_sb_puts(&w->text, "<|tool_response>");
        } else if (!continues && !(responded && !content && next < 0)) {
            if ((rc = put_special(w, SP_TURN_CLOSE))) return rc;
            g4_sb_puts(&w->text, "\n");
        }
        prev_model = model;
    }
    if (at != r->n_media_tokens)
        return g4_fail(G4_EUSER, "%d media items, but the messages place %d", r->n_media_tokens, at);
    if (prev == PREV_NONE) {
        if ((rc = put_special(w, SP_TURN_OPEN))) return rc;
        g4_sb_puts(&w->text, "model\n");
    }
    return flush(w);
}

static int walk(walker *w, const g4_chat_request *r) {
    int rc;
    for (int i = 0; i < r->n_images; i++)
        if (r->image_tokens[i] < 0)
            return g4_fail(G4_EUSER, "image %d: %d soft tokens (expected >= 0)", i + 1,
                           r->image_tokens[i]);
    for (int i = 0; i < r->n_audio; i++)
        if (r->audio_tokens[i] < 0)
            return g4_fail(G4_EUSER, "audio %d: %d soft tokens (expected >= 0)", i + 1,
                           r->audio_tokens[i]);
    if ((rc = put_special(w, SP_BOS))) return rc;
    if (r->system || r->tools) {
        if ((rc = put_special(w, SP_TURN_OPEN))) return rc;
        g4_sb_puts(&w->text, "system\n");
        if ((rc = put_trimmed(w, r->system, "system prompt"))) return rc;
        if (r->system && r->system_as_parts) g4_sb_putc(&w->text, ' ');
        if (r->tools) g4_sb_puts(&w->text, r->tools); // (its special tokens are matched)
        if ((rc = put_special(w, SP_TURN_CLOSE))) return rc;
        g4_sb_puts(&w->text, "\n");
    }
    if (r->messages) return walk_messages(w, r);
    if ((rc = put_special(w, SP_TURN_OPEN))) return rc;
    g4_sb_puts(&w->text, "user\n");
    for (int i = 0; i < r->n_images; i++)
        if ((rc = put_media(w, SP_BOI, SP_IMAGE, SP_EOI, r->image_tokens[i]))) return rc;
    for (int i = 0; i < r->n_audio; i++)
        if ((rc = put_media(w, SP_BOA, SP_AUDIO, SP_EOA, r->audio_tokens[i]))) return rc;
    if ((rc = put_trimmed(w, r->text, "prompt text"))) return rc;
    if ((rc = put_special(w, SP_TURN_CLOSE))) return rc;
    g4_sb_puts(&w->text, "\n");
    if ((rc = put_special(w, SP_TURN_OPEN))) return rc;
    g4_sb_puts(&w->text, "model\n");
    return flush(w);
}

int g4_chat_render(const g4_chat_request *req, char **out) {
    walker w = {0};
    int rc = walk(&w, req);
    if (rc) {
        g4_sb_free(&w.text);
        *out = NULL;
        return rc;
    }
    *out = g4_sb_take(&w.text);
    return G4_OK;
}

int g4_chat_encode(const g4_tokenizer *tok, const g4_chat_request *req, g4_ids *out) {
    walker w = {.expand = 1, .tok = tok, .out = out};
    int rc = g4_chat_tokens_find(tok, "tokenizer", &w.ct);
    if (!rc) rc = walk(&w, req);
    g4_sb_free(&w.text);
    return rc;
}
