// test_serve_compat.c: the protocol of `g4cu serve` that clients we did not write expect
// (issue 32), on the tiny fixture with tests/serve_client.h's socket client:
//  - conversations: every case of tests/fixtures/chat/multiturn_cases.jsonl without media
//    (system, user, assistant, tool calls and responses; rendered by Jinja from the E2B
//    template) sent as OpenAI messages: the prompt has the rendered text's tokens, and the
//    greedy answer is /v1/completions' on that very text (no template involved)
//  - /tokenize + /detokenize round trip, /v1/completions plain = streamed, /v1/models/{id},
//    /props, /slots; a sampled answer without a seed reports a fresh one that repeats it
//  - every transcription response_format (json, text, srt, vtt against the file's length);
//    a 31 s upload transcribed in two segments (verbose_json) and heard whole in chat (two
//    audio blocks); 32 requests at once on the default queue all answered; max_tokens past
//    --max-tokens clamped with "length"
//  - a non-streamed request whose client leaves is cancelled (g4cu_cancelled_total, and far
//    fewer tokens generated than the same request run whole)
#include "tests/serve_client.h"

// Conversations: the fixture's Jinja-rendered cases sent as OpenAI messages: the prompt is the
// rendered text's tokens, and the greedy answer is /v1/completions' on that very text.
static void test_multiturn(int P) {
    char *path = g4_sprintf("%s/chat/multiturn_cases.jsonl", fix);
    cf_lines l = cf_read(path);
    int n = 0;
    for (int i = 0; i < l.n; i++) {
        const cJSON *o = l.line[i];
        const char *name = cf_str(o, "name"), *rendered = cf_str(o, "rendered");
        const cJSON *msgs = cJSON_GetObjectItem(o, "messages"), *sys = cJSON_GetObjectItem(o, "system");
        if (strstr(rendered, "<|image|>") || strstr(rendered, "<|audio|>")) continue; // (media: below)
        cJSON *q = cJSON_CreateObject(), *m = cJSON_Duplicate(msgs, 1);
        if (cJSON_IsString(sys)) {
            cJSON *sm = cJSON_CreateObject();
            cJSON_AddStringToObject(sm, "role", "system");
            cJSON_AddStringToObject(sm, "content", sys->valuestring);
            cJSON_InsertItemInArray(m, 0, sm);
        }
        const cJSON *e; // OpenAI sends tool-call arguments as a JSON object's text
        cJSON_ArrayForEach(e, m) {
            const cJSON *tc;
            cJSON_ArrayForEach(tc, cJSON_GetObjectItem(e, "tool_calls")) {
                cJSON *f = cJSON_GetObjectItem(tc, "function");
                char *a = cJSON_PrintUnformatted(cJSON_GetObjectItem(f, "arguments"));
                cJSON_ReplaceItemInObject(f, "arguments", cJSON_CreateString(a));
                free(a);
            }
        }
        cJSON_AddItemToObject(q, "messages", m);
        cJSON_AddNumberToObject(q, "max_tokens", 6);
        char *body = cJSON_PrintUnformatted(q);
        resp r = post_json(P, "/v1/chat/completions", body);
        const int want = n_tokens_of(rendered);
        CHECK_MSG(r.status == 200 && usage_of(&r, "prompt_tokens") == want,
                  "%s: %d, prompt_tokens %d, the rendered text has %d (%s)", name, r.status,
                  usage_of(&r, "prompt_tokens"), want, r.body ? r.body : "");
        char *chat = chat_text(&r);
        resp_free(&r);
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "prompt", rendered);
        cJSON_AddNumberToObject(c, "max_tokens", 6);
        char *cb = cJSON_PrintUnformatted(c);
        r = post_json(P, "/v1/completions", cb);
        char *raw = choice_field(&r, "text");
        CHECK_MSG(r.status == 200 && usage_of(&r, "prompt_tokens") == want, "%s: completion %d %s",
                  name, r.status, r.body ? r.body : "");
        // (the chat stops at <turn|> too: its text is a prefix of the raw completion's)
        CHECK_MSG(chat && raw && !strncmp(raw, chat, strlen(chat)),
                  "%s: chat '%s' is not the completion '%s' of the same text", name,
                  chat ? chat : "(none)", raw ? raw : "(none)");
        n++;
        free(chat), free(raw), free(cb), free(body);
        resp_free(&r);
        cJSON_Delete(c), cJSON_Delete(q);
    }
    CHECK_MSG(n >= 9, "%d conversations sent", n);
    printf("multi-turn: %d conversations, each the prompt Jinja renders\n", n);
    cf_free(&l);
    free(path);
}

