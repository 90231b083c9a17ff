// serve_guard.c: who may use `g4cu serve` (an API key, Host / Origin checks against DNS
// rebinding and cross-site pages, a log line per request) and how much one client can make it
// hold (a request-memory budget, a deadline for reading a request, a JSON pre-scan, an image's
// pixel count from its header, a drain deadline at SIGTERM). See serve_guard.h for where
// serve.c calls in; the README's server section states the limits and the memory bound.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef G4_HAVE_MHD

#include "tools/serve_guard.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#define MAX_CORS 8
#define MAX_KEY  4096

typedef struct conn_entry conn_entry;
struct conn_entry { // one open connection
    int fd;
    double t0;   // when its current request began (accept, or the previous request's end)
    int reading; // still reading a request: the deadline applies
    int cut;     // shut down by the watchdog
    conn_entry *prev, *next;
};

static struct {
    const char *key_arg, *key_file;
    char *key;
    size_t key_len;
    const char *cors[MAX_CORS];
    int n_cors;
    int drain_s;
    long long max_image_px, max_json_values, max_mem_mib;
    int loopback;
    int timeout_s;
    size_t max_body;
    pthread_mutex_t mu; // mem_used, the connection list, stop
    pthread_cond_t cv;
    size_t mem_used;
    conn_entry *conns;
    int started, stop;
    pthread_t watchdog;
    volatile int cancel;
} G = {.drain_s = 30,
       .max_image_px = 1 << 25,
       .max_json_values = 100000,
       .max_mem_mib = 2048,
       .mu = PTHREAD_MUTEX_INITIALIZER,
       .cv = PTHREAD_COND_INITIALIZER};

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// --- options -----------------------------------------------------------------------------------
static int num_arg(const char *opt, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "g4cu serve: %s expects an integer in [%lld, %lld], got '%s'\n", opt, lo,
                hi, s);
        return 0;
    }
    *out = v;
    return 1;
}

int serve_guard_option(int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (*i + 1 >= argc) return 0;
    const char *v = argv[*i + 1];
    long long n;
    if (!strcmp(a, "--api-key")) {
        G.key_arg = v;
    } else if (!strcmp(a, "--api-key-file")) {
        G.key_file = v;
    } else if (!strcmp(a, "--cors-origin")) {
        if (G.n_cors == MAX_CORS) {
            fprintf(stderr, "g4cu serve: --cors-origin '%s': at most %d origins\n", v, MAX_CORS);
            return -1;
        }
        if (!v[0]) {
            fprintf(stderr, "g4cu serve: --cors-origin: expected an origin (http://host:port "
                            "or *), got ''\n");
            return -1;
        }
        G.cors[G.n_cors++] = v;
    } else if (!strcmp(a, "--drain-timeout")) {
        if (!num_arg(a, v, 0, 3600, &n)) return -1;
        G.drain_s = (int)n;
    } else if (!strcmp(a, "--max-image-pixels")) {
        if (!num_arg(a, v, 1, 1LL << 32, &n)) return -1;
        G.max_image_px = n;
    } else if (!strcmp(a, "--max-json-values")) {
        if (!num_arg(a, v, 16, 1 << 24, &n)) return -1;
        G.max_json_values = n;
    } else if (!strcmp(a, "--max-request-memory")) {
        if (!num_arg(a, v, 16, 1 << 20, &n)) return -1;
        G.max_mem_mib = n;
    } else {
        return 0;
    }
    (*i)++;
    return 1;
}

// A key: 1..4096 printable ASCII bytes, no spaces (it travels in a header).
static int key_ok(const char *what, const char *k, size_t n) {
    if (!n || n > MAX_KEY) {
        fprintf(stderr, "g4cu serve: %s: the key has %zu bytes, expected 1 to %d\n", what, n,
                MAX_KEY);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (k[i] <= ' ' || k[i] > '~') {
            fprintf(stderr,
                    "g4cu serve: %s: byte %zu of the key is 0x%02x, expected printable "
                    "ASCII without spaces\n",
                    what, i, (unsigned char)k[i]);
            return 0;
        }
    return 1;
}

static int read_key_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "g4cu serve: --api-key-file '%s': %s\n", path, strerror(errno));
        return 0;
    }
    char buf[MAX_KEY + 2];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (n > MAX_KEY + 1) n = MAX_KEY + 1; // (over: key_ok says so)
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) n--;
    if (!key_ok("--api-key-file", buf, n)) return 0;
    G.key = strndup(buf, n);
    G.key_len = n;
    return G.key != NULL;
}

