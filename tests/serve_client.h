// serve_client.h: what tests/test_serve.c and tests/test_serve_compat.c share: `g4cu serve` on
// the tiny fixture as a child process (--port 0, read from its first stdout line), a small
// HTTP/1.1 client over sockets, the answers' fields, multipart bodies and fixture files.
#ifndef G4_TESTS_SERVE_CLIENT_H
#define G4_TESTS_SERVE_CLIENT_H

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
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

// Reads the environment (the fixtures folder); 0 when this g4cu was built without
// libmicrohttpd (the test then skips).
static inline int serve_setup(void) {
    fix = g4t_env("G4_FIXTURES");
    char *probe = g4_sprintf("'%s' serve 2>&1 | grep -q 'without libmicrohttpd'", g4t_env("G4CU"));
    const int without = system(probe) == 0;
    free(probe);
    return !without;
}

// --- the server process -----------------------------------------------------------------------
typedef struct {
    pid_t pid;
    int port;
} srv;

static inline int srv_start(srv *s, const char *extra) {
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

static inline long srv_rss_kb(const srv *s) {
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
static inline int srv_stop(srv *s) {
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

static inline void resp_free(resp *r) {
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof *r);
}

static inline int dial(int port) {
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

static inline void send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        p += w, n -= (size_t)w;
    }
}

// Reads to EOF and splits the response (de-chunking a chunked body).
static inline void read_resp(int fd, resp *r) {
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
static inline resp http(int port, const char *method, const char *path, const char *ctype,
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

static inline resp post_json(int port, const char *path, const char *json) {
    return http(port, "POST", path, "application/json", json, strlen(json), -1);
}

static inline resp get(int port, const char *path) { return http(port, "GET", path, NULL, NULL, 0, -1); }

// A 4xx answer with the error object.
// The metric's value in a /metrics body (-1: absent); name may carry its labels.
static inline long metric(const char *body, const char *name) {
    const char *p = body;
    const size_t n = strlen(name);
    while (p && (p = strstr(p, name))) {
        if ((p == body || p[-1] == '\n') && p[n] == ' ') return atol(p + n + 1);
        p += n;
    }
    return -1;
}

// The same as a double (NAN: absent), for the seconds counters.
static inline double metric_f(const char *body, const char *name) {
    const char *p = body;
    const size_t n = strlen(name);
    while (p && (p = strstr(p, name))) {
        if ((p == body || p[-1] == '\n') && p[n] == ' ') return strtod(p + n + 1, NULL);
        p += n;
    }
    return NAN;
}

static inline int is_error(const resp *r, int status) {
    if (r->status != status || !r->body) return 0;
    cJSON *j = cJSON_Parse(r->body);
    const cJSON *e = cJSON_GetObjectItem(j, "error");
    int ok = cJSON_IsString(cJSON_GetObjectItem(e, "message")) &&
             cJSON_IsString(cJSON_GetObjectItem(e, "type"));
    cJSON_Delete(j);
    return ok;
}

// choices[0].message.content of a chat answer (a new string), or NULL.
static inline char *chat_text(const resp *r) {
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

static inline sse_events sse_parse(char *body) {
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
static inline char *form_with_file(const char *bd, const char *name, const char *value,
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
static inline char *b64(const unsigned char *d, size_t n) {
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

static inline char *file_b64(const char *rel, char **raw, size_t *raw_n) {
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
static inline char *hf_text(const cJSON *o) {
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
static inline void check_url_part(int P, const char *type, const char *prefix, const char *b64s,
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

typedef struct {
    int port, status;
    int retry_after; // the 429's Retry-After header was there
} slow_req;

static inline void *slow(void *arg) {
    slow_req *q = arg;
    resp r = post_json(q->port, "/v1/chat/completions",
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello, who are you?\"}],"
                       "\"max_tokens\":200,\"temperature\":0.7,\"seed\":3}");
    q->status = r.status;
    q->retry_after = r.head && strcasestr(r.head, "\r\nRetry-After: 1");
    resp_free(&r);
    return NULL;
}

// usage.<key> of an answer (-1: none).
static inline int usage_of(const resp *r, const char *key) {
    cJSON *j = r->body ? cJSON_Parse(r->body) : NULL;
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), key);
    const int n = cJSON_IsNumber(v) ? v->valueint : -1;
    cJSON_Delete(j);
    return n;
}

// A top-level string or number field of a JSON answer, as text (a new string), or NULL.
static inline char *field_of(const char *body, const char *key) {
    cJSON *j = body ? cJSON_Parse(body) : NULL;
    const cJSON *v = cJSON_GetObjectItem(j, key);
    char *s = cJSON_IsString(v)   ? g4_strdup(v->valuestring)
              : cJSON_IsNumber(v) ? g4_sprintf("%.0f", v->valuedouble)
                                  : NULL;
    cJSON_Delete(j);
    return s;
}

// choices[0].finish_reason / .text of an answer (a new string), or NULL.
static inline char *choice_field(const resp *r, const char *key) {
    cJSON *j = r->body ? cJSON_Parse(r->body) : NULL;
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), key);
    char *s = cJSON_IsString(v) ? g4_strdup(v->valuestring) : NULL;
    cJSON_Delete(j);
    return s;
}

// The fixture tokenizer's ids of text (special tokens written in it matched).
static inline int n_tokens_of(const char *text) {
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

#endif
