// g4cu_dev_bench_peer.h: the HF transformers peer of `g4cu bench --hf HF_DIR`
// (g4cu_dev_bench_model; tools/python/bench_hf.py), run without a shell: the interpreter gets an
// argument vector (posix_spawnp), so no path or directory name is ever parsed as a command.
//
// The script: --hf-script when given; else found from the binary (/proc/self/exe), not the
// working directory: <exe dir>/../tools/python/bench_hf.py (a build directory in the source
// tree: build/g4cu), then <exe dir>/../share/g4cu/python/bench_hf.py (an install). The
// interpreter: $G4_PYTHON, else python3 on PATH.
#ifndef G4_DEV_BENCH_PEER_H
#define G4_DEV_BENCH_PEER_H

#include "loader/json.h"

// The script to run (a new string): hf_script when not NULL, else the one beside the binary.
int g4_bench_peer_find(const char *hf_script, char **script);
// Runs "PY SCRIPT --check HF_DIR" before the long benchmark: G4_OK when it exits 0, else a user
// error with its exit code (its own reason is on stderr above).
int g4_bench_peer_check(const char *script, const char *hf_dir);
// Runs "PY SCRIPT HF_DIR --reps N --json TMP" and parses TMP into *out (g4_json_close it).
int g4_bench_peer_run(const char *script, const char *hf_dir, int reps, g4_json *out);

#endif
