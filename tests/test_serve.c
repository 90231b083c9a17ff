// test_serve.c: `g4cu serve` on the tiny fixture, driven over sockets by a small HTTP client
// (no Python, no curl: Debian bookworm has no python3-openai package, so the official client
// cannot run in CI; the requests here are the ones it sends). The server runs on a free port
// (--port 0, read from its first stdout line).
//  - chat, plain and streamed (SSE deltas, a finish chunk, `data: [DONE]`): HF's greedy text
//    (tests/fixtures/chat/generate_cases.jsonl chat_text); with an image (data: URL) and with
//    audio (input_audio): HF's ids for vqa_square / asr_tone, decoded; a transcription
//    (multipart `file`): asr_tone's; /v1/models, /health, /metrics (counters that moved)
//  - malformed requests, each a 4xx JSON error {"error": {"message", "type"}} with the server
//    still answering after it: bad JSON, trailing data, huge body (413), wrong content type
//    (415), wrong method (405), unknown path (404), bad fields, bad base64, a form without a
//    file, a body cut off mid-way (the connection closed)
//  - load: 300 requests from 16 clients at once, every 5th malformed or cut off: every
//    well-formed one answered 200 with the same text, every malformed one 4xx; the server's RSS
//    after a second such round within 16 MiB of after the first (memory flat; under ASan,
//    whose quarantine grows RSS, LeakSanitizer checks the server's exit instead)
//  - a full queue answers 429 (--parallel 1 --queue 1, 8 clients at once)
//  - SIGTERM while a request is in flight: it completes (200), the server exits 0
//  - an audio_url part, 429 with Retry-After; the protocol added for issue 32 (conversations,
//    the other routes, seeds, transcription formats, long audio, cancellation) is checked by
//    tests/test_serve_compat.c
#include "tests/serve_client.h"

// --- the load test ----------------------------------------------------------------------------
#define CLIENTS 16
#define PER_CLIENT 19 // 304 requests
static const char *load_want;
static int load_port;

typedef struct {
    int id, ok, bad_ok, n_good, n_bad, failures;
} client;

static void *load_client(void *arg) {
    client *c = arg;
    const char *good = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello, who are you?\"}],"
                       "\"max_tokens\":8}";
    for (int i = 0; i < PER_CLIENT; i++) {
        const int k = c->id * PER_CLIENT + i;
        resp r;
        if (k % 5 == 4) { // malformed, four ways
            c->n_bad++;
            int want = 400;
            switch (k / 5 % 4) {
            case 0:
                r = post_json(load_port, "/v1/chat/completions", "{\"messages\":[{\"role\":");
                break;
            case 1:
                r = http(load_port, "POST", "/v1/chat/completions", "text/plain", good,
                         strlen(good), -1);
                want = 415;
                break;
            case 2:
                r = post_json(load_port, "/v1/chat/completions", "{\"messages\":[],\"x\":1}");
                break;
            default: // cut off mid-body: no answer expected
                r = http(load_port, "POST", "/v1/chat/completions", "application/json", good, 20,
                         (long)strlen(good));
                want = 0;
            }
            if (want ? is_error(&r, want) : r.status == 0)
                c->bad_ok++;
            else
                c->failures++;
        } else {
            c->n_good++;
            r = post_json(load_port, "/v1/chat/completions", good);
            char *t = chat_text(&r);
            if (t && !strcmp(t, load_want))
                c->ok++;
            else
                c->failures++;
            free(t);
        }
        resp_free(&r);
    }
    return NULL;
}

static void load_round(int round) {
    client cl[CLIENTS];
    pthread_t th[CLIENTS];
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < CLIENTS; i++) {
        cl[i] = (client){.id = i};
        pthread_create(&th[i], NULL, load_client, &cl[i]);
    }
    int ok = 0, good = 0, bad_ok = 0, bad = 0;
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(th[i], NULL);
        ok += cl[i].ok, good += cl[i].n_good, bad_ok += cl[i].bad_ok, bad += cl[i].n_bad;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    const double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    printf("load round %d: %d requests from %d clients in %.1f s: %d/%d well-formed answered "
           "right, %d/%d malformed answered 4xx (or cut off)\n",
           round, good + bad, CLIENTS, s, ok, good, bad_ok, bad);
    CHECK_MSG(ok == good && good > 0, "round %d: %d of %d well-formed requests failed", round,
              good - ok, good);
    CHECK_MSG(bad_ok == bad && bad > 0, "round %d: %d of %d malformed requests mis-answered", round,
              bad - bad_ok, bad);
}

