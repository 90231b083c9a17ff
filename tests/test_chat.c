// test_chat.c: the E2B chat template (engine/chat.c) against HF's Gemma4Processor.
//
//  1. every case of tests/fixtures/chat/chat_cases.jsonl (HF apply_chat_template with the real
//     E2B template on chat_bpe.json): the soft-token counts our front ends derive from the image
//     sizes / audio lengths equal the processor's, the rendered text equals HF's exactly, and
//     the token ids equal HF's exactly (ids are discrete: no tolerance);
//  2. the media cases of generate_cases.jsonl: the real image / audio files through our front
//     ends give the counts, and the prompt ids equal HF's for the same files;
//  3. another tokenizer (tests/fixtures/tokenizer/gemma_bpe.json, where the special tokens have
//     other ids): the ids equal that tokenizer's encoding of the expanded template text, so no
//     id is assumed;
//  4. errors: placeholder tokens typed in the text, invalid UTF-8, a negative count, a tokenizer
//     without <|turn> or without the media tokens a request needs;
//  5. conversations (tests/fixtures/chat/multiturn_cases.jsonl: the E2B template rendered by
//     Jinja2, tools/python/make_multiturn_fixture.py): user / assistant / tool messages, tool
//     calls with sorted arguments, thinking left out, media in earlier turns: the rendered text
//     equals Jinja's exactly, and the ids equal the tokenizer's encoding of the expanded text;
//     and their errors (arguments not an object, media on an assistant message, a media count
//     that does not add up).
#include <stdlib.h>
#include <string.h>

#include "engine/chat.h"
#include "engine/media.h"
#include "loader/package.h"
#include "tests/chat_fixture.h"
#include "tests/test_util.h"

static void check_ids(const char *name, const g4_ids *got, const int *want, int n_want) {
    int d = cf_first_diff(got->v, (int)got->n, want, n_want);
    CHECK_MSG(d < 0, "%s: ids differ from HF's at index %d (got %d ids, want %d; got %d, want %d)",
              name, d, (int)got->n, n_want, d >= 0 && d < (int)got->n ? got->v[d] : -1,
              d >= 0 && d < n_want ? want[d] : -1);
}

// The fixture's chat cases: counts, rendering, ids.
static void test_hf_cases(const g4_tokenizer *tok, const g4_package *pkg, const char *dir) {
    char *path = g4_sprintf("%s/chat/chat_cases.jsonl", dir);
    cf_lines l = cf_read(path);
    g4_logmel lm;
    G4_ASSERT(g4_logmel_init(&pkg->audio_fe, &lm) == G4_OK);
    int n_cases = 0;
    for (int c = 0; c < l.n; c++) {
        const cJSON *o = l.line[c];
        if (strcmp(cf_str(o, "kind"), "chat")) continue;
        n_cases++;
        const char *name = cf_str(o, "name");
        int n_img, n_aud, n_want, n_hf_img, n_hf_aud;
        int *want = cf_ints(o, "ids", &n_want);
        int *hf_img = cf_ints(o, "n_image_tokens", &n_hf_img);
        int *hf_aud = cf_ints(o, "n_audio_tokens", &n_hf_aud);
        const cJSON *sizes = cJSON_GetObjectItem(o, "images");
        int *samples = cf_ints(o, "audio_samples", &n_aud);
        n_img = cJSON_GetArraySize(sizes);
        CHECK_INT(n_img, n_hf_img);
        CHECK_INT(n_aud, n_hf_aud);
        int img_tok[8] = {0}, aud_tok[8] = {0};
        G4_ASSERT(n_img <= 8 && n_aud <= 8);
        for (int i = 0; i < n_img; i++) {
            const cJSON *hw = cJSON_GetArrayItem(sizes, i);
            int h = cJSON_GetArrayItem(hw, 0)->valueint, w = cJSON_GetArrayItem(hw, 1)->valueint;
            CHECK(g4_image_soft_tokens(&pkg->image_proc, h, w, &img_tok[i]) == G4_OK);
            CHECK_MSG(img_tok[i] == hf_img[i], "%s: image %d (%dx%d): %d soft tokens, HF %d", name,
                      i, h, w, img_tok[i], hf_img[i]);
        }
        for (int i = 0; i < n_aud; i++) {
            int frames, valid;
            g4_logmel_counts(&lm, samples[i], &frames, &valid, &aud_tok[i]);
            CHECK_MSG(aud_tok[i] == hf_aud[i], "%s: audio %d (%d samples): %d soft tokens, HF %d",
                      name, i, samples[i], aud_tok[i], hf_aud[i]);
        }
        const cJSON *sys = cJSON_GetObjectItem(o, "system");
        g4_chat_request req = {
            .system = cJSON_IsString(sys) ? sys->valuestring : NULL,
            .system_as_parts = cJSON_IsTrue(cJSON_GetObjectItem(o, "system_parts")),
            .image_tokens = img_tok,
            .n_images = n_img,
            .audio_tokens = aud_tok,
            .n_audio = n_aud,
            .text = cf_str(o, "text"),
        };
        char *text = NULL;
        CHECK(g4_chat_render(&req, &text) == G4_OK);
        CHECK_MSG(text && !strcmp(text, cf_str(o, "rendered")), "%s: rendered\n  %s\nHF\n  %s",
                  name, text ? text : "(null)", cf_str(o, "rendered"));
        g4_ids ids = {0};
        int rc = g4_chat_encode(tok, &req, &ids);
        CHECK_MSG(rc == G4_OK, "%s: %s", name, g4_error());
        check_ids(name, &ids, want, n_want);
        g4_ids_free(&ids);
        free(text);
        free(want);
        free(hf_img);
        free(hf_aud);
        free(samples);
    }
    CHECK_MSG(n_cases >= 15, "only %d chat cases in %s", n_cases, path);
    printf("chat cases: %d compared with HF\n", n_cases);
    g4_logmel_free(&lm);
    cf_free(&l);
    free(path);
}

