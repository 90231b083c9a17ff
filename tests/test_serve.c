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
//  - issue 32: conversations (multiturn_cases.jsonl, rendered by Jinja: the prompt has the
//    rendered text's tokens and the greedy answer is /v1/completions' on that text), audio_url,
//    /tokenize + /detokenize, /v1/completions plain and streamed, /v1/models/{id}, /props,
//    /slots, /v1/embeddings (501), a drawn seed that repeats its sample, Retry-After on a 429,
//    a 35 s upload transcribed whole in json / text / verbose_json / srt / vtt and heard whole
//    in chat, max_tokens clamped, a non-streamed request stopped when its client leaves
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "loader/tokenizer.h"
#include "tests/chat_fixture.h"
#include "tests/test_util.h"

static const char *fix;

// --- the server process -----------------------------------------------------------------------
typedef struct {
    pid_t pid;
    int port;
} srv;

static int srv_start(srv *s, const char *extra) {
    int fd[2];
    if (pipe(fd)) return 0;
    char *cmd = g4_sprintf("exec '%s' serve '%s' --tokenizer '%s/chat/chat_bpe.json' --backend cpu "
                           "--port 0 %s",
                           g4t_env("G4CU"), g4t_env("G4_TINY_PKG"), fix, extra);
    s->pid = fork();
    if (s->pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    free(cmd);
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    char line[512] = {0};
    const int got = fgets(line, sizeof line, f) != NULL;
    fclose(f); // (the server's later stdout goes nowhere; it prints only this line)
    const char *p = strstr(line, "127.0.0.1:");
    s->port = got && p ? atoi(p + 10) : 0;
    if (!s->port) fprintf(stderr, "test_serve: the server printed '%s'\n", line);
    return s->port > 0;
}

static long srv_rss_kb(const srv *s) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)s->pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = atol(line + 6);
    if (f) fclose(f);
    return kb;
}

// SIGTERM and the exit status (-1: it did not exit within 60 s).
static int srv_stop(srv *s) {
    kill(s->pid, SIGTERM);
    for (int i = 0; i < 600; i++) {
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
        usleep(100000);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    return -1;
}

// --- a small HTTP/1.1 client ------------------------------------------------------------------
typedef struct {
    int status; // 0: no response (connection closed or failed)
    char *head, *body;
    size_t body_len;
} resp;

static void resp_free(resp *r) {
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof *r);
}

static int dial(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {180, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

static void send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        p += w, n -= (size_t)w;
    }
}

// Reads to EOF and splits the response (de-chunking a chunked body).
static void read_resp(int fd, resp *r) {
    memset(r, 0, sizeof *r);
    size_t cap = 65536, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (n + 4096 > cap) b = realloc(b, cap *= 2);
        ssize_t k = recv(fd, b + n, cap - n - 1, 0);
        if (k <= 0) break;
        n += (size_t)k;
    }
    b[n] = 0;
    char *sep = strstr(b, "\r\n\r\n");
    if (!sep || strncmp(b, "HTTP/1.", 7)) {
        free(b);
        return;
    }
    r->status = atoi(b + 9);
    r->head = g4_strndup(b, (size_t)(sep - b));
    const char *body = sep + 4;
    size_t blen = n - (size_t)(body - b);
    if (strcasestr(r->head, "transfer-encoding: chunked")) {
        char *o = malloc(blen + 1);
        size_t k = 0;
        const char *p = body, *end = body + blen;
        while (p < end) {
            char *e;
            unsigned long sz = strtoul(p, &e, 16);
            const char *d = strstr(e, "\r\n");
            if (!d || !sz) break;
            d += 2;
            if (d + sz > end) sz = (unsigned long)(end - d);
            memcpy(o + k, d, sz);
            k += sz;
            p = d + sz + 2;
        }
        o[k] = 0;
        r->body = o, r->body_len = k;
    } else {
        r->body = g4_strndup(body, blen), r->body_len = blen;
    }
    free(b);
}