// The sampling fields (tools/serve_sampling.c): logprobs (greedy: HF's text, one entry per
// token whose texts add up to the content, the chosen token first among its alternatives),
// json_object across seeds (each finished answer an object), n = 2, the penalties and min_p
// accepted, tools (their declarations lengthen the prompt by the count the fixture tokenizer
// gives them; "none" leaves them out), and a 400 naming the field for each refused value.
static void test_sampling_fields(int P, const char *want_chat) {
    resp r = post_json(P, "/v1/chat/completions",
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello, who are you?\"}],"
                       "\"max_tokens\":40,\"logprobs\":true,\"top_logprobs\":2}");
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const cJSON *content = cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "logprobs"), "content");
    const cJSON *msg = cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "message"), "content");
    char joined[4096] = {0};
    size_t n_joined = 0;
    int entries = 0, firsts = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, content) {
        const cJSON *top = cJSON_GetObjectItem(e, "top_logprobs");
        const char *tt = cJSON_GetObjectItem(e, "token")->valuestring;
        const size_t tl = strlen(tt); // (U+FFFD for each byte outside a UTF-8 character, as the
        if (n_joined + tl < sizeof joined) // decoder writes a lone byte-fallback piece)
            memcpy(joined + n_joined, tt, tl), n_joined += tl;
        const cJSON *t0 = cJSON_GetArrayItem(top, 0);
        firsts += cJSON_GetArraySize(top) == 2 &&
                  !strcmp(cJSON_GetObjectItem(t0, "token")->valuestring,
                          cJSON_GetObjectItem(e, "token")->valuestring) &&
                  cJSON_GetObjectItem(t0, "logprob")->valuedouble ==
                      cJSON_GetObjectItem(e, "logprob")->valuedouble &&
                  cJSON_GetObjectItem(e, "logprob")->valuedouble <= 0;
        entries++;
    }
    CHECK_MSG(cJSON_IsString(msg) && !strcmp(msg->valuestring, want_chat), "logprobs: %s", r.body);
    // HF's 40 ids hold one special token (48, <|tool_call>), which has no bytes: no entry
    CHECK_MSG(entries == 39 && firsts == 39, "logprobs: %d entries, %d greedy firsts", entries,
              firsts);
    CHECK_MSG(cJSON_IsString(msg) && !strcmp(joined, msg->valuestring),
              "logprobs: the tokens give '%s'", joined);
    cJSON_Delete(j);
    resp_free(&r);

    int finished = 0, objects = 0;
    for (int seed = 1; seed <= 4; seed++) {
        char *body = g4_sprintf("{\"messages\":[{\"role\":\"user\",\"content\":\"JSON\"}],"
                                "\"max_tokens\":64,\"temperature\":1,\"seed\":%d,"
                                "\"response_format\":{\"type\":\"json_object\"},"
                                "\"presence_penalty\":0.5,\"min_p\":0.01}",
                                seed);
        r = post_json(P, "/v1/chat/completions", body);
        free(body);
        j = r.body ? cJSON_Parse(r.body) : NULL;
        c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        const cJSON *fin = cJSON_GetObjectItem(c0, "finish_reason");
        msg = cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "message"), "content");
        CHECK_MSG(r.status == 200 && cJSON_IsString(fin) && cJSON_IsString(msg), "json_object: %s",
                  r.body);
        if (cJSON_IsString(fin) && !strcmp(fin->valuestring, "stop") && cJSON_IsString(msg)) {
            finished++;
            cJSON *v = cJSON_Parse(msg->valuestring);
            objects += cJSON_IsObject(v);
            cJSON_Delete(v);
        }
        cJSON_Delete(j);
        resp_free(&r);
    }
    CHECK_MSG(finished >= 1 && objects == finished, "json_object: %d finished, %d objects",
              finished, objects);

    r = post_json(P, "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3,"
                  "\"n\":2,\"temperature\":1,\"frequency_penalty\":1,\"repetition_penalty\":1.3,"
                  "\"logit_bias\":{\"5\":-100}}");
    j = r.body ? cJSON_Parse(r.body) : NULL;
    CHECK_MSG(r.status == 200 && cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")) == 2 &&
                  cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 1),
                                      "index")->valueint == 1,
              "n = 2: %s", r.body);
    cJSON_Delete(j);
    resp_free(&r);

    // tools: the declarations go into a system turn (prompt tokens: 9 for "hi" alone, plus the
    // system turn's <|turn>system\n ... <turn|>\n and the declaration's tokens)
    int with_tools = -1, without = -1, with_none = -1;
    for (int k = 0; k < 3; k++) {
        char *body = g4_sprintf(
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2%s}",
            k == 0 ? "" : k == 1 ? ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
                                   "\"now\",\"description\":\"The time.\"}}]"
                                 : ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
                                   "\"now\"}}],\"tool_choice\":\"none\"");
        r = post_json(P, "/v1/chat/completions", body);
        free(body);
        j = r.body ? cJSON_Parse(r.body) : NULL;
        const cJSON *pt = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens");
        const int v = r.status == 200 && cJSON_IsNumber(pt) ? pt->valueint : -1;
        *(k == 0 ? &without : k == 1 ? &with_tools : &with_none) = v;
        cJSON_Delete(j);
        resp_free(&r);
    }
    {
        char *tp = g4_sprintf("%s/chat/chat_bpe.json", fix);
        g4_tokenizer *tk = NULL;
        g4_ids ids = {0};
        const char *sys = "<|turn>system\n<|tool>declaration:now{description:<|\"|>The time.<|\"|>}"
                          "<tool|><turn|>\n";
        CHECK(!g4_tokenizer_open(tp, &tk) && !g4_tokenizer_encode(tk, sys, strlen(sys), 0, &ids));
        CHECK_MSG(without > 0 && with_none == without && with_tools == without + (int)ids.n,
                  "prompt tokens: %d without tools, %d with, %d with tool_choice none (the "
                  "system turn has %zu)",
                  without, with_tools, with_none, ids.n);
        g4_ids_free(&ids);
        g4_tokenizer_close(tk);
        free(tp);
    }

    static const struct {
        const char *fields, *word;
    } bad[] = {
        {"\"logprobs\":true,\"top_logprobs\":21", "top_logprobs"},
        {"\"top_logprobs\":2", "top_logprobs"},
        {"\"logit_bias\":{\"x\":1}", "logit_bias"},
        {"\"logit_bias\":{\"3\":101}", "logit_bias"},
        {"\"logit_bias\":{\"99999\":1}", "logit_bias"},
        {"\"presence_penalty\":3", "presence_penalty"},
        {"\"min_p\":-0.1", "min_p"},
        {"\"n\":9", "in [1, 8]"},
        {"\"n\":2,\"stream\":true", "not streamed"},
        {"\"response_format\":{\"type\":\"xml\"}", "response_format"},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":"
         "\"string\",\"pattern\":\"a\"}}}",
         "pattern"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"stream\":true",
         "tools"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]", "function.name"},
        {"\"tools\":{}", "tools"},
        {"\"tool_choice\":\"required\"", "tool_choice"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char *body = g4_sprintf("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                                "\"max_tokens\":2,%s}",
                                bad[k].fields);
        r = post_json(P, "/v1/chat/completions", body);
        CHECK_MSG(is_error(&r, 400) && strstr(r.body, bad[k].word), "%s: %d %s", body, r.status,
                  r.body ? r.body : "");
        free(body);
        resp_free(&r);
    }
}

