// test_serve_batch.c: `g4cu serve --parallel N` as N slots decoded together in one batch
// (tools/serve.c's scheduler over g4cu_batch), on the tiny fixture, CPU backend:
//  - four different requests at once (three chats, one of them streamed and one sampled, and a
//    /v1/completions prompt) through --parallel 4 each get exactly the text and token count
//    they get alone; the greedy "Hello, who are you?" is HF's text (generate_cases.jsonl), so
//    "alone" is not only the server's word. They are sent while a long streamed request is
//    decoding, so the batch runs them together: /metrics' g4cu_batch_size histogram must show
//    decode steps of 2 rows or more, and /slots a busy slot decoding with its tokens so far.
//  - meanwhile malformed requests (bad JSON, a wrong content type, a body cut off) get their
//    4xx or no answer, and a request the batch cannot run (logprobs) is served on the single
//    state with HF's text; none of them disturbs the batch's answers.
//  - /metrics' split of the scheduler's rounds (g4cu_batch_seconds_total by phase: finite,
//    non-negative, growing with the work; prefill none with prompts as rows, the default; the
//    prompt tokens prefilled counted exactly);
//  - a client that leaves mid-stream (--parallel 1) frees its slot at once: the next request
//    runs, and the cut request generated far fewer tokens than it asked for.
#include "tests/serve_client.h"

#define N_REQ 4

static const char *const bodies[N_REQ] = {
    "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello, who are you?\"}],\"max_tokens\":40}",
    "{\"messages\":[{\"role\":\"user\",\"content\":\"Write a short poem about the sea.\"}],"
    "\"max_tokens\":60,\"stream\":true}",
    "{\"messages\":[{\"role\":\"user\",\"content\":\"Count to ten.\"}],\"max_tokens\":50,"
    "\"temperature\":0.8,\"top_k\":40,\"seed\":11}",
    "{\"prompt\":\"The quick brown fox\",\"max_tokens\":30}",
};
static const char *const paths[N_REQ] = {"/v1/chat/completions", "/v1/chat/completions",
                                         "/v1/chat/completions", "/v1/completions"};

// A request's answer text (chat content, the streamed deltas joined, or a completion's text)
// and its completion tokens (-1 when streamed: the final chunk's usage is not parsed here).
typedef struct {
    int port, k;
    int status;
    char *text;
    int tokens;
} answer;

static void *ask(void *arg) {
    answer *a = arg;
    resp r = post_json(a->port, paths[a->k], bodies[a->k]);
    a->status = r.status;
    if (a->k == 1) {
        sse_events e = sse_parse(r.body);
        a->text = e.done && e.finish == 1 ? g4_strdup(e.text) : NULL;
        a->tokens = -1;
    } else {
        a->text = a->k == 3 ? choice_field(&r, "text") : chat_text(&r);
        a->tokens = usage_of(&r, "completion_tokens");
    }
    resp_free(&r);
    return NULL;
}

// Malformed requests sent while the batch runs: each its 4xx (a cut-off body: no answer).
typedef struct {
    int port, ok, n;
} bad_sender;

static void *send_bad(void *arg) {
    bad_sender *b = arg;
    const char *good = bodies[0];
    for (int i = 0; i < 3; i++) {
        resp r = post_json(b->port, "/v1/chat/completions", "{\"messages\":[{\"role\":");
        b->ok += is_error(&r, 400), b->n++;
        resp_free(&r);
        r = http(b->port, "POST", "/v1/chat/completions", "text/plain", good, strlen(good), -1);
        b->ok += is_error(&r, 415), b->n++;
        resp_free(&r);
        r = http(b->port, "POST", "/v1/chat/completions", "application/json", good, 20,
                 (long)strlen(good));
        b->ok += r.status == 0, b->n++;
        resp_free(&r);
        r = post_json(b->port, "/v1/chat/completions",
                      "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":0}");
        b->ok += is_error(&r, 400), b->n++;
        resp_free(&r);
    }
    return NULL;
}

// A request the batch cannot run (logprobs): the single state's greedy answer.
typedef struct {
    int port, status;
    char *text;
    int has_logprobs;
    int prompt_tokens;
} single_req;