// The other routes: tokenize / detokenize round trip, completions streamed, models/{id},
// props, slots.
static void test_routes(int P) {
    resp r = post_json(P, "/tokenize", "{\"content\":\"Hello, who are you?\"}");
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *ids = cJSON_GetObjectItem(j, "tokens");
    CHECK_MSG(r.status == 200 && cJSON_GetArraySize(ids) == n_tokens_of("Hello, who are you?"),
              "/tokenize: %d %s", r.status, r.body ? r.body : "");
    char *ids_s = cJSON_PrintUnformatted(ids);
    char *db = g4_sprintf("{\"tokens\":%s}", ids_s ? ids_s : "[]");
    resp_free(&r);
    r = post_json(P, "/detokenize", db);
    char *content = field_of(r.body, "content");
    CHECK_MSG(content && !strcmp(content, "Hello, who are you?"), "/detokenize: %s",
              r.body ? r.body : "");
    free(content), free(db), free(ids_s);
    cJSON_Delete(j);
    resp_free(&r);
    // completions: plain = streamed
    r = post_json(P, "/v1/completions", "{\"prompt\":\"Hello\",\"max_tokens\":12}");
    char *plain = choice_field(&r, "text");
    CHECK_MSG(plain && r.body && strstr(r.body, "\"object\":\"text_completion\""),
              "/v1/completions: %d %s", r.status, r.body ? r.body : "");
    resp_free(&r);
    r = post_json(P, "/v1/completions", "{\"prompt\":[\"Hello\"],\"max_tokens\":12,\"stream\":true}");
    {
        char *p = r.body;
        char acc[4096] = {0};
        int events = 0, done = 0;
        for (p = p ? strstr(p, "data: ") : NULL; p; p = strstr(p, "data: ")) {
            p += 6;
            char *end = strstr(p, "\n\n");
            if (!end) break;
            *end = 0;
            events++;
            if (!strcmp(p, "[DONE]")) done = 1;
            cJSON *e = cJSON_Parse(p);
            const cJSON *t = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(e, "choices"), 0), "text");
            if (cJSON_IsString(t)) strncat(acc, t->valuestring, sizeof acc - strlen(acc) - 1);
            cJSON_Delete(e);
            p = end + 1;
        }
        CHECK_MSG(done && events >= 2 && plain && !strcmp(acc, plain),
                  "/v1/completions streamed: '%s' vs '%s' (%d events)", acc, plain ? plain : "", events);
    }
    free(plain);
    resp_free(&r);
    r = get(P, "/v1/models/package");
    CHECK_MSG(r.status == 200 && strstr(r.body, "\"id\":\"package\""), "/v1/models/package: %d", r.status);
    resp_free(&r);
    r = get(P, "/props");
    CHECK_MSG(r.status == 200 && strstr(r.body, "\"total_slots\":2") && strstr(r.body, "\"n_ctx\":4096"),
              "/props: %s", r.body ? r.body : "");
    resp_free(&r);
    r = get(P, "/slots");
    j = r.body ? cJSON_Parse(r.body) : NULL;
    CHECK_MSG(r.status == 200 && cJSON_GetArraySize(j) == 2, "/slots: %s", r.body ? r.body : "");
    cJSON_Delete(j);
    resp_free(&r);
}