int main(void) {
    if (!serve_setup()) return g4t_skip("test_serve", "g4cu was built without libmicrohttpd");
    char *cases = g4_sprintf("%s/chat/generate_cases.jsonl", fix);
    cf_lines l = cf_read(cases);
    const char *want_chat = NULL;
    const cJSON *vqa = NULL, *asr = NULL;
    for (int c = 0; c < l.n; c++) {
        const cJSON *o = l.line[c];
        const char *name = cf_str(o, "name"), *pkg = cf_str(o, "package");
        if (!name || !pkg || strcmp(pkg, "mobius-tiny-f16")) continue;
        if (!strcmp(name, "chat_text"))
            want_chat = cf_str(o, "text");
        if (!strcmp(name, "vqa_square")) vqa = o;
        if (!strcmp(name, "asr_tone")) asr = o;
    }
    CHECK(want_chat && vqa && asr);
    if (!want_chat || !vqa || !asr) return g4t_finish("test_serve");

    srv s;
    CHECK_MSG(srv_start(&s, "--parallel 2 --queue 64 --max-body 4000000 --timeout 5 --max-audio-seconds 5"),
              "the server did not start");
    if (!s.port) return g4t_finish("test_serve");
    const int P = s.port;

    resp r = get(P, "/health");
    CHECK_MSG(r.status == 200 && strstr(r.body, "\"ok\""), "/health: %d", r.status);
    resp_free(&r);
    r = get(P, "/v1/models");
    CHECK_MSG(r.status == 200 && strstr(r.body, "\"id\":\"package\""), "/v1/models: %s", r.body);
    resp_free(&r);

    // chat, plain: HF's text
    r = post_json(P, "/v1/chat/completions",
                  "{\"model\":\"package\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello, who "
                  "are you?\"}],\"max_tokens\":40}");
    char *t = chat_text(&r);
    CHECK_MSG(t && !strcmp(t, want_chat), "chat: got '%s' (%d)", t ? t : r.body, r.status);
    CHECK_MSG(r.body && strstr(r.body, "\"prompt_tokens\":21,\"completion_tokens\":40"),
              "chat usage: %s", r.body);
    free(t);
    resp_free(&r);

    test_sampling_fields(P, want_chat);

    // chat, streamed: the deltas add up to the same text; a finish chunk, then [DONE]
    r = post_json(P, "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"system\",\"content\":\"\"},{\"role\":\"user\","
                  "\"content\":[{\"type\":\"text\",\"text\":\"Hello, who are you?\"}]}],"
                  "\"max_completion_tokens\":40,\"stream\":true}");
    {
        CHECK_MSG(r.status == 200 && r.head && strcasestr(r.head, "text/event-stream"),
                  "stream: %d", r.status);
        sse_events e = sse_parse(r.body);
        // (an empty system turn changes the prompt: only the stream's form is checked here;
        // the next request checks its text)
        CHECK_MSG(e.done && e.finish == 1 && e.events >= 3, "stream: %d events, done %d, finish %d",
                  e.events, e.done, e.finish);
    }
    resp_free(&r);
    r = post_json(P, "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
                  "\"Hello, who are you?\"}]}],\"max_tokens\":40,\"stream\":true}");
    {
        sse_events e = sse_parse(r.body);
        CHECK_MSG(e.done && e.finish == 1 && !strcmp(e.text, want_chat), "stream: the deltas are '%s'",
                  e.text);
    }
    resp_free(&r);

    // an image as a data: URL: HF's answer to vqa_square
    {
        char *img = file_b64(cf_str(vqa, "file"), NULL, NULL), *want = hf_text(vqa);
        check_url_part(P, "image_url", "data:image/png;base64,", img, vqa, want);
        // bad base64, a remote URL, an unknown part: 400
        char *bad = g4_sprintf("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                               "\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,%s\"}}"
                               "]}]}",
                               "@@@@");
        r = post_json(P, "/v1/chat/completions", bad);
        CHECK_MSG(is_error(&r, 400), "bad base64: %d", r.status);
        resp_free(&r);
        r = post_json(P, "/v1/chat/completions",
                      "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                      "\"image_url\":{\"url\":\"http://example.com/a.png\"}}]}]}");
        CHECK_MSG(is_error(&r, 400), "remote URL: %d", r.status);
        resp_free(&r);
        // not an image at all: the engine's one-line error as a 400
        r = post_json(P, "/v1/chat/completions",
                      "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                      "\"image_url\":{\"url\":\"data:image/png;base64,aGVsbG8gd29ybGQ=\"}}]}]}");
        CHECK_MSG(is_error(&r, 400) && strstr(r.body, "image 1"), "junk image: %d %s", r.status,
                  r.body);
        resp_free(&r);
        free(bad);
        free(img);
        free(want);
    }

    // audio as input_audio, and the same file as a transcription upload: HF's asr_tone answer
    {
        char *raw;
        size_t raw_n;
        char *au = file_b64(cf_str(asr, "file"), &raw, &raw_n), *want = hf_text(asr);
        cJSON *q = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(q, "messages");
        cJSON *m = cJSON_CreateObject(), *parts = cJSON_AddArrayToObject(m, "content");
        cJSON_AddStringToObject(m, "role", "user");
        cJSON *p1 = cJSON_CreateObject(), *ia = cJSON_AddObjectToObject(p1, "input_audio");
        cJSON_AddStringToObject(p1, "type", "input_audio");
        cJSON_AddStringToObject(ia, "data", au);
        cJSON_AddStringToObject(ia, "format", "wav");
        cJSON *p2 = cJSON_CreateObject();
        cJSON_AddStringToObject(p2, "type", "text");
        cJSON_AddStringToObject(p2, "text", cf_str(asr, "text"));
        cJSON_AddItemToArray(parts, p1);
        cJSON_AddItemToArray(parts, p2);
        cJSON_AddItemToArray(msgs, m);
        cJSON_AddNumberToObject(q, "max_tokens", cf_int(asr, "max_new"));
        char *body = cJSON_PrintUnformatted(q);
        cJSON_Delete(q);
        r = post_json(P, "/v1/chat/completions", body);
        t = chat_text(&r);
        CHECK_MSG(t && want && !strcmp(t, want), "audio: got '%s' (%d)", t, r.status);
        free(t);
        resp_free(&r);
        // the same clip as an audio_url part (a data: URL), as lmms-eval sends audio
        check_url_part(P, "audio_url", "data:audio/wav;base64,", au, asr, want);

        // the transcription: multipart/form-data with the file, the prompt and max tokens
        // (the default prompt is the same ASR prompt; HF's case generated max_new tokens, so
        // the answer's first max_new tokens' text is compared: the server's default is longer)
        const char *bd = "g4cuTestBoundary7MA4YWxkTrZu0gW";
        size_t n, head_n;
        char *mp = form_with_file(bd, "model", "package", "tone.wav", raw, raw_n, &n, &head_n);
        char *ct = g4_sprintf("multipart/form-data; boundary=%s", bd);
        r = http(P, "POST", "/v1/audio/transcriptions", ct, mp, n, -1);
        {
            cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
            const cJSON *tx = cJSON_GetObjectItem(j, "text");
            CHECK_MSG(r.status == 200 && cJSON_IsString(tx) && want &&
                          !strncmp(tx->valuestring, want, strlen(want)),
                      "transcription: %d '%s'", r.status, r.body);
            cJSON_Delete(j);
        }
        resp_free(&r);
        // audio over --max-audio-seconds (7.3 s of speech, the limit 5 s): 400 naming it
        {
            char *fd;
            size_t fn;
            char *fb = file_b64("frontends/media/speech_7.3s_8k.flac", &fd, &fn);
            size_t m2, h2;
            char *mp2 = form_with_file(bd, NULL, NULL, "s.flac", fd, fn, &m2, &h2);
            r = http(P, "POST", "/v1/audio/transcriptions", ct, mp2, m2, -1);
            CHECK_MSG(is_error(&r, 400) && strstr(r.body, "over the limit of 5 s"),
                      "7.3 s over a 5 s limit: %d %s", r.status, r.body ? r.body : "");
            resp_free(&r);
            free(mp2);
            free(fd);
            free(fb);
        }
        // no file field: 400; not multipart: 415; a body cut inside the file: no answer
        char *nofile = g4_sprintf("--%s\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n"
                                  "x\r\n--%s--\r\n",
                                  bd, bd);
        r = http(P, "POST", "/v1/audio/transcriptions", ct, nofile, strlen(nofile), -1);
        CHECK_MSG(is_error(&r, 400), "form without a file: %d", r.status);
        resp_free(&r);
        r = http(P, "POST", "/v1/audio/transcriptions", "application/json", "{}", 2, -1);
        CHECK_MSG(is_error(&r, 415), "transcription as JSON: %d", r.status);
        resp_free(&r);
        r = http(P, "POST", "/v1/audio/transcriptions", ct, mp, head_n / 2, (long)n);
        CHECK(r.status == 0);
        resp_free(&r);
        free(nofile);
        free(ct);
        free(mp);
        free(body);
        free(au);
        free(raw);
        free(want);
    }

    // malformed requests: each a 4xx JSON error
    struct {
        const char *name, *method, *path, *ctype, *body;
        int status;
    } bad[] = {
        {"bad JSON", "POST", "/v1/chat/completions", "application/json", "{\"messages\":", 400},
        {"trailing data", "POST", "/v1/chat/completions", "application/json",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]} x", 400},
        {"empty body", "POST", "/v1/chat/completions", "application/json", "", 400},
        {"not an object", "POST", "/v1/chat/completions", "application/json", "[1,2]", 400},
        {"no messages", "POST", "/v1/chat/completions", "application/json", "{}", 400},
        {"unknown role", "POST", "/v1/chat/completions", "application/json",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"robot\","
         "\"content\":\"b\"}]}",
         400},
        {"system message second", "POST", "/v1/chat/completions", "application/json",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\","
         "\"content\":\"b\"}]}",
         400},
        {"tool call arguments not an object", "POST", "/v1/chat/completions", "application/json",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\","
         "\"tool_calls\":[{\"id\":\"1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
         "\"arguments\":\"[1]\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"1\",\"content\":\"x\"}]}",
         400},
        {"image in an assistant message", "POST", "/v1/chat/completions", "application/json",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\","
         "\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,"
         "aGVsbG8=\"}}]}]}",
         400},
        {"audio_url remote", "POST", "/v1/chat/completions", "application/json",
         "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"audio_url\",\"audio_url\":"
         "{\"url\":\"https://example.com/a.wav\"}}]}]}",
         400},
        {"audio_url a path without --media-dir", "POST", "/v1/chat/completions",
         "application/json",
         "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"audio_url\",\"audio_url\":"
         "{\"url\":\"/etc/passwd\"}}]}]}",
         400},
        {"an empty data: URL", "POST", "/v1/chat/completions", "application/json",
         "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"audio_url\",\"audio_url\":"
         "{\"url\":\"data:audio/wav;base64,\"}}]}]}",
         400},
        {"completion without a prompt", "POST", "/v1/completions", "application/json",
         "{\"max_tokens\":3}", 400},
        {"completion of two prompts", "POST", "/v1/completions", "application/json",
         "{\"prompt\":[\"a\",\"b\"]}", 400},
        {"completion id out of the vocabulary", "POST", "/v1/completions", "application/json",
         "{\"prompt\":[2,99999999]}", 400},
        {"completion echo", "POST", "/v1/completions", "application/json",
         "{\"prompt\":\"a\",\"echo\":true}", 400},
        {"tokenize without content", "POST", "/tokenize", "application/json", "{\"x\":1}", 400},
        {"detokenize a bad id", "POST", "/detokenize", "application/json", "{\"tokens\":[-1]}",
         400},
        {"embeddings", "POST", "/v1/embeddings", "application/json", "{\"input\":\"a\"}", 501},
        {"another model", "GET", "/v1/models/gpt-4", NULL, "", 404},
        {"max_tokens 0", "POST", "/v1/chat/completions", "application/json",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":0}", 400},
        {"temperature a string", "POST", "/v1/chat/completions", "application/json",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"temperature\":\"hot\"}", 400},
        {"top_p 0", "POST", "/v1/chat/completions", "application/json",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_p\":0}", 400},
        {"stop an empty string", "POST", "/v1/chat/completions", "application/json",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"stop\":\"\"}", 400},
        {"n 9", "POST", "/v1/chat/completions", "application/json",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"n\":9}", 400},
        {"invalid UTF-8", "POST", "/v1/chat/completions", "application/json",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 400},
        {"wrong content type", "POST", "/v1/chat/completions", "text/plain", "{}", 415},
        {"no content type", "POST", "/v1/chat/completions", NULL, "{}", 415},
        {"GET on chat", "GET", "/v1/chat/completions", NULL, "", 405},
        {"POST on models", "POST", "/v1/models", "application/json", "{}", 405},
        {"unknown path", "GET", "/v2/nothing", NULL, "", 404},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = http(P, bad[i].method, bad[i].path, bad[i].ctype, bad[i].body, strlen(bad[i].body), -1);
        CHECK_MSG(is_error(&r, bad[i].status), "%s: %d (want %d) %s", bad[i].name, r.status,
                  bad[i].status, r.body ? r.body : "");
        resp_free(&r);
    }
    // huge body: refused from its Content-Length (413) before a byte of it is read
    {
        int fd = dial(P);
        const char *h = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        "Connection: close\r\nContent-Type: application/json\r\n"
                        "Content-Length: 5000000\r\n\r\n";
        send_all(fd, h, strlen(h));
        read_resp(fd, &r);
        close(fd);
        CHECK_MSG(is_error(&r, 413), "huge body: %d", r.status);
        resp_free(&r);
    }
    // a body cut off mid-way with the connection kept open: closed after --timeout
    {
        int fd = dial(P);
        const char *h = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"mess";
        send_all(fd, h, strlen(h));
        read_resp(fd, &r); // blocks until the server's timeout closes it
        close(fd);
        CHECK_MSG(r.status == 0 || (r.status >= 400 && r.status < 500),
                  "cut-off body: status %d", r.status);
        resp_free(&r);
    }
    r = get(P, "/health");
    CHECK_MSG(r.status == 200, "still serving after the malformed requests: %d", r.status);
    resp_free(&r);

    // load: two rounds; memory flat between them
    load_want = NULL;
    {
        r = post_json(P, "/v1/chat/completions",
                      "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello, who are you?\"}],"
                      "\"max_tokens\":8}");
        char *w8 = chat_text(&r);
        resp_free(&r);
        CHECK_MSG(w8 && !strncmp(w8, want_chat, strlen(w8)),
                  "8 tokens: '%s' is not the start of HF's text", w8 ? w8 : "(none)");
        load_want = w8;
        load_port = P;
        if (w8) {
            load_round(1);
            const long rss1 = srv_rss_kb(&s);
            load_round(2);
            const long rss2 = srv_rss_kb(&s);
            printf("server RSS: %ld kB after round 1, %ld kB after round 2\n", rss1, rss2);
#if defined(__SANITIZE_ADDRESS__)
            // ASan holds freed blocks in its quarantine (up to 256 MB), so RSS grows without a
            // leak: under it LeakSanitizer checks instead, at the server's exit (exit 0 below)
            (void)rss2;
#else
            CHECK_MSG(rss1 > 0 && rss2 - rss1 < 16 * 1024, "RSS grew by %ld kB", rss2 - rss1);
#endif
        }
        free(w8);
    }
    r = get(P, "/metrics");
    CHECK_MSG(r.status == 200 && strstr(r.body, "g4cu_requests_total{endpoint=\"chat_completions\","
                                                "code=\"200\"}") &&
                  strstr(r.body, "g4cu_request_seconds_count") &&
                  strstr(r.body, "code=\"415\""),
              "/metrics: %s", r.body);
    resp_free(&r);

    // SIGTERM with a request in flight: it completes, the server exits 0
    {
        slow_req q = {P, 0, 0};
        pthread_t th;
        pthread_create(&th, NULL, slow, &q);
        usleep(300000);
        const int code = srv_stop(&s);
        pthread_join(th, NULL);
        CHECK_MSG(q.status == 200, "the request in flight at SIGTERM: %d", q.status);
        CHECK_MSG(code == 0, "exit status after SIGTERM: %d", code);
    }

    // a full queue: 429
    {
        srv s2;
        CHECK(srv_start(&s2, "--parallel 1 --queue 1"));
        slow_req q[8];
        pthread_t th[8];
        for (int i = 0; i < 8; i++) {
            q[i] = (slow_req){s2.port, 0, 0};
            pthread_create(&th[i], NULL, slow, &q[i]);
        }
        int n429 = 0, n200 = 0, n_retry = 0;
        for (int i = 0; i < 8; i++) {
            pthread_join(th[i], NULL);
            n_retry += q[i].status == 429 && q[i].retry_after;
            n429 += q[i].status == 429;
            n200 += q[i].status == 200;
        }
        CHECK_MSG(n429 >= 1 && n200 >= 1 && n429 + n200 == 8, "8 at once, queue 1: %d x 200, %d x 429",
                  n200, n429);
        CHECK_MSG(n_retry == n429, "%d of %d 429s without Retry-After", n429 - n_retry, n429);
        CHECK_INT(srv_stop(&s2), 0);
    }
    cf_free(&l);
    free(cases);
    return g4t_finish("test_serve");
}