static void *ask_single(void *arg) {
    single_req *q = arg;
    resp r = post_json(q->port, "/v1/chat/completions",
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello, who are you?\"}],"
                       "\"max_tokens\":40,\"logprobs\":true}");
    q->status = r.status;
    q->text = chat_text(&r);
    q->has_logprobs = r.body && strstr(r.body, "\"logprobs\":{\"content\":[") != NULL;
    q->prompt_tokens = usage_of(&r, "prompt_tokens");
    resp_free(&r);
    return NULL;
}

// A long streamed request on its own socket, read until its first content delta arrived (it
// is decoding then); the caller reads the rest (read_resp) or closes the socket.
// ("Hello, who are you?" runs 930 tokens greedy on the fixture before its EOS: max_tokens up to
// that many are all generated.)
static int start_stream(int port, int max_tokens) {
    int fd = dial(port);
    if (fd < 0) return -1;
    char *body = g4_sprintf("{\"messages\":[{\"role\":\"user\",\"content\":\"Hello, who are "
                            "you?\"}],\"max_tokens\":%d,\"stream\":true}",
                            max_tokens);
    char *h = g4_sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Connection: close\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\n\r\n%s",
                         strlen(body), body);
    send_all(fd, h, strlen(h));
    free(h);
    free(body);
    char buf[8192];
    for (int i = 0; i < 6000; i++) { // (peeked: read_resp then reads the whole response)
        const ssize_t k = recv(fd, buf, sizeof buf - 1, MSG_PEEK | MSG_DONTWAIT);
        if (k > 0) {
            buf[k] = 0;
            if (strstr(buf, "\"content\"")) return fd;
        } else if (k == 0) {
            break;
        }
        usleep(10000);
    }
    close(fd);
    return -1;
}

