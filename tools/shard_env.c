// shard_env.c: `--shard auto` (tools/shard_env.h).
#include "tools/shard_env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

// An integer environment variable: 1 when set (*v), 0 when unset; a malformed value fails.
static int env_int(const char *name, long long lo, long long *v, int *rc) {
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (*end || errno || x < lo || x > (1 << 30)) {
        *rc = g4_fail(G4_EUSER, "--shard auto: %s='%s': expected an integer >= %lld", name, s, lo);
        return 0;
    }
    *v = x;
    return 1;
}

static int pick_gpu(char *how, size_t how_size) {
    long long local;
    int rc = G4_OK;
    const char *var = "LOCAL_RANK";
    if (!env_int(var, 0, &local, &rc)) {
        if (rc) return rc;
        var = "SLURM_LOCALID";
        if (!env_int(var, 0, &local, &rc)) return rc; // no local rank: no GPU choice
    }
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    size_t used = strlen(how);
    if (!vis || !*vis) {
        char dev[32];
        snprintf(dev, sizeof dev, "%lld", local);
        setenv("CUDA_VISIBLE_DEVICES", dev, 1);
        snprintf(how + used, how_size - used, "; GPU from %s=%lld: CUDA_VISIBLE_DEVICES=%s", var,
                 local, dev);
        return G4_OK;
    }
    if (!strchr(vis, ',')) {
        snprintf(how + used, how_size - used,
                 "; GPU: CUDA_VISIBLE_DEVICES=%s (one device, as the scheduler bound it)", vis);
        return G4_OK;
    }
    // The list's entry at the local rank.
    const char *p = vis;
    for (long long k = 0; k < local && p; k++) {
        p = strchr(p, ',');
        if (p) p++;
    }
    if (!p || !*p || *p == ',')
        return g4_fail(G4_EUSER,
                       "--shard auto: %s=%lld but CUDA_VISIBLE_DEVICES='%s' has fewer devices", var,
                       local, vis);
    char *dev = g4_strndup(p, strcspn(p, ","));
    snprintf(how + used, how_size - used, "; GPU from %s=%lld: CUDA_VISIBLE_DEVICES=%s (of %s)",
             var, local, dev, vis);
    setenv("CUDA_VISIBLE_DEVICES", dev, 1);
    free(dev);
    return G4_OK;
}

int g4_shard_auto(int *i, int *n, char *how, size_t how_size) {
    static const struct {
        const char *id, *count;
    } schemes[] = {{"SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"},
                   {"RANK", "WORLD_SIZE"},
                   {"SLURM_PROCID", "SLURM_NTASKS"}};
    int rc = G4_OK;
    for (size_t k = 0; k < sizeof schemes / sizeof schemes[0]; k++) {
        long long id, count, min = 0, step = 1;
        if (!env_int(schemes[k].id, 0, &id, &rc)) {
            if (rc) return rc;
            continue;
        }
        if (!env_int(schemes[k].count, 1, &count, &rc))
            return rc ? rc
                      : g4_fail(G4_EUSER, "--shard auto: %s is set but %s is not", schemes[k].id,
                                schemes[k].count);
        if (k == 0) { // a job array may start above 0 and step (--array=4-10:2)
            if (!env_int("SLURM_ARRAY_TASK_MIN", 0, &min, &rc) && rc) return rc;
            if (!env_int("SLURM_ARRAY_TASK_STEP", 1, &step, &rc) && rc) return rc;
            if (id < min || (id - min) % step)
                return g4_fail(G4_EUSER,
                               "--shard auto: SLURM_ARRAY_TASK_ID=%lld is not in the array "
                               "(min %lld, step %lld)",
                               id, min, step);
        }
        const long long shard = (id - min) / step;
        if (shard >= count)
            return g4_fail(G4_EUSER, "--shard auto: %s=%lld gives shard %lld, not below %s=%lld",
                           schemes[k].id, id, shard, schemes[k].count, count);
        *i = (int)shard;
        *n = (int)count;
        snprintf(how, how_size, "shard %d of %d from %s=%lld, %s=%lld", *i, *n, schemes[k].id, id,
                 schemes[k].count, count);
        return pick_gpu(how, how_size);
    }
    return g4_fail(G4_EUSER, "--shard auto: none of SLURM_ARRAY_TASK_ID / _COUNT, RANK / "
                             "WORLD_SIZE, SLURM_PROCID / SLURM_NTASKS is set");
}
