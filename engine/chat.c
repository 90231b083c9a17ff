// chat.c: the E2B chat template (see chat.h) rendered as text or as token ids.
//
// Both outputs come from one walk over the template's parts (walk()): fixed text, the
// trimmed messages, and special tokens. As ids, adjacent text parts are joined and tokenized
// together, and each special token is pushed by its id: the same ids as tokenizing the whole
// expanded string, because the tokenizer cuts special tokens out before anything else.
#include "engine/chat.h"

#include <stdlib.h>
#include <string.h>

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
    if (r->system) {
        if ((rc = put_special(w, SP_TURN_OPEN))) return rc;
        g4_sb_puts(&w->text, "system\n");
        if ((rc = put_trimmed(w, r->system, "system prompt"))) return rc;
        if (r->system_as_parts) g4_sb_putc(&w->text, ' ');
        if ((rc = put_special(w, SP_TURN_CLOSE))) return rc;
        g4_sb_puts(&w->text, "\n");
    }
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