static void test_batch(const char *want_chat) {
    srv s;
    CHECK_MSG(srv_start(&s, "--parallel 4 --queue 16"), "the server did not start");
    if (!s.port) return;
    const int P = s.port;

    // alone: one request at a time
    answer alone[N_REQ];
    for (int k = 0; k < N_REQ; k++) {
        alone[k] = (answer){.port = P, .k = k};
        ask(&alone[k]);
        CHECK_MSG(alone[k].status == 200 && alone[k].text && alone[k].text[0],
                  "request %d alone: %d", k, alone[k].status);
    }
    CHECK_MSG(alone[0].text && !strcmp(alone[0].text, want_chat), "alone: '%s', HF: '%s'",
              alone[0].text ? alone[0].text : "", want_chat);
    CHECK_MSG(alone[0].tokens == 40, "alone: %d tokens, want 40", alone[0].tokens);

    resp m0 = get(P, "/metrics"); // (the rounds' split so far: it grows with the work below)

    // together, while a long stream decodes; malformed and single-state requests meanwhile
    const int anchor = start_stream(P, 400);
    CHECK_MSG(anchor >= 0, "the long stream did not start");
    answer both[N_REQ];
    pthread_t th[N_REQ + 2];
    bad_sender bs = {P, 0, 0};
    single_req sq = {P, 0, NULL, 0, 0};
    for (int k = 0; k < N_REQ; k++) {
        both[k] = (answer){.port = P, .k = k};
        pthread_create(&th[k], NULL, ask, &both[k]);
    }
    pthread_create(&th[N_REQ], NULL, send_bad, &bs);
    pthread_create(&th[N_REQ + 1], NULL, ask_single, &sq);
    // /slots while they run: four slots, some processing, one with tokens decoded
    int busy = 0, decoded = 0;
    for (int i = 0; i < 50 && !(busy && decoded); i++) {
        resp r = get(P, "/slots");
        cJSON *a = r.body ? cJSON_Parse(r.body) : NULL;
        CHECK_MSG(r.status == 200 && cJSON_GetArraySize(a) == 4, "/slots: %s",
                  r.body ? r.body : "");
        busy = decoded = 0;
        const cJSON *o;
        cJSON_ArrayForEach(o, a) {
            busy += cJSON_IsTrue(cJSON_GetObjectItem(o, "is_processing"));
            const cJSON *d = cJSON_GetObjectItem(o, "n_decoded");
            const cJSON *st = cJSON_GetObjectItem(o, "state");
            decoded += cJSON_IsNumber(d) && d->valueint > 0 && cJSON_IsString(st) &&
                       !strcmp(st->valuestring, "decode");
        }
        cJSON_Delete(a);
        resp_free(&r);
        if (!(busy && decoded)) usleep(20000);
    }
    CHECK_MSG(busy && decoded, "/slots: %d slots processing, %d decoding with tokens", busy,
              decoded);
    for (int k = 0; k < N_REQ + 2; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < N_REQ; k++) {
        CHECK_MSG(both[k].status == 200 && both[k].text && alone[k].text &&
                      !strcmp(both[k].text, alone[k].text) && both[k].tokens == alone[k].tokens,
                  "request %d in the batch: %d '%s' (%d tokens); alone '%s' (%d tokens)", k,
                  both[k].status, both[k].text ? both[k].text : "", both[k].tokens,
                  alone[k].text ? alone[k].text : "", alone[k].tokens);
    }
    CHECK_MSG(bs.ok == bs.n && bs.n == 12, "malformed during the batch: %d of %d answered right",
              bs.ok, bs.n);
    CHECK_MSG(sq.status == 200 && sq.text && !strcmp(sq.text, want_chat) && sq.has_logprobs,
              "logprobs (the single state) during the batch: %d '%s'", sq.status,
              sq.text ? sq.text : "");
    resp ra = {0};
    if (anchor >= 0) {
        read_resp(anchor, &ra);
        close(anchor);
    }
    sse_events e = sse_parse(ra.body);
    CHECK_MSG(ra.status == 200 && e.done && e.finish == 1, "the long stream: %d, done %d",
              ra.status, e.done);
    resp_free(&ra);

    // the batch sizes: some decode steps ran 2 rows or more; the gauges back at 0
    resp r = get(P, "/metrics");
    const long steps = metric(r.body, "g4cu_batch_size_count");
    const long ones = metric(r.body, "g4cu_batch_size_bucket{le=\"1\"}");
    const long rows = metric(r.body, "g4cu_batch_size_sum");
    printf("batch: %ld decode steps, %ld of one row, %ld rows in all (mean %.2f); /slots saw %d "
           "busy\n",
           steps, ones, rows, steps > 0 ? (double)rows / (double)steps : 0.0, busy);
    CHECK_MSG(steps > 0 && ones >= 0 && ones < steps && rows > steps,
              "g4cu_batch_size: %ld steps, %ld of one row, %ld rows", steps, ones, rows);
    // where the rounds went: every phase's seconds finite, non-negative and not fewer than
    // before the batch ran; decode grew (steps ran). prefill: with prompts as rows of the decode
    // step (the server's default, engine/batch.h: the env it inherits says) the text prompts
    // went in as rows of the steps, their time in decode: no prefill seconds at all; with
    // G4_BATCH_PROMPT_ROWS=0 (or G4_BATCH_ROWS=0) their own forwards' seconds grew. Exact
    // counts: the batch prefilled every prompt token of the requests it answered (all but the
    // single state's), and ran a round for each decode step or more.
    const int prompt_rows =
        !g4_env_is("G4_BATCH_PROMPT_ROWS", "0") && !g4_env_is("G4_BATCH_ROWS", "0");
    const char *const phases[5] = {"prefill", "decode", "accept", "submit", "sched"};
    for (int i = 0; i < 5; i++) {
        char name[64];
        snprintf(name, sizeof name, "g4cu_batch_seconds_total{phase=\"%s\"}", phases[i]);
        const double v0 = metric_f(m0.body, name), v1 = metric_f(r.body, name);
        printf("%s: %.6f s before the batch, %.6f s after\n", name, v0, v1);
        const int grew = i == 0   ? (prompt_rows ? v0 == 0 && v1 == 0 : v1 > v0)
                         : i == 1 ? v1 > v0
                                  : 1;
        CHECK_MSG(isfinite(v0) && isfinite(v1) && v0 >= 0 && v1 >= v0 && grew,
                  "%s: %g, then %g (prompts as rows: %d)", name, v0, v1, prompt_rows);
    }
    const long rounds = metric(r.body, "g4cu_batch_rounds_total");
    const long ptok = metric(r.body, "g4cu_batch_prefill_tokens_total");
    const long all_ptok = metric(r.body, "g4cu_prompt_tokens_total");
    CHECK_MSG(rounds >= steps && rounds > metric(m0.body, "g4cu_batch_rounds_total"),
              "g4cu_batch_rounds_total %ld, %ld decode steps", rounds, steps);
    CHECK_MSG(sq.prompt_tokens > 0 && ptok == all_ptok - sq.prompt_tokens &&
                  metric(r.body, "g4cu_batch_prefill_chunks_total") > 0,
              "prefill tokens: %ld in the batch, %ld prompt tokens answered, %d of them the "
              "single state's",
              ptok, all_ptok, sq.prompt_tokens);
    resp_free(&m0);
    CHECK_MSG(metric(r.body, "g4cu_batch_slots") == 4 &&
                  metric(r.body, "g4cu_batch_running") == 0 &&
                  metric(r.body, "g4cu_running") == 0 &&
                  metric(r.body, "g4cu_single_requests_total") == 1,
              "/metrics gauges: %s", r.body ? r.body : "");
    resp_free(&r);
    for (int k = 0; k < N_REQ; k++) free(alone[k].text), free(both[k].text);
    free(sq.text);
    CHECK_INT(srv_stop(&s), 0);
}

