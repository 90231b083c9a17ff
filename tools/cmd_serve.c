// g4cu serve PKG [--host 127.0.0.1] [--port 8080] [options]: the OpenAI-compatible server
// (tools/serve.c).
#include "tools/cli.h"
#include "tools/serve.h"

// The options, with their defaults (serve.c's serve_opts): the help and the accepted list.
static const g4_opt serve_opts_table[] = {
    {"--host", "ADDR", "address to bind (default 127.0.0.1: loopback only)"},
    {"--port", "N", "TCP port (default 8080; 0: a free one, printed)"},
    {"--backend", "cpu|cuda|auto", "where the model runs (default auto)"},
    {"--tokenizer", "F", "tokenizer.json (default: the package's)"},
    {"--parallel", "N", "slots: requests decoded together in one batch (default 1; 1..64)"},
    {"--batch-prefill-tokens", "N", "prompt tokens the batch prefills a round at most, as rows of its decode step (G4_BATCH_PROMPT_ROWS=0: in forwards of their own before it) (default 0: 512)"},
    {"--queue", "N", "requests waiting beyond those (1 or more); more get 429 with Retry-After (default 64)"},
    {"--max-body", "BYTES", "largest request body; more gets 413 (default 33554432)"},
    {"--max-tokens", "N", "new tokens a request gets at most; more asked is clamped (default 0: the context)"},
    {"--max-media", "N", "images + audio clips a request may carry (default 8)"},
    {"--max-audio-seconds", "S", "longest audio a request may carry (default 600)"},
    {"--timeout", "S", "seconds a client may take to send a whole request (default 30)"},
    {"--max-connections", "N", "open connections at once (default 256)"},
    {"--api-key", "KEY", "require `Authorization: Bearer KEY` (also G4CU_API_KEY; not /health)"},
    {"--api-key-file", "F", "the key from a file's first line (not shown by ps)"},
    {"--cors-origin", "O", "a browser Origin allowed besides the server's own (repeatable; *)"},
    {"--drain-timeout", "S", "SIGTERM: seconds before requests in flight are cancelled (default 30)"},
    {"--max-image-pixels", "N", "image width x height, read from its header (default 33554432)"},
    {"--max-json-values", "N", "JSON values in a request body (default 100000)"},
    {"--max-request-memory", "MIB", "request bodies and their parsing, all at once (default 2048)"},
    {"--n-ctx", "N", "KV rows of each slot's cache, made at start-up (default 0: as its largest request needs, made by its first)"},
    {"--name", "ID", "the model id /v1/models reports (default: the package's name)"},
    {"--media-dir", "DIR", "image_url / audio_url may name files under DIR (default: data: URLs only)"},
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_serve = {
    "serve", g4_serve_main,
    "PKG [--host 127.0.0.1] [--port 8080] [options]   OpenAI-compatible HTTP server:\n"
    "            /v1/chat/completions, /v1/completions, /v1/audio/transcriptions, /tokenize,\n"
    "            /detokenize, /v1/models, /props, /slots, /health, /metrics",
    serve_opts_table, NULL};