// Sampling without a seed draws one and reports it; sending it back repeats the sample.
static void test_seed(int P) {
    const char *q = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":12,"
                    "\"temperature\":1.5%s}";
    char *b0 = g4_sprintf(q, ""), *b1 = g4_sprintf(q, ",\"seed\":-1");
    resp a = post_json(P, "/v1/chat/completions", b0), b = post_json(P, "/v1/chat/completions", b1);
    char *sa = field_of(a.body, "seed"), *sb = field_of(b.body, "seed"), *ta = chat_text(&a);
    CHECK_MSG(sa && sb && strcmp(sa, sb), "two requests without a seed: seeds %s and %s",
              sa ? sa : "(none)", sb ? sb : "(none)");
    CHECK_MSG(a.body && strstr(a.body, "\"system_fingerprint\":\"g4cu-"), "no system_fingerprint: %s",
              a.body ? a.body : "");
    char *again = g4_sprintf(q, "");
    free(again);
    again = g4_sprintf("{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":12,"
                       "\"temperature\":1.5,\"seed\":%s}",
                       sa ? sa : "0");
    resp c = post_json(P, "/v1/chat/completions", again);
    char *tc = chat_text(&c), *sc = field_of(c.body, "seed");
    CHECK_MSG(ta && tc && !strcmp(ta, tc) && sc && sa && !strcmp(sc, sa),
              "the reported seed %s does not repeat the sample: '%s' vs '%s'", sa ? sa : "",
              ta ? ta : "", tc ? tc : "");
    resp g = post_json(P, "/v1/chat/completions",
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":2}");
    CHECK_MSG(g.status == 200 && !strstr(g.body, "\"seed\""), "a greedy answer reports a seed: %s",
              g.body ? g.body : "");
    free(sa), free(sb), free(sc), free(ta), free(tc), free(b0), free(b1), free(again);
    resp_free(&a), resp_free(&b), resp_free(&c), resp_free(&g);
}

// A mono 16-bit WAV of `sec` seconds at 16 kHz (a seeded noise + tone), *n its size.
__attribute__((unused)) static char *make_wav(double sec, size_t *n) {
    const uint32_t rate = 16000, k = (uint32_t)(sec * rate), bytes = k * 2;
    char *w = malloc(44 + bytes);
    uint32_t v32;
    uint16_t v16;
    memcpy(w, "RIFF", 4), v32 = 36 + bytes, memcpy(w + 4, &v32, 4), memcpy(w + 8, "WAVEfmt ", 8);
    v32 = 16, memcpy(w + 16, &v32, 4), v16 = 1, memcpy(w + 20, &v16, 2), memcpy(w + 22, &v16, 2);
    memcpy(w + 24, &rate, 4), v32 = rate * 2, memcpy(w + 28, &v32, 4);
    v16 = 2, memcpy(w + 32, &v16, 2), v16 = 16, memcpy(w + 34, &v16, 2);
    memcpy(w + 36, "data", 4), memcpy(w + 40, &bytes, 4);
    uint32_t x = 12345;
    for (uint32_t i = 0; i < k; i++) {
        x = x * 1664525u + 1013904223u;
        int16_t s = (int16_t)((int)(x >> 20) - 2048 + ((i / 20) % 2 ? 3000 : -3000));
        memcpy(w + 44 + 2 * i, &s, 2);
    }
    *n = 44 + bytes;
    return w;
}

// A WAV file's length in ms (its fmt and data chunks), -1 when it has none.
static long wav_ms(const char *w, size_t n) {
    uint16_t ch = 0, bits = 0;
    uint32_t rate = 0, size = 0;
    for (size_t at = 12; at + 8 <= n;) {
        uint32_t len;
        memcpy(&len, w + at + 4, 4);
        if (!memcmp(w + at, "fmt ", 4) && at + 24 <= n) {
            memcpy(&ch, w + at + 10, 2), memcpy(&rate, w + at + 12, 4), memcpy(&bits, w + at + 22, 2);
        } else if (!memcmp(w + at, "data", 4)) {
            size = len;
            break;
        }
        at += 8 + len + (len & 1);
    }
    if (!ch || !rate || !bits || !size) return -1;
    return (long)((double)size / (ch * (bits / 8)) / rate * 1000.0 + 0.5);
}

// A multipart upload of wav[0..wn) with this response_format to the server at P.
static resp transcribe_as(int P, const char *fmt, const char *wav, size_t wn) {
    const char *bd = "g4cuFormatBoundary";
    char *ct = g4_sprintf("multipart/form-data; boundary=%s", bd);
    size_t n, h;
    char *mp = form_with_file(bd, "response_format", fmt, "a.wav", wav, wn, &n, &h);
    resp r = http(P, "POST", "/v1/audio/transcriptions", ct, mp, n, -1);
    free(mp), free(ct);
    return r;
}