// A client that leaves mid-stream frees its slot (--parallel 1): the next request runs.
static void test_stream_disconnect(const char *want_chat) {
    srv s;
    CHECK_MSG(srv_start(&s, "--parallel 1"), "the server did not start");
    if (!s.port) return;
    const int P = s.port, asked = 900;
    const int fd = start_stream(P, asked);
    CHECK_MSG(fd >= 0, "the stream did not start");
    if (fd >= 0) close(fd); // the client gives up after its first delta
    // the slot is idle again soon (the scheduler cancels at its next step, once MHD notices)
    int idle = 0;
    for (int i = 0; i < 200 && !idle; i++) {
        resp r = get(P, "/metrics");
        idle = metric(r.body, "g4cu_running") == 0 && metric(r.body, "g4cu_batch_running") == 0;
        resp_free(&r);
        if (!idle) usleep(20000);
    }
    resp r = post_json(P, "/v1/chat/completions", bodies[0]);
    char *t = chat_text(&r);
    CHECK_MSG(t && !strcmp(t, want_chat), "the request after the cut stream: %d '%s'", r.status,
              t ? t : "");
    free(t);
    resp_free(&r);
    r = get(P, "/metrics");
    const long tokens = metric(r.body, "g4cu_completion_tokens_total");
    resp_free(&r);
    r = get(P, "/slots");
    printf("stream disconnect: slot idle %d; %ld tokens generated in all (the cut stream asked "
           "%d, the next request 40)\n",
           idle, tokens, asked);
    CHECK_MSG(idle && tokens >= 40 && tokens - 40 < asked / 2,
              "a stream cut after its first delta: idle %d, %ld tokens generated for it (of %d)",
              idle, tokens - 40, asked);
    CHECK_MSG(r.status == 200 && r.body && strstr(r.body, "\"state\":\"idle\""), "/slots: %s",
              r.body ? r.body : "");
    resp_free(&r);
    CHECK_INT(srv_stop(&s), 0);
}

int main(void) {
    if (!serve_setup()) return g4t_skip("test_serve_batch", "g4cu was built without libmicrohttpd");
    char *cases = g4_sprintf("%s/chat/generate_cases.jsonl", fix);
    cf_lines l = cf_read(cases);
    const char *want_chat = NULL;
    for (int c = 0; c < l.n; c++) {
        const char *name = cf_str(l.line[c], "name"), *pkg = cf_str(l.line[c], "package");
        if (name && pkg && !strcmp(pkg, "mobius-tiny-f16") && !strcmp(name, "chat_text"))
            want_chat = cf_str(l.line[c], "text");
    }
    CHECK(want_chat);
    if (want_chat) {
        test_batch(want_chat);
        test_stream_disconnect(want_chat);
    }
    cf_free(&l);
    free(cases);
    return g4t_finish("test_serve_batch");
}