// Real media files through our front ends -> counts -> prompt ids, against HF's processor on
// the same files.
static void test_media_files(const g4_tokenizer *tok, const g4_package *pkg, const char *dir) {
    char *path = g4_sprintf("%s/chat/generate_cases.jsonl", dir);
    cf_lines l = cf_read(path);
    int n = 0;
    for (int c = 0; c < l.n; c++) {
        const cJSON *o = l.line[c];
        if (strcmp(cf_str(o, "kind"), "media")) continue;
        const char *name = cf_str(o, "name");
        char *file = g4_sprintf("%s/%s", dir, cf_str(o, "file"));
        int count = -1, is_image = !strcmp(cf_str(o, "media"), "image");
        if (is_image) {
            g4_image_features f;
            CHECK_MSG(g4_image_features_load(&pkg->image_proc, file, &f) == G4_OK, "%s",
                      g4_error());
            count = f.n_soft_tokens;
            g4_image_features_free(&f);
        } else {
            g4_audio_features f;
            CHECK_MSG(g4_audio_features_load(&pkg->audio_fe, file, &f) == G4_OK, "%s", g4_error());
            count = f.n_soft_tokens;
            g4_audio_features_free(&f);
        }
        CHECK_MSG(count == cf_int(o, "n_soft_tokens"), "%s: %d soft tokens, HF %d", name, count,
                  cf_int(o, "n_soft_tokens"));
        g4_chat_request req = {.text = cf_str(o, "text")};
        if (is_image)
            req.image_tokens = &count, req.n_images = 1;
        else
            req.audio_tokens = &count, req.n_audio = 1;
        g4_ids ids = {0};
        CHECK_MSG(g4_chat_encode(tok, &req, &ids) == G4_OK, "%s: %s", name, g4_error());
        int n_want;
        int *want = cf_ints(o, "prompt_ids", &n_want);
        check_ids(name, &ids, want, n_want);
        free(want);
        g4_ids_free(&ids);
        free(file);
        n++;
    }
    CHECK_MSG(n >= 3, "only %d media cases", n);
    printf("media prompts from files: %d compared with HF\n", n);
    cf_free(&l);
    free(path);
}

// "<|image|>" -> "<|image>" + n x "<|image|>" + "<image|>" (and audio), on the rendered text.
static char *expand(const char *rendered, const int *img, const int *aud) {
    size_t cap = strlen(rendered) + 1;
    for (int i = 0; img[i] >= 0; i++) cap += 32 + 9 * (size_t)img[i];
    for (int i = 0; aud[i] >= 0; i++) cap += 32 + 9 * (size_t)aud[i];
    char *out = g4_malloc(cap), *w = out;
    int ki = 0, ka = 0;
    for (const char *s = rendered; *s;) {
        if (!strncmp(s, "<|image|>", 9) || !strncmp(s, "<|audio|>", 9)) {
            int image = s[2] == 'i', n = image ? img[ki++] : aud[ka++];
            w += sprintf(w, image ? "<|image>" : "<|audio>");
            for (int k = 0; k < n; k++) w += sprintf(w, image ? "<|image|>" : "<|audio|>");
            w += sprintf(w, image ? "<image|>" : "<audio|>");
            s += 9;
        } else {
            *w++ = *s++;
        }
    }
    *w = 0;
    return out;
}

