// bench_model.h: `g4cu bench PKG [PKG2]` (tools/bench_model.c).
#ifndef G4_BENCH_MODEL_H
#define G4_BENCH_MODEL_H

// Benchmarks each package on the backend (ple_host: the load option --ple-host) and prints (and
// writes to json when given, keyed "f16" / "q4") prefill, TTFT and decode speed, the decode
// measured through g4_generate as `g4cu generate` runs it; with hf_dir, also runs hf_script
// (tools/python/bench_hf.py) on the same weights and prints the ratios. format "md", "csv" or
// "json" (or NULL): a table of every measurement's mean and standard deviation over the
// repetitions on stdout, the lines above then going to stderr. Returns the command's exit code.
int g4_bench_model(const char *const *pkgs, int n_pkgs, const char *backend, int ple_host,
                   int reps, const char *json, const char *format, const char *hf_dir,
                   const char *hf_script);

#endif