// One request (Connection: close); body_len bytes of body are sent of a declared clen
// (clen < 0: the body's length).
static resp http(int port, const char *method, const char *path, const char *ctype,
                 const char *body, size_t body_len, long clen) {
    resp r = {0};
    int fd = dial(port);
    if (fd < 0) return r;
    char *h = g4_sprintf("%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%s%s"
                         "Content-Length: %ld\r\n\r\n",
                         method, path, ctype ? "Content-Type: " : "", ctype ? ctype : "",
                         ctype ? "\r\n" : "", clen >= 0 ? clen : (long)body_len);
    send_all(fd, h, strlen(h));
    if (body_len) send_all(fd, body, body_len);
    free(h);
    if (clen >= 0 && (size_t)clen > body_len) { // cut off: the client goes away
        close(fd);
        return r;
    }
    read_resp(fd, &r);
    close(fd);
    return r;
}

static resp post_json(int port, const char *path, const char *json) {
    return http(port, "POST", path, "application/json", json, strlen(json), -1);
}

static resp get(int port, const char *path) { return http(port, "GET", path, NULL, NULL, 0, -1); }

// A 4xx answer with the error object.
static int is_error(const resp *r, int status) {
    if (r->status != status || !r->body) return 0;
    cJSON *j = cJSON_Parse(r->body);
    const cJSON *e = cJSON_GetObjectItem(j, "error");
    int ok = cJSON_IsString(cJSON_GetObjectItem(e, "message")) &&
             cJSON_IsString(cJSON_GetObjectItem(e, "type"));
    cJSON_Delete(j);
    return ok;
}

// choices[0].message.content of a chat answer (a new string), or NULL.
static char *chat_text(const resp *r) {
    if (r->status != 200 || !r->body) return NULL;
    cJSON *j = cJSON_Parse(r->body);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content");
    char *s = cJSON_IsString(t) ? g4_strdup(t->valuestring) : NULL;
    cJSON_Delete(j);
    return s;
}

// The events of a server-sent-event body: the content deltas joined, the count of events, of
// chunks with a finish_reason, and whether `data: [DONE]` came (body is cut up in place).
typedef struct {
    char text[8192];
    int events, done, finish;
} sse_events;

static sse_events sse_parse(char *body) {
    sse_events e = {{0}, 0, 0, 0};
    for (char *p = body ? strstr(body, "data: ") : NULL; p; p = strstr(p, "data: ")) {
        p += 6;
        char *end = strstr(p, "\n\n");
        if (!end) break;
        *end = 0;
        e.events++;
        if (!strcmp(p, "[DONE]")) e.done = 1;
        cJSON *j = cJSON_Parse(p);
        const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        const cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(c0, "delta"), "content");
        if (cJSON_IsString(d)) strncat(e.text, d->valuestring, sizeof e.text - strlen(e.text) - 1);
        if (cJSON_IsString(cJSON_GetObjectItem(c0, "finish_reason"))) e.finish++;
        cJSON_Delete(j);
        p = end + 1;
    }
    return e;
}

// A multipart/form-data body with boundary bd: an optional text field (name = value), then a
// `file` field (filename, data[0..n)). *len: its length; *head_len: the bytes before the file's
// end (a cut there leaves the form unfinished).
static char *form_with_file(const char *bd, const char *name, const char *value,
                            const char *filename, const char *data, size_t n, size_t *len,
                            size_t *head_len) {
    size_t cap = n + 4096, k = 0;
    char *b = malloc(cap);
    if (name)
        k += (size_t)snprintf(b + k, cap - k,
                              "--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n",
                              bd, name, value);
    k += (size_t)snprintf(b + k, cap - k,
                          "--%s\r\nContent-Disposition: form-data; name=\"file\"; "
                          "filename=\"%s\"\r\nContent-Type: application/octet-stream\r\n\r\n",
                          bd, filename);
    memcpy(b + k, data, n);
    k += n;
    *head_len = k;
    k += (size_t)snprintf(b + k, cap - k, "\r\n--%s--\r\n", bd);
    *len = k;
    return b;
}

// --- fixtures ---------------------------------------------------------------------------------
static char *b64(const unsigned char *d, size_t n) {
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc((n + 2) / 3 * 4 + 1), *p = o;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)d[i] << 16 | (i + 1 < n ? (unsigned)d[i + 1] << 8 : 0) |
                     (i + 2 < n ? d[i + 2] : 0);
        *p++ = t[v >> 18 & 63], *p++ = t[v >> 12 & 63];
        *p++ = i + 1 < n ? t[v >> 6 & 63] : '=';
        *p++ = i + 2 < n ? t[v & 63] : '=';
    }
    *p = 0;
    return o;
}