// A tokenizer with other ids for the special tokens: encode == its encoding of the expanded text.
static void test_other_tokenizer(const char *dir) {
    char *path = g4_sprintf("%s/tokenizer/gemma_bpe.json", dir);
    g4_tokenizer *tok;
    CHECK_MSG(g4_tokenizer_open(path, &tok) == G4_OK, "%s", g4_error());
    g4_chat_tokens ct;
    CHECK(g4_chat_tokens_find(tok, path, &ct) == G4_OK);
    CHECK(ct.turn_open != 105 && ct.image != 258880); // not the E2B ids: a real lookup
    int img[] = {5, 1, -1}, aud[] = {3, -1};
    g4_chat_request req = {.system = "Be brief.",
                           .system_as_parts = 1,
                           .image_tokens = img,
                           .n_images = 2,
                           .audio_tokens = aud,
                           .n_audio = 1,
                           .text = "  Was ist das?  Straße, 東京 😀\n"};
    char *rendered;
    CHECK(g4_chat_render(&req, &rendered) == G4_OK);
    CHECK(!strcmp(rendered, "<bos><|turn>system\nBe brief. <turn|>\n<|turn>user\n<|image|><|image|>"
                            "<|audio|>Was ist das?  Straße, 東京 😀<turn|>\n<|turn>model\n"));
    char *full = expand(rendered, img, aud);
    g4_ids want = {0}, got = {0};
    CHECK(g4_tokenizer_encode(tok, full, strlen(full), 0, &want) == G4_OK);
    CHECK(g4_chat_encode(tok, &req, &got) == G4_OK);
    check_ids("gemma_bpe", &got, want.v, (int)want.n);
    CHECK(got.n > 0 && got.v[0] == ct.bos);
    g4_ids_free(&want);
    g4_ids_free(&got);
    free(full);
    free(rendered);
    g4_tokenizer_close(tok);
    free(path);
}

// gemma_bpe.json with one added token removed (from the added tokens and the vocabulary).
static g4_tokenizer *without_token(const char *dir, const char *content) {
    char *path = g4_sprintf("%s/tokenizer/gemma_bpe.json", dir), *data;
    size_t size;
    G4_ASSERT(g4_read_file(path, &data, &size) == G4_OK);
    cJSON *j = cJSON_Parse(data);
    G4_ASSERT(j);
    cJSON *added = cJSON_GetObjectItem(j, "added_tokens");
    for (int i = 0; i < cJSON_GetArraySize(added); i++)
        if (!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(added, i), "content")->valuestring,
                    content)) {
            cJSON_DeleteItemFromArray(added, i);
            break;
        }
    cJSON *vocab = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "vocab");
    cJSON_DeleteItemFromObjectCaseSensitive(vocab, content);
    char *text = cJSON_PrintUnformatted(j);
    g4_tokenizer *tok = NULL;
    int rc = g4_tokenizer_parse(text, strlen(text), content, &tok);
    CHECK_MSG(rc == G4_OK, "tokenizer without %s: %s", content, g4_error());
    free(text);
    cJSON_Delete(j);
    free(data);
    free(path);
    return tok;
}

