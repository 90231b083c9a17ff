// shard_env.h: `g4cu eval --shard auto`: the shard and the GPU of this process from the
// scheduler's environment (a Slurm job array, srun tasks, torchrun / MPI-style launchers).
#ifndef G4_SHARD_ENV_H
#define G4_SHARD_ENV_H

#include <stddef.h>

// The shard, from the first of these that is set:
//   SLURM_ARRAY_TASK_ID: i = (ID - SLURM_ARRAY_TASK_MIN) / SLURM_ARRAY_TASK_STEP (MIN 0 and
//     STEP 1 when unset), n = SLURM_ARRAY_TASK_COUNT (required with it);
//   RANK: i = RANK, n = WORLD_SIZE (required with it);
//   SLURM_PROCID: i = SLURM_PROCID, n = SLURM_NTASKS (required with it).
// Each value must be a decimal integer and 0 <= i < n. The local rank, LOCAL_RANK else
// SLURM_LOCALID (neither: no GPU choice), picks the GPU: with CUDA_VISIBLE_DEVICES unset it is
// set to the local rank; with a list of several it is set to the list's entry at the local
// rank (which must exist); with one device (the scheduler bound it already) it stays. *how
// gets one line saying what was read. Errors (G4_EUSER) name the variable and its value.
int g4_shard_auto(int *i, int *n, char *how, size_t how_size);

#endif
