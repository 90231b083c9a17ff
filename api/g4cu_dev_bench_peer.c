// g4cu_dev_bench_peer.c: see g4cu_dev_bench_peer.h.
#include "api/g4cu_dev_bench_peer.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int g4_bench_peer_find(const char *hf_script, char **script) {
    *script = NULL;
    if (hf_script) {
        if (!g4_is_file(hf_script))
            return g4_fail(G4_EUSER, "--hf-script %s: not a file", hf_script);
        *script = g4_strdup(hf_script);
        return G4_OK;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return g4_fail(G4_EINTERNAL, "/proc/self/exe: %s", strerror(errno));
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    static const char *const rel[] = {"../tools/python/bench_hf.py",
                                      "../share/g4cu/python/bench_hf.py"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char *p = g4_path_join(exe, rel[i]), real[PATH_MAX];
        if (g4_is_file(p) && realpath(p, real)) {
            *script = g4_strdup(real);
            free(p);
            return G4_OK;
        }
        free(p);
    }
    // The source tree this binary was configured from (an out-of-tree build directory has no
    // ../tools beside it)
    char *src = g4_path_join(G4_SOURCE_DIR, "tools/python/bench_hf.py"), real[PATH_MAX];
    if (g4_is_file(src) && realpath(src, real)) {
        *script = g4_strdup(real);
        free(src);
        return G4_OK;
    }
    free(src);
    return g4_fail(G4_EUSER,
                   "bench --hf: no bench_hf.py beside the binary (%s/../tools/python/ or "
                   "%s/../share/g4cu/python/) nor in the source tree %s; pass --hf-script F",
                   exe, exe, G4_SOURCE_DIR);
}

// Runs argv (argv[0] looked up on PATH) and waits: G4_OK on exit 0; else a user error saying how
// it ended (the exit code, or the signal), prefixed by what.
static int run_argv(char *const argv[], const char *what) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid;
    int e = posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ);
    if (e) return g4_fail(G4_EUSER, "%s: cannot start %s: %s", what, argv[0], strerror(e));
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return g4_fail(G4_EINTERNAL, "%s: waitpid: %s", what, strerror(errno));
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return G4_OK;
    if (WIFEXITED(st))
        return g4_fail(G4_EUSER, "%s: %s exited with code %d (its messages are above)", what,
                       argv[0], WEXITSTATUS(st));
    return g4_fail(G4_EUSER, "%s: %s was killed by signal %d (%s)", what, argv[0],
                   WIFSIGNALED(st) ? WTERMSIG(st) : 0,
                   WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "stopped");
}

static const char *python(void) {
    const char *py = getenv("G4_PYTHON");
    return py && *py ? py : "python3";
}

int g4_bench_peer_check(const char *script, const char *hf_dir) {
    char *argv[] = {(char *)python(), (char *)script, "--check", (char *)hf_dir, NULL};
    return run_argv(argv, "bench --hf (checking the peer before the benchmark)");
}

int g4_bench_peer_run(const char *script, const char *hf_dir, int reps, g4_json *out) {
    char tmp[] = "/tmp/g4cu-hf-XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0) return g4_fail(G4_EINTERNAL, "cannot create a temporary file: %s", strerror(errno));
    close(fd);
    char reps_s[16];
    snprintf(reps_s, sizeof reps_s, "%d", reps);
    char *argv[] = {
        (char *)python(), (char *)script, (char *)hf_dir, "--reps", reps_s, "--json", tmp, NULL};
    int rc = run_argv(argv, "bench --hf");
    if (!rc) rc = g4_json_open(tmp, out);
    unlink(tmp);
    return rc;
}