static void *watchdog_main(void *arg);

// What a body of n bytes can cost: itself, cJSON's copy of its strings, the text / encoded
// media made from those, and the JSON tree (112 bytes a value: a cJSON node and its key, at
// most one value per 2 bytes of JSON, at most --max-json-values), and 64 KiB of the rest.
static size_t body_cost(size_t n) {
    size_t values = n / 2 < (size_t)G.max_json_values ? n / 2 : (size_t)G.max_json_values;
    return 3 * n + values * 112 + (64u << 10);
}

int serve_guard_start(const char *host, int timeout_s, size_t max_body) {
    const char *env = getenv("G4CU_API_KEY");
    if (G.key_arg && G.key_file) {
        fprintf(stderr, "g4cu serve: --api-key and --api-key-file: give one\n");
        return 1;
    }
    if (G.key_file) {
        if (!read_key_file(G.key_file)) return 1;
    } else if (G.key_arg || (env && env[0])) {
        const char *k = G.key_arg ? G.key_arg : env;
        if (!key_ok(G.key_arg ? "--api-key" : "G4CU_API_KEY", k, strlen(k))) return 1;
        G.key = strdup(k);
        G.key_len = strlen(k);
    }
    struct in_addr a;
    G.loopback = inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
    if (!G.loopback && !G.key)
        fprintf(stderr,
                "g4cu serve: warning: --host %s serves every machine that can reach it, "
                "and there is no API key: anyone may use it (--api-key-file F)\n",
                host);
    G.timeout_s = timeout_s;
    G.max_body = max_body;
    if ((unsigned long long)G.max_mem_mib << 20 < body_cost(max_body)) {
        fprintf(stderr,
                "g4cu serve: --max-request-memory %lld MiB cannot hold one request of "
                "--max-body %zu bytes (%zu MiB are reserved for it)\n",
                G.max_mem_mib, max_body, (body_cost(max_body) >> 20) + 1);
        return 1;
    }
    return 0;
}

int serve_guard_listening(void) {
    if (pthread_create(&G.watchdog, NULL, watchdog_main, NULL)) {
        fprintf(stderr, "g4cu serve: cannot start a thread\n");
        return 1;
    }
    G.started = 1;
    return 0;
}

// An allocation failed on this thread (see serve_guard_oom).
static _Thread_local int t_oom;

// --- connections: the read deadline and the drain -------------------------------------------
void serve_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                        enum MHD_ConnectionNotificationCode code) {
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_entry *e = calloc(1, sizeof *e);
        const union MHD_ConnectionInfo *fd =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!e || !fd) { // untracked: no deadline, but it still works
            free(e);
            *socket_context = NULL;
            return;
        }
        e->fd = fd->connect_fd;
        e->t0 = mono_s();
        e->reading = 1;
        pthread_mutex_lock(&G.mu);
        e->next = G.conns;
        if (G.conns) G.conns->prev = e;
        G.conns = e;
        if (G.cancel) shutdown(e->fd, SHUT_RDWR); // draining: no new request is read
        pthread_mutex_unlock(&G.mu);
        *socket_context = e;
    } else if (*socket_context) { // closed: MHD closes the socket after this returns
        conn_entry *e = *socket_context;
        pthread_mutex_lock(&G.mu);
        if (e->prev)
            e->prev->next = e->next;
        else
            G.conns = e->next;
        if (e->next) e->next->prev = e->prev;
        pthread_mutex_unlock(&G.mu);
        free(e);
        *socket_context = NULL;
    }
}

static conn_entry *entry_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *i =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return i ? i->socket_context : NULL;
}

void serve_guard_read_done(struct MHD_Connection *c) {
    conn_entry *e = entry_of(c);
    if (!e) return;
    pthread_mutex_lock(&G.mu);
    e->reading = 0;
    pthread_mutex_unlock(&G.mu);
}