static void test_errors(const g4_tokenizer *tok, const char *dir) {
    g4_ids ids = {0};
    int n = 3;
    g4_chat_request r = {.text = "look: <|image|> here"};
    CHECK(g4_chat_encode(tok, &r, &ids) == G4_EUSER);
    CHECK(strstr(g4_error(), "'<|image|>'") != NULL);
    r.text = "say <|audio|>";
    CHECK(g4_chat_encode(tok, &r, &ids) == G4_EUSER);
    CHECK(strstr(g4_error(), "'<|audio|>'") != NULL);
    r.text = "bad \xff byte";
    CHECK(g4_chat_encode(tok, &r, &ids) == G4_EUSER);
    CHECK(strstr(g4_error(), "UTF-8") != NULL);
    char *s = NULL;
    CHECK(g4_chat_render(&r, &s) == G4_EUSER && s == NULL);
    r = (g4_chat_request){.system = "\xc3", .text = "ok"};
    CHECK(g4_chat_encode(tok, &r, &ids) == G4_EUSER);
    CHECK(strstr(g4_error(), "system prompt") != NULL);
    n = -1;
    r = (g4_chat_request){.image_tokens = &n, .n_images = 1, .text = "x"};
    CHECK(g4_chat_encode(tok, &r, &ids) == G4_EUSER);
    g4_ids_free(&ids);

    g4_tokenizer *no_turn = without_token(dir, "<|turn>");
    if (no_turn) {
        g4_chat_tokens ct;
        CHECK(g4_chat_tokens_find(no_turn, "t.json", &ct) == G4_EUSER);
        CHECK(strstr(g4_error(), "t.json") && strstr(g4_error(), "'<|turn>'"));
        g4_tokenizer_close(no_turn);
    }
    g4_tokenizer *no_boa = without_token(dir, "<|audio>");
    if (no_boa) {
        n = 2;
        g4_chat_request a = {.audio_tokens = &n, .n_audio = 1, .text = "x"};
        CHECK(g4_chat_encode(no_boa, &a, &ids) == G4_EUSER);
        CHECK(strstr(g4_error(), "'<|audio>'") != NULL);
        g4_ids_free(&ids);
        g4_chat_request t = {.text = "text only"}; // no media: the media tokens are not needed
        CHECK(g4_chat_encode(no_boa, &t, &ids) == G4_OK && ids.n > 5);
        g4_ids_free(&ids);
        g4_tokenizer_close(no_boa);
    }
}

// --- conversations ------------------------------------------------------------------------------
#define MT_MAX 16

typedef struct {
    g4_chat_message m[MT_MAX];
    g4_chat_tool_call calls[MT_MAX][4];
    char *args[MT_MAX][4];
    char *text[MT_MAX];
    int media[64], img[64], aud[64]; // soft tokens in prompt order; by kind, -1 ended
    int n, n_media;
} mt_conv;

// A case's OpenAI-style messages -> the engine's (media parts before text, as the fixture
// writes them; text parts joined).
static void mt_parse(const cJSON *msgs, mt_conv *c) {
    memset(c, 0, sizeof *c);
    int ni = 0, na = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, msgs) {
        G4_ASSERT(c->n < MT_MAX);
        g4_chat_message *m = &c->m[c->n];
        const char *role = cf_str(o, "role");
        m->role = !strcmp(role, "user") ? G4_CHAT_USER
                  : !strcmp(role, "assistant") ? G4_CHAT_MODEL
                                               : G4_CHAT_TOOL;
        const cJSON *ct = cJSON_GetObjectItem(o, "content"), *p;
        if (cJSON_IsString(ct)) {
            m->text = ct->valuestring;
        } else if (cJSON_IsArray(ct)) {
            cJSON_ArrayForEach(p, ct) {
                const char *t = cf_str(p, "type");
                if (!strcmp(t, "text")) {
                    c->text[c->n] = g4_strdup(cf_str(p, "text")); // (one text part a message)
                    m->text = c->text[c->n];
                } else {
                    const int n_tok = 2 + c->n_media % 3, image = !strcmp(t, "image");
                    c->media[c->n_media++] = n_tok;
                    if (image)
                        c->img[ni++] = n_tok, m->n_images++;
                    else
                        c->aud[na++] = n_tok, m->n_audio++;
                }
            }
        }
        const cJSON *tcs = cJSON_GetObjectItem(o, "tool_calls"), *tc;
        cJSON_ArrayForEach(tc, tcs) {
            const int k = m->n_tool_calls++;
            const cJSON *f = cJSON_GetObjectItem(tc, "function");
            c->args[c->n][k] = cJSON_PrintUnformatted(cJSON_GetObjectItem(f, "arguments"));
            c->calls[c->n][k] = (g4_chat_tool_call){cf_str(tc, "id"), cf_str(f, "name"),
                                                    c->args[c->n][k]};
        }
        m->tool_calls = c->calls[c->n];
        const cJSON *id = cJSON_GetObjectItem(o, "tool_call_id"), *nm = cJSON_GetObjectItem(o, "name");
        m->tool_call_id = cJSON_IsString(id) ? id->valuestring : NULL;
        m->name = cJSON_IsString(nm) ? nm->valuestring : NULL;
        c->n++;
    }
    c->img[ni] = c->aud[na] = -1;
}