static char *file_b64(const char *rel, char **raw, size_t *raw_n) {
    char *path = g4_sprintf("%s/%s", fix, rel), *data;
    size_t n;
    if (g4_read_file(path, &data, &n)) {
        fprintf(stderr, "%s\n", g4_error());
        exit(1);
    }
    free(path);
    char *s = b64((unsigned char *)data, n);
    if (raw)
        *raw = data, *raw_n = n;
    else
        free(data);
    return s;
}

// HF's ids of a case decoded by the fixture tokenizer (the media cases keep ids, not text).
static char *hf_text(const cJSON *o) {
    char *tp = g4_sprintf("%s/chat/chat_bpe.json", fix), *text = NULL;
    g4_tokenizer *t;
    size_t len;
    int n, *ids = cf_ints(o, "ids", &n);
    if (g4_tokenizer_open(tp, &t) == G4_OK) {
        g4_tokenizer_decode(t, ids, (size_t)n, 1, &text, &len);
        g4_tokenizer_close(t);
    }
    free(ids);
    free(tp);
    return text;
}

// A chat of one user turn: a `type` part {"url": prefix + b64} and the case's text, answered
// with the case's max_new tokens: the text must be want (HF's).
static void check_url_part(int P, const char *type, const char *prefix, const char *b64s,
                           const cJSON *c, const char *want) {
    char *body = g4_sprintf("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"%s\","
                            "\"%s\":{\"url\":\"%s%s\"}},{\"type\":\"text\",\"text\":\"%s\"}]}],"
                            "\"max_tokens\":%d}",
                            type, type, prefix, b64s, cf_str(c, "text"), cf_int(c, "max_new"));
    resp r = post_json(P, "/v1/chat/completions", body);
    char *t = chat_text(&r);
    CHECK_MSG(t && want && !strcmp(t, want), "%s: got '%s' (%d %s)", type, t ? t : "", r.status,
              t ? "" : r.body);
    free(t);
    free(body);
    resp_free(&r);
}

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

typedef struct {
    int port, status;
    int retry_after; // the 429's Retry-After header was there
} slow_req;

static void *slow(void *arg) {
    slow_req *q = arg;
    resp r = post_json(q->port, "/v1/chat/completions",
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello, who are you?\"}],"
                       "\"max_tokens\":200,\"temperature\":0.7,\"seed\":3}");
    q->status = r.status;
    q->retry_after = r.head && strcasestr(r.head, "\r\nRetry-After: 1");
    resp_free(&r);
    return NULL;
}

// --- issue 32: the protocol clients expect ------------------------------------------------------
// usage.<key> of an answer (-1: none).
static int usage_of(const resp *r, const char *key) {
    cJSON *j = r->body ? cJSON_Parse(r->body) : NULL;
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), key);
    const int n = cJSON_IsNumber(v) ? v->valueint : -1;
    cJSON_Delete(j);
    return n;
}

// A top-level string or number field of a JSON answer, as text (a new string), or NULL.
static char *field_of(const char *body, const char *key) {
    cJSON *j = body ? cJSON_Parse(body) : NULL;
    const cJSON *v = cJSON_GetObjectItem(j, key);
    char *s = cJSON_IsString(v)   ? g4_strdup(v->valuestring)
              : cJSON_IsNumber(v) ? g4_sprintf("%.0f", v->valuedouble)
                                  : NULL;
    cJSON_Delete(j);
    return s;
}

// choices[0].finish_reason / .text of an answer (a new string), or NULL.
static char *choice_field(const resp *r, const char *key) {
    cJSON *j = r->body ? cJSON_Parse(r->body) : NULL;
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), key);
    char *s = cJSON_IsString(v) ? g4_strdup(v->valuestring) : NULL;
    cJSON_Delete(j);
    return s;
}