// Every 100 ms: a connection still reading its request past the deadline is shut down (its
// thread then sees the socket end and closes it). Idle keep-alive connections count as reading.
static void *watchdog_main(void *arg) {
    pthread_mutex_lock(&G.mu);
    while (!G.stop) {
        const double now = mono_s();
        for (conn_entry *e = G.conns; e; e = e->next)
            if (e->reading && !e->cut && (G.cancel || now - e->t0 > G.timeout_s)) {
                shutdown(e->fd, SHUT_RDWR);
                e->cut = 1;
            }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&G.cv, &G.mu, &ts);
    }
    pthread_mutex_unlock(&G.mu);
    return NULL;
}

int serve_guard_drain_timeout(void) {
    return G.drain_s;
}

void serve_guard_cancel_all(void) {
    pthread_mutex_lock(&G.mu);
    G.cancel = 1;
    pthread_cond_broadcast(&G.cv);
    pthread_mutex_unlock(&G.mu);
}

int serve_guard_cancelling(void) {
    return G.cancel;
}

void serve_guard_stop(void) {
    if (!G.started) return;
    pthread_mutex_lock(&G.mu);
    G.stop = 1;
    pthread_cond_broadcast(&G.cv);
    pthread_mutex_unlock(&G.mu);
    pthread_join(G.watchdog, NULL);
    G.started = 0;
    free(G.key);
    G.key = NULL;
}

// --- the request's headers ---------------------------------------------------------------------
typedef struct {
    int n_clen, n_te;
} header_counts;

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value) {
    header_counts *h = cls;
    if (!strcasecmp(key, "Content-Length")) h->n_clen++;
    if (!strcasecmp(key, "Transfer-Encoding")) h->n_te++;
    return MHD_YES;
}

// A Host value naming this machine's loopback: localhost, 127.x.x.x or [::1], any port.
static int host_is_loopback(const char *h) {
    const char *port;
    char name[64];
    if (h[0] == '[') {
        const char *e = strchr(h, ']');
        if (!e || e - h != 4 || strncmp(h, "[::1]", 5)) return 0;
        port = e + 1;
    } else {
        const char *e = strchr(h, ':');
        size_t n = e ? (size_t)(e - h) : strlen(h);
        if (n == 0 || n >= sizeof name) return 0;
        memcpy(name, h, n);
        name[n] = 0;
        struct in_addr a;
        if (strcasecmp(name, "localhost") &&
            !(inet_pton(AF_INET, name, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127))
            return 0;
        port = h + n;
    }
    if (!*port) return 1;
    if (*port++ != ':' || !*port) return 0;
    for (; *port; port++)
        if (*port < '0' || *port > '9') return 0;
    return 1;
}

// The Origin is allowed: --cors-origin lists it (or *), or it is the server's own page.
static int origin_allowed(const char *origin, const char *host, int *by_cors) {
    *by_cors = 0;
    for (int i = 0; i < G.n_cors; i++)
        if (!strcmp(G.cors[i], "*") || !strcasecmp(G.cors[i], origin)) return *by_cors = 1;
    return host && !strncasecmp(origin, "http://", 7) && !strcasecmp(origin + 7, host);
}

// Equal keys, in time that does not depend on where they differ.
static int key_equal(const char *a, size_t na) {
    unsigned char d = na != G.key_len;
    for (size_t i = 0; i < G.key_len; i++) d |= (unsigned char)(a[i < na ? i : 0] ^ G.key[i]);
    return !d;
}

static void copy_route(serve_guard_req *g, const char *method, const char *url) {
    snprintf(g->method, sizeof g->method, "%s", method);
    size_t k = 0;
    for (const char *p = url; *p && k + 4 < sizeof g->route; p++)
        g->route[k++] = *p > ' ' && *p <= '~' ? *p : '?';
    if (strlen(url) > k)
        memcpy(g->route + k, "...", 4);
    else
        g->route[k] = 0;
    for (char *p = g->method; *p; p++)
        if (*p <= ' ' || *p > '~') *p = '?';
}

int serve_guard_check(struct MHD_Connection *c, const char *method, const char *url,
                      serve_guard_req *g, char *msg, size_t n) {
    g->t0 = mono_s();
    t_oom = 0; // (a mark left by an earlier request on this thread's connection)
    copy_route(g, method, url);
    header_counts h = {0, 0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_header, &h);
    if (h.n_clen > 1) {
        snprintf(msg, n, "the request has %d Content-Length headers, expected one", h.n_clen);
        return 400;
    }
    if (h.n_clen && h.n_te) {
        snprintf(msg, n, "the request has both Content-Length and Transfer-Encoding, expected one");
        return 400;
    }
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    if (G.loopback && host && !host_is_loopback(host)) {
        snprintf(msg, n,
                 "Host '%.100s' is not this server's loopback address (localhost, "
                 "127.0.0.1 or [::1]); refused against DNS rebinding",
                 host);
        return 403;
    }
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    int by_cors;
    if (origin && !origin_allowed(origin, host, &by_cors)) {
        snprintf(msg, n,
                 "Origin '%.100s' may not use this server (its own origin is "
                 "http://%.100s; --cors-origin allows others)",
                 origin, host ? host : "?");
        return 403;
    }
    if (origin && !strcmp(method, "OPTIONS")) return 204; // a preflight carries no key
    if (G.key && strcmp(url, "/health")) {
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        if (!auth) {
            snprintf(msg, n, "this server needs an API key: send `Authorization: Bearer KEY`");
            return 401;
        }
        if (strncasecmp(auth, "Bearer ", 7) || !key_equal(auth + 7, strlen(auth + 7))) {
            snprintf(msg, n,
                     "the API key in the Authorization header is not this server's "
                     "(expected `Authorization: Bearer KEY`)");
            return 401;
        }
    }
    return 0;
}

void serve_guard_headers(struct MHD_Connection *c, struct MHD_Response *r, int status) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    int by_cors;
    if (origin && origin_allowed(origin, host, &by_cors) && by_cors) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
        MHD_add_response_header(r, "Vary", "Origin");
    }
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 503) MHD_add_response_header(r, "Retry-After", "1"); // (the budget, the drain)
}

