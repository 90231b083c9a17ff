// serve_guard.h: who may use `g4cu serve` and how much one client can make it hold
// (tools/serve_guard.c). serve.c calls these at a few points:
//  - serve_guard_option / serve_guard_start while parsing its options, serve_guard_listening;
//  - serve_guard_check on a request's headers (before anything is read or routed);
//  - serve_guard_admit for a POST body (a share of the request-memory budget);
//  - serve_guard_image / serve_guard_json on bytes before the costly parse;
//  - serve_guard_headers on every response, serve_guard_log when a request ends;
//  - serve_guard_drain / serve_guard_cancelling at SIGTERM.
#ifndef G4_SERVE_GUARD_H
#define G4_SERVE_GUARD_H

#include <stddef.h>

#include <microhttpd.h>

// Per request, kept in serve.c's connection context.
typedef struct {
    double t0;  // monotonic seconds at the request's headers
    int status; // the status answered (0: none)
    long prompt_tokens, completion_tokens;
    size_t reserved;            // bytes of the request-memory budget held
    char method[12], route[80]; // for the log line (route: the path, sanitised and cut)
} serve_guard_req;

// An option of the guard at argv[*i] (its value at argv[*i + 1]): 1 taken (*i moved past the
// value), 0 not a guard option, -1 a bad value (printed).
int serve_guard_option(int argc, char **argv, int *i);

// After the options: reads --api-key-file / G4CU_API_KEY, warns on a non-loopback host without a
// key. timeout_s: the deadline for reading a whole request. 0 ok, 1 bad input (printed).
int serve_guard_start(const char *host, int timeout_s, size_t max_body);
// The daemon listens: starts the read-deadline watchdog (a thread: call it after
// SIGTERM is blocked, so that the signal reaches only sigwait). 0 ok, 1 failed (printed).
int serve_guard_listening(void);
// MHD_OPTION_NOTIFY_CONNECTION: tracks connections for the read deadline and the drain.
void serve_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                        enum MHD_ConnectionNotificationCode code);

// The request's headers: 0 to go on, else an HTTP status with a one-line reason in msg
// (400 two Content-Length, 403 Host / Origin, 401 no or a wrong key). 204: a CORS preflight
// from an allowed origin (answer it with serve_guard_preflight).
int serve_guard_check(struct MHD_Connection *c, const char *method, const char *url,
                      serve_guard_req *g, char *msg, size_t n);
enum MHD_Result serve_guard_preflight(struct MHD_Connection *c, serve_guard_req *g);
// A POST body of clen bytes (-1: not declared): reserves its share of the request-memory
// budget; 0 when the budget is spent (answer 503).
int serve_guard_admit(serve_guard_req *g, long long clen);
// Decoded media of the request being parsed on this thread (after serve_guard_admit): more
// of the budget; 0 when it is spent (answer 503).
int serve_guard_reserve(size_t bytes);
// The whole request has been read: its read deadline ends.
void serve_guard_read_done(struct MHD_Connection *c);
// Headers every response gets: CORS for an allowed origin, WWW-Authenticate on a 401,
// Retry-After on a 503.
void serve_guard_headers(struct MHD_Connection *c, struct MHD_Response *r, int status);
// The log line of a finished request (stderr), and the budget it held returned.
void serve_guard_end(struct MHD_Connection *c, serve_guard_req *g);

// A JSON body's pre-scan, linear in its length: more values than --max-json-values, or a NUL
// in a string (which the parser would cut the text at). 0 with a message in msg.
int serve_guard_json(const char *body, size_t len, char *msg, size_t n);
// An encoded image's size from its PNG / JPEG header, against --max-image-pixels. 0 with a
// message in msg (other formats pass: the decoder names them).
int serve_guard_image(const unsigned char *data, size_t n, char *msg, size_t msg_n);

// Allocation failures: cJSON's hooks through these mark the thread, so a parse that ran out of
// memory answers 503 instead of "not valid JSON". serve_guard_oom() reads and clears the mark.
void serve_guard_install_alloc_hooks(void);
int serve_guard_oom(void);
void serve_guard_set_oom(void);

// SIGTERM: the drain deadline (--drain-timeout) in seconds; serve_guard_cancel_all() at that
// deadline makes serve_guard_cancelling() true (the jobs stop) and cuts every connection that
// is still sending its request.
int serve_guard_drain_timeout(void);
void serve_guard_cancel_all(void);
int serve_guard_cancelling(void);
void serve_guard_stop(void);

#endif