// A server with --max-tokens 4 (--parallel 1): every response_format of a transcription (the
// short tone: one segment); audio past the 30 s window heard whole: a 31 s upload transcribed
// in two segments, and in chat two audio blocks; max_tokens over the limit clamped ("length").
static void test_audio_formats_and_limits(const char *tone_rel) {
    srv s;
    CHECK_MSG(srv_start(&s, "--parallel 1 --max-tokens 4"), "the server did not start");
    if (!s.port) return;
    const int P = s.port;
    char *tone, *wav;
    size_t tn, wn;
    free(file_b64(tone_rel, &tone, &tn));
    resp r = transcribe_as(P, "json", tone, tn);
    char *text = field_of(r.body, "text");
    CHECK_MSG(r.status == 200 && text, "json: %d %s", r.status, r.body ? r.body : "");
    resp_free(&r);
    r = transcribe_as(P, "text", tone, tn);
    CHECK_MSG(r.status == 200 && r.head && strcasestr(r.head, "text/plain") && text &&
                  !strcmp(r.body, text),
              "text: '%s' vs json '%s'", r.body ? r.body : "", text ? text : "");
    resp_free(&r);
    const long ms = wav_ms(tone, tn);
    CHECK(ms > 0 && ms < 60000);
    for (int vtt = 0; vtt < 2; vtt++) { // one cue, 0 to the file's length
        r = transcribe_as(P, vtt ? "vtt" : "srt", tone, tn);
        char *want = g4_sprintf("%s00:00:00%c000 --> 00:00:%02ld%c%03ld\n%s\n\n",
                                vtt ? "WEBVTT\n\n" : "1\n", vtt ? '.' : ',', ms / 1000,
                                vtt ? '.' : ',', ms % 1000, text ? text : "");
        CHECK_MSG(r.status == 200 && !strcmp(r.body, want), "%s: '%s', want '%s'",
                  vtt ? "vtt" : "srt", r.body ? r.body : "", want);
        free(want);
        resp_free(&r);
    }
    r = transcribe_as(P, "xml", tone, tn);
    CHECK_MSG(is_error(&r, 400) && strstr(r.body, "verbose_json"), "xml: %d", r.status);
    resp_free(&r);
    free(text);
    free(tone);
#if defined(__SANITIZE_ADDRESS__)
    // The sanitizer tree is an unoptimized build: the audio tower on a 30 s window takes minutes
    // there, past the client's timeout; the long-audio cases run in the optimized tree only.
    (void)wav, (void)wn;
    printf("long audio: not run under ASan (the unoptimized tower on 30 s is minutes)\n");
#else
    // 31 s: two windows (30 s, and the last 6 s with its 5 s overlap), two segments to 31 s
    wav = make_wav(31.0, &wn);
    r = transcribe_as(P, "verbose_json", wav, wn);
    {
        cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
        const cJSON *segs = cJSON_GetObjectItem(j, "segments");
        const cJSON *s0 = cJSON_GetArrayItem(segs, 0), *s1 = cJSON_GetArrayItem(segs, 1);
        const cJSON *dur = cJSON_GetObjectItem(j, "duration"), *t = cJSON_GetObjectItem(j, "text");
        const cJSON *st0 = cJSON_GetObjectItem(s0, "start"), *e1 = cJSON_GetObjectItem(s1, "end");
        const cJSON *e0 = cJSON_GetObjectItem(s0, "end"), *st1 = cJSON_GetObjectItem(s1, "start");
        CHECK_MSG(r.status == 200 && cJSON_GetArraySize(segs) == 2 && cJSON_IsNumber(dur) &&
                      dur->valuedouble == 31.0 && cJSON_IsNumber(st0) && st0->valuedouble == 0 &&
                      cJSON_IsNumber(e1) && e1->valuedouble == 31.0 && cJSON_IsNumber(e0) &&
                      cJSON_IsNumber(st1) && e0->valuedouble == st1->valuedouble &&
                      cJSON_IsString(t) && cJSON_IsString(cJSON_GetObjectItem(s0, "text")),
                  "verbose_json of 31 s: %d %s", r.status, r.body ? r.body : "");
        cJSON_Delete(j);
    }
    resp_free(&r);
    // the same 31 s in chat as audio_url: both windows in the prompt (750 + 25 soft tokens at
    // 25 a second), not the first 30 s alone (750)
    {
        char *b64w = b64((unsigned char *)wav, wn);
        char *body = g4_sprintf("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"audio_url\","
                                "\"audio_url\":{\"url\":\"data:audio/wav;base64,%s\"}}]}]}",
                                b64w);
        r = post_json(P, "/v1/chat/completions", body);
        const int pt = usage_of(&r, "prompt_tokens");
        CHECK_MSG(r.status == 200 && pt >= 775 + 4, "31 s of chat audio: %d, %d prompt tokens",
                  r.status, pt);
        resp_free(&r);
        free(body), free(b64w);
    }
    free(wav);
#endif
    // lmms-eval's default: 32 requests at once, one state, the default queue: every one answered
    {
        slow_req q[32];
        pthread_t th[32];
        for (int i = 0; i < 32; i++) {
            q[i] = (slow_req){P, 0, 0};
            pthread_create(&th[i], NULL, slow, &q[i]);
        }
        int n200 = 0;
        for (int i = 0; i < 32; i++) {
            pthread_join(th[i], NULL);
            n200 += q[i].status == 200;
        }
        CHECK_MSG(n200 == 32, "32 at once on the default queue: %d answered 200", n200);
    }
    // max_tokens far past --max-tokens 4 (and the context): clamped, "length"
    r = post_json(P, "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello, who are you?\"}],"
                  "\"max_tokens\":1000000}");
    char *fr = choice_field(&r, "finish_reason");
    CHECK_MSG(r.status == 200 && usage_of(&r, "completion_tokens") == 4 && fr && !strcmp(fr, "length"),
              "max_tokens 1000000 under --max-tokens 4: %d %s", r.status, r.body ? r.body : "");
    free(fr);
    resp_free(&r);
    CHECK_INT(srv_stop(&s), 0);
}

