// serve.h: `g4cu serve` (tools/serve.c), an OpenAI-compatible HTTP server on libmicrohttpd
// written against the public C API only (include/g4cu.h).
#ifndef G4_SERVE_H
#define G4_SERVE_H

#if defined(__GNUC__)
#define G4_SERVE_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define G4_SERVE_PRINTF(a, b)
#endif

// argv[0] is "serve"; returns the exit code (0 after a SIGTERM drain, 1 bad input, 2 internal).
int g4_serve_main(int argc, char **argv);

#endif