// The fixture tokenizer's ids of text (special tokens written in it matched).
static int n_tokens_of(const char *text) {
    char *tp = g4_sprintf("%s/chat/chat_bpe.json", fix);
    g4_tokenizer *t;
    g4_ids ids = {0};
    int n = -1;
    if (g4_tokenizer_open(tp, &t) == G4_OK) {
        if (g4_tokenizer_encode(t, text, strlen(text), 0, &ids) == G4_OK) n = (int)ids.n;
        g4_ids_free(&ids);
        g4_tokenizer_close(t);
    }
    free(tp);
    return n;
}

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
static char *make_wav(double sec, size_t *n) {
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
    r = transcribe_as(P, "srt", tone, tn);
    char *want = g4_sprintf("1\n00:00:00,000 --> 00:00:%02ld,%03ld\n%s\n\n", ms / 1000, ms % 1000,
                            text ? text : "");
    CHECK_MSG(r.status == 200 && !strcmp(r.body, want), "srt: '%s', want '%s'", r.body ? r.body : "",
              want);
    free(want);
    resp_free(&r);
    r = transcribe_as(P, "vtt", tone, tn);
    want = g4_sprintf("WEBVTT\n\n00:00:00.000 --> 00:00:%02ld.%03ld\n%s\n\n", ms / 1000, ms % 1000,
                      text ? text : "");
    CHECK_MSG(r.status == 200 && !strcmp(r.body, want), "vtt: '%s', want '%s'", r.body ? r.body : "",
              want);
    free(want);
    resp_free(&r);
    r = transcribe_as(P, "xml", tone, tn);
    CHECK_MSG(is_error(&r, 400) && strstr(r.body, "verbose_json"), "xml: %d", r.status);
    resp_free(&r);
    free(text);
    free(tone);
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

// The metric's value in a /metrics body (-1: absent).
static long metric(const char *body, const char *name) {
    const char *p = body;
    const size_t n = strlen(name);
    while (p && (p = strstr(p, name))) {
        if ((p == body || p[-1] == '\n') && p[n] == ' ') return atol(p + n + 1);
        p += n;
    }
    return -1;
}

// A non-streamed request whose client leaves: its generation stops (a long greedy answer, ~930
// tokens on the tiny model, cut after a fraction of it).
static void test_disconnect(void) {
    srv s;
    CHECK_MSG(srv_start(&s, "--parallel 1"), "the server did not start");
    if (!s.port) return;
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello, who are you?\"}],"
                       "\"max_tokens\":4000}";
    resp r = post_json(s.port, "/v1/chat/completions", body);
    const int full = usage_of(&r, "completion_tokens");
    resp_free(&r);
    int fd = dial(s.port);
    char *h = g4_sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                         strlen(body), body);
    send_all(fd, h, strlen(h));
    free(h);
    usleep(300000);
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
    printf("disconnect: the full answer %d tokens; after the cut one, %ld tokens in all, %ld "
           "cancelled\n",
           full, tokens, cancelled);
    CHECK_MSG(full > 200 && cancelled == 1 && running == 0 && tokens - full < full / 2,
              "a client that left: %ld cancelled, %ld tokens generated for it (of %d)", cancelled,
              tokens - full, full);
    CHECK_INT(srv_stop(&s), 0);
}

int main(void) {
    fix = g4t_env("G4_FIXTURES");
    const char *g4cu = g4t_env("G4CU");
    {
        char *probe = g4_sprintf("'%s' serve 2>&1 | grep -q 'without libmicrohttpd'", g4cu);
        const int without = system(probe) == 0;
        free(probe);
        if (without) return g4t_skip("test_serve", "g4cu was built without libmicrohttpd");
    }
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

    test_multiturn(P);
    test_routes(P);
    test_seed(P);

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
        {"n 2", "POST", "/v1/chat/completions", "application/json",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"n\":2}", 400},
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
        const char *h = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                        "Content-Type: application/json\r\nContent-Length: 5000000\r\n\r\n";
        send_all(fd, h, strlen(h));
        read_resp(fd, &r);
        close(fd);
        CHECK_MSG(is_error(&r, 413), "huge body: %d", r.status);
        resp_free(&r);
    }
    // a body cut off mid-way with the connection kept open: closed after --timeout
    {
        int fd = dial(P);
        const char *h = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
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
    test_audio_formats_and_limits(cf_str(asr, "file"));
    test_disconnect();
    cf_free(&l);
    free(cases);
    return g4t_finish("test_serve");
}