// A non-streamed request whose client leaves: its generation stops (a greedy answer of up to
// 2000 tokens, measured whole first, the same request cut 150 ms after it is sent). What the cut
// one may still generate follows this machine's speed, measured on the whole answer: at most
// 0.5 s of it (the cut at 0.15 s, the server's look every 0.1 s, a step), and less than the
// whole. (A fixed half of a 600-token answer failed on a loaded 2-core machine: 359 tokens.)
static void test_disconnect(void) {
    srv s;
    CHECK_MSG(srv_start(&s, "--parallel 1"), "the server did not start");
    if (!s.port) return;
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello, who are you?\"}],"
                       "\"max_tokens\":2000}";
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    resp r = post_json(s.port, "/v1/chat/completions", body);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const int full = usage_of(&r, "completion_tokens");
    resp_free(&r);
    const double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    const long allowed = (long)(0.5 * full / (secs > 1e-3 ? secs : 1e-3)) + 16;
    int fd = dial(s.port);
    char *h = g4_sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                         strlen(body), body);
    send_all(fd, h, strlen(h));
    free(h);
    usleep(150000);
    close(fd); // the client gives up
    long cancelled = -1, tokens = -1;
    for (int i = 0; i < 100 && cancelled < 1; i++) { // (the server looks every 100 ms)
        usleep(100000);
        r = get(s.port, "/metrics");
        cancelled = metric(r.body, "g4cu_cancelled_total");
        tokens = metric(r.body, "g4cu_completion_tokens_total");
        resp_free(&r);
    }
    // the running gauge back at 0 once the cut request has ended
    long running = 1;
    for (int i = 0; i < 100 && running; i++) {
        r = get(s.port, "/metrics");
        running = metric(r.body, "g4cu_running");
        tokens = metric(r.body, "g4cu_completion_tokens_total");
        resp_free(&r);
        if (running) usleep(50000);
    }
    printf("disconnect: the full answer %d tokens in %.3f s; after the cut one, %ld tokens in "
           "all, %ld cancelled (at most %ld allowed for it)\n",
           full, secs, tokens, cancelled, allowed);
    CHECK_MSG(full > 200 && cancelled == 1 && running == 0 && tokens - full < full &&
                  tokens - full <= allowed,
              "a client that left: %ld cancelled, %ld tokens generated for it (of %d; allowed %ld)",
              cancelled, tokens - full, full, allowed);
    CHECK_INT(srv_stop(&s), 0);
}

int main(void) {
    if (!serve_setup()) return g4t_skip("test_serve_compat", "g4cu was built without libmicrohttpd");
    srv s;
    CHECK_MSG(srv_start(&s, "--parallel 2"), "the server did not start");
    if (!s.port) return g4t_finish("test_serve_compat");
    test_multiturn(s.port);
    test_routes(s.port);
    test_seed(s.port);
    CHECK_INT(srv_stop(&s), 0);
    test_audio_formats_and_limits("frontends/media/tone_1s_f32.wav");
    test_disconnect();
    return g4t_finish("test_serve_compat");
}