enum MHD_Result serve_guard_preflight(struct MHD_Connection *c, serve_guard_req *g) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    serve_guard_headers(c, r, 204);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    enum MHD_Result ok = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    g->status = 204;
    return ok;
}

// --- the request-memory budget and the log line --------------------------------------------
// The request whose body this thread parses (MHD runs a connection's callbacks on its thread).
static _Thread_local serve_guard_req *t_req;

static int reserve(serve_guard_req *g, size_t need) {
    pthread_mutex_lock(&G.mu);
    const int ok = G.mem_used + need <= (size_t)G.max_mem_mib << 20;
    if (ok) G.mem_used += need, g->reserved += need;
    pthread_mutex_unlock(&G.mu);
    return ok;
}

int serve_guard_admit(serve_guard_req *g, long long clen) {
    t_req = g;
    return reserve(g, body_cost(clen >= 0 ? (size_t)clen : G.max_body));
}

int serve_guard_reserve(size_t bytes) {
    return !t_req || reserve(t_req, bytes);
}

void serve_guard_end(struct MHD_Connection *c, serve_guard_req *g) {
    conn_entry *e = entry_of(c);
    if (t_req == g) t_req = NULL;
    pthread_mutex_lock(&G.mu);
    G.mem_used -= g->reserved;
    g->reserved = 0;
    if (e) e->reading = 1, e->t0 = mono_s(); // the next request on this connection
    pthread_mutex_unlock(&G.mu);
    if (!g->method[0]) return;
    char ts[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    // One fprintf: stdio locks the stream for the call, so lines from threads do not mix.
    fprintf(stderr, "%s %s %s %d prompt_tokens=%ld completion_tokens=%ld ms=%.0f\n", ts, g->method,
            g->route, g->status, g->prompt_tokens, g->completion_tokens, (mono_s() - g->t0) * 1e3);
}

// --- bytes before the costly parse ------------------------------------------------------------
int serve_guard_json(const char *b, size_t len, char *msg, size_t n) {
    long long values = 0;
    char key[48] = "";
    for (size_t i = 0; i < len; i++) {
        const char ch = b[i];
        if (!ch) {
            snprintf(msg, n, "byte %zu of the body is a NUL, expected JSON text", i);
            return 0;
        }
        if (ch == '"') {
            const size_t s = i + 1;
            for (i = s; i < len && b[i] != '"'; i++) {
                if (!b[i]) {
                    snprintf(msg, n, "byte %zu of the body is a NUL, expected JSON text", i);
                    return 0;
                }
                if (b[i] != '\\') continue;
                if (i + 5 < len && b[i + 1] == 'u' && !memcmp(b + i + 2, "0000", 4)) {
                    snprintf(msg, n,
                             "a string%s%s%s holds a NUL character (\\u0000) at byte "
                             "%zu; refused rather than cut there",
                             key[0] ? " in \"" : "", key, key[0] ? "\"" : "", i);
                    return 0;
                }
                i++; // the escaped byte
            }
            size_t k = i + 1;
            while (k < len && (b[k] == ' ' || b[k] == '\t' || b[k] == '\n' || b[k] == '\r')) k++;
            if (k < len && b[k] == ':') { // a key: remembered for the message, not a value
                const size_t kn = i - s < sizeof key - 1 ? i - s : sizeof key - 1;
                memcpy(key, b + s, kn);
                key[kn] = 0;
            } else {
                values++;
            }
        } else if (ch == '{' || ch == '[') {
            values++;
        } else if ((ch == '-' || (ch >= '0' && ch <= '9') || ch == 't' || ch == 'f' || ch == 'n') &&
                   (i == 0 || strchr(",:[ \t\r\n", b[i - 1]))) {
            values++; // a number or a literal begins
        }
        if (values > G.max_json_values) {
            snprintf(msg, n,
                     "the body has more than %lld JSON values (--max-json-values; a "
                     "text content part is 3)",
                     G.max_json_values);
            return 0;
        }
    }
    return 1;
}

static unsigned be16(const unsigned char *p) {
    return (unsigned)p[0] << 8 | p[1];
}
static unsigned long be32(const unsigned char *p) {
    return (unsigned long)p[0] << 24 | (unsigned long)p[1] << 16 | (unsigned long)p[2] << 8 | p[3];
}

int serve_guard_image(const unsigned char *d, size_t n, char *msg, size_t msg_n) {
    unsigned long w = 0, h = 0;
    const char *kind = NULL;
    if (n >= 24 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8) && !memcmp(d + 12, "IHDR", 4)) {
        kind = "PNG", w = be32(d + 16), h = be32(d + 20);
    } else if (n >= 4 && d[0] == 0xFF && d[1] == 0xD8) {
        // JPEG: walk the marker segments to the frame header (SOFn: precision, height, width).
        size_t i = 2;
        while (i + 4 <= n) {
            if (d[i] != 0xFF) break; // not a marker: let the decoder say what is wrong
            const unsigned m = d[i + 1];
            if (m == 0xFF) { // fill byte
                i++;
                continue;
            }
            if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) { // no length
                i += 2;
                continue;
            }
            const unsigned len = be16(d + i + 2);
            if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
                if (i + 9 <= n) kind = "JPEG", h = be16(d + i + 5), w = be16(d + i + 7);
                break;
            }
            if (len < 2) break;
            i += 2 + len;
        }
    }
    if (!kind) return 1;
    const unsigned long long px = (unsigned long long)w * h;
    if (px > (unsigned long long)G.max_image_px) {
        snprintf(msg, msg_n,
                 "a %s of %lux%lu pixels (%llu) is over the limit of %lld pixels "
                 "(--max-image-pixels); refused from its header",
                 kind, w, h, px, G.max_image_px);
        return 0;
    }
    return 1;
}

// --- allocation failures ----------------------------------------------------------------------

static void *guard_malloc(size_t n) {
    void *p = malloc(n);
    if (!p) t_oom = 1;
    return p;
}

void serve_guard_install_alloc_hooks(void) {
    cJSON_Hooks h = {guard_malloc, free};
    cJSON_InitHooks(&h);
}

int serve_guard_oom(void) {
    const int o = t_oom;
    t_oom = 0;
    return o;
}

void serve_guard_set_oom(void) {
    t_oom = 1;
}

#endif