static void mt_free(mt_conv *c) {
    for (int i = 0; i < MT_MAX; i++) {
        free(c->text[i]);
        for (int k = 0; k < 4; k++) free(c->args[i][k]);
    }
}

static void test_multiturn(const g4_tokenizer *tok, const char *dir) {
    char *path = g4_sprintf("%s/chat/multiturn_cases.jsonl", dir);
    cf_lines l = cf_read(path);
    int n = 0;
    for (int i = 0; i < l.n; i++) {
        const cJSON *o = l.line[i], *sys = cJSON_GetObjectItem(o, "system");
        const char *name = cf_str(o, "name"), *want = cf_str(o, "rendered");
        mt_conv c;
        mt_parse(cJSON_GetObjectItem(o, "messages"), &c);
        g4_chat_request req = {.system = cJSON_IsString(sys) ? sys->valuestring : NULL,
                               .messages = c.m,
                               .n_messages = c.n,
                               .media_tokens = c.media,
                               .n_media_tokens = c.n_media};
        char *text = NULL;
        CHECK_MSG(g4_chat_render(&req, &text) == G4_OK, "%s: %s", name, g4_error());
        CHECK_MSG(text && !strcmp(text, want), "%s: rendered\n%s\nJinja\n%s", name,
                  text ? text : "(null)", want);
        char *full = expand(want, c.img, c.aud);
        g4_ids want_ids = {0}, got = {0};
        CHECK(g4_tokenizer_encode(tok, full, strlen(full), 0, &want_ids) == G4_OK);
        CHECK_MSG(g4_chat_encode(tok, &req, &got) == G4_OK, "%s: %s", name, g4_error());
        check_ids(name, &got, want_ids.v, (int)want_ids.n);
        g4_ids_free(&want_ids);
        g4_ids_free(&got);
        free(full);
        free(text);
        mt_free(&c);
        n++;
    }
    CHECK_MSG(n >= 12, "%d conversation cases (want 12)", n);
    printf("conversations: %d rendered and encoded as Jinja renders them\n", n);
    cf_free(&l);
    free(path);

    // errors: each refused with a message naming it
    g4_chat_tool_call bad_args = {"x", "f", "[1, 2]"};
    g4_chat_message two[2] = {{.role = G4_CHAT_USER, .text = "a"},
                              {.role = G4_CHAT_MODEL, .tool_calls = &bad_args, .n_tool_calls = 1}};
    int one = 4;
    struct {
        const char *name, *want;
        g4_chat_request req;
    } bad[] = {
        {"arguments an array", "expected a JSON object", {.messages = two, .n_messages = 2}},
        {"media not placed", "1 media items, but the messages place 0",
         {.messages = two, .n_messages = 1, .media_tokens = &one, .n_media_tokens = 1}},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char *t = NULL;
        CHECK_MSG(g4_chat_render(&bad[k].req, &t) == G4_EUSER && strstr(g4_error(), bad[k].want),
                  "%s: '%s'", bad[k].name, g4_error());
        free(t);
    }
    g4_chat_message media_model[2] = {{.role = G4_CHAT_USER, .text = "a"},
                                      {.role = G4_CHAT_MODEL, .text = "b", .n_images = 1}};
    g4_chat_request r = {.messages = media_model, .n_messages = 2, .media_tokens = &one,
                         .n_media_tokens = 1};
    char *t = NULL;
    CHECK_MSG(g4_chat_render(&r, &t) == G4_EUSER && strstr(g4_error(), "assistant message with media"),
              "media on an assistant message: '%s'", g4_error());
    free(t);
}

int main(void) {
    const char *dir = g4t_env("G4_FIXTURES");
    char *tok_path = g4_sprintf("%s/chat/chat_bpe.json", dir);
    g4_tokenizer *tok;
    g4_package *pkg;
    if (g4_tokenizer_open(tok_path, &tok) || g4_package_open(g4t_env("G4_TINY_PKG"), &pkg)) {
        fprintf(stderr, "%s\n", g4_error());
        return 1;
    }
    test_hf_cases(tok, pkg, dir);
    test_media_files(tok, pkg, dir);
    test_other_tokenizer(dir);
    test_errors(tok, dir);
    test_multiturn(tok, dir);
    g4_package_close(pkg);
    g4_tokenizer_close(tok);
    free(tok_path);
    return g4t_finish("test_chat");
}
