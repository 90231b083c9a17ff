#!/usr/bin/env bash
# The GPU-machine batch (one H200, Ubuntu 24.04 + CUDA 13, no registry): build, test and bench
# in one call. Run from the repository root with the .debs/ folder carried (tools/gpu/
# fetch_debs.sh makes it on a Debian CPU machine):
#
#   OUT=/some/dir tools/gpu/run.sh [stage ...]
#
# Where things go: logs and results in $OUT; everything a stage makes for another stage in $WORK
# (default /tmp/g4work: packages, trained proxies, mm_make's data, the corpus), never in the
# tree, and the build in build-gpu/. tools/gpu/pipeline.sh runs the stages in $WORK/src, a fresh
# copy of the tree each start that keeps the earlier start's build-gpu/ (rebuilt where sources
# changed), so a stage in a later call (same warm machine) finds an earlier call's products:
# "build / mm_make" then "mm_run". A new stage follows the same rule: products under $WORK, read
# only from the tree (carried inputs such as .carry/ are read, never written).
#
# Stages (default: build tests tiny kernels):
#   build    cmake Release + build (sm_90a) into build-gpu/
#   tests    the whole ctest suite (GPU tests run here instead of skipping)
#   tiny     gpu-tiny package (tools/python/make_package.py --preset gpu-tiny) + its Q4 form +
#            HF dumps; test_cuda_engine and g4cu compare --backend cuda|cpu against HF
#   engine   the one-decode-step checks (after tiny): the sample op and the scatter op vs the
#            CPU reference (test_cuda_ops --op sample / scatter_rows), the supported()
#            predicates and load checks (test_cuda_supported), test_cuda_engine's graph ==
#            eager step, generate == the old path (CUDA and CPU), sampled == the CPU reference,
#            two states interleaved, 0 allocations after the first request (f16 and Q4); and
#            `g4cu generate` on gpu-tiny: greedy tokens equal on CUDA and the CPU where the
#            logits agree, a seed reproduces the same sampled tokens run to run
#   backend_ops  tests/test_backend_ops on both backends (every ops.h op vs its naive
#            implementation: the CUDA half runs only here), its --break self-check on CUDA, and
#            its perf mode on CUDA ($OUT/backend_ops*.log; after build)
#   sanitize compute-sanitizer memcheck, racecheck, synccheck over the CUDA test tables and
#            end-to-end runs on the gpu-tiny package (tools/gpu/sanitize.sh; after build, tiny)
#   kernels  g4cu bench --kernels --json
#   e2b_quick  bench --reps 3 and the prefill attention kernel rows on the full-size package
#   towers   issue 22's breakdown on the full-size package: bench under G4_PROFILE=1 (the
#            towers' and the decode step's per-op split) and the kernel rows of the towers' ops
#   branch   an unlanded branch carried as .carry/branch.tar.gz: its own stages, its
#            test_cuda_engine on gpu-tiny, its compare and bench on the full-size package
#   prefill  the prefill kernels alone (issues 18, 22; after build): test_cuda_gemm --op wgmma,
#            --op q4, test_cuda_attention --op attn_prefill, then their kernel bench rows
#            (wgmma GEMMs next to cuBLAS, wgmma attention next to the HMMA kernel). A deadlocked
#            mbarrier traps after seconds ("unspecified launch failure"), it never hangs.
#   floor    issue 30: the launch floor of a graph-replayed PDL kernel (1 CTA .. 2 an SM), and
#            the floor of the path after the wait (x from the launch before, a CTA reduction,
#            16 stores a CTA: a GEMV without weights)
#   handover issue 30 stage 2: what one on-device hand-over between CTAs costs (after build;
#            ~1 min): test_pdl_sass, then `bench --kernels --filter handover --reps 30` twice (the
#            chain of dependent steps across CTAs in one persistent launch, each publish form /
#            flag line / vector size; the norm join; the same chain as PDL kernels; ms per
#            hand-over), then the floor rows once for the same run's units. A row whose values
#            were wrong says FAIL; a spin that never ends traps ("trapping"), never hangs
#   stepskel issue 30, the floor of "one persistent kernel a step" (after build; ~3 min):
#            test_cuda_step_skel (the skeleton a few steps on small configs, every prefetch form
#            and ablation mode, two stamped steps: counters, epoch, timelines, no trap), then
#            `bench --kernels --filter stepskel --reps 30` twice (E2B's tile plan as per-CTA
#            queues with the real Q4 / f16 weight bytes and counters, against one plain stream
#            of the same bytes: pf 0 / 1 / 2 at 5 CTAs an SM and 2 an SM; at 5 an SM the
#            ablations of pf=2 (nowait, noact, nowts, all three, act8) and pf=3 (" ub": a
#            two-deep register lookahead, an upper bound); pf=2 at all that fit when more do;
#            a line a row: us a step / a layer, GB/s, waits found short), then one stamped step
#            each of pf=2 / pf=2 nowts / pf=2 all off / pf=0 taken apart ("stepskel-tl"
#            lines: the critical path a layer by segment, by op, each op's own segments; the
#            step with and without stamps; run 1's summary lines printed here, the rest in
#            $OUT/stepskel_{1,2}.txt).
#            The other plans of g4_sp_bench_plans (splits of 64 / 32, down chunks of 2048, the CPU
#            cost model's two best: chunks of 2048 with GEMV groups of 8 and LM groups of 128, and
#            its two best past that grid's edge: chunks of 3072, groups of 16, LM groups of 64 /
#            128) run the design row and Q4's timeline. The baseline and the best plan also run the
#            GEMV math (G4_SK_MATH, at the 4 CTAs an SM its kernel fits: pf=2 without it, with it,
#            and " math held ub": on words never loaded), Q4 and f16, and Q4's stamped step with it
#            on the best plan (~15 s more); so does the cost model's best with the math (chunks of
#            2048, groups of 2, LM groups of 64; its design row, Q4 timeline and stamped math
#            step too, ~10 s more), and its best held-words plan that fits a CTA's shared memory
#            (splits of 128, chunks of 2048, groups of 1, LM groups of 2: 59,122 instructions;
#            the same rows, ~15 s more a run). Last, the cost model itself (`bench --step-model`,
#            CPU, ~45 s) into $OUT/stepskel_model.txt, its bench-plan lines, math rows against
#            session 32's, per-unit lines and the unmeasured plan's math rows printed here, so
#            that its predictions sit beside the rows they predict.
#            A wait that never ends traps ("trapping", naming the instruction), never hangs
#   quant_time  issue 33 (after build): tests/bench_quant_methods on all cores at the trained
#            proxy's largest linears (K x N = 6144 x 768, 768 x 6144, 3072 x 768; 2048 rows):
#            X^T X, GPTQ's factorisation and column work (and act-order), fit, gptq_imx; ~20 s
#   fattn    issue 30: the head preparation inside the decode attention, checks and A/B
#   amerge   issue 30: the split-KV merge inside the decode attention (G4_ATTN_MERGE=cluster,
#            or =global: windowless layers only): test_cuda_attention's decode cases all three
#            ways (each launch repeated: the same bits), test_backend_ops under both and
#            test_cuda_engine under cluster (alone and with G4_FUSE_ATTN=1: the head preparation
#            inside), the decode kernel rows of both forms twice (after 128 also on a 32k
#            grid, as the engine launches it) (after build, tiny); the end-to-end A/B is e2bq's
#            E2BQ_VARIANTS="landed:X=1 amg:G4_ATTN_MERGE=global amc:G4_ATTN_MERGE=cluster
#            amergef:G4_ATTN_MERGE=cluster,G4_FUSE_ATTN=1"
#   qprep    issue 30: G4_QKV_PREP_CTAS=1 (the head preparation one CTA a head vector, off):
#            test_cuda_ops --op qkv_rope, test_backend_ops --op qkv_prep / qkv_attention and
#            test_cuda_engine (tiny) under it (after build, tiny); the end-to-end A/B is e2bq's
#            E2BQ_VARIANTS="landed:X=1 qctas:G4_QKV_PREP_CTAS=1"
#   ncu_step each kernel's own time in the last decode step (Nsight Compute; after e2b_make)
#   ncu_gemv issue 29: Nsight Compute metrics (throughput, occupancy, issue use, stall reasons)
#            of the GEMV kernels alone on NCU_GEMV_SHAPES (after build)
#   ktrace   issue 30: every kernel's in-situ start / end in graph-replayed decode steps (PDL
#            overlap as it runs; CUPTI tracer tools/gpu/kernel_trace.c, LD_PRELOAD) of `g4cu
#            generate`, cut into steps and layers by tools/python/ktrace_step.py (after build,
#            e2b_make; KTRACE_PKGS, KTRACE_ENV, KTRACE_ARGS)
#   l2hot    issue 30 (after build): `bench --kernels --filter l2hot` twice, each decode GEMV
#            with its weights L2-resident beside the same row rotated past the L2 (what an L2
#            hit of every weight byte buys a shape; H200: within 0-5% on every decode shape)
#   gemvprobe  issue 29, where the third-design Q4 GEMV's time goes (after build; ~2 min):
#            test_pdl_sass, then `bench --kernels --filter gemv_q4_probe --reps 30` twice (each
#            v3 decode shape as today's kernel and its loads / math / shell probe forms, weights
#            rotated and L2-resident) and a full / loads / math / shell table a run
#   e2bq     bench f16 + Q4 --reps 3 as landed, with G4_QKV=0 and with G4_GEMV=v2 (after e2b_make);
#            E2BQ_VARIANTS="landed:X=1 persist:G4_PERSIST_MLP=1"
#            for issue 30 stage 2's A/B (a variant's variables comma-separated)
#   persist  issue 30 stage 2, the decode MLP block as one persistent launch (after build; tiny
#            for its engine half): test_backend_ops --op mlp_block on CUDA and --break, the kernel
#            rows `bench --kernels --filter persist` twice (the launch vs the fused gate/up GEMV
#            + the down GEMV), test_cuda_engine with G4_PERSIST_MLP=1
#   ple      issue 30, the decode PLE block as one launch of clusters (after build; tiny for its
#            engine half): test_backend_ops --op ple_block on CUDA (and --break, and with
#            G4_PLE_CLUSTERS=1 and 3), the kernel rows `bench --kernels --filter ple_block` (Q4
#            and fp16) twice (the launch vs the gate GEMV + the projection GEMV), test_cuda_engine with
#            G4_PLE_FUSED=1; end to end: e2bq with E2BQ_VARIANTS="landed:X=1 ple:G4_PLE_FUSED=1"
#   dgemm    the wgmma / mma GEMMs at M = 8, 16, 32, 64 on the decoder's shapes (the skinny path
#            at 16..64 beside them), beside cuBLAS
#   q4wg     issue 31, the Q4 wgmma GEMM at the serve load's rows (after build): test_cuda_gemm
#            --op q4/wgmma and --op q4_glu/wgmma (the producer's depths 1, 2, 3 forced), then the
#            srv_ kernel rows twice (M = 210 and 512 on the decoder's shapes: Q4 wgmma at depth 1,
#            2, 3 in one run, Q4 mma.sync, fp16 wgmma, cuBLAS); q4wg_check / q4wg_rows: each half
#   skinny   issues 31 / 29, the skinny split-K GEMM for 8 < M <= 64 (after build; e2b_make for
#            its second half): its test_cuda_gemm cases (and the mma / AUTO ones, same kernels),
#            test_backend_ops linear cases on CUDA, the dgemm kernel rows, then on the full-size
#            package bench --batch-rows 16,32 with G4_SKINNY=0 and 1 and the 32-row profile
#   gemv     issue 29 (after build) = gemv_check then gemv_rows. gemv_check: the GEMV test
#            cases (the third design's add-norm GEMVs too), and q4 + f16 GEMV cases and the
#            add-norm path again under each GEMV_CHECK_ENVS entry (plan knobs, read once);
#            gemv_rows: the decode GEMV kernel rows of each GEMV_VARIANTS entry (default
#            G4_GEMV=v1/v2/v3/auto), twice
#   f16mma   issue 29, the tensor-core fp16 GEMV (the default; G4_GEMV_F16=fma the earlier kernel; after build):
#            test_cuda_gemm --op f16 (its mma cases force the design and check it ran) plain and
#            again under G4_GEMV_F16=fma (every other fp16 GEMV case then on the CUDA-core
#            kernel), the linear, linear_gelu_mul and add_norm_linear ops of test_backend_ops on CUDA
#            under both, then the gemv kernel
#            rows twice, landed and with fma (the gemv_f16mma / glu_f16mma_gemv rows force the
#            mma design in both); end to end: e2bq with E2BQ_VARIANTS="landed:X=1 fma:G4_GEMV_F16=fma"
#   gvm_sweep  issue 29, the tensor-core fp16 GEMV's plan knobs (after build; ~2-3 min):
#            G4_GEMV_F16=mma test_cuda_gemm --op f16 under two extreme plans (G4_GVM_SPLIT_MAX=1
#            and 64 with G4_GVM_CPS=1) and an invalid knob (must fail naming it), then the
#            gemv_f16mma / glu_f16mma_gemv kernel rows (`bench --kernels --filter f16mma --reps
#            20`, the rows force the design) under each GVM_SWEEP entry ("NAME:VAR=V,VAR=V ..";
#            default 11 settings of G4_GVM_SPLIT_MAX / G4_GVM_CPS / G4_GVM_MIN_CTAS) and one
#            table: shape x M rows, a column a setting (us), the best setting a row and the best
#            one overall (the rows' times summed)
#   anrows   issue 30, the add-norm prologue's cost (after build): `bench --kernels --filter an_
#            --reps 30` twice, each add-norm GEMV (q|k|v, q, the PLE gate with its multiplier,
#            the fused gate/up; Q4 and fp16, M = 1) beside the same GEMV design on x given; the
#            shape column names the design (Q4 v1..v3, fp16 fma / mma: G4_GEMV_F16_NORM=mma moves
#            the fp16 rows to mma; ANROWS_VARIANTS="nm:G4_GEMV_F16_NORM=mma"); then the _xl2 rows
#            once (the plain GEMVs in their default designs)
#   e2b_gemv issue 29's end-to-end figures (after e2b_make): compare vs HF, bench with the earlier
#            and the streaming GEMV, generate vs bench, the per-op decode split
#   batch_cuda  issue 31's batch on CUDA (after tiny): test_cuda_engine (its batch and prompt-rows
#            checks, the latter also at a server's scale: "rows at scale"), the row-batched ops'
#            test_backend_ops cases on CUDA (and --break), test_cuda_ops --op sample
#   batch_bench  issue 31's batched decode step (after e2b_make): g4cu bench --batch-rows
#            1,8,16,32 on the full-size f16 and Q4 packages, G4_BATCH_ROWS=0 at 32 for A/B, and
#            the 32-row step's per-op split (G4_PROFILE=1)
#   fuse     issue 30 stage 1 (after build, tiny; e2b_make for its full-size half): the fused
#            add-norm GEMV vs the naive op, test_cuda_engine with G4_FUSE=0, and on the
#            full-size package generate fused vs unfused and bench both ways
#   qkv      issue 30 stage 1, q|k|v as one decode GEMV (after build, tiny; e2b_make for its
#            full-size half): the q|k|v shapes of add_norm_linear / linear vs the naive op,
#            test_cuda_engine with it on and off, and on the full-size package generate and bench
#            --reps 5 with G4_QKV=0 and the default, greedy tokens compared, the per-op profile
#   eval_batch  issue 31's eval --batch 16 vs 1 on the carried smoke media (CUDA; a gpu-eval
#            package: gpu-tiny's shapes with the tiny fixture's vocabulary and token ids), each
#            run's --time split, and --batch 16 with G4_EVAL_PREP_THREADS=0
#            G4_BATCH_PREFILL_ONE=1 G4_BATCH_PROMPT_ROWS=0 (the front ends on the stepping thread,
#            the earlier rounds with a prefill budget of one chunk: one prompt chunk a round)
#            and with G4_BATCH_GRAPH=1 (the batch step captured per row count)
#   alt_greedy  issue 30: alt_run's greedy CUDA-vs-CPU check alone (where they differ: near-tie
#            or bug, from teacher-forced logits on both backends, tools/python/greedy_ties.py;
#            after build, makes the alt f16 package if absent)
#   alt      issue 30, a Gemma-4 of another shape than E2B at full scale = alt_make + alt_run
#            (after build; ~7-10 min in all, see bench/NOTES.md): alt_make makes it
#            (tools/python/make_package.py --preset alt [--hidden $ALT_HIDDEN]: hidden 2048, 24
#            layers S S F, GQA 8:2, head_dim 256 / 512, window 1024, MLP 8192 on every layer, PLE
#            512, vocab 32768; ~2.1e9 parameters, 4.2 GB in f16), its Q4 form (g4cu quantize)
#            and HF dumps of 16 and 1100 tokens (past the window; fp32 on the CPU, as e2b_make's
#            --package checks of the RoPE tables run there; fp16 on the GPU);
#            alt_run: g4cu compare
#            --backend cuda vs HF fp32 with --tol-from HF fp16 (hf-fp16x3) at both lengths,
#            Q4's KL vs f16, greedy tokens CUDA == CPU over 32 steps, bench f16 + Q4
#            ($OUT/alt_bench.json). Two calls when one would pass the 10 minutes: "build alt_make"
#            then "alt_run" on the still warm machine
#   e2b_bg   start making the full-size random E2B package in the background (f16, Q4 via
#            g4cu quantize, HF dumps of a 16-token prompt): e2b_make, detached
#   e2b_wait wait for it (a later call on the same, still warm machine)
#   e2b_run  g4cu compare (cuda vs HF, f16 and Q4), bench f16 + Q4 + HF peers ($OUT/e2b_bench.json
#            is what bench/results.json commits), then `g4cu generate --backend cuda --ids <the
#            bench's 128 prompt ids> --max-new 128 --ignore-eos --json` 3 times per package and
#            the ratio of its decode tok/s (median) to bench's decode_tok_s (target: within 3%)
#   serve    `g4cu serve` on the full-size package (after e2b_wait; SERVE_PKGS, default "f16 q4")
#            with --backend ${SERVE_BACKEND:-cuda} --parallel ${SERVE_PARALLEL:-4} --n-ctx 4096, driven by
#            tools/gpu/serve_load.py (300 requests from ${SERVE_CLIENTS:-16} clients, every 10th
#            malformed or cut off, every 3rd streamed, ${SERVE_MAX_TOKENS:-64} tokens each, plus
#            $SERVE_LOAD_ARGS): prints throughput, p50/p99 latency, the batch size over the
#            run and where the scheduler's rounds went ("serve <pkg> rounds:": prefill, decode,
#            accept, submit, sched, idle seconds; $OUT/serve_<pkg>.json), the server's RSS before
#            and after, its whole-run g4cu_batch_seconds_total, and its exit status after
#            SIGTERM. SERVE_PREFILL_TOKENS="512 128" runs the load once per
#            --batch-prefill-tokens value (a fresh server each; default: the server's default;
#            files serve_<pkg>_p<N>.*). Pass: "0 failed, 0 mis-answered" and "exit 0 after
#            SIGTERM". Issue 31's load: SERVE_PARALLEL=32 SERVE_CLIENTS=32 SERVE_MAX_TOKENS=128
#            SERVE_LOAD_ARGS="--greedy --prompt-words 100". SERVE_PROMPT_ROWS="0 1" runs each
#            load once per G4_BATCH_PROMPT_ROWS value (engine/batch.h: 1, the default (issue
#            31), prompts as rows of the decode step; 0 the earlier rounds, a forward per
#            prompt chunk then the decode step; a fresh server each; files
#            serve_<pkg>[_p<N>]_rows0.* for 0; default: $G4_BATCH_PROMPT_ROWS as set, else 1).
#            SERVE_ENV="plain:X=1 graph:G4_BATCH_GRAPH=1" runs each load once per variant (NAME:
#            VAR=VALUE[,VAR=VALUE..] set for the server; files serve_..._NAME.*; default one
#            run with the environment as it is)
#   fidelity_bg   start, detached, the trained proxy of issue 19 (fidelity_make): corpus in
#            $WORK/fidelity/corpus (fid_corpus_make: from the carried .carry/corpus, or
#            .carry/corpus-xz from tools/python/corpus_xz.py pack, unpacked and checked, or
#            tools/python/prepare_corpus.py's; the later fidelity stages read it there), train_proxy.py
#            --preset ${FIDELITY_PRESET:-proxy} --minutes ${FIDELITY_MINUTES:-8}, mobius export,
#            g4cu quantize: plain Q4, --keep-auto (10% more bytes, FIDELITY_KEEP_PCT), --imatrix
#            and the --method variants (fid_methods: rtn, gptq, gptq --act-order, fit, gptq_imx,
#            on request the --imatrix search's A/B q4_imatrix_v1 / q4_imatrix_diag and
#            gptq_imx's q4_gptq_imx_pick (G4_GPTQ_IMX=pick: no screen), imatrix with the
#            covariance's directions on every linear q4_imatrix_r32, by default the rule before
#            the shrunk directions q4_imatrix_s0 (FID_AB_VARIANTS), the
#            X^T X calibration's q4_gptq_imx_16k / q4_imatrix_16k (FIDELITY_CALIB_TOKENS_LONG,
#            16384, in windows of FIDELITY_CALIB_CTX, 512) and on request q4_gptq_16k, q4_fit_16k,
#            q4_imatrix_r0_16k (G4_IMATRIX_RANK=0), q4_imatrix_nrf_16k / q4_imatrix_k8_16k
#            (G4_IMATRIX_REFIT=0 / 8: no block refit / 8 candidates refit), q4_imatrix_p1_16k
#            (G4_IMATRIX_PASSES=1: one pass over each column), q4_gptq_imx_w512
#            (the windows alone), q4_gptq_imx_d0.1 / q4_gptq_d0.1 (G4_GPTQ_DAMP=0.1),
#            q4_gptq_imx_cv / q4_gptq_cv (G4_GPTQ_DAMP=cv: the damping per linear by held-out
#            calibration rows) (FID_CALIB_VARIANTS),
#            and FIDELITY_BEST's method with the same --keep-auto budget; issue 33), and the
#            output-KL scale fits of tools/python/dwq_fit.py (fid_dwq: FID_DWQ's
#            NAME:SOURCE[:ARGS] entries, ARGS extra dwq_fit.py arguments joined by commas;
#            default q4_dwq:q4 q4_fit_dwq:q4_fit q4_fit_dwq_keep_auto:q4_best_keep_auto and the
#            code fits q4_dwqc:q4:--codes q4_fit_dwqc_keep_auto:q4_best_keep_auto:--codes,
#            side by side, FID_DWQ_MINUTES (2) each; FID_DWQ= leaves them out). Order (issue
#            33's target rows first: fid_methods): q4, q4_keep_auto, FID_FIRST's packages
#            (q4_gptq_imx_16k_keep_auto q4_gptq_imx_16k q4_imatrix_16k when made), the other fits'
#            SOURCE packages (q4_fit, q4_best_keep_auto), then the rest (q4_imatrix, the --method
#            rows, ...); each fit starts in the background as soon as its SOURCE is written,
#            while the other quantizations run beside it, on FID_OVERLAP_CORES (1) core a
#            running fit fewer threads; the stage ends when both have (same packages, same bytes;
#            ~1.5-2 min less on the H200: bench/NOTES.md "The fits beside the quantizations").
#            FID_OVERLAP=0: every quantization first, then the fits. The log prints a row a fit:
#            steps, stop, s/step, cores. Each package's perplexity row is measured on the GPU as
#            soon as it is written (fid_mq_start: f16 --save-logits first, one row at a time,
#            into $OUT/fidelity with FIDELITY.md rebuilt after each; FID_MEASURE_EARLY=0: none),
#            so that a run cut short still carries the rows made so far.
#   fidelity_methods  on a trained proxy ($FID/READY): the --method variants and the fits again
#            (after a quant/ or dwq_fit.py change; the same order and FID_OVERLAP as
#            fidelity_bg's), then fidelity_run: the method table in one call
#   fidelity_wait wait for it (at most ~9.5 min a call; call again while it trains)
#   train    fidelity_make in the foreground (for tools/gpu/pipeline.sh, which detaches stages)
#   fidelity_measure  = fidelity_run (pipeline.sh's name)
#   fidelity_run  g4cu perplexity (f16 --save-logits, each Q4 --kl-base) on the held-out text on
#            ${FIDELITY_BACKEND:-cuda} (only the rows fidelity_make's measurer has not made: its
#            $FID/measure_dir's rows are copied, those older than their package measured again),
#            the per-layer error SVG and sensitivity ranking, each
#            package's per-linear layer-output error (fid_linerr: compare --linear-error on the
#            calibration tokens), the same statistics on $WORK/e2b when it is READY; writes
#            $OUT/fidelity/FIDELITY.md (with the fits' steps table)
#   mm_bg    start, detached, issue 35's multimodal proxy (mm_make): from .carry/mmdata
#            ($MM_CARRY; tools/gpu/fetch_mm_carry.sh on a Debian CPU machine: the item plan,
#            gzipped, and espeak-ng's .debs) the speech (espeak-ng unpacked by tools/gpu/
#            espeak_prefix.sh, all cores, ~1 min) and the held-out media (fonts from
#            $MM_CARRY/fonts, unpacked by tools/gpu/env.sh), written to $WORK/mm/data
#            ($MM_DATA: the plan's copy, speech, media, manifests; outside the tree, so that
#            mm_run in a later tools/gpu/pipeline.sh start finds them), train_mm_proxy.py --preset
#            ${MM_PRESET:-proxy} --minutes ${MM_MINUTES:-10}, mobius export, g4cu quantize:
#            plain Q4, --keep-auto, --imatrix and the --method variants (as fid_methods;
#            calibrated on the train sentences; q4_gptq_imx_16k from MM_CALIB_TOKENS_LONG=16384
#            in windows of 512, as the text proxy's row); MM_QUANTS="q4_rtn q4_gptq ..." makes
#            only those (q4 always; default all of MM_VARIANTS).
#            MM_TRAIN_ARGS_B="...": a second recipe B trained beside A (MM_TRAIN_ARGS) in the
#            same stage, at the same time, on the same GPU and data (the same preset, --minutes
#            and seed unless B's arguments give another), into $WORK/mm/proxy_b with --no-export;
#            each trainer gets half the preset's loader workers (an own --workers in either list
#            wins); B's log lines are A's with "B: " in front; B failing fails nothing. Then
#            tools/python/mm_pair_table.py's table of both train.json files (steps done, median
#            step s, data wait, the LM warm losses (copy / plain rows), each held-out row: image /
#            audio loss, zeroed and rolled gaps, read-out heads' CER, answers' exact / OCRBench /
#            WER / stopped share / distinct count), printed, in $OUT/mm/PAIR.md
#            and $WORK/mm/PAIR.md, which mm_run packs with B's train.json (train_b.json). Only A
#            is quantized, evaluated and packed. Unset: A alone, and the same table of its
#            train.json alone (its column) in $OUT/mm/RUN.md and $WORK/mm/RUN.md, which mm_run
#            packs (issue 35: two recipes in one GPU start; bench/NOTES.md "Two recipes in one
#            start")
#   mm_quant mm_make's quantize part alone, again, on its $WORK/mm/proxy/f16 and calib.txt
#   mm_wait  wait for it (at most ~9.5 min a call; call again while it trains). Order the first
#            call `mm_bg build mm_wait`: mm_make trains while build runs and waits for
#            build-gpu/g4cu before quantizing
#   mm_run   on $WORK/mm/READY: g4cu eval (ocrbench accuracy, librispeech WER) of f16 and each
#            Q4 variant on the held-out items (${MM_BACKEND:-cuda}), the parity of f16's greedy
#            answers with HF's (tools/python/mm_parity.py, >= 95%; each differing answer a near
#            tie or a real disagreement by the backend's compare tolerance), g4cu compare of f16 and
#            each variant against an HF dump of one image + audio prompt (the CPU backend against
#            HF float64 with --tol-from the float32 dump: hf-fp32x8), each compare followed by
#            one line per span kind (tools/python/cmp_spans.py: the worst decoder layer's rel
#            err on the text / image / audio rows, issue 35); writes
#            $OUT/mm/MM_FIDELITY.md (tools/python/mm_report.py) and $OUT/mm.tar.gz;
#            MM_EVAL_BATCH=N: g4cu eval --batch N (default 1; on CUDA a batch may round a
#            near-tie the other way); MM_CPU_PARITY=1: f16's ASR items again on the CPU backend,
#            their parity with HF at cpu-f32 and the CPU's answers against the GPU's
#            (mm_parity.py --same) in parity_cpu.{json,txt}, and the first 8 disagreements
#            teacher-forced on g4cu's answers on both backends (mm_logits_check.py:
#            logits_check.{json,txt}: the decode path or the prefill?)
#            MM_DECCHECK=1: after the parity, mm_deccheck's work into $OUT/mm (below)
#   mm_deccheck  issue 35: which op of CUDA's one-token decode path leaves its own prefill (~3-4
#            min; after mm_run, this call or an earlier start's on the same warm machine: it
#            needs only $MMD/proxy/{hf,f16}, $MM_DATA and mm_run's ASR predictions + parity.json,
#            which mm_run keeps in $MMD/deccheck_in; without them it makes them: the f16 ASR
#            eval on CUDA and mm_parity, ~1.5 min). The first 8 parity mismatches through
#            mm_logits_check.py --decode --backend cuda (g4cu logits --decode-from: generate's
#            prompt prefill, then each answer token one decode step, against the plain prefill)
#            once per decode toggle, each under its environment: base (HF too), then --no-hf:
#            all_off (the five below at once), text (the defaults, each prompt without its audio
#            block: dec_rel / dec_pf after a text context), eager (G4_EAGER=1: no graph), pdl0,
#            fuse0, qkv0, gemv_fma, norm_mma, attn1, merge_cluster, ple_fused, gvm_split1 (the
#            list and why: MM_DECCHECK_TOGGLES). $OUT/mm_deccheck/deccheck_NAME.
#            {txt,json} and the table DECCHECK.md (toggle, items, dec_rel mean / max, dec_pf,
#            dec_own, dec_sample: rows whose sampled id is not the argmax of its row; and "eval = full eval": the same items through g4cu eval alone under the
#            toggle, how many answers equal the full default eval's: base < all means an answer
#            depends on the items evaluated before it, the state's history, not on the decode
#            op). MM_DECCHECK_ONLY="base pdl0 ..." runs those toggles only; MM_DECCHECK_ITEMS
#            (default 8); MM_BACKEND=cpu: a CPU dry run (the toggles change nothing there)
#   mm_det   is the CUDA eval deterministic, and which decode switch changes its answers? (issue
#            35: two mm_run calls on one package and build gave 16 of 80 different f16 ASR
#            answers; the CPU's equal HF's on 80 of 80). On $WORK/mm/proxy/f16 and $MM_DATA (an
#            earlier call's mm_make): f16's librispeech eval on CUDA
#            ${MM_DET_RUNS:-3} times under each setting of MM_DECCHECK_TOGGLES (mm_deccheck's:
#            base, all_off, then one switch of the one-token step each; MM_DET_ONLY="base
#            pdl0 ..." those only; ~3 s an eval, ~2 min in all), every run against the
#            baseline's first (tools/python/mm_parity.py --same) and, where mm_run's
#            MM_CPU_PARITY left the CPU's answers ($WORK/mm/det_ref: copied there by mm_run),
#            against those; $OUT/mm_det/DET.md, one row a setting. Another package and
#            manifest folder: MM_DET_PKG, MM_DET_DATA (its asr_test.jsonl), MM_DET_HF (its HF
#            model, for the prefill pair; none: skipped), MM_DET_REF (the CPU's predictions
#            of that package, if any), e.g. after tiny, without a trained
#            proxy: MM_DET_PKG=$WORK/gpu-tiny/f16 MM_DET_HF=$WORK/gpu-tiny/hf
#            MM_DET_DATA=tests/fixtures/mm-tiny (random weights: flat logits show any
#            run-to-run difference, a benign rounding order too)
#   mm_data  mm_make's data part alone, no training (~1 min): the carried plan into $MM_DATA,
#            the speech and the held-out media: what mm_speed needs (`build / mm_data mm_speed`)
#   mm_speed issue 35: how fast can the proxy train on one GPU? (~2 min, at most 3.5 by its
#            timeouts; after mm_make, this call or an earlier start's, also right after mm_run:
#            it reads only $MM_DATA) tools/python/mm_warm_timing.py, ${MM_PRESET:-proxy} on
#            ${MM_SPEED_DEVICE:-cuda}: (1) the batch sweep, one model: the joint step, then the
#            warm + audio step, at each of ${MM_SPEED_BATCHES:-64,128,256} items (first train
#            items, half images, half clips), ${MM_SPEED_ROUNDS:-5} timed steps each after one
#            untimed, with the recipe's options that change a step (--pad-to 64
#            --strict-determinism --split-digits, AudioChars' CTC x 0.5 at embed, --ctc-tied,
#            --a-lr-mult 0.3): a row each with the median s a step, items/s, peak GiB allocated
#            and (CUDA) the GPU's own seconds in one more, profiled step (--gpu-busy: near the
#            median, GPU-bound; --top-ops: its ${MM_SPEED_TOP_OPS:-12} ops of most GPU time
#            named), OOM where a size does not fit (timeout ${MM_SPEED_SWEEP_S:-150} s); (2)
#            the trainer's two loaders alone (its datasets, collate, augmentations: --reps 8
#            --a-speed-perturb 0.1, batch 64) at each of ${MM_SPEED_WORKERS:-7,14} workers:
#            items/s over ${MM_SPEED_LOADER_BATCHES:-24} batches after one a worker (timeout
#            ${MM_SPEED_LOADER_S:-60} s). Rows in $OUT/mm_speed/speed.txt (logs speed_sweep.log,
#            speed_loader.log); MM_SPEED_ARGS: more sweep options
#   tiny_det mm_det on gpu-tiny (after tiny) with tests/fixtures/mm-tiny-grow's clips: $OUT/tiny_det
#            (its items fail after the tower: no fitting tokenizer; see stage_tiny_det)
#   mm_make  mm_bg's work in the foreground, for tools/gpu/pipeline.sh (which detaches every
#            stage): plan "build / mm_make mm_run", or "build / mm_make" in one call and "mm_run"
#            in the next (mm_run reads $WORK/mm and $MM_DATA). A CPU dry run of both (tiny proxy, ~2.5
#            min; bench/NOTES.md "The multimodal proxy's first GPU run"): MM_PRESET=tiny tools/gpu/fetch_mm_carry.sh, then
#            build-gpu -> a CPU build, python3 on PATH with torch, transformers, mobius, PIL,
#            soundfile, soxr, torchvision, G4_PREFIX=/tmp/somewhere, MM_PRESET=tiny
#            MM_TRAIN_ARGS="--device cpu --threads 1" MM_BACKEND=cpu MM_CALIB_TOKENS=256
#   llama_build  llama.cpp (.carry/llama.tar.xz, tools/peers/pack_llamacpp.sh) unpacked to
#            $WORK/llama and built with CUDA sm_90a: llama-bench, llama-quantize (beside e2b_make)
#   llama_convert  llama.cpp's f16 GGUF and Q4_K_M of the checkpoint (after llama_build,
#            e2b_make; CPU work beside the GPU stages: peers' llama-bench waits for it)
#   peers    issue 23's table (after e2b_make, llama_build): g4cu bench f16 + Q4 beside
#            onnxruntime-genai 0.18 ($WORK/ort), HF bf16 / fp16, llama.cpp F16 / Q4_K_M, and the
#            logits parity vs HF fp32 -> $OUT/peers.md, $OUT/peers.json (PEERS_SKIP, PEERS_HF_REPS,
#            PEERS_HF_LONG; LLAMACPP_DEPTH_REPS)
#   cli      issue 21's figures (after e2b_wait): `g4cu asr` long-form on a 600 s WAV made here on
#            the E2B f16 package, CUDA (wall s, real-time factor = wall / 600, windows), with
#            --tokenizer ${E2B_TOKENIZER:-$FID/proxy/f16/tokenizer.json} (the package has none);
#            bench -o md (mean +/- sd over 5 reps); the CPU --threads speedup (tiny logits)
# Logs and JSON go to $OUT (the device tool brings them back). Each stage prints its time.
set -uo pipefail
OUT=${OUT:-/tmp/g4out}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
source tools/gpu/env.sh
export PYTHONUNBUFFERED=1
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(build tests tiny kernels)
WORK=${WORK:-/tmp/g4work}
mkdir -p "$WORK"
t_start=$(date +%s)
stamp() { echo "[$(($(date +%s) - t_start)) s] $*"; }

# wait_g4cu TAG: until the foreground build's build-gpu/g4cu exists (a stage started beside the
# build), at most 20 minutes: a failed build leaves none, and the stage fails instead of hanging.
wait_g4cu() {
    local n=0
    while [ ! -x build-gpu/g4cu ] && [ $n -lt 1200 ]; do sleep 5; n=$((n + 5)); done
    [ -x build-gpu/g4cu ] || { echo "$1: no build-gpu/g4cu after 20 min (the build failed?)"; return 1; }
}

stage_build() {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
    cmake -S . -B build-gpu -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release -DG4_WERROR=OFF >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; return 1; }
    cmake --build build-gpu -j"$(nproc)" -- -k >"$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; }; ls build-gpu/g4cu >/dev/null || return 1
}

stage_tests() {
    ctest --test-dir build-gpu --output-on-failure -j4 --timeout 600 >"$OUT/ctest.log" 2>&1
    grep -E "tests passed|Failed|\*\*\*|Skipped" "$OUT/ctest.log" | tail -25
}

stage_tiny() {
    local d="$WORK/gpu-tiny"
    rm -rf "$d"
    python3 tools/python/make_package.py "$d" --preset gpu-tiny >"$OUT/tiny.log" 2>&1 || { tail -20 "$OUT/tiny.log"; return 1; }
    build-gpu/g4cu quantize "$d/f16" "$d/q4" >>"$OUT/tiny.log" 2>&1 || { tail -5 "$OUT/tiny.log"; return 1; }
    python3 tools/python/make_reference.py --hf "$d/hf" --package "$d/f16" --out "$d/dumps" \
        --lengths 1,40,100 >>"$OUT/tiny.log" 2>&1 || { tail -10 "$OUT/tiny.log"; return 1; }
    python3 tools/python/make_reference.py --hf "$d/hf" --out "$d/dumps16" --lengths 1,40,100 \
        --dtype float16 --device cuda >>"$OUT/tiny.log" 2>&1 || { tail -10 "$OUT/tiny.log"; return 1; }
    for b in cpu cuda; do
        for k in len1 len40 len100; do
            tol=""; [ $b = cuda ] && tol="--tol-from $d/dumps16/$k.npz"
            build-gpu/g4cu compare "$d/f16" "$d/dumps/$k.npz" --backend $b $tol >"$OUT/tiny_cmp_${b}_$k.txt" 2>&1
            echo "compare $b $k: exit $? $(tail -1 "$OUT/tiny_cmp_${b}_$k.txt")"
        done
    done
    # Q4 is a fidelity figure, not a pass/fail against the f16 HF dump (4-bit weights are not
    # within fp16 tolerances by design): the f16 -> Q4 KL and top-1 on CUDA, then the per-tensor
    # error of Q4 vs HF for the record (its exit status is not a verdict).
    build-gpu/g4cu compare "$d/f16" "$d/q4" --backend cuda --ids "$(seq -s, 5 44)" \
        >"$OUT/tiny_fid_q4_cuda.txt" 2>&1
    echo "fidelity q4 vs f16 (cuda, 40 ids): exit $? $(tail -2 "$OUT/tiny_fid_q4_cuda.txt" | tr '\n' ' ')"
    build-gpu/g4cu compare "$d/q4" "$d/dumps/len40.npz" --backend cuda --tol-from "$d/dumps16/len40.npz" >"$OUT/tiny_cmp_q4_cuda_len40.txt" 2>&1
    echo "q4 vs HF len40 (information, not a verdict): $(tail -1 "$OUT/tiny_cmp_q4_cuda_len40.txt")"
    G4_GPU_TINY_PKG="$d/f16" G4_GPU_TINY_Q4="$d/q4" build-gpu/tests/test_cuda_engine 2>&1 | tee "$OUT/test_cuda_engine.log" | grep -v "    step" | tail -14
    G4_GPU_TINY_PKG="$d/f16" build-gpu/tests/test_cuda_towers 2>&1 | tee "$OUT/test_cuda_towers.log" | tail -12
    G4_GPU_TINY_PKG="$d/f16" build-gpu/tests/test_cuda_ple_host 2>&1 | tee "$OUT/test_cuda_ple_host.log" | tail -4
    G4_GPU_TINY_PKG="$d/f16" build-gpu/tests/test_cuda_oom 2>&1 | tee "$OUT/test_cuda_oom.log" | tail -6
}

# The one-decode-step checks on the GPU (see the header). Lines to read: "sample" / "scatter"
# case counts with 0 failed, "test_cuda_supported: N checks, 0 failed", test_cuda_engine's
# "graph == eager step", "identical", "as alone" / "the tokens of each alone", "allocations after
# the first request: 0" and its final "0 failed"; the generate lines end in "same".
stage_engine() {
    local d="$WORK/gpu-tiny"
    build-gpu/tests/test_cuda_ops --op sample 2>&1 | tee "$OUT/engine_sample.log" | grep -E "^(sample|  ids|  capped)|cases|FAIL" | tail -40
    build-gpu/tests/test_cuda_ops --op scatter_rows 2>&1 | tee "$OUT/engine_scatter.log" | tail -4
    build-gpu/tests/test_cuda_supported 2>&1 | tail -1
    G4_GPU_TINY_PKG="$d/f16" G4_GPU_TINY_Q4="$d/q4" build-gpu/tests/test_cuda_engine 2>&1 | tee "$OUT/engine_cuda_engine.log" |
        grep -E "decode:|old path|sampled|interleaved|allocations|checks" | tail -20
    local ids="2,318,302,48,100,477,262,5,90,91,92,93,94,95,96,97,98,99,100,101" # (vocab 512)
    for b in cuda cpu; do
        build-gpu/g4cu generate "$d/f16" --backend $b --ids $ids --max-new 24 --ignore-eos --json >"$OUT/engine_gen_$b.json" 2>&1
    done
    local tc tp
    tc=$(sed -E 's/.*"tokens":\[([^]]*)\].*/\1/' "$OUT/engine_gen_cuda.json")
    tp=$(sed -E 's/.*"tokens":\[([^]]*)\].*/\1/' "$OUT/engine_gen_cpu.json")
    echo "generate gpu-tiny greedy, cuda vs cpu: $([ "$tc" = "$tp" ] && echo same || echo "differ (fp16 vs fp32 logits: expected only at near-ties; cuda $tc / cpu $tp)")"
    for r in 1 2; do
        build-gpu/g4cu generate "$d/f16" --backend cuda --ids $ids --max-new 24 --temperature 1 --top-k 64 --top-p 0.95 --seed 11 --json >"$OUT/engine_sampled_$r.json" 2>&1
    done
    cmp -s <(sed -E 's/.*"tokens":(\[[^]]*\]).*/\1/' "$OUT/engine_sampled_1.json") <(sed -E 's/.*"tokens":(\[[^]]*\]).*/\1/' "$OUT/engine_sampled_2.json")
    echo "generate gpu-tiny sampled seed 11, run 1 vs run 2: $([ $? -eq 0 ] && echo same || echo DIFFERENT)"
    # The sensitivity probe binds Q4 candidates through the CUDA backend's prepare_linear (it
    # aborted on an unrepacked weight before): the ranking on CUDA and on the CPU (the fidelity
    # stages run quantize --keep-auto --backend cuda on the trained proxy).
    for b in cuda cpu; do
        build-gpu/g4cu compare "$d/f16" --sensitivity --ids $ids --backend $b >"$OUT/engine_sens_$b.txt" 2>&1
        echo "sensitivity gpu-tiny --backend $b: exit $?"
    done
    head -8 "$OUT/engine_sens_cuda.txt" | cut -c1-150
}

# Lines to read: "test_backend_ops: N cases, 0 failed" and "N checks, 0 failed" for the run and
# for --break (which passes only when every perturbed case failed), no "SKIP ... cuda half" line,
# and "list: cuda: N ops, each called by a case"; the perf lines are ms per call on the H200.
stage_backend_ops() {
    build-gpu/tests/test_backend_ops >"$OUT/backend_ops.log" 2>&1
    echo "test_backend_ops: exit $?"
    grep -E "^list|FAIL|SKIP|cases|checks" "$OUT/backend_ops.log" | grep -v "^  list" | tail -20
    build-gpu/tests/test_backend_ops --break --backend cuda >"$OUT/backend_ops_break.log" 2>&1
    echo "test_backend_ops --break --backend cuda: exit $?"
    tail -2 "$OUT/backend_ops_break.log"
    build-gpu/tests/test_backend_ops perf --reps 50 --backend cuda >"$OUT/backend_ops_perf.log" 2>&1
    echo "test_backend_ops perf --backend cuda: exit $?"
    awk '/^case/ { c = $0 } /^  perf/ { print $2 "\t" $3 " ms  " substr(c, 28) }' "$OUT/backend_ops_perf.log" | cut -c1-150
}

stage_sanitize() { # one line per run and per tool (logs in $OUT/sanitize/); SAN_TOOLS to narrow
    G4_GPU_TINY_PKG="$WORK/gpu-tiny/f16" bash tools/gpu/sanitize.sh ${SAN_TOOLS:-memcheck racecheck synccheck}
}

stage_kernels() {
    build-gpu/g4cu bench --kernels --reps 30 --json "$OUT/kbench.json" >"$OUT/kbench.txt" 2>&1
    echo "bench --kernels: exit $?"
    cat "$OUT/kbench.txt" | cut -c1-160
    # cuBLAS / cuDNN are dlopen()ed on use (kernels/bench/baselines.h, issue 34): which were
    # loaded, and how many rows timed each baseline (0 with a "not loaded" line: look at why)
    build-gpu/g4cu --version | grep -E '^cu(BLAS|DNN) '
    echo "baseline rows timed: cublas $(grep -cE '\| cublas(16| x2)? +[0-9]+\.[0-9]+ ' "$OUT/kbench.txt")," \
        "cudnn $(grep -cE '\| cudnn +[0-9]+\.[0-9]+ ' "$OUT/kbench.txt")," \
        "not loaded $(grep -c 'not loaded' "$OUT/kbench.txt")"
}

# The mma.sync / wgmma crossover sweep (bench_gemm.cu's sweep()): the data AUTO's per-shape
# prefill kernel choice is set from.
stage_xover() {
    local k c n=0
    for k in ${XOVER_KINDS:-f16 q4 glu_f16 glu_q4}; do # (a subset re-sweeps one kind's kernels)
        for c in mma wgmma wg128 wg192 wg256; do
            build-gpu/g4cu bench --kernels --filter "xover_${k}_$c" --reps 10 \
                --json "$OUT/xover_${k}_$c.json" >"$OUT/xover_${k}_$c.txt" 2>&1 ||
                echo "xover_${k}_$c: exit $?"
            n=$((n + $(grep -c "^xover" "$OUT/xover_${k}_$c.txt")))
        done
    done
    echo "xover: $n rows"
    tar czf "$OUT/xover.tar.gz" -C "$OUT" $(cd "$OUT" && ls xover_*.json) && rm -f "$OUT"/xover_*.json
}

# AUTO's prefill GEMM choice A/B on the full-size package (after e2b_make): the tuned table
# (default), its cost model alone (G4_GEMM_TUNED=0) and mma.sync (G4_GEMM_PREFILL=mma), one
# bench each (GEMM_AB: a subset), then the rows side by side.
stage_gemm_ab() {
    local d="$WORK/e2b" v env_ab
    while [ ! -f "$d/READY" ] && [ ! -f "$d/FAILED" ]; do sleep 5; done
    [ -f "$d/READY" ] || { echo "gemm_ab: the package was not made"; return 1; }
    for v in ${GEMM_AB:-tuned model mma}; do
        case $v in
        tuned) env_ab=() ;;
        model) env_ab=(G4_GEMM_TUNED=0) ;;
        mma) env_ab=(G4_GEMM_PREFILL=mma) ;;
        esac
        env "${env_ab[@]}" build-gpu/g4cu bench "$d/f16" "$d/q4" --reps 3 \
            --json "$OUT/gemm_ab_$v.json" >"$OUT/gemm_ab_$v.txt" 2>&1 || echo "gemm_ab $v: exit $?"
    done
    python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
import os
runs = {v: json.load(open(f"{out}/gemm_ab_{v}.json"))["packages"] for v in ("tuned", "model", "mma")
        if os.path.exists(f"{out}/gemm_ab_{v}.json")}
runs.setdefault("model", runs["tuned"])  # a subset (GEMM_AB): a missing column repeats one run
runs.setdefault("mma", runs["model"])
keys = [k for k in next(iter(runs["tuned"].values())) if k.endswith(("_ms", "_tok_s"))]
for pkg in runs["tuned"]:
    print(f"== {pkg}: tuned / model / mma (and tuned vs model)")
    for k in keys:
        a, b, c = (runs[v][pkg].get(k) for v in ("tuned", "model", "mma"))
        if None in (a, b, c) or not b: continue
        print(f"{k:24s} {a:10.2f} {b:10.2f} {c:10.2f}   {a / b:5.3f}")
PY
}

# A short look at the full-size package (after e2b_make): bench at 3 reps and the prefill
# attention kernel rows (wgmma vs HMMA), for a call without time for e2b_run.
stage_e2b_quick() {
    local d="$WORK/e2b"
    [ -f "$d/READY" ] || { echo "e2b_quick: no $d/READY"; return 1; }
    build-gpu/g4cu bench "$d/f16" "$d/q4" --reps 3 --json "$OUT/e2b_quick_bench.json" 2>&1 | tee "$OUT/e2b_quick_bench.txt" | cut -c1-800
    build-gpu/g4cu bench --kernels --filter attn_prefill --reps 20 --json "$OUT/e2b_quick_kattn.json" >"$OUT/e2b_quick_kattn.txt" 2>&1
    echo "bench --kernels --filter attn_prefill: exit $?"; grep attn_prefill "$OUT/e2b_quick_kattn.txt" | cut -c1-160
}

# Issue 22's breakdown (after e2b_make): the towers' per-op split and the decode step's
# (bench under G4_PROFILE=1, f16), and the kernel-table rows of the towers' ops (conv, audio and
# bidirectional attention, the GEMMs) against cuDNN / cuBLAS.
stage_towers() {
    local d="$WORK/e2b"
    [ -f "$d/READY" ] || { echo "towers: no $d/READY"; return 1; }
    G4_PROFILE=1 build-gpu/g4cu bench "$d/f16" --reps 5 >"$OUT/towers_profile.txt" 2>&1
    echo "bench G4_PROFILE=1 f16: exit $?"
    grep -E "^(vision|audio)" "$OUT/towers_profile.txt"
    awk '/tower, .*per op/ { on = 1 } /^decode step/ { on = 0 } on' "$OUT/towers_profile.txt" | head -60 | cut -c1-150
    for f in sscp conv attn_bidir attn_audio gemm; do
        build-gpu/g4cu bench --kernels --filter $f --reps 20 >"$OUT/towers_k_$f.txt" 2>&1
        echo "bench --kernels --filter $f: exit $?"; head -40 "$OUT/towers_k_$f.txt" | cut -c1-160
    done
}

# An unlanded branch's tree, carried as .carry/branch.tar.gz (`git archive BRANCH -- .
# ':!tests/fixtures' | gzip`), run beside this tree without replacing it: its own run.sh
# stages ${BRANCH_STAGES:-build prefill} in $WORK/branch-src (its own build-gpu/), then its
# test_cuda_engine on this run's gpu-tiny packages, and its g4cu bench and compare on the
# full-size package when e2b_make made one. Logs under $OUT/branch/.
stage_branch() {
    local src="$WORK/branch-src" d="$WORK/e2b"
    [ -f .carry/branch.tar.gz ] || { echo "branch: no .carry/branch.tar.gz"; return 1; }
    rm -rf "$src" && mkdir -p "$src" "$OUT/branch" && tar -xzf .carry/branch.tar.gz -C "$src" || return 1
    (cd "$src" && OUT="$OUT/branch" WORK="$WORK" bash tools/gpu/run.sh ${BRANCH_STAGES:-build prefill})
    if [ -f "$WORK/gpu-tiny/f16/genai_config.json" ]; then
        G4_GPU_TINY_PKG="$WORK/gpu-tiny/f16" G4_GPU_TINY_Q4="$WORK/gpu-tiny/q4" "$src/build-gpu/tests/test_cuda_engine" >"$OUT/branch/test_cuda_engine.log" 2>&1
        echo "branch test_cuda_engine on gpu-tiny: exit $? $(tail -1 "$OUT/branch/test_cuda_engine.log")"
    fi
    [ -f "$d/READY" ] || { echo "branch: no full-size package ($d/READY)"; return 0; }
    "$src/build-gpu/g4cu" compare "$d/f16" "$d/dumps/len16.npz" --backend cuda --tol-from "$d/dumps16/len16.npz" >"$OUT/branch/e2b_compare_cuda.txt" 2>&1
    echo "branch e2b compare cuda vs HF fp32: exit $? $(tail -1 "$OUT/branch/e2b_compare_cuda.txt")"
    "$src/build-gpu/g4cu" bench "$d/f16" "$d/q4" --reps 5 --json "$OUT/branch/e2b_bench.json" 2>&1 | tee "$OUT/branch/e2b_bench.txt" | cut -c1-700
}

# Kernel test programs, each "PROGRAM ARGS" under build-gpu/tests with its log in
# $OUT/PREFIX_<words>.log: the exit code, case count and last line, and any failure lines.
kernel_tests() {
    local prefix=$1 t log
    shift
    for t in "$@"; do
        log=${t// /_}
        log="$OUT/${prefix}_${log//\//_}.log" # (an --op filter may hold a '/')
        timeout 480 build-gpu/tests/$t >"$log" 2>&1
        echo "$t: exit $? ($(grep -c '^case' "$log") cases) $(tail -1 "$log")"
        grep -E "FAIL|error|CUDA" "$log" | head -8
    done
}

# The GPU tests that failed or changed after a call's ctest, rerun alone (after build): the block
# ops of test_backend_ops on CUDA (the persistent MLP at several shapes on one workspace) and the
# decode attention's tests.
stage_recheck() {
    kernel_tests recheck "test_backend_ops --backend cuda --op mlp_block" "test_cuda_attention --op attn_decode"
    return 0 # (each run's exit is printed above; kernel_tests ends with a grep's status)
}

stage_prefill() {
    kernel_tests prefill "test_cuda_gemm --op wgmma" "test_cuda_gemm --op q4" \
        "test_cuda_attention --op attn_prefill"
    build-gpu/g4cu bench --kernels --filter wgmma --reps 30 --json "$OUT/prefill_kbench_gemm.json" >"$OUT/prefill_kbench_gemm.txt" 2>&1
    echo "bench --kernels --filter wgmma: exit $?"; cut -c1-160 "$OUT/prefill_kbench_gemm.txt"
    build-gpu/g4cu bench --kernels --filter attn_prefill --reps 20 --json "$OUT/prefill_kbench_attn.json" >"$OUT/prefill_kbench_attn.txt" 2>&1
    echo "bench --kernels --filter attn_prefill: exit $?"; cut -c1-160 "$OUT/prefill_kbench_attn.txt"
}

# Issue 29's GEMV run (after build), stage gemv = gemv_check + gemv_rows. gemv_check: the GEMV
# test cases (test_cuda_gemm --op q4 / --op f16, every case of those ops: GEMV, forced streaming
# plans, the third design's cases, prefill), the add-norm GEMVs with the third design forced
# (G4_GEMV=v3 test_backend_ops --op add_norm_linear), then both again under each plan knob of
# GEMV_CHECK_ENVS. gemv_rows: the decode GEMV kernel rows twice for each variant of
# GEMV_VARIANTS (default: the earlier kernel G4_GEMV=v1, the streaming one v2, the third design
# v3, and the automatic choice, which mixes them by shape), each "NAME:ENV,ENV..".
stage_gemv_check() {
    kernel_tests gemv "test_cuda_gemm --op q4" "test_cuda_gemm --op f16"
    G4_GEMV=v3 timeout 300 build-gpu/tests/test_backend_ops --op add_norm_linear \
        >"$OUT/gemv_v3_add_norm.log" 2>&1
    echo "G4_GEMV=v3 test_backend_ops --op add_norm_linear: exit $? $(tail -1 "$OUT/gemv_v3_add_norm.log")"
    grep -E "FAIL|error|CUDA" "$OUT/gemv_v3_add_norm.log" | head -8
    # the plan knobs' correctness (GEMV_CHECK_ENVS: each a VAR=VALUE[,VAR=VALUE] list, read once
    # by the process, so each runs the GEMV cases and the prologue path under it)
    local ce
    for ce in ${GEMV_CHECK_ENVS:-}; do
        env ${ce//,/ } timeout 300 build-gpu/tests/test_cuda_gemm --op /gemv >"$OUT/gemv_check_${ce//[=,]/_}.log" 2>&1
        echo "$ce test_cuda_gemm --op /gemv (q4 and f16): exit $? $(tail -1 "$OUT/gemv_check_${ce//[=,]/_}.log")"
        env ${ce//,/ } timeout 300 build-gpu/tests/test_backend_ops --backend cuda --op add_norm_linear >"$OUT/gemv_check_an_${ce//[=,]/_}.log" 2>&1
        echo "$ce test_backend_ops --op add_norm_linear: exit $? $(tail -1 "$OUT/gemv_check_an_${ce//[=,]/_}.log")"
        grep -hE "FAIL|error" "$OUT/gemv_check_${ce//[=,]/_}.log" "$OUT/gemv_check_an_${ce//[=,]/_}.log" | head -5
    done
    return 0 # (each run's exit is printed above; the last grep finding nothing is not a failure)
}

stage_gemv_rows() {
    local variants=${GEMV_VARIANTS:-"v1:G4_GEMV=v1 v2:G4_GEMV=v2 v3:G4_GEMV=v3 auto:G4_GEMV=auto"}
    local v name envs rep
    for rep in 1 2; do
        for v in $variants; do
            name=${v%%:*}
            envs=${v#*:}
            env ${envs//,/ } build-gpu/g4cu bench --kernels --filter gemv --reps 30 \
                --json "$OUT/gemv_${name}_$rep.json" >"$OUT/gemv_${name}_$rep.txt" 2>&1
            echo "=== gemv rows, $name ($envs), run $rep: exit $?"
            grep -E "gemv_(q4|f16)|glu_(q4|f16)(mma)?_gemv" "$OUT/gemv_${name}_$rep.txt" | cut -c1-140
        done
    done
}

stage_gemv() {
    stage_gemv_check
    stage_gemv_rows
}

# Issue 29, the tensor-core fp16 GEMV (after build; the usage above).
stage_f16mma() {
    kernel_tests f16mma "test_cuda_gemm --op f16"
    local op log m
    G4_GEMV_F16=fma timeout 480 build-gpu/tests/test_cuda_gemm --op f16 >"$OUT/f16mma_env_test_cuda_gemm.log" 2>&1
    echo "G4_GEMV_F16=fma test_cuda_gemm --op f16: exit $? ($(grep -c '^case' "$OUT/f16mma_env_test_cuda_gemm.log") cases) $(tail -1 "$OUT/f16mma_env_test_cuda_gemm.log")"
    grep -E "FAIL|error|CUDA" "$OUT/f16mma_env_test_cuda_gemm.log" | head -8
    for m in mma fma; do
        for op in linear linear_gelu_mul add_norm_linear; do
            log="$OUT/f16mma_backend_ops_${m}_$op.log"
            G4_GEMV_F16=$m G4_GEMV_F16_NORM=$m timeout 300 build-gpu/tests/test_backend_ops --backend cuda --op $op >"$log" 2>&1
            echo "G4_GEMV_F16=$m test_backend_ops --op $op (cuda): exit $? $(tail -1 "$log")"
            grep -E "FAIL|error" "$log" | head -5
        done
    done
    GEMV_VARIANTS=${GEMV_VARIANTS:-"landed:X=1 fma:G4_GEMV_F16=fma"} stage_gemv_rows
    return 0 # (each run's exit is printed above)
}

# Issue 29, the tensor-core fp16 GEMV's plan knobs (after build; the usage above). The knobs are
# read once a process, so each setting is its own bench run; the shape column of a row carries
# the plan it ran (S warps, CS CTAs a cluster, grid) or "cuda-core" where the setting left the
# shape to the CUDA-core kernel (x past 64 KB a CTA).
stage_gvm_sweep() {
    local ce log v name envs names=""
    # (GVM_TEST_OP narrows the cases, e.g. f16/gemv; the knobs move only the GEMV's)
    for ce in G4_GVM_SPLIT_MAX=1,G4_GVM_CPS=1 G4_GVM_SPLIT_MAX=64,G4_GVM_CPS=1; do
        log="$OUT/gvm_sweep_test_${ce//[=,]/_}.log"
        env G4_GEMV_F16=mma ${ce//,/ } timeout 240 build-gpu/tests/test_cuda_gemm --op "${GVM_TEST_OP:-f16}" >"$log" 2>&1
        echo "G4_GEMV_F16=mma $ce test_cuda_gemm --op ${GVM_TEST_OP:-f16}: exit $? ($(grep -c '^case' "$log") cases) $(tail -1 "$log")"
        grep -E "FAIL|error|CUDA" "$log" | head -8
    done
    log="$OUT/gvm_sweep_test_invalid.log"
    G4_GEMV_F16=mma G4_GVM_SPLIT_MAX=3 timeout 60 build-gpu/tests/test_cuda_gemm --op f16/gemv --shape "M=1 N=8 K=8 " >"$log" 2>&1
    echo "G4_GVM_SPLIT_MAX=3 (invalid): exit $? (expected 1), $(grep -c 'G4_GVM_SPLIT_MAX=3: expected' "$log") lines naming it (expected >= 1)"
    local settings=${GVM_SWEEP:-"def:X=1 m4:G4_GVM_SPLIT_MAX=4 m8:G4_GVM_SPLIT_MAX=8 m16:G4_GVM_SPLIT_MAX=16 m32:G4_GVM_SPLIT_MAX=32 c1:G4_GVM_CPS=1 c2:G4_GVM_CPS=2 c1m8:G4_GVM_CPS=1,G4_GVM_SPLIT_MAX=8 c1m16:G4_GVM_CPS=1,G4_GVM_SPLIT_MAX=16 a66:G4_GVM_MIN_CTAS=66 c4a264:G4_GVM_CPS=4,G4_GVM_MIN_CTAS=264"}
    for v in $settings; do
        name=${v%%:*}
        envs=${v#*:}
        env ${envs//,/ } timeout 120 build-gpu/g4cu bench --kernels --filter f16mma --reps 20 \
            --json "$OUT/gvm_sweep_$name.json" >"$OUT/gvm_sweep_$name.txt" 2>&1
        echo "gvm_sweep $name ($envs): exit $?"
        names="$names $name"
    done
    python3 - "$OUT" $names <<'PY'
import json, math, os, re, sys
out, names = sys.argv[1], sys.argv[2:]
runs, plans, base = {}, {}, {}
for n in names:
    f = f"{out}/gvm_sweep_{n}.json"
    if not os.path.exists(f):
        continue
    for r in json.load(open(f))["rows"]:
        # "M=1 N=2048 K=1536 q_proj S8 CS8 g32": the shape, then the plan it ran
        m = re.match(r"(M=\d+ N=\d+ K=\d+ \S+)\s*(.*)", r["shape"])
        key = ("glu" if r["op"].startswith("glu") else "gemv", m.group(1))
        runs.setdefault(key, {})[n] = r["median_ms"] * 1e3
        plans.setdefault(key, {})[n] = m.group(2).replace(" ", "")
        base[key] = r["baseline_ms"] * 1e3
cols = [n for n in names if any(n in v for v in runs.values())]
keys = sorted(runs, key=lambda k: (k[0], int(k[1].split()[0][2:]), k[1]))
print(f"{'op  shape (us)':36s}" + "".join(f"{n:>7s}" for n in cols) + f"{'cublas':>7s}  best (plan, vs {cols[0]}, vs cublas)")
tot = {n: 0.0 for n in cols}
rel = {n: 0.0 for n in cols}  # sum of log(time / first column's): each row weighted equally
for key in keys:
    v = runs[key]
    best = min(cols, key=lambda n: v.get(n, 1e9))
    for n in cols:
        tot[n] += v.get(n, math.nan)
        rel[n] += math.log(v.get(n, math.nan) / v.get(cols[0], math.nan))
    print(f"{key[0] + '  ' + key[1][:30]:36s}" + "".join(f"{v.get(n, math.nan):7.1f}" for n in cols)
          + f"{base[key]:7.1f}  {best} ({plans[key][best]}, {v.get(cols[0], math.nan) / v[best]:.2f}x, "
          + f"{base[key] / v[best]:.2f}x)")
print(f"{'sum (us)':36s}" + "".join(f"{tot[n]:7.1f}" for n in cols))
print(f"{'geomean vs ' + cols[0]:36s}" + "".join(f"{math.exp(rel[n] / len(keys)):7.3f}" for n in cols))
print(f"best one setting overall: {min(cols, key=lambda n: tot[n])} by the sum of times, "
      f"{min(cols, key=lambda n: rel[n])} by the geometric mean (rows weighted equally)")
print("the plan (S warps, CS cluster, g grid) a row ran under each setting:")
for key in keys:
    print(f"  {key[0] + '  ' + key[1][:30]:36s} " + " ".join(f"{n}={plans[key].get(n, '-')}" for n in cols))
PY
    return 0 # (each run's exit is printed above)
}

# The decode GEMMs (issues 29 and 31; after build): the wgmma and mma.sync GEMMs at M = 8 (beside
# the GEMV rows) and M = 32 (the batched decode's linears past 8 rows), each with cuBLAS's time.
stage_dgemm() {
    build-gpu/g4cu bench --kernels --filter dgemm --reps 30 --json "$OUT/dgemm.json" >"$OUT/dgemm.txt" 2>&1
    echo "bench --kernels --filter dgemm: exit $?"
    grep dgemm "$OUT/dgemm.txt" | cut -c1-150
}

# Issue 31's Q4 prefill GEMM at the serve load's row counts (after build): every Q4 wgmma case,
# the new producer depths included, then the srv_ kernel rows (M = 210, 512) twice; the rows
# force the depth per row (g4_gemm_wgmma_q4_depth), so G4_Q4_WG_DEPTH does not matter here.
stage_q4wg() {
    stage_q4wg_check
    stage_q4wg_rows
}
stage_q4wg_check() {
    kernel_tests q4wg "test_cuda_gemm --op q4/wgmma" "test_cuda_gemm --op q4_glu/wgmma"
}
stage_q4wg_rows() {
    local rep
    for rep in 1 2; do
        build-gpu/g4cu bench --kernels --filter srv_ --reps 30 --json "$OUT/q4wg_$rep.json" \
            >"$OUT/q4wg_$rep.txt" 2>&1
        echo "=== bench --kernels --filter srv_, run $rep: exit $?"
        grep -E "^srv_" "$OUT/q4wg_$rep.txt" | cut -c1-150
    done
}

# Issues 31 / 29, the skinny path (after build; e2b_make for the full-size half): the batched
# decode's linears at 8 < M <= 64 on the mma.sync GEMMs with K split over a cluster. First the
# kernels' cases (test_cuda_gemm --op skinny; --op mma and --op auto: the prefill kernels and
# AUTO's choices run the same code), the PDL rule on the SASS, test_backend_ops' linear cases on
# CUDA (AUTO at T = 16..33); then on the full-size package the batch step at 16 and 32 rows
# with G4_SKINNY=0 (the prefill GEMMs, as before) and 1, and the 32-row step's per-op split
# (G4_PROFILE=1) with the skinny path; last the dgemm kernel rows at M = 16, 32, 64 (explicit
# algorithms: the skinny rows beside mma / wgmma / cuBLAS; G4_SKINNY only moves AUTO, so one run).
stage_skinny() {
    kernel_tests skinny "test_cuda_gemm --op skinny" "test_cuda_gemm --op mma" "test_cuda_gemm --op auto"
    ctest --test-dir build-gpu -R 'test_pdl_sass|test_cuda_pdl' --output-on-failure 2>&1 | grep -E "tests passed|Failed|checked" | head -4
    timeout 300 build-gpu/tests/test_backend_ops --backend cuda --op linear >"$OUT/skinny_backend_ops.log" 2>&1
    echo "test_backend_ops --backend cuda --op linear: exit $? $(tail -1 "$OUT/skinny_backend_ops.log")"
    grep -E "FAIL" "$OUT/skinny_backend_ops.log" | head -8
    # the full-size half before the kernel rows (the longer part, SKINNY_DGEMM_M to narrow it)
    local e="$WORK/e2b" v p m
    if [ -f "$e/READY" ]; then
        for v in 0 1; do
            G4_SKINNY=$v build-gpu/g4cu bench "$e/f16" "$e/q4" --batch-rows 16,32 --reps 2 \
                --json "$OUT/skinny_batch_$v.json" >"$OUT/skinny_batch_$v.txt" 2>&1
            echo "G4_SKINNY=$v bench --batch-rows 16,32: exit $?"
            grep -E "batch rows|rror" "$OUT/skinny_batch_$v.txt" | sed "s/^/G4_SKINNY=$v: /"
        done
        # fp16 at 2..8 rows: its GEMV (0.4-0.6x cuBLAS at M = 8) against the skinny path there
        for v in 9 2; do
            G4_SKINNY_F16_MIN=$v build-gpu/g4cu bench "$e/f16" --batch-rows 2,4,8 --reps 2 \
                >"$OUT/skinny_f16min_$v.txt" 2>&1
            grep -E "batch rows|rror" "$OUT/skinny_f16min_$v.txt" | sed "s/^/G4_SKINNY_F16_MIN=$v: /"
        done
        for p in q4 f16; do
            G4_PROFILE=1 build-gpu/g4cu bench "$e/$p" --batch-rows 32 --reps 1 >"$OUT/skinny_profile_$p.txt" 2>&1
            echo "G4_PROFILE=1 $p --batch-rows 32: exit $?"
            grep -A18 "batch step of 32 rows" "$OUT/skinny_profile_$p.txt" | head -20
        done
    else
        echo "skinny: no full-size package ($e/READY missing): end-to-end half skipped"
    fi
    # the dgemm rows at M > 8 (filter "M=16 N" etc. selects exactly them): skinny, mma, wgmma,
    # cuBLAS side by side
    for m in ${SKINNY_DGEMM_M:-8 16 32 64}; do
        timeout 280 build-gpu/g4cu bench --kernels --filter "M=$m N" --reps 20 \
            --json "$OUT/skinny_dgemm_M$m.json" >"$OUT/skinny_dgemm_M$m.txt" 2>&1
        echo "bench --kernels --filter 'M=$m N': exit $?"
        grep -E "^dgemm" "$OUT/skinny_dgemm_M$m.txt" | cut -c1-150
    done
}

# Issue 29's end-to-end figures (after e2b_make, or e2b_wait): compare CUDA vs HF (f16, Q4),
# bench f16 + Q4 (--reps 5) with the earlier GEMV (G4_GEMV=v1) and the streaming one, then
# generate vs bench (the user path, 3 runs a package) and the per-op split of a decode step.
stage_e2b_gemv() {
    local d="$WORK/e2b"
    [ -f "$d/READY" ] || { echo "e2b_gemv: no package ($d/READY missing)"; return 1; }
    cp "$d/inspect.txt" "$OUT/e2b_inspect.txt" 2>/dev/null
    build-gpu/g4cu compare "$d/f16" "$d/dumps/len16.npz" --backend cuda --tol-from "$d/dumps16/len16.npz" >"$OUT/e2b_compare_cuda.txt" 2>&1
    echo "e2b compare cuda vs HF fp32 (tolerance 3x HF fp16's error): exit $? $(tail -1 "$OUT/e2b_compare_cuda.txt")"
    build-gpu/g4cu compare "$d/q4" "$d/dumps/len16.npz" --backend cuda >"$OUT/e2b_compare_cuda_q4.txt" 2>&1
    echo "e2b Q4 compare cuda vs HF(f16) (fidelity): exit $? $(grep KL "$OUT/e2b_compare_cuda_q4.txt")"
    G4_GEMV=v1 build-gpu/g4cu bench "$d/f16" "$d/q4" --reps 5 --json "$OUT/e2b_bench_v1.json" >"$OUT/e2b_bench_v1.txt" 2>&1
    echo "=== bench, G4_GEMV=v1: exit $?"; grep -iE "decode|prefill 512|ttft" "$OUT/e2b_bench_v1.txt" | head -20
    build-gpu/g4cu bench "$d/f16" "$d/q4" --reps 5 --json "$OUT/e2b_bench.json" >"$OUT/e2b_bench.txt" 2>&1
    echo "=== bench, streaming GEMV: exit $?"; grep -iE "decode|prefill 512|ttft" "$OUT/e2b_bench.txt" | head -20
    e2b_generate_vs_bench "$d"
    G4_PROFILE=1 build-gpu/g4cu bench "$d/f16" "$d/q4" --reps 1 2>&1 | grep -v "^pkg\|^  *(" >"$OUT/e2b_profile.txt"
    grep -iE "gemv|linear|total|step" "$OUT/e2b_profile.txt" | head -30
}

# e2b_switch_ab VAR NAME WHAT: an on/off switch A/B on the full-size package ($WORK/e2b): greedy
# generate tokens with VAR=0 and VAR=1 (Q4 and f16, 128 tokens: equal where the logits' top-2 gap
# exceeds the rounding difference), bench f16 + Q4 --reps 5 both ways, the eager per-op profile
# of Q4 both ways; files $OUT/NAME_*.
# Greedy generate of 128 tokens after the same 128 prompt ids on the full-size Q4 and f16
# packages with VAR=0 and VAR=1 ($OUT/NAME_gen_<pkg>_<v>.json), and the first token where the two
# differ, with both runs' decode rate: e2b_greedy_ab VAR NAME WHAT.
e2b_greedy_ab() {
    local var=$1 name=$2 what=$3 e="$WORK/e2b" ids p v
    ids=$(python3 -c "print(','.join(str(3 + (i * 7919) % 262000) for i in range(128)))")
    for p in q4 f16; do
        for v in 0 1; do
            env "$var=$v" build-gpu/g4cu generate "$e/$p" --backend cuda --ids "$ids" --max-new 128 \
                --ignore-eos --json >"$OUT/${name}_gen_${p}_$v.json" 2>&1
        done
        python3 - "$OUT/${name}_gen_${p}_0.json" "$OUT/${name}_gen_${p}_1.json" "$name $p" "$what" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
ta, tb = a["tokens"], b["tokens"]
same = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), len(ta))
print(f"{sys.argv[3]}: greedy tokens {sys.argv[4]} for the first {same} of {len(ta)}; "
      f"decode {a['decode_tok_s']:.1f} -> {b['decode_tok_s']:.1f} tok/s")
PY
    done
}

e2b_switch_ab() {
    local var=$1 name=$2 what=$3 e="$WORK/e2b" v
    e2b_greedy_ab "$var" "$name" "$what"
    for v in 0 1; do
        env "$var=$v" build-gpu/g4cu bench "$e/f16" "$e/q4" --reps 5 --json "$OUT/${name}_bench_$v.json" >"$OUT/${name}_bench_$v.txt" 2>&1
        echo "=== bench $var=$v: exit $?"; grep -iE "weights|decode" "$OUT/${name}_bench_$v.txt" | head -6 | cut -c1-400
    done
    for v in 0 1; do
        env "$var=$v" G4_PROFILE=1 build-gpu/g4cu bench "$e/q4" --reps 1 2>&1 | grep -v "^pkg\|^  *(" >"$OUT/${name}_profile_$v.txt"
        echo "=== profile $var=$v"; grep -A14 "decode step, eager" "$OUT/${name}_profile_$v.txt" | head -16
    done
}

# Issue 30 stage 1, the consumer-side fusion (G4_FUSE=1; after build, tiny, and e2b_make
# for the full-size half): the fused add-norm GEMV against the naive op (test_backend_ops
# --op add_norm_linear on CUDA), test_cuda_engine on gpu-tiny with the fusion on (graph == eager,
# CUDA vs the CPU reference, 0 allocations), then on the full-size package: greedy tokens of
# generate fused vs unfused (Q4 and f16, 128 tokens: equal where the logits' top-2 gap exceeds
# the reduction-order difference), bench --reps 5 both ways and the fused per-op profile.
stage_fuse() {
    local d="$WORK/gpu-tiny" e="$WORK/e2b"
    build-gpu/tests/test_backend_ops --backend cuda --op add_norm_linear >"$OUT/fuse_backend_ops.log" 2>&1
    echo "test_backend_ops --op add_norm_linear (cuda): exit $?"
    grep -E "FAIL|cases|checks" "$OUT/fuse_backend_ops.log" | tail -12
    build-gpu/tests/test_backend_ops --break --backend cuda --op add_norm_linear 2>&1 | tail -1
    # (the fusion is the default, which the tiny stage's test_cuda_engine runs: here without it)
    G4_FUSE=0 G4_GPU_TINY_PKG="$d/f16" G4_GPU_TINY_Q4="$d/q4" build-gpu/tests/test_cuda_engine 2>&1 |
        tee "$OUT/fuse_cuda_engine.log" | grep -E "decode:|old path|sampled|interleaved|allocations|checks|FAIL" | tail -24
    [ -f "$e/READY" ] || { echo "fuse: no full-size package ($e/READY missing): the e2b half skipped"; return 0; }
    e2b_switch_ab G4_FUSE fuse "fused == unfused"
}

# Issue 30 stage 1, q|k|v as one GEMV in a one-token forward (G4_QKV=0 turns it off; after build,
# tiny, and e2b_make for the full-size half): the E2B q|k|v shapes (N 2560, 5120) of
# add_norm_linear and linear on CUDA against the naive op, test_cuda_engine on gpu-tiny with it on
# and off (graph == eager, CUDA vs the CPU reference, 0 allocations), then on the full-size
# package: greedy tokens of generate with G4_QKV=0 and the default (Q4 and f16, 128 tokens: equal
# where the logits' top-2 gap exceeds the GEMV's reduction-order difference), bench --reps 5
# both ways (the weights line says what the copies add) and the per-op profile (launches a step).
stage_qkv() {
    local d="$WORK/gpu-tiny" e="$WORK/e2b"
    for op in add_norm_linear linear; do
        build-gpu/tests/test_backend_ops --backend cuda --op $op >"$OUT/qkv_backend_ops_$op.log" 2>&1
        echo "test_backend_ops --op $op (cuda): exit $?"
        grep -E "FAIL|2560|5120" "$OUT/qkv_backend_ops_$op.log" | head -12
        tail -2 "$OUT/qkv_backend_ops_$op.log"
    done
    for q in 1 0; do
        G4_QKV=$q G4_GPU_TINY_PKG="$d/f16" G4_GPU_TINY_Q4="$d/q4" build-gpu/tests/test_cuda_engine 2>&1 |
            tee "$OUT/qkv_cuda_engine_$q.log" | grep -E "decode:|old path|sampled|interleaved|allocations|checks|FAIL" | tail -24
        echo "=== test_cuda_engine G4_QKV=$q: exit ${PIPESTATUS[0]}"
    done
    [ -f "$e/READY" ] || { echo "qkv: no full-size package ($e/READY missing): the e2b half skipped"; return 0; }
    e2b_switch_ab G4_QKV qkv "q|k|v == separate"
}

# Issue 30: the launch floor (a kernel that only waits and triggers, 64 to a graph: 1 CTA, one
# and two an SM, a 2-CTA cluster, and without PDL), what each of the step's launches costs.
stage_quant_time() { # the parts of `quantize --method gptq|fit|gptq_imx` per linear (bench/NOTES.md)
    local shape
    : >"$OUT/quant_time.txt"
    for shape in "6144 768" "768 6144" "3072 768"; do
        # shellcheck disable=SC2086 # "K N"
        build-gpu/tests/bench_quant_methods $shape 2048 "$(nproc)" >>"$OUT/quant_time.txt" 2>&1 ||
            echo "bench_quant_methods $shape: FAILED"
    done
    cat "$OUT/quant_time.txt"
}

stage_floor() {
    build-gpu/g4cu bench --kernels --filter _floor --reps 30 >"$OUT/floor.txt" 2>&1
    echo "bench --kernels --filter _floor: exit $?"
    grep -E "launch_floor|post_wait_floor" "$OUT/floor.txt" | cut -c1-130
}

# `bench --kernels --filter FILTER --reps 30` twice into $OUT/BASE_{1,2}.{txt,json} (each under
# timeout SECONDS), each run's exit and its lines that `grep GREP_ARGS...` keeps; a failed run's
# last lines too (a trap's device printf may never reach stdout: the CUDA error is the last lines).
kbench_twice() {
    local filter=$1 base=$2 secs=$3 r rc
    shift 3
    for r in 1 2; do
        timeout "$secs" build-gpu/g4cu bench --kernels --filter "$filter" --reps 30 \
            --json "$OUT/${base}_$r.json" >"$OUT/${base}_$r.txt" 2>&1
        rc=$?
        echo "=== bench --kernels --filter $filter (run $r): exit $rc"
        grep "$@" "$OUT/${base}_$r.txt" | cut -c1-230
        [ $rc = 0 ] || tail -3 "$OUT/${base}_$r.txt" | cut -c1-200
    done
}

# Issue 30 stage 2 (bench/NOTES.md "What one on-device hand-over costs"; after build).
stage_handover() {
    ctest --test-dir build-gpu -R "test_pdl_sass|test_handover_plan" 2>&1 | grep -E "tests passed|Failed|\*\*\*"
    kbench_twice handover handover 300 -E "handover|FAIL|trapping|refused"
    stage_floor
}

# Issue 30 (bench/NOTES.md "The persistent skeleton of the decode step"; after build).
stage_stepskel() {
    timeout 300 build-gpu/tests/test_cuda_step_skel >"$OUT/stepskel_test.log" 2>&1
    echo "test_cuda_step_skel: exit $? ($(tail -1 "$OUT/stepskel_test.log"))"
    grep -E "FAIL|trapping|co-resident|counters as expected" "$OUT/stepskel_test.log" | cut -c1-200 | head -30
    kbench_twice stepskel stepskel 300 -E "stepskel |FAIL|trapping|refused"
    echo "=== the stamped steps (run 1; every line in $OUT/stepskel_1.txt)"
    grep -E "stepskel-tl .*(without stamps|span|critical path|path a layer|after the layers|path by op)" \
        "$OUT/stepskel_1.txt" | cut -c1-330
    echo "=== the CPU cost model's prediction of the plans (engine/step_cost.h)"
    timeout 120 build-gpu/g4cu bench --step-model >"$OUT/stepskel_model.txt" 2>&1
    echo "bench --step-model: exit $?"
    grep -E "^step-model (bench plan|math rows|math a path unit|math plan)|^s32 plan" \
        "$OUT/stepskel_model.txt" | cut -c1-330
}

# Issue 30 stage 1, the head preparation inside the decode attention (default: the batch rows
# only; G4_FUSE_ATTN=0 off everywhere, =1 on everywhere; after build, tiny; e2b_make for the
# full-size half): test_backend_ops on CUDA for the fused ops (vs the naive and bit-equal to
# qkv_prep + attention) and the changed qkv_prep grid, --break; test_cuda_engine off and on
# everywhere; on the full-size package greedy generate tokens with it off and on (equal bits: all
# 128 tokens must agree), and the bench of the two (FATTN_BENCH=0 skips).
stage_fattn() {
    local d="$WORK/gpu-tiny" e="$WORK/e2b" op v
    for op in qkv_attention qkv_prep attention; do
        build-gpu/tests/test_backend_ops --backend cuda --op $op >"$OUT/fattn_backend_ops_$op.log" 2>&1
        echo "test_backend_ops --op $op (cuda): exit $? $(tail -1 "$OUT/fattn_backend_ops_$op.log")"
        grep -E "FAIL|differ" "$OUT/fattn_backend_ops_$op.log" | head -12
    done
    build-gpu/tests/test_backend_ops --break --backend cuda --op qkv_attention 2>&1 | tail -1
    # (the default fuses the batch rows only: here off everywhere, and on everywhere)
    for v in 0 1; do
        G4_FUSE_ATTN=$v G4_GPU_TINY_PKG="$d/f16" G4_GPU_TINY_Q4="$d/q4" build-gpu/tests/test_cuda_engine 2>&1 |
            tee "$OUT/fattn_cuda_engine_$v.log" | grep -E "checks|FAIL" | tail -8
    done
    [ -f "$e/READY" ] || { echo "fattn: no full-size package ($e/READY missing): the e2b half skipped"; return 0; }
    e2b_greedy_ab G4_FUSE_ATTN fattn "fused == unfused"
    [ "${FATTN_BENCH:-1}" = 1 ] || return 0
    for v in 0 1; do
        G4_FUSE_ATTN=$v build-gpu/g4cu bench "$e/f16" "$e/q4" --reps 3 --json "$OUT/fattn_bench_$v.json" >"$OUT/fattn_bench_$v.txt" 2>&1
        echo "=== bench G4_FUSE_ATTN=$v: exit $?"; grep -E "^(f16|q4) " "$OUT/fattn_bench_$v.txt" | sed -E 's/\| prefill 128.*TTFT\(128\)/| TTFT(128)/' | cut -c1-300
    done
}

# The decode attention's kernel rows twice (bench --kernels --filter attn_decode: every form),
# into $OUT/PREFIX_bench_{1,2}.{txt,json}.
attn_decode_rows() {
    kbench_twice attn_decode "$1_bench" 300 -E "^attn_decode"
}

# Issue 30: the split-KV merge inside the decode attention's split kernel (G4_ATTN_MERGE=cluster;
# after build, tiny): test_cuda_attention's decode cases (each with the merge kernel and with the
# merge inside: path and ticket checks), the attention ops of test_backend_ops and
# test_cuda_engine under it, then the decode kernel rows of both forms twice.
stage_amerge() {
    local d="$WORK/gpu-tiny" op
    timeout 300 build-gpu/tests/test_cuda_attention --op attn_decode >"$OUT/amerge_attention.log" 2>&1
    echo "test_cuda_attention --op attn_decode: exit $? $(tail -1 "$OUT/amerge_attention.log")"
    grep -E "FAIL" "$OUT/amerge_attention.log" | head -12
    for m in cluster global; do
        for op in attention qkv_attention; do
            G4_ATTN_MERGE=$m timeout 300 build-gpu/tests/test_backend_ops --backend cuda --op $op >"$OUT/amerge_backend_ops_${m}_$op.log" 2>&1
            echo "G4_ATTN_MERGE=$m test_backend_ops --op $op (cuda): exit $? $(tail -1 "$OUT/amerge_backend_ops_${m}_$op.log")"
            grep -E "FAIL|differ" "$OUT/amerge_backend_ops_${m}_$op.log" | head -8
        done
    done
    if [ -d "$d/f16" ]; then
        # the default (auto) with the long-range bound at 8 keys: the decode steps past 8 keys
        # replay the engine's second graph (merge inside on the full layers), graph == eager
        G4_ATTN_MERGE_LONG=8 G4_GPU_TINY_PKG="$d/f16" G4_GPU_TINY_Q4="$d/q4" timeout 500 build-gpu/tests/test_cuda_engine 2>&1 |
            tee "$OUT/amerge_cuda_engine_long8.log" | grep -E "decode:|checks|FAIL" | tail -8
        echo "=== test_cuda_engine G4_ATTN_MERGE_LONG=8 (auto): exit ${PIPESTATUS[0]}"
        for f in 0 1; do # G4_FUSE_ATTN=1: the PREP kernels' one-token form merges inside too
            G4_ATTN_MERGE=cluster G4_FUSE_ATTN=$f G4_GPU_TINY_PKG="$d/f16" G4_GPU_TINY_Q4="$d/q4" timeout 500 build-gpu/tests/test_cuda_engine 2>&1 |
                tee "$OUT/amerge_cuda_engine_fuse$f.log" | grep -E "decode:|checks|FAIL" | tail -8
            echo "=== test_cuda_engine G4_ATTN_MERGE=cluster G4_FUSE_ATTN=$f: exit ${PIPESTATUS[0]}"
        done
    else
        echo "amerge: no gpu-tiny package ($d/f16): test_cuda_engine skipped"
    fi
    attn_decode_rows amerge
}

# Issue 30: the head preparation one CTA a head vector (G4_QKV_PREP_CTAS=1; after build, tiny).
stage_qprep() {
    local d="$WORK/gpu-tiny" op
    G4_QKV_PREP_CTAS=1 timeout 300 build-gpu/tests/test_cuda_ops --op qkv_rope >"$OUT/qprep_cuda_ops_qkv.log" 2>&1
    echo "G4_QKV_PREP_CTAS=1 test_cuda_ops --op qkv_rope: exit $? $(tail -1 "$OUT/qprep_cuda_ops_qkv.log")"
    grep -E "FAIL" "$OUT/qprep_cuda_ops_qkv.log" | head -8
    for op in qkv_prep qkv_attention; do
        G4_QKV_PREP_CTAS=1 timeout 300 build-gpu/tests/test_backend_ops --backend cuda --op $op >"$OUT/qprep_backend_ops_$op.log" 2>&1
        echo "G4_QKV_PREP_CTAS=1 test_backend_ops --op $op (cuda): exit $? $(tail -1 "$OUT/qprep_backend_ops_$op.log")"
        grep -E "FAIL|differ" "$OUT/qprep_backend_ops_$op.log" | head -8
    done
    [ -d "$d/f16" ] || { echo "qprep: no gpu-tiny package ($d/f16): test_cuda_engine skipped"; return 0; }
    G4_QKV_PREP_CTAS=1 G4_GPU_TINY_PKG="$d/f16" G4_GPU_TINY_Q4="$d/q4" timeout 500 build-gpu/tests/test_cuda_engine 2>&1 |
        tee "$OUT/qprep_cuda_engine.log" | grep -E "decode:|checks|FAIL" | tail -8
    echo "=== test_cuda_engine G4_QKV_PREP_CTAS=1: exit ${PIPESTATUS[0]}"
}

# Issue 30: each kernel's own duration in Q4 / f16 decode steps (after e2b_make), under Nsight
# Compute (kernels serialized: no PDL overlap, so the sum over a step against the step's graph
# time is the launch and dependency cost). generate of 4 tokens after a 16-token prompt.
stage_ncu_step() {
    local e="$WORK/e2b" ncu p ids
    [ -f "$e/READY" ] || { echo "ncu_step: no full-size package ($e/READY missing)"; return 1; }
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    [ -n "$ncu" ] || { echo "ncu_step: no ncu"; return 1; }
    ids=$(python3 -c "print(','.join(str(3 + (i * 7919) % 262000) for i in range(16)))")
    for p in ${NCU_PKGS:-q4 f16}; do
        timeout 240 "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv \
            --log-file "$OUT/ncu_step_$p.csv" build-gpu/g4cu generate "$e/$p" --backend cuda \
            --ids "$ids" --max-new 4 --ignore-eos >"$OUT/ncu_step_$p.log" 2>&1
        echo "ncu $p: exit $? ($(wc -l <"$OUT/ncu_step_$p.csv") csv lines)"
        python3 tools/gpu/ncu_step.py "$OUT/ncu_step_$p.csv" | head -40
    done
}

# Issue 29: why the Q4 GEMV streams its large shapes at 30-47% of copy: Nsight Compute metrics of
# the GEMV kernels alone (after build; no package): for each shape of NCU_GEMV_SHAPES, `bench
# --kernels --filter SHAPE --reps 1` under ncu, the kernels matching NCU_GEMV_KERNELS (default the
# Q4 GEMVs: gemv_q4), each launch's duration, DRAM and SM throughput, achieved
# occupancy, issue-slot use, instructions and the warp stall reasons per issued instruction, one
# csv per shape, summarised by tools/gpu/ncu_gemv.py. ncu serializes kernels and flushes caches
# between them (--cache-control all): each row is the kernel alone with cold weights, no PDL overlap.
# At most NCU_GEMV_LAUNCHES (300) launches a shape: a small weight's bench row replays its kernel
# up to 64 x 5 times, and q_proj's rows (the add-norm ones too) passed 150 s without the cap.
stage_ncu_gemv() {
    local ncu s
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    [ -n "$ncu" ] || { echo "ncu_gemv: no ncu"; return 1; }
    local m="gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
    m+=",dram__bytes_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed"
    m+=",sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active"
    m+=",smsp__inst_executed.sum,launch__registers_per_thread,launch__grid_size,launch__block_size"
    local r
    for r in long_scoreboard short_scoreboard mio_throttle lg_throttle math_pipe_throttle wait \
        barrier membar not_selected selected dispatch_stall no_instruction branch_resolving \
        tex_throttle drain sleeping misc imc_miss; do
        m+=",smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
    done
    for s in ${NCU_GEMV_SHAPES:-gate_up_wide down_wide lm_head q_proj}; do
        timeout 150 "$ncu" --clock-control none --cache-control all --metrics "$m" --csv \
            -k "regex:${NCU_GEMV_KERNELS:-gemv_q4}" --launch-count "${NCU_GEMV_LAUNCHES:-300}" --log-file "$OUT/ncu_gemv_$s.csv" \
            build-gpu/g4cu bench --kernels --filter "$s" --reps 1 >"$OUT/ncu_gemv_$s.log" 2>&1
        echo "ncu_gemv $s: exit $? ($(wc -l <"$OUT/ncu_gemv_$s.csv") csv lines)"
    done
    python3 tools/gpu/ncu_gemv.py "$OUT"/ncu_gemv_*.csv
}

# Issue 30: where a decode step's time goes in situ (after build, e2b_make). tools/gpu/kernel_trace.c
# (CUPTI, built here into $WORK/ktrace, preloaded into g4cu only) records every kernel's start
# and end as the GPU ran it, with PDL overlap (Nsight Compute's ncu_step serializes kernels; the
# kernel bench rows repeat one kernel after itself). `g4cu generate` of 128 prompt ids (ncu_step's
# formula), 64 new tokens, EOS ignored: its decode steps are replays of the graph captured at
# state creation (engine/text_decoder.c capture_step / g4_text_step: one token, no layer hook,
# not eager); G4_PROFILE=1 would not change that (its events skip captures; only bench's own
# eager pass is profiled) and is not set. tools/python/ktrace_step.py cuts the graph's kernels
# into launches, drops 2 warm-up steps, divides a step into layers. Lines to read, per package:
#   "ktrace <p>: decode <t> tok/s traced (<ms> ms a token), <u> untraced": the tracer's own cost
#     (the step figures below are the traced ones);
#   "step wall ... mean / median" (a Q4 step: ~1.63 ms untraced) and "kernels a step";
#   "per kernel name, a step": n a step, in-situ dur, gap (< 0: started under its predecessor,
#     PDL), idle (no kernel running before it), crit (how far it pushed the step's end), share;
#   "a layer: mean ... us" against the ~31 us of the kernel bench rows a layer, the layer kinds,
#     "per kernel name, a layer", and the kernels that extend the step most.
# Files: ktrace_<tag>.csv.gz (the trace), .json (the analysis), .txt (all of it), .gen.json
# (generate's own JSON), ktrace_<tag>_untraced.gen.json. KTRACE_PKGS (default "q4 f16");
# KTRACE_ENV="NAME:VAR=V[,VAR=V] ..." runs each package again with those variables, tag <p>_NAME
# (e.g. "amg:G4_ATTN_MERGE=global"); KTRACE_ARGS: ktrace_step.py's options (default "--layers 35",
# E2B's layers: its sliding and full attention kernels occur 28 and 7 times, which could fool the
# detection of the layer count).
# Exit non-zero, printing the tracer's or the loader's line, when no kernel row came back (the
# library not preloaded, CUPTI refused, e.g. in a sandbox); every run is under a timeout.
stage_ktrace() {
    local e="$WORK/e2b" ids p v rc=0
    [ -f "$e/READY" ] || { echo "ktrace: no full-size package ($e/READY missing)"; return 1; }
    [ -x build-gpu/g4cu ] || { echo "ktrace: no build-gpu/g4cu (run build)"; return 1; }
    tools/gpu/build_kernel_trace.sh "$WORK/ktrace" >"$OUT/ktrace_build.log" 2>&1 ||
        { echo "ktrace: the tracer did not build:"; tail -5 "$OUT/ktrace_build.log"; return 1; }
    head -1 "$OUT/ktrace_build.log"
    ids=$(python3 -c "print(','.join(str(3 + (i * 7919) % 262000) for i in range(128)))")
    for p in ${KTRACE_PKGS:-q4 f16}; do
        for v in "-:X=1" ${KTRACE_ENV:-}; do
            ( # the variant's variables for these runs only
                IFS=, read -r -a kvs <<<"${v#*:}"
                for kv in "${kvs[@]}"; do export "${kv?}"; done
                tag=$p
                [ "${v%%:*}" = - ] || tag=${p}_${v%%:*}
                ktrace_one "$e/$p" "$tag" "$ids"
            ) || rc=1
        done
    done
    return $rc
}

# ktrace_one PKG TAG IDS: an untraced then a traced generate, the analysis (stage_ktrace).
ktrace_one() {
    local pkg=$1 tag=$2 ids=$3 csv="$OUT/ktrace_$2.csv" r t u
    local gen=(build-gpu/g4cu generate "$pkg" --backend cuda --ids "$ids" --max-new 64 --ignore-eos --json)
    rm -f "$csv" "$csv.gz"
    timeout 180 "${gen[@]}" >"$OUT/ktrace_${tag}_untraced.gen.json" 2>"$OUT/ktrace_${tag}_untraced.err"
    r=$?
    [ $r -eq 0 ] || { echo "ktrace $tag: untraced generate exit $r"; tail -3 "$OUT/ktrace_${tag}_untraced.err"; }
    # LD_PRELOAD on g4cu alone (not on timeout): one process writes the CSV
    G4_KTRACE_OUT="$csv" timeout 240 env LD_PRELOAD="$WORK/ktrace/libg4ktrace.so" "${gen[@]}" \
        >"$OUT/ktrace_$tag.gen.json" 2>"$OUT/ktrace_$tag.err"
    r=$?
    grep -E "g4ktrace|preload" "$OUT/ktrace_$tag.err" | head -5
    if [ $r -ne 0 ]; then
        echo "ktrace $tag: traced generate exit $r (124: timed out)"; tail -3 "$OUT/ktrace_$tag.err"
        return 1
    fi
    if [ ! -s "$csv" ] || ! grep -q '^"kernel"' "$csv"; then
        echo "ktrace $tag: no kernel rows in $csv (the tracer not preloaded, or CUPTI refused: the lines above)"
        return 1
    fi
    t=$(sed -nE 's/.*"decode_tok_s":([0-9.eE+-]+).*/\1/p' "$OUT/ktrace_$tag.gen.json")
    u=$(sed -nE 's/.*"decode_tok_s":([0-9.eE+-]+).*/\1/p' "$OUT/ktrace_${tag}_untraced.gen.json")
    echo "ktrace $tag: decode ${t:-?} tok/s traced ($(python3 -c "print(f'{1e3 / $t:.3f}')" 2>/dev/null || echo ?) ms a token), ${u:-?} untraced; $(grep -c '^"kernel"' "$csv") kernel rows"
    python3 tools/python/ktrace_step.py "$csv" --json "$OUT/ktrace_$tag.json" ${KTRACE_ARGS:---layers 35} \
        >"$OUT/ktrace_$tag.txt" 2>&1
    r=$?
    head -"${KTRACE_LINES:-80}" "$OUT/ktrace_$tag.txt" | cut -c1-170
    gzip -f "$csv" # (~20 MB of names and numbers; the analyzer reads .gz too)
    [ $r -eq 0 ] || { echo "ktrace $tag: ktrace_step.py exit $r"; return 1; }
}

# Issue 30 (the usage above): the decode GEMVs with their weights L2-resident against rotated,
# the upper bound of any weight prefetch into L2.
stage_l2hot() {
    kbench_twice l2hot l2hot 300 -vE "^\[|^$"
}

# One line a case and placement of a form-rows run (`bench --kernels --json`, op OP: a row's shape
# is "CASE FORM PLACE", FORM maybe "NAME(unchecked)"): each FORM's median in us, the first FORM
# the base, then each other FORM's share of it (percent).
# form_table JSON OP FORM...
form_table() {
    python3 - "$@" <<'PY'
import json, sys
path, op, *forms = sys.argv[1:]
t = {}
for r in json.load(open(path))["rows"]:
    if r["op"] != op:
        continue
    w = r["shape"].split()
    t.setdefault((" ".join(w[:-2]), w[-1]), {})[w[-2].split("(")[0]] = r["median_ms"] * 1e3
head = " ".join(f"{k:>7s}" for k in forms)
print(f"{'case (us)':44s} {'place':8s} {head}  shares")
for (case, place), v in t.items():
    f = v.get(forms[0], 0)
    us = " ".join(f"{v.get(k, float('nan')):7.2f}" for k in forms)
    d = " ".join(f"{k} {100 * v[k] / f:.0f}%" for k in forms[1:] if k in v and f)
    print(f"{case:44s} {place:8s} {us}  {d}")
PY
}

# form_rows STAGE OP FORM...: the op's kernel rows twice ($OUT/STAGE_{1,2}), then each
# run's form_table (gemvprobe)
form_rows() {
    local stage=$1 op=$2 r
    shift 2
    kbench_twice "$op" "$stage" 400 -E "$op|skipped|error"
    for r in 1 2; do
        form_table "$OUT/${stage}_$r.json" "$op" "$@" || echo "$stage: no summary (run $r)"
    done
}

# Issue 29: where the third-design Q4 GEMV's time goes (bench/NOTES.md "gemvprobe"; after build;
# ~2 min): test_pdl_sass (the probe forms are launched through g4_pdl_launch too), then `bench
# --kernels --filter gemv_q4_probe --reps 30` twice, and per run one line a case and placement:
# full / loads / math / shell in us and each probe's share of full.
stage_gemvprobe() {
    ctest --test-dir build-gpu -R "test_pdl_sass" 2>&1 | grep -E "tests passed|Failed|\*\*\*"
    form_rows gemvprobe gemv_q4_probe full loads math shell
}

# One short call's end-to-end figures (after e2b_make): bench f16 + Q4 --reps 3 as landed (fusion,
# q|k|v, the GEMV plan), then with G4_QKV=0 and with G4_GEMV=v2 (the A/Bs of this round), and
# greedy generate tokens of the landed Q4 against G4_QKV=0.
stage_e2bq() {
    local e="$WORK/e2b"
    [ -f "$e/READY" ] || { echo "e2bq: no full-size package ($e/READY missing)"; return 1; }
    local v
    for v in ${E2BQ_VARIANTS:-landed:X=1 qkv0:G4_QKV=0 gemv2:G4_GEMV=v2}; do # (NAME:A=1,B=2)
        env $(tr , " " <<<"${v#*:}") build-gpu/g4cu bench "$e/f16" "$e/q4" --reps 3 --json "$OUT/e2bq_${v%%:*}.json" >"$OUT/e2bq_${v%%:*}.txt" 2>&1
        echo "=== bench ${v%%:*} (${v#*:}): exit $?"
        grep -E "^(f16|q4) " "$OUT/e2bq_${v%%:*}.txt" | sed -E 's/\| prefill 128.*TTFT\(128\)/| TTFT(128)/' | cut -c1-330
    done
}

# Issue 30 stage 2 (bench/NOTES.md "Issue 30 stage 2, first step"; after build, and tiny for the
# engine half): the MLP block of one token as one persistent launch (kernels/persist_mlp.cu, op
# mlp_block, G4_PERSIST_MLP=1, dynamic claims; the second design was removed in the eleventh
# session: slower and racy). test_backend_ops --op mlp_block on CUDA (vs the naive op at tiny, odd
# and E2B shapes, y written over r, run 3 times and replayed 3 times from a graph, bit-identical)
# and its --break, again with G4_PERSIST_GRID=1 and 3 (one CTA does every unit, never waiting on
# another; 3 CTAs) and G4_PERSIST_CPS=1. Then the kernel rows (beside the fused gate/up GEMV +
# the down GEMV, all graph-replayed with PDL) twice, and once each with G4_PERSIST_CPS=1,
# G4_PERSIST_PF=0 and =2 (PERSIST_VARIANTS: NAME:VAR=VALUE ...); then test_cuda_engine on
# gpu-tiny with it (graph == eager, CUDA vs the CPU reference). Every run is under a timeout: a
# kernel that waited too long traps (persist_mlp.cu), never hangs. The end-to-end A/B: the e2bq
# stage with E2BQ_VARIANTS="landed:X=1 persist:G4_PERSIST_MLP=1".
stage_persist() {
    local d="$WORK/gpu-tiny" v D=1 # (D: G4_PERSIST_MLP's design; one since the second went)
    timeout 300 env G4_PERSIST_MLP=$D build-gpu/tests/test_backend_ops --backend cuda --op mlp_block >"$OUT/persist${D}_backend_ops.log" 2>&1
    echo "test_backend_ops --op mlp_block (cuda) G4_PERSIST_MLP=$D: exit $?"
    grep -E "^case|FAIL|vs naive|rms|cases|checks|trapping" "$OUT/persist${D}_backend_ops.log" | cut -c1-150 | tail -40
    timeout 300 env G4_PERSIST_MLP=$D build-gpu/tests/test_backend_ops --break --backend cuda --op mlp_block 2>&1 | tail -1
    # smaller grids: one CTA walks every unit (no wait), 3 CTAs, one CTA an SM
    for v in G4_PERSIST_GRID=1 G4_PERSIST_GRID=3 G4_PERSIST_CPS=1; do
        env G4_PERSIST_MLP=$D $v timeout 300 build-gpu/tests/test_backend_ops --backend cuda --op mlp_block >"$OUT/persist${D}_backend_ops_$v.log" 2>&1
        echo "test_backend_ops --op mlp_block (cuda) G4_PERSIST_MLP=$D $v: exit $? $(tail -1 "$OUT/persist${D}_backend_ops_$v.log")"
        grep -E "FAIL|trapping" "$OUT/persist${D}_backend_ops_$v.log" | head -5
    done
    # twice as built, then the plans' knobs once each (PERSIST_VARIANTS)
    for v in run1:X=1 run2:X=1 ${PERSIST_VARIANTS:-cps1:G4_PERSIST_CPS=1 pf0:G4_PERSIST_PF=0 pf2:G4_PERSIST_PF=2}; do
        env ${v#*:} timeout 300 build-gpu/g4cu bench --kernels --filter persist --reps 30 >"$OUT/persist_bench_${v%%:*}.txt" 2>&1
        echo "=== bench --kernels --filter persist, ${v%%:*} (${v#*:}): exit $?"
        grep -vE "^\[|^$" "$OUT/persist_bench_${v%%:*}.txt" | cut -c1-230
    done
    [ -d "$d/f16" ] || { echo "persist: no gpu-tiny package ($d/f16): test_cuda_engine skipped"; return 0; }
    G4_PERSIST_MLP=$D G4_GPU_TINY_PKG="$d/f16" G4_GPU_TINY_Q4="$d/q4" timeout 500 build-gpu/tests/test_cuda_engine 2>&1 |
        tee "$OUT/persist${D}_cuda_engine.log" | grep -E "decode:|old path|sampled|interleaved|allocations|checks|FAIL|trapping" | tail -24
    echo "=== test_cuda_engine G4_PERSIST_MLP=$D: exit ${PIPESTATUS[0]}"
}

# Issue 30 (bench/NOTES.md "Issue 30: the PLE block as one launch"; after build, and tiny for the
# engine half): the per-layer-input block of one token as one launch of thread-block clusters
# (kernels/ple_block.cu, op ple_block, G4_PLE_FUSED=1). test_backend_ops --op ple_block on CUDA
# (vs the naive op at tiny, odd and E2B shapes, Q4 and fp16 one row fused, several rows and
# shapes outside the kernel's limits the ops apart; run 3 times and replayed 3 times from a graph,
# bit-identical) and its --break, again with G4_PLE_CLUSTERS=1 and 3 (a few clusters walk every
# projection group / unit); then the kernel rows, Q4 and fp16 (each beside its gate GEMV with
# the add-norm + the projection GEMV, graph-replayed with PDL) twice; then test_cuda_engine on
# gpu-tiny with G4_PLE_FUSED=1 (graph == eager, CUDA vs the CPU reference; its f16 package runs
# the fp16 kernel, its q4 package the Q4 one). The end-to-end A/B: the e2bq stage with
# E2BQ_VARIANTS="landed:X=1 ple:G4_PLE_FUSED=1".
stage_ple() {
    local d="$WORK/gpu-tiny" v
    timeout 300 build-gpu/tests/test_backend_ops --backend cuda --op ple_block >"$OUT/ple_backend_ops.log" 2>&1
    echo "test_backend_ops --op ple_block (cuda): exit $?"
    grep -E "^case|FAIL|vs naive|rms|cases|checks" "$OUT/ple_backend_ops.log" | cut -c1-150 | tail -60
    timeout 300 build-gpu/tests/test_backend_ops --break --backend cuda --op ple_block 2>&1 | tail -1
    for v in G4_PLE_CLUSTERS=1 G4_PLE_CLUSTERS=3; do
        env $v timeout 300 build-gpu/tests/test_backend_ops --backend cuda --op ple_block >"$OUT/ple_backend_ops_$v.log" 2>&1
        echo "test_backend_ops --op ple_block (cuda) $v: exit $? $(tail -1 "$OUT/ple_backend_ops_$v.log")"
        grep -E "FAIL" "$OUT/ple_backend_ops_$v.log" | head -5
    done
    for v in run1:X=1 run2:X=1 ${PLE_VARIANTS:-}; do
        env ${v#*:} timeout 300 build-gpu/g4cu bench --kernels --filter ple_block --reps 30 >"$OUT/ple_bench_${v%%:*}.txt" 2>&1
        echo "=== bench --kernels --filter ple_block, ${v%%:*} (${v#*:}): exit $?"
        grep -vE "^\[|^$" "$OUT/ple_bench_${v%%:*}.txt" | cut -c1-230
    done
    [ -d "$d/f16" ] || { echo "ple: no gpu-tiny package ($d/f16): test_cuda_engine skipped"; return 0; }
    G4_PLE_FUSED=1 G4_GPU_TINY_PKG="$d/f16" G4_GPU_TINY_Q4="$d/q4" timeout 500 build-gpu/tests/test_cuda_engine 2>&1 |
        tee "$OUT/ple_cuda_engine.log" | grep -E "decode:|old path|sampled|interleaved|allocations|checks|FAIL" | tail -24
    echo "=== test_cuda_engine G4_PLE_FUSED=1: exit ${PIPESTATUS[0]}"
}

# Issue 30 (bench/NOTES.md "Issue 30: the add-norm prologue's cost"; after build): the add-norm
# GEMV rows (bench_gemm.cu an_*: ours the add-norm form, base the same design with x given, so
# ours - base is the prologue), twice for the spread. ANROWS_VARIANTS adds runs, e.g.
# "norm_mma:G4_GEMV_F16_NORM=mma".
stage_anrows() {
    local v
    for v in run1:X=1 run2:X=1 ${ANROWS_VARIANTS:-}; do
        env ${v#*:} timeout 300 build-gpu/g4cu bench --kernels --filter an_ --reps 30 >"$OUT/anrows_${v%%:*}.txt" 2>&1
        echo "=== bench --kernels --filter an_, ${v%%:*} (${v#*:}): exit $?"
        grep -vE "^\[|^$" "$OUT/anrows_${v%%:*}.txt" | cut -c1-230
    done
    # the plain GEMVs with x L2-resident in their default designs, beside (the PLE gate's is v1)
    timeout 300 build-gpu/g4cu bench --kernels --filter _xl2 --reps 30 >"$OUT/anrows_xl2.txt" 2>&1
    echo "=== bench --kernels --filter _xl2: exit $?"
    grep -vE "^\[|^$" "$OUT/anrows_xl2.txt" | cut -c1-230
}

# Issue 31's batched step on CUDA (after build, tiny): test_cuda_engine on gpu-tiny (its batch
# check: the row-batched ops vs the per-row ops vs the step in a graph per row count, f16 and
# Q4), the row-batched ops' cases of test_backend_ops on CUDA (and --break), then the sample
# op over changing row counts on one workspace (test_cuda_ops --op sample). test_batch needs
# the chat fixture's vocabulary and context, which gpu-tiny lacks: its CUDA batch runs in the
# serve stage on the full-size package.
stage_batch_cuda() {
    local d="$WORK/gpu-tiny"
    [ -d "$d/f16" ] || { echo "batch_cuda: no gpu-tiny package ($d/f16): run the tiny stage first"; return 1; }
    # (BATCH_CUDA_ENGINE=0: the tiny stage of the same plan ran test_cuda_engine already)
    [ "${BATCH_CUDA_ENGINE:-1}" = 0 ] ||
        G4_GPU_TINY_PKG="$d/f16" G4_GPU_TINY_Q4="$d/q4" build-gpu/tests/test_cuda_engine 2>&1 |
        tee "$OUT/batch_cuda_engine.log" | grep -E "batch of|prompt rows|rows at scale|checks|FAIL|step [0-9] row" |
            tail -16
    for op in qkv_prep_rows attention_rows sample_rows; do
        build-gpu/tests/test_backend_ops --backend cuda --op $op >"$OUT/batch_ops_$op.log" 2>&1
        echo "test_backend_ops --op $op (cuda): exit $?"
        grep -E "FAIL|cases,|checks," "$OUT/batch_ops_$op.log" | head -12
        build-gpu/tests/test_backend_ops --break --backend cuda --op $op 2>&1 | tail -1
    done
    # the sample op on one workspace over changing row counts (the prompt-rows NaN of the
    # ninth session); test_batch itself wants the chat fixture's vocabulary, not gpu-tiny's
    build-gpu/tests/test_cuda_ops --op sample >"$OUT/batch_sample.log" 2>&1
    echo "test_cuda_ops --op sample: exit $?"
    grep -E "one workspace|FAIL|cases" "$OUT/batch_sample.log" | tail -8
}

# Issue 31's batched decode step (after e2b_make): g4cu bench --batch-rows 1,8,16,32 on the
# full-size f16 and Q4 packages (step ms, per-stream and total tok/s; each of N sequences has
# its own 128-token prompt, 128 greedy steps), the per-row calls (G4_BATCH_ROWS=0) at 32 rows for
# A/B, the step captured per row count (G4_BATCH_GRAPH=1), and the per-op split of the 32-row
# step under G4_PROFILE=1 (eager).
stage_batch_bench() {
    local e="$WORK/e2b" rows=${BATCH_BENCH_ROWS:-1,8,16,32} reps=${BATCH_BENCH_REPS:-3}
    [ -f "$e/READY" ] || { echo "batch_bench: no full-size package ($e/READY missing)"; return 1; }
    build-gpu/g4cu bench "$e/f16" "$e/q4" --batch-rows $rows --reps $reps \
        --json "$OUT/batch_bench.json" >"$OUT/batch_bench.txt" 2>&1
    echo "bench --batch-rows $rows: exit $?"
    grep -E "batch rows|wrote|rror" "$OUT/batch_bench.txt"
    # the batch step captured per row count (new, off by default): tokens must not change
    G4_BATCH_GRAPH=1 build-gpu/g4cu bench "$e/f16" "$e/q4" --batch-rows $rows --reps $reps \
        --json "$OUT/batch_bench_graph.json" 2>&1 | grep -E "batch rows|rror" |
        sed 's/^/G4_BATCH_GRAPH=1: /'
    local p
    for p in ${BATCH_BENCH_PROFILE:-q4 f16}; do
        G4_PROFILE=1 build-gpu/g4cu bench "$e/$p" --batch-rows 32 --reps 1 >"$OUT/batch_profile_$p.txt" 2>&1
        grep -A18 "batch step of 32 rows" "$OUT/batch_profile_$p.txt" | head -20
    done
    [ "${BATCH_BENCH_PERROW:-1}" = 1 ] || return 0
    G4_BATCH_ROWS=0 build-gpu/g4cu bench "$e/f16" "$e/q4" --batch-rows 32 --reps 1 2>&1 |
        grep -E "batch rows|rror" | sed 's/^/G4_BATCH_ROWS=0 (per-row calls): /'
}

# Issue 31's eval target (after build): `g4cu eval --backend cuda` on the smoke media (carried
# as .smoke-data, tools/fetch_smoke_set.sh) with each item repeated EVAL_REPEAT times (ids made
# unique), --batch 1 then --batch 16: wall seconds, items/s and how many predictions differ
# (the batched M > 1 linears may round differently). The package: make_package.py's gpu-eval
# preset (gpu-tiny's shapes, head_dim 256 / 512, which the CUDA attention takes; the tiny
# fixture's head_dim 32 it does not) with the vocabulary and token ids of the tiny fixture
# (--like), which the chat fixture tokenizer fits.
stage_eval_batch() {
    local data="$PWD/.smoke-data" d="$WORK/gpu-eval" pkg="$WORK/gpu-eval/f16"
    [ -d "$data/librivox" ] || { echo "eval_batch: no .smoke-data carried"; return 1; }
    rm -rf "$d"
    python3 tools/python/make_package.py "$d" --preset gpu-eval \
        --like tests/fixtures/mobius-tiny-f16/package >"$OUT/eval_batch_make.log" 2>&1 ||
        { tail -20 "$OUT/eval_batch_make.log"; return 1; }
    grep '^make_package:' "$OUT/eval_batch_make.log"
    local task man b
    for task in librispeech ocrbench; do
        man="$WORK/eval_${task}.jsonl"
        [ $task = librispeech ] && src=tests/fixtures/eval/librispeech_smoke.jsonl || src=tests/fixtures/eval/ocr_smoke.jsonl
        python3 - "$src" "$man" "${EVAL_REPEAT:-8}" <<'PY'
import json, sys
items = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
with open(sys.argv[2], "w") as f:
    for r in range(int(sys.argv[3])):
        for it in items:
            f.write(json.dumps(dict(it, id=f"{it['id']}-r{r}")) + "\n")
PY
        # 16ab: --batch 16 with the front ends on the stepping thread and a prefill budget of one
        # chunk a round (G4_EVAL_PREP_THREADS=0 G4_BATCH_PREFILL_ONE=1, which applies only to the
        # earlier rounds: G4_BATCH_PROMPT_ROWS=0): what the worker threads and the default
        # rounds bring (the A/B of issue 31's eval half; the media prompts are chunks of their
        # own forwards either way, cut to the budget's rest with prompt rows); 16g: the batch step captured
        # per row count (G4_BATCH_GRAPH=1): whether the tiny model's eager step is launch-bound
        for b in 1 16 16ab 16g; do
            rm -rf "$WORK/eval_${task}_b$b"
            local t0=$(date +%s.%N) env=()
            [ $b = 16ab ] && env=(G4_EVAL_PREP_THREADS=0 G4_BATCH_PREFILL_ONE=1 G4_BATCH_PROMPT_ROWS=0)
            [ $b = 16g ] && env=(G4_BATCH_GRAPH=1)
            env ${env[@]+"${env[@]}"} build-gpu/g4cu eval "$man" --task $task "$pkg" --backend cuda --tokenizer tests/fixtures/chat/chat_bpe.json \
                --data-dir "$data" --out "$WORK/eval_${task}_b$b" --batch ${b%%[a-z]*} --time >"$OUT/eval_${task}_b$b.out" 2>"$OUT/eval_${task}_b$b.err"
            local rc=$? t1=$(date +%s.%N)
            echo "eval $task --batch $b: exit $rc, $(wc -l <"$man") items in $(python3 -c "print(f'{$t1 - $t0:.2f}')") s wall, $(tail -1 "$OUT/eval_${task}_b$b.out")"
            grep '^g4cu eval: time:' "$OUT/eval_${task}_b$b.err"
            [ $rc -ne 0 ] && tail -3 "$OUT/eval_${task}_b$b.err"
        done
        python3 - "$WORK/eval_${task}_b1/predictions.jsonl" "$WORK/eval_${task}_b16/predictions.jsonl" "$task" \
            "$WORK/eval_${task}_b16ab/predictions.jsonl" "$WORK/eval_${task}_b16g/predictions.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
ka = {x["id"]: x for x in a}
diff = sum(1 for x in b if ka.get(x["id"], {}).get("prediction") != x.get("prediction"))
ms = lambda r: sum(x.get("item_ms", 0) for x in r)
print(f"eval {sys.argv[3]}: {len(a)} / {len(b)} predictions, {diff} differ between --batch 1 and 16; "
      f"sum of item_ms {ms(a):.0f} / {ms(b):.0f}")
kb = [x.get("prediction") for x in b]
for name, path in (("16ab", sys.argv[4]), ("16g", sys.argv[5])):
    try:
        c = [json.loads(l) for l in open(path)]
        print(f"eval {sys.argv[3]}: --batch 16 and {name}: {sum(1 for x, y in zip(kb, c) if x != y.get('prediction'))} "
              f"of {len(c)} predictions differ, in order (none on the CPU; on CUDA a row may round "
              f"differently beside other rows, as --batch 1 vs 16)")
    except OSError as e:
        print(f"eval {sys.argv[3]}: no {name} predictions: {e}")
PY
    done
}

# The full-size package takes minutes to make (random init, save, mobius export, quantize, HF
# dumps): e2b_bg starts it detached (setsid) so a later call can wait for it (e2b_wait) on the
# same machine while this call goes on with other stages.
stage_e2b_make() {
    local d="$WORK/e2b"
    rm -rf "$d" && mkdir -p "$d"
    python3 tools/python/make_package.py "$d" --preset e2b || { touch "$d/FAILED"; return 1; }
    wait_g4cu e2b_make || { touch "$d/FAILED"; return 1; }
    build-gpu/g4cu inspect "$d/f16" --summary >"$d/inspect.txt" 2>&1
    build-gpu/g4cu quantize "$d/f16" "$d/q4" --threads "$(nproc)" || { touch "$d/FAILED"; return 1; }
    ls -l "$d/q4/decoder/model.onnx.data" | awk '{print "q4 decoder data: " $5 " bytes (real 1,511,784,448)"}'
    # E2B_DUMPS=0: no HF dumps (a call that runs no compare: the peers stage)
    [ "${E2B_DUMPS:-1}" = 0 ] && { touch "$d/READY"; return 0; }
    python3 tools/python/make_reference.py --hf "$d/hf" --package "$d/f16" --out "$d/dumps" \
        --lengths 16 || { touch "$d/FAILED"; return 1; }
    python3 tools/python/make_reference.py --hf "$d/hf" --out "$d/dumps16" --lengths 16 \
        --dtype float16 --device cuda || { touch "$d/FAILED"; return 1; }
    touch "$d/READY"
}

# issue 30: the engine on another shape than E2B (the header's "alt"). Lines to read:
# "alt compare cuda lenN: exit 0 ... all within tolerance", "alt greedy cuda == cpu: same", the
# bench table; a refusal names the op and shape in one line (kernels/backend_cuda_checks.cu).
stage_alt_make() {
    local d="$WORK/alt"
    rm -rf "$d" && mkdir -p "$d"
    python3 tools/python/make_package.py "$d" --preset alt ${ALT_HIDDEN:+--hidden "$ALT_HIDDEN"} \
        >"$OUT/alt_make.log" 2>&1 || { tail -20 "$OUT/alt_make.log"; return 1; }
    grep "^make_package" "$OUT/alt_make.log"
    build-gpu/g4cu inspect "$d/f16" --summary >"$OUT/alt_inspect.txt" 2>&1
    sed -n '/text decoder (derived)/,/^$/p' "$OUT/alt_inspect.txt" | head -40
    build-gpu/g4cu quantize "$d/f16" "$d/q4" --threads "$(nproc)" >>"$OUT/alt_make.log" 2>&1 ||
        { tail -5 "$OUT/alt_make.log"; return 1; }
    stamp "alt made and quantized"
    python3 tools/python/make_reference.py --hf "$d/hf" --package "$d/f16" --out "$d/dumps" \
        --lengths 16,1100 >>"$OUT/alt_make.log" 2>&1 || { tail -10 "$OUT/alt_make.log"; return 1; }
    python3 tools/python/make_reference.py --hf "$d/hf" --out "$d/dumps16" --lengths 16,1100 \
        --dtype float16 --device cuda >>"$OUT/alt_make.log" 2>&1 || { tail -10 "$OUT/alt_make.log"; return 1; }
    touch "$d/READY"
    stamp "alt dumps made"
}

# Issue 30: greedy decoding on CUDA and on the CPU (32 tokens after the prompt IDS) on the alt
# package PKG, and where they differ, whether that is a near-tie or a decode bug: the CUDA
# tokens teacher-forced through `g4cu logits` on both backends, tools/python/greedy_ties.py
# saying at each step whether the CUDA decode step chose the CUDA prefill's argmax (the decode
# path against the prefill path that `compare` checks against HF), and at the first difference
# the CPU's margin against the two backends' logit difference on those two tokens.
alt_greedy_check() {
    local pkg=$1 ids=$2 b full
    for b in cuda cpu; do
        build-gpu/g4cu generate "$pkg" --ids "$ids" --max-new 32 --ignore-eos --backend $b --json \
            >"$OUT/alt_gen_$b.json" 2>"$OUT/alt_gen_$b.err" ||
            { echo "alt greedy: generate $b failed: $(head -2 "$OUT/alt_gen_$b.err")"; return 1; }
    done
    if cmp -s <(grep -o '"tokens":\[[^]]*\]' "$OUT/alt_gen_cuda.json") <(grep -o '"tokens":\[[^]]*\]' "$OUT/alt_gen_cpu.json"); then
        echo "alt greedy cuda == cpu (32 tokens): same"
        return 0
    fi
    echo "alt greedy cuda vs cpu: differ; teacher-forced logits on both backends:"
    full=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["tokens"]; print(sys.argv[2] + "," + ",".join(map(str, t[:-1])))' \
        "$OUT/alt_gen_cuda.json" "$ids")
    for b in cuda cpu; do
        build-gpu/g4cu logits "$pkg" --ids "$full" --backend $b --out "$OUT/alt_greedy_logits_$b.npy" \
            >"$OUT/alt_greedy_logits_$b.log" 2>&1 || { echo "alt greedy: logits $b failed: $(tail -1 "$OUT/alt_greedy_logits_$b.log")"; return 1; }
    done
    python3 tools/python/greedy_ties.py --prompt-len "$(tr ',' '\n' <<<"$ids" | wc -l)" \
        --gen-cuda "$OUT/alt_gen_cuda.json" --gen-cpu "$OUT/alt_gen_cpu.json" \
        --cuda "$OUT/alt_greedy_logits_cuda.npy" --cpu "$OUT/alt_greedy_logits_cpu.npy"
}

stage_alt_run() {
    local d="$WORK/alt"
    [ -f "$d/READY" ] || { echo "alt_run: no $d/READY (run alt_make first)"; return 1; }
    for k in len16 len1100; do
        build-gpu/g4cu compare "$d/f16" "$d/dumps/$k.npz" --backend cuda --tol-from "$d/dumps16/$k.npz" \
            >"$OUT/alt_compare_cuda_$k.txt" 2>&1
        echo "alt compare cuda $k vs HF fp32 (hf-fp16x3): exit $? $(tail -1 "$OUT/alt_compare_cuda_$k.txt")"
    done
    build-gpu/g4cu compare "$d/f16" "$d/q4" --backend cuda --ids "$(seq -s, 5 44)" >"$OUT/alt_fidelity_q4.txt" 2>&1
    echo "alt Q4 vs f16 (cuda, 40 ids; fidelity, not a verdict): $(grep KL "$OUT/alt_fidelity_q4.txt")"
    local ids
    ids=$(python3 -c 'import json; print(",".join(map(str, json.load(open("'"$d"'/dumps/meta.json"))["cases"][0]["ids"])))' 2>/dev/null)
    alt_greedy_check "$d/f16" "${ids:-$(seq -s, 7 22)}"
    stamp "alt compared"
    build-gpu/g4cu bench "$d/f16" "$d/q4" --reps 5 --json "$OUT/alt_bench.json" 2>&1 | tee "$OUT/alt_bench.txt"
    stamp "alt benched"
}

stage_alt() { stage_alt_make && stage_alt_run; }

# The alt package's greedy check alone (after build; makes $WORK/alt/f16 when alt_make did not
# run, ~2 min): alt_greedy_check on the prompt 7..22.
stage_alt_greedy() {
    local d="$WORK/alt"
    if [ ! -d "$d/f16" ]; then
        mkdir -p "$d"
        python3 tools/python/make_package.py "$d" --preset alt >"$OUT/alt_greedy_make.log" 2>&1 ||
            { tail -20 "$OUT/alt_greedy_make.log"; return 1; }
        stamp "alt f16 made"
    fi
    alt_greedy_check "$d/f16" "$(seq -s, 7 22)"
}

stage_e2b_bg() {
    mkdir -p "$WORK/e2b"
    setsid nohup bash tools/gpu/run.sh e2b_make >"$WORK/e2b_make.log" 2>&1 < /dev/null &
    echo "e2b_make started in the background (log $WORK/e2b_make.log)"
}

stage_e2b_wait() {
    local d="$WORK/e2b" n=0
    while [ ! -f "$d/READY" ] && [ ! -f "$d/FAILED" ] && [ $n -lt 500 ]; do sleep 5; n=$((n + 5)); done
    cp "$WORK/e2b_make.log" "$OUT/" 2>/dev/null
    grep -E "make_package|bytes|Error|error" "$WORK/e2b_make.log" | grep -v Warn | tail -15
    [ -f "$d/READY" ]
}

stage_e2b_run() {
    local d="$WORK/e2b"
    cp "$d/inspect.txt" "$OUT/e2b_inspect.txt" 2>/dev/null
    local tol="--tol-from $d/dumps16/len16.npz"
    build-gpu/g4cu compare "$d/f16" "$d/dumps/len16.npz" --backend cuda $tol >"$OUT/e2b_compare_cuda.txt" 2>&1
    echo "e2b compare cuda vs HF fp32 (tolerance 3x HF fp16's error): exit $? $(tail -1 "$OUT/e2b_compare_cuda.txt")"
    build-gpu/g4cu compare "$d/q4" "$d/dumps/len16.npz" --backend cuda >"$OUT/e2b_compare_cuda_q4.txt" 2>&1
    echo "e2b Q4 compare cuda vs HF(f16) (fidelity, not a pass/fail): $(grep KL "$OUT/e2b_compare_cuda_q4.txt")"
    build-gpu/g4cu compare "$d/f16" "$d/q4" --ids 2,818,3022,48,1000,77777,262000,5 --backend cuda >"$OUT/e2b_fidelity_q4.txt" 2>&1
    echo "e2b Q4 vs f16 fidelity: $(grep KL "$OUT/e2b_fidelity_q4.txt")"
    stamp "e2b compared"
    build-gpu/g4cu bench "$d/f16" "$d/q4" --reps 10 --hf "$d/hf" --json "$OUT/e2b_bench.json" 2>&1 | tee "$OUT/e2b_bench.txt"
    e2b_generate_vs_bench "$d"
    # per-op split of an eager decode step (events around every op; not the graph-replayed path)
    G4_PROFILE=1 build-gpu/g4cu bench "$d/f16" "$d/q4" --reps 1 2>&1 | grep -v "^pkg\|^  *(" | tee "$OUT/e2b_profile.txt"
}

# `g4cu generate` (what a user runs) against `g4cu bench`'s decode_tok_s (both through
# g4_generate; bench: median of 10 runs on one state): the bench's own 128 prompt ids (its
# xorshift64 seed 0x5eed, ids 3 + x % (V - 3)), 128 new tokens, EOS ignored, 3 runs a package.
# Prints "e2b <pkg> decode: generate <median> tok/s (runs ...), bench <x> tok/s, ratio <r>: PASS"
# when |1 - ratio| <= 0.03.
e2b_generate_vs_bench() {
    local d=$1 ids
    ids=$(python3 -c "
s, out = 0x5eed, []
for i in range(128):
    s ^= (s << 13) & (2**64 - 1); s ^= s >> 7; s ^= (s << 17) & (2**64 - 1)
    out.append(str(3 + s % (262144 - 3)))
print(','.join(out))")
    for k in f16 q4; do
        local rates=()
        for r in 1 2 3; do
            build-gpu/g4cu generate "$d/$k" --backend cuda --ids "$ids" --max-new 128 --ignore-eos --json >"$OUT/e2b_generate_${k}_$r.json" 2>"$OUT/e2b_generate_${k}_$r.err"
            rates+=("$(sed -E 's/.*"decode_tok_s":([0-9.eE+-]+).*/\1/' "$OUT/e2b_generate_${k}_$r.json")")
        done
        python3 - "$OUT/e2b_bench.json" "$k" "${rates[@]}" <<'PY'
import json, statistics, sys
bench = json.load(open(sys.argv[1]))["packages"][sys.argv[2]]["decode_tok_s"]
runs = [float(x) for x in sys.argv[3:]]
gen = statistics.median(runs)
ratio = gen / bench
print(f"e2b {sys.argv[2]} decode: generate {gen:.1f} tok/s (runs {', '.join(f'{x:.1f}' for x in runs)}), "
      f"bench {bench:.1f} tok/s, ratio {ratio:.4f}: {'PASS' if abs(1 - ratio) <= 0.03 else 'FAIL'} (target within 3%)")
PY
    done
}

# --- issue 20: g4cu serve on the full-size package --------------------------------------------
# The random E2B package has no tokenizer.json of its own: the chat fixture's tokenizer (its
# <bos> is the package's id 2; its ids are < 1024) serves text prompts, which is what the load
# test sends (its media placeholder ids are not E2B's, so images / audio are not sent here).
stage_serve() {
    local d="$WORK/e2b" k p
    [ -f "$d/READY" ] || { echo "serve: no $d/READY (run e2b_bg and e2b_wait first)"; return 1; }
    # every id a random E2B can emit decodes, to visible text (--text: else a reply of gap or
    # special-pad ids streams no content and the load test measures no TTFT)
    python3 tools/gpu/pad_tokenizer.py tests/fixtures/chat/chat_bpe.json "$WORK/e2b_tok_text.json" 262144 --text || return 1
    for k in ${SERVE_PKGS:-f16 q4}; do
        for p in ${SERVE_PREFILL_TOKENS:-default}; do
            for r in ${SERVE_PROMPT_ROWS:-${G4_BATCH_PROMPT_ROWS:-1}}; do
                for v in ${SERVE_ENV:-"-:X=1"}; do
                    ( # the variant's variables for this server only
                        IFS=, read -r -a kvs <<<"${v#*:}"
                        for kv in "${kvs[@]}"; do export "${kv?}"; done
                        G4_BATCH_PROMPT_ROWS=$r SERVE_TAG="${v%%:*}" serve_one "$d" "$k" "$p"
                    )
                done
            done
        done
    done
}

# serve_one DIR PKG BUDGET: one server (--batch-prefill-tokens BUDGET unless "default") under
# the load test, its split of the rounds printed
serve_one() {
    local d=$1 k=$2 p=$3 tok="--tokenizer $WORK/e2b_tok_text.json" tag=$2 f=serve_$2 budget=()
    [ -f "$d/$k/tokenizer.json" ] && tok=""
    if [ "$p" != default ]; then
        budget=(--batch-prefill-tokens "$p")
        tag="$k prefill-$p" f="serve_${k}_p$p"
    fi
    if [ "${G4_BATCH_PROMPT_ROWS:-1}" = 0 ]; then # (read by the server's batch; 1 the default)
        tag="$tag rows0" f="${f}_rows0"
    fi
    if [ "${SERVE_TAG:--}" != - ]; then # (a SERVE_ENV variant)
        tag="$tag $SERVE_TAG" f="${f}_$SERVE_TAG"
    fi
    # shellcheck disable=SC2086
    build-gpu/g4cu serve "$d/$k" --backend "${SERVE_BACKEND:-cuda}" --port 0 --parallel "${SERVE_PARALLEL:-4}" \
        --queue 64 --n-ctx 4096 "${budget[@]}" $tok >"$OUT/$f.out" 2>"$OUT/$f.err" &
    local pid=$! port="" n=0
    while [ -z "$port" ] && [ $n -lt 600 ] && kill -0 $pid 2>/dev/null; do
        sleep 0.5; n=$((n + 1))
        port=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/$f.out")
    done
    [ -n "$port" ] || { echo "serve $tag: did not start"; tail -5 "$OUT/$f.err"; kill $pid 2>/dev/null; return; }
    head -1 "$OUT/$f.out"
    echo "serve $tag: RSS $(awk '/VmRSS/{print $2, $3}' /proc/$pid/status) before the load"
    # shellcheck disable=SC2086
    python3 tools/gpu/serve_load.py --port "$port" --requests 300 --clients "${SERVE_CLIENTS:-16}" \
        --max-tokens "${SERVE_MAX_TOKENS:-64}" ${SERVE_LOAD_ARGS:-} \
        --json "$OUT/$f.json" | sed "s/^serve /serve $tag /"
    echo "serve $tag: RSS $(awk '/VmRSS/{print $2, $3}' /proc/$pid/status) after"
    curl -s "http://127.0.0.1:$port/metrics" >"$OUT/${f}_metrics.txt" 2>/dev/null
    # the whole run's split (start-up included), as the server counts it
    echo "serve $tag whole run: $(grep -E '^g4cu_batch_(seconds|rounds|prefill_(chunks|tokens))_total' \
        "$OUT/${f}_metrics.txt" | tr '\n' ' ')"
    kill -TERM $pid
    wait $pid
    echo "serve $tag: exit $? after SIGTERM"
    stamp "serve $tag"
}

# --- issue 19: quantization fidelity on a trained proxy ------------------------------------
FID=${FID:-$WORK/fidelity}
# the text proxy's sentences (train.txt, test.txt, corpus.json) as fidelity_make used them
# (fid_corpus_make): under $WORK, so that fidelity_methods / fidelity_run in a later
# pipeline.sh start (a fresh copy of the tree) read the same text
FID_CORPUS=$FID/corpus
# The output-KL scale fits (issue 33, tools/python/dwq_fit.py), NAME:SOURCE[:ARGS]: the package
# $FID/proxy/SOURCE with its scales fitted against the fp16 proxy's output KL on the train split;
# ARGS: more dwq_fit.py arguments, commas for spaces ("q4_x:q4:--codes,--code-lr,3e-3").
# q4_fit_dwq_keep_auto starts from q4_best_keep_auto (${FIDELITY_BEST:-fit} with --keep-auto);
# the *_dwqc ones fit the codes too (--codes), beside the scales-only fits of the same sources.
fid_dwq_default="q4_dwq:q4 q4_fit_dwq:q4_fit q4_fit_dwq_keep_auto:q4_best_keep_auto"
fid_dwq_default+=" q4_dwqc:q4:--codes q4_fit_dwqc_keep_auto:q4_best_keep_auto:--codes"
FID_DWQ=${FID_DWQ-$fid_dwq_default}
# the Q4 variants fidelity_make writes (each one that succeeds): g4cu quantize's, then the fits.
# FID_METHODS: the --method rows on ${FIDELITY_CALIB_TOKENS:-2048} tokens in one sequence (the
# earlier runs' calibration; FID_CALIB_VARIANTS' *_16k rows take quantize's defaults), and
# FID_IMATRIX=0 leaves out q4_imatrix (--imatrix on those 2048 tokens, ~3 min on the H100): a run
# that must fit one session's budget keeps the table to the defaults' rows (bench/NOTES.md,
# twenty-seventh session)
FID_METHODS=${FID_METHODS-q4_rtn q4_gptq q4_gptq_act q4_fit q4_gptq_imx}
FID_QUANT_VARIANTS="q4 q4_keep_auto"
[ "${FID_IMATRIX:-1}" = 0 ] || FID_QUANT_VARIANTS+=" q4_imatrix"
FID_QUANT_VARIANTS+=" $FID_METHODS q4_best_keep_auto"
# the --imatrix search's A/B on the same calibration (bench/NOTES.md "A better --imatrix search
# (issue 33)"): the first search (G4_IMATRIX_SEARCH=v1), the new one without the mean term
# (diag); gptq_imx with the search's own pick, its candidates not re-judged by GPTQ's block error
# (G4_GPTQ_IMX=pick; NOTES "GPTQ with the imatrix search's blocks"). Default none: the first
# two were measured in the sixteenth session's run (v1 -13.3%, diag -15.6%, new -18.9%), and the
# session's budget goes to the calibration rows below; name them to run them again.
# q4_imatrix_r32: the covariance's 32 directions on every linear (G4_IMATRIX_RANK=32) although
# 2048 tokens are short of 4 per input (the default then gives them to the K <= 512 linears
# only; NOTES "--imatrix with the inputs' leading correlations").
# q4_imatrix_s0: --imatrix under the rule before branch imxmp (G4_IMATRIX_SHRINK=0: no directions
# for the linears with fewer than 4 tokens an input channel, at 2048 tokens all but the 15
# per_layer_projections), against q4_imatrix's directions read against the sampling noise (the
# default since; NOTES "--imatrix's covariance directions read against the sampling noise"): the
# default A/B row, ~35 s.
FID_AB_VARIANTS=${FID_AB_VARIANTS-q4_imatrix_s0}
# the X^T X methods' calibration (bench/NOTES.md "How much calibration the X^T X methods need
# (issue 33)"): gptq and gptq_imx from ${FIDELITY_CALIB_TOKENS_LONG:-16384} tokens of the train
# split in windows of ${FIDELITY_CALIB_CTX:-512} (the proxy's training length; --calib-ctx);
# gptq_imx from the usual FIDELITY_CALIB_TOKENS in the same windows (q4_gptq_imx_w512: the
# windows alone, against q4_gptq_imx's one sequence); gptq and gptq_imx from the usual tokens
# with 10x GPTQ's damping (G4_GPTQ_DAMP=0.1: X^T X of fewer rows than the down_projs' K), and
# with the damping chosen per linear on held-out calibration rows (q4_gptq_imx_cv / q4_gptq_cv,
# G4_GPTQ_DAMP=cv: two folds of alternate 64-row spans, 0.01 .. 1 each scored by the other
# fold's layer-output error; bench/FIDELITY.md "GPTQ's damping chosen per linear on held-out
# rows"; ~11 GPTQ solves a linear: on request, q4_gptq_imx_cv ~10-20 min of quantizing on the
# proxy, q4_gptq_cv ~5-8);
# imatrix from the long calibration (q4_imatrix_16k: the default search, now with the inputs'
# covariance's 32 directions on the linears of K <= tokens / 4, all but the K = 6144 down_projs;
# NOTES "--imatrix with the inputs' leading correlations") and, on request, the same without
# them (q4_imatrix_r0_16k, G4_IMATRIX_RANK=0); on request the same without the block refit
# (q4_imatrix_nrf_16k, G4_IMATRIX_REFIT=0: the search before branch imx25), with one pass over
# each column instead of the default 4 (q4_imatrix_p1_16k, G4_IMATRIX_PASSES=1) and with the
# search's 8 best candidates refit (q4_imatrix_k8_16k, G4_IMATRIX_REFIT=8: ~3x the search's
# time; NOTES "--imatrix: each block refit after its search").
# q4_gptq_imx_16k_keep_auto: q4_gptq_imx_16k with --keep-auto at q4_keep_auto's byte budget (the
# sensitivity ranking on the same 16,384 tokens), a source for a dwq fit on top.
# FID_CALIB_VARIANTS chooses among these thirteen (empty: none; default q4_gptq_imx_16k, the best
# method's question, and q4_imatrix_16k, imatrix's: ~1.5-2.5 + 3-4 min of quantizing on the
# H200, NOTES; q4_gptq_16k, the plainest test of the length, ~1-1.5 min more, on request: the
# pipeline must fit beside the GEMV call in one session's 30 minutes); the names are the
# defaults'.
FID_CALIB_VARIANTS=${FID_CALIB_VARIANTS-q4_gptq_imx_16k q4_imatrix_16k}
FID_VARIANTS="$FID_QUANT_VARIANTS $FID_AB_VARIANTS $FID_CALIB_VARIANTS"
FID_VARIANTS+=" $(for p in $FID_DWQ; do printf '%s ' "${p%%:*}"; done)"

# quant_into DIR TAG NAME ARGS...: g4cu quantize of DIR/f16 into DIR/NAME (replaced), timed,
# its lines prefixed TAG; on ${quant_threads:-$(nproc)} threads (fid_methods lowers it while the
# fits run beside; the bytes are the same for any count: base/parallel.h). gptq / gptq_imx at
# GPTQ's fixed damping 0.01 (the rows of earlier runs, and their time) unless the row sets
# G4_GPTQ_DAMP (q4_gptq_cv, q4_gptq_imx_cv, the d0.1 rows) or FIDELITY_GPTQ_DAMP sets every
# row's (0.01 is also the quantizer's default; cv ~8-11x the quantize time)
quant_into() {
    local d=$1 tag=$2 v=$3 t0
    shift 3
    rm -rf "${d:?}/$v"
    t0=$(date +%s)
    G4_GPTQ_DAMP=${G4_GPTQ_DAMP:-${FIDELITY_GPTQ_DAMP:-0.01}} \
        build-gpu/g4cu quantize "$d/f16" "$d/$v" --threads "${quant_threads:-$(nproc)}" "$@" || echo "$tag: quantize $v FAILED"
    stamp "$tag: quantized $v ($(($(date +%s) - t0)) s)"
}

# keep_budget Q4_PKG: the --keep-auto byte budget of every fidelity and mm row,
# ${FIDELITY_KEEP_PCT:-10}% of the plain Q4 package's decoder data (fails if it has none)
keep_budget() {
    local b
    b=$(stat -c %s "$1/decoder/model.onnx.data") || return 1
    echo $((b * ${FIDELITY_KEEP_PCT:-10} / 100))
}

# fid_quant NAME ARGS...: the text proxy's ($FID/proxy/NAME), then its row queued for the
# measurer (fid_mq_add: no-op when none runs)
fid_quant() {
    quant_into "$FID/proxy" fidelity "$@"
    fid_mq_add "$1"
}

# fid_make KIND NAME: one of fid_methods' packages; KIND says which list named it (method: the
# --method rows and q4_best_keep_auto, ab: FID_AB_VARIANTS, calib: FID_CALIB_VARIANTS)
fid_make() {
    local kind=$1 v=$2 d="$FID/proxy" corpus=$FID_CORPUS budget
    # (one sequence, as every earlier run's rows: quantize's default windows of 512 since branch
    # calibdef; a later --calib-ctx, q4_gptq_imx_w512's, wins)
    local cal=(--calib "$corpus/train.txt" --calib-tokens "${FIDELITY_CALIB_TOKENS:-2048}"
        --calib-ctx "${FIDELITY_CALIB_TOKENS:-2048}" --backend "${FIDELITY_BACKEND:-cuda}")
    local win=(--calib-ctx "${FIDELITY_CALIB_CTX:-512}")
    local long=(--calib "$corpus/train.txt" --calib-tokens "${FIDELITY_CALIB_TOKENS_LONG:-16384}"
        --backend "${FIDELITY_BACKEND:-cuda}" "${win[@]}")
    case $kind:$v in
        method:q4_rtn) fid_quant "$v" --method rtn ;;
        method:q4_gptq) fid_quant "$v" --method gptq "${cal[@]}" ;;
        method:q4_gptq_act) fid_quant "$v" --method gptq --act-order "${cal[@]}" ;;
        method:q4_fit) fid_quant "$v" --method fit "${cal[@]}" ;;
        method:q4_gptq_imx) fid_quant "$v" --method gptq_imx "${cal[@]}" ;;
        make:q4_imatrix) # --imatrix on 2048 tokens in one sequence (FID_IMATRIX; fidelity_make only)
            fid_quant "$v" --imatrix --calib-tokens 2048 --calib-ctx 2048 --calib "$corpus/train.txt" \
                --backend "${FIDELITY_BACKEND:-cuda}" ;;
        method:q4_best_keep_auto)
            budget=$(keep_budget "$d/q4")
            # shellcheck disable=SC2086 # FIDELITY_BEST is "METHOD [--act-order]"
            fid_quant "$v" --method ${FIDELITY_BEST:-fit} --keep-auto "$budget" "${cal[@]}" ;;
        ab:q4_imatrix_v1) G4_IMATRIX_SEARCH=v1 fid_quant "$v" --method imatrix "${cal[@]}" ;;
        ab:q4_imatrix_diag) G4_IMATRIX_SEARCH=diag fid_quant "$v" --method imatrix "${cal[@]}" ;;
        ab:q4_gptq_imx_pick) G4_GPTQ_IMX=pick fid_quant "$v" --method gptq_imx "${cal[@]}" ;;
        ab:q4_imatrix_r32) G4_IMATRIX_RANK=32 fid_quant "$v" --method imatrix "${cal[@]}" ;;
        ab:q4_imatrix_s0) G4_IMATRIX_SHRINK=0 fid_quant "$v" --method imatrix "${cal[@]}" ;;
        ab:*) echo "fidelity: FID_AB_VARIANTS: unknown variant '$v'" ;;
        calib:q4_gptq_16k) fid_quant "$v" --method gptq "${long[@]}" ;;
        calib:q4_fit_16k) fid_quant "$v" --method fit "${long[@]}" ;;
        calib:q4_gptq_imx_16k) fid_quant "$v" --method gptq_imx "${long[@]}" ;;
        calib:q4_gptq_imx_16k_keep_auto) # the best method at equal bytes (twenty-third session)
            budget=$(keep_budget "$d/q4")
            fid_quant "$v" --method gptq_imx --keep-auto "$budget" "${long[@]}" ;;
        calib:q4_gptq_imx_w512) fid_quant "$v" --method gptq_imx "${cal[@]}" "${win[@]}" ;;
        calib:q4_gptq_d0.1) G4_GPTQ_DAMP=0.1 fid_quant "$v" --method gptq "${cal[@]}" ;;
        calib:q4_gptq_imx_d0.1) G4_GPTQ_DAMP=0.1 fid_quant "$v" --method gptq_imx "${cal[@]}" ;;
        calib:q4_gptq_cv) G4_GPTQ_DAMP=cv fid_quant "$v" --method gptq "${cal[@]}" ;;
        calib:q4_gptq_imx_cv) G4_GPTQ_DAMP=cv fid_quant "$v" --method gptq_imx "${cal[@]}" ;;
        calib:q4_imatrix_16k) fid_quant "$v" --method imatrix "${long[@]}" ;;
        calib:q4_imatrix_r0_16k) G4_IMATRIX_RANK=0 fid_quant "$v" --method imatrix "${long[@]}" ;;
        calib:q4_imatrix_nrf_16k) G4_IMATRIX_REFIT=0 fid_quant "$v" --method imatrix "${long[@]}" ;;
        calib:q4_imatrix_k8_16k) G4_IMATRIX_REFIT=8 fid_quant "$v" --method imatrix "${long[@]}" ;;
        calib:q4_imatrix_p1_16k) G4_IMATRIX_PASSES=1 fid_quant "$v" --method imatrix "${long[@]}" ;;
        calib:*) echo "fidelity: FID_CALIB_VARIANTS: unknown variant '$v'" ;;
        *) echo "fidelity: fid_make: no package '$v' of kind '$kind'" ;;
    esac
}

# The --method variants (issue 33), calibrated on ${FIDELITY_CALIB_TOKENS:-2048} tokens of the
# train split (never the held-out text); q4_best_keep_auto: ${FIDELITY_BEST:-fit}
# with --keep-auto at the same byte budget as q4_keep_auto (${FIDELITY_KEEP_PCT:-10}% of Q4's);
# then the $FID_DWQ fits. fid_methods [KIND:NAME...]: these jobs too (fidelity_make's
# make:q4_imatrix), before the --method rows.
# The order (branch fidfast; the twenty-eighth session's train stage ran >= 1,000 s and the
# session's budget ended before any row was measured): the rows issue 33's targets read first,
# so that a run cut short by the budget still has them (each row is measured on the GPU as soon
# as its package is written: fid_mq_start):
#  1. the names in FID_FIRST that this run makes, in FID_FIRST's order (default
#     q4_gptq_imx_16k_keep_auto q4_gptq_imx_16k q4_imatrix_16k: the ">= -70%" row's source
#     first, so its code fit runs beside everything after it, then the best method and
#     --imatrix at quantize's default calibration; q4 and q4_keep_auto, the baseline and the
#     keep-auto row, are fidelity_make's, before these);
#  2. with FID_OVERLAP (1, the default), the other packages the fits start from (their SOURCE
#     fields, e.g. q4_best_keep_auto, the comparison fit's), so their fits run beside the rest;
#  3. the rest, the comparison rows (q4_imatrix, FID_METHODS, FID_AB_VARIANTS,
#     FID_CALIB_VARIANTS' others), in that list order.
# Each fit starts as soon as its SOURCE is written (fid_dwq_start src; the sources made before
# fid_methods, e.g. q4, at its start), in the background while the other quantizations run (CPU
# work, 16 threads, the GPU nearly idle), on ${FID_OVERLAP_CORES:-1} core a running fit fewer
# threads (fid_threads); fid_methods ends when both have. Each quantize writes the same bytes in
# any order (its inputs are the f16 package, the train split and its arguments; no quantize
# reads another's output; any --threads: base/parallel.h). FID_OVERLAP=0: FID_FIRST, then the
# rest in list order, every quantize on all cores, then the fits.
FID_FIRST=${FID_FIRST-q4_gptq_imx_16k_keep_auto q4_gptq_imx_16k q4_imatrix_16k}
fid_methods() {
    local jobs=("$@") order=() j v s srcs=" " made=" "
    for v in $FID_METHODS; do jobs+=("method:$v"); done
    for v in $FID_AB_VARIANTS; do jobs+=("ab:$v"); done
    for v in $FID_CALIB_VARIANTS; do jobs+=("calib:$v"); done
    jobs+=(method:q4_best_keep_auto)
    for v in $FID_DWQ; do
        s=${v#*:}
        srcs+="${s%%:*} "
    done
    for v in $FID_FIRST; do # 1.
        for j in "${jobs[@]}"; do [ "${j#*:}" = "$v" ] && order+=("$j"); done
    done
    if [ "${FID_OVERLAP:-1}" != 0 ]; then # 2.
        for j in "${jobs[@]}"; do
            [[ " ${order[*]} " == *" $j "* ]] || [[ $srcs != *" ${j#*:} "* ]] || order+=("$j")
        done
    fi
    for j in "${jobs[@]}"; do # 3.
        [[ " ${order[*]} " == *" $j "* ]] || order+=("$j")
    done
    echo "fidelity: quantize order: ${order[*]#*:}"
    for j in "${order[@]}"; do made+="${j#*:} "; done
    fid_dwq_pids=() fid_dwq_started=" "
    if [ "${FID_OVERLAP:-1}" != 0 ]; then # the fits whose source is made before fid_methods
        for v in $srcs; do [[ $made == *" $v "* ]] || fid_dwq_start "$v"; done
    fi
    local quant_threads # (quant_into's, for these calls only)
    for j in "${order[@]}"; do
        fid_threads "${j#*:}"
        fid_make "${j%%:*}" "${j#*:}"
        [ "${FID_OVERLAP:-1}" = 0 ] || fid_dwq_start "${j#*:}"
    done
    [ "${FID_OVERLAP:-1}" != 0 ] || for v in $srcs; do fid_dwq_start "$v"; done
    fid_dwq_wait
}

# fid_threads NAME: quant_threads for the quantize of NAME: all cores, less
# ${FID_OVERLAP_CORES:-1} for each fit still running (its python thread launches the fit's GPU
# work and waits on it: about a core; the quantize's threads take fixed ranges, so one thread
# that waits for a core slows the whole step: bench/NOTES.md "The fits beside the
# quantizations"); at least 1
fid_threads() {
    local p n=0
    for p in ${fid_dwq_pids[@]+"${fid_dwq_pids[@]}"}; do kill -0 "$p" 2>/dev/null && n=$((n + 1)); done
    quant_threads=$(($(nproc) - n * ${FID_OVERLAP_CORES:-1}))
    [ "$quant_threads" -ge 1 ] || quant_threads=1
    [ "$n" = 0 ] || echo "fidelity: quantize $1 on $quant_threads of $(nproc) threads, beside $n running fits"
}

# fid_dwq: the $FID_DWQ fits, side by side on the GPU (each alone leaves it mostly idle: a 200M
# model's steps are short), each stopped after ${FID_DWQ_MINUTES:-2} minutes of fitting,
# ${FID_DWQ_STEPS:-800} steps, or ${FID_DWQ_PATIENCE:-4} validations (every
# ${FID_DWQ_EVAL:-25} steps) without a new best, keeping the scales of the best validation
# step; calibration: the first ${FID_DWQ_TOKENS:-2097152} tokens of the train split (never the
# held-out text; the split has 2.54M in the proxy's tokenizer) in windows of
# ${FID_DWQ_SEQ:-512}, the last 64 of them for validation, ${FID_DWQ_BATCH:-8} a step (~350
# steps in 2 minutes: fresh windows, no second pass; the eleventh session's 131,072 tokens made
# ~16 passes and overfitted), AdamW lr ${FID_DWQ_LR:-2e-3} on log(scale), decay
# ${FID_DWQ_WD:-0}, seed 0, then the entry's own ARGS (later arguments win: an entry may
# override these). All of them share the GPU: five fits side by side make fewer steps each in
# their minutes than three did. fid_dwq_start starts them in the background (their pids in
# fid_dwq_pids); fid_dwq_wait waits for them, prints each fit's log (fit and validation KL, time
# per step, the process's wall and CPU seconds; $FID/proxy/NAME.dwq.log), then a table row a
# fit: its steps, why it stopped, the step kept, s/step, the cores it used (the time cap makes
# the steps depend on the machine's load: these say whether the quantizations beside cut them).
fid_dwq_pids=()
fid_dwq_started=" "
# fid_dwq_start SOURCE: start the FID_DWQ fits that start from SOURCE (each once a fid_methods:
# fid_dwq_started); a fit's package, once written, is queued for the measurer (fid_mq_add)
fid_dwq_start() {
    local d="$FID/proxy" corpus=$FID_CORPUS p v src extra
    [ -n "$FID_DWQ" ] || return 0
    for p in $FID_DWQ; do
        v=${p%%:*} src=${p#*:} extra=()
        if [[ $src == *:* ]]; then # NAME:SOURCE:ARGS
            IFS=, read -r -a extra <<<"${src#*:}"
            src=${src%%:*}
        fi
        [ "$src" = "$1" ] || continue
        [[ $fid_dwq_started != *" $v "* ]] || continue
        fid_dwq_started+="$v "
        rm -rf "${d:?}/$v" "$d/$v.partial" "$d/$v.dwq.log"
        [ -d "$d/$src" ] || { echo "fidelity: dwq $v: no $src package (its quantize failed)"; continue; }
        (
            TIMEFORMAT="dwq_fit: process %R s wall, %U s user, %S s system"
            time python3 tools/python/dwq_fit.py "$d/hf" "$d/$src" "$d/$v" --calib "$corpus/train.txt" \
                --calib-tokens "${FID_DWQ_TOKENS:-2097152}" --seq "${FID_DWQ_SEQ:-512}" \
                --batch "${FID_DWQ_BATCH:-8}" --steps "${FID_DWQ_STEPS:-800}" --lr "${FID_DWQ_LR:-2e-3}" \
                --wd "${FID_DWQ_WD:-0}" --eval-every "${FID_DWQ_EVAL:-25}" \
                --patience "${FID_DWQ_PATIENCE:-4}" --val-max 64 --minutes "${FID_DWQ_MINUTES:-2}" \
                --threads 4 --log-every 50 ${extra[@]+"${extra[@]}"}
            [ ! -d "$d/$v" ] || fid_mq_add "$v"
        ) >"$d/$v.dwq.log" 2>&1 &
        fid_dwq_pids+=($!)
        stamp "fidelity: dwq fit $v started (from $src)"
    done
}

fid_dwq_wait() {
    local d="$FID/proxy" p v wall=0 w logs=()
    [ -n "$FID_DWQ" ] || return 0
    for p in ${fid_dwq_pids[@]+"${fid_dwq_pids[@]}"}; do wait "$p"; done
    fid_dwq_pids=()
    for p in $FID_DWQ; do
        v=${p%%:*}
        [ -f "$d/$v.dwq.log" ] || continue
        logs+=("$d/$v.dwq.log")
        grep -E "^dwq_fit:|Error|error" "$d/$v.dwq.log" | sed "s/^/fidelity: $v: /"
        [ -d "$d/$v" ] || echo "fidelity: dwq $v FAILED"
        w=$(sed -n 's/^dwq_fit: process \([0-9]*\).*/\1/p' "$d/$v.dwq.log")
        [ "${w:-0}" -le "$wall" ] || wall=$w
    done
    # each fit's steps, stop, kept step, s/step, cores (the time cap makes the steps depend on
    # the machine's load: whether the quantizations beside cut them)
    [ ${#logs[@]} = 0 ] ||
        python3 tools/python/fidelity_report.py --dwq "${logs[@]}" | grep "^|" | sed "s/^/fidelity: dwq /"
    # the fits' own time (the longest one's process), not the wait's, which the quantizations
    # beside them set
    stamp "fidelity: dwq fits $FID_DWQ ($wall s)"
}

stage_fidelity_methods() {
    [ -f "$FID/READY" ] || { echo "fidelity: $FID/READY missing (fidelity_bg, fidelity_wait)"; return 1; }
    fid_mq_start
    fid_methods
    fid_mq_end
    stage_fidelity_run
}

# fid_corpus_make: $FID_CORPUS from the carried .carry/corpus (copied), else from the carried
# .carry/corpus-xz (tools/python/corpus_xz.py pack; unpack checks both texts' sha256 and writes
# the folder whole or not at all), else made by tools/python/prepare_corpus.py.
fid_corpus_make() {
    if [ -f .carry/corpus/train.txt ]; then
        rm -rf "$FID_CORPUS" && cp -r .carry/corpus "$FID_CORPUS"
    elif [ -f .carry/corpus-xz/train.txt.xz ]; then
        python3 tools/python/corpus_xz.py unpack .carry/corpus-xz "$FID_CORPUS"
    else
        python3 tools/python/prepare_corpus.py --out "$FID_CORPUS"
    fi
}

stage_fidelity_make() {
    local d="$FID" corpus=$FID_CORPUS t0
    rm -rf "$d" && mkdir -p "$d"
    t0=$(date +%s)
    if ! fid_corpus_make || [ ! -f "$corpus/train.txt" ]; then touch "$d/FAILED"; return 1; fi
    stamp "fidelity: corpus ready ($(($(date +%s) - t0)) s)"
    t0=$(date +%s)
    python3 tools/python/train_proxy.py "$d/proxy" --corpus "$corpus" \
        --preset "${FIDELITY_PRESET:-proxy}" --minutes "${FIDELITY_MINUTES:-8}" \
        ${FIDELITY_TRAIN_ARGS:-} 2>&1 | grep -v "Saving \|it/s\]" || true
    [ -f "$d/proxy/f16/tokenizer.json" ] || { touch "$d/FAILED"; return 1; }
    stamp "fidelity: trained + exported ($(($(date +%s) - t0)) s)"
    wait_g4cu fidelity || { touch "$d/FAILED"; return 1; }
    fid_mq_start # f16's perplexity (--save-logits) on the GPU beside q4's quantize
    t0=$(date +%s)
    build-gpu/g4cu quantize "$d/proxy/f16" "$d/proxy/q4" --threads "$(nproc)" || echo "fidelity: quantize q4 FAILED"
    stamp "fidelity: quantized q4 ($(($(date +%s) - t0)) s)"
    fid_mq_add q4
    # --keep-auto: ${FIDELITY_KEEP_PCT:-10}% more decoder bytes than plain Q4, calibrated on the
    # train split (never the held-out text)
    local budget
    budget=$(keep_budget "$d/proxy/q4")
    t0=$(date +%s)
    build-gpu/g4cu quantize "$d/proxy/f16" "$d/proxy/q4_keep_auto" --keep-auto "$budget" \
        --calib "$corpus/train.txt" --backend "${FIDELITY_BACKEND:-cuda}" --threads "$(nproc)" || echo "fidelity: quantize q4_keep_auto FAILED"
    stamp "fidelity: quantized q4_keep_auto, budget $budget bytes ($(($(date +%s) - t0)) s)"
    fid_mq_add q4_keep_auto
    # q4_imatrix (--imatrix on 2048 tokens, a comparison row) is fid_methods' job, after the
    # rows of the targets (FID_FIRST)
    if [ "${FID_IMATRIX:-1}" != 0 ]; then fid_methods make:q4_imatrix; else fid_methods; fi
    fid_mq_end
    touch "$d/READY"
}

# --- the rows measured as the packages come (issue 33, branch fidfast) ---
# fid_mq_start: a measurer in the background, one g4cu perplexity at a time on the GPU while the
# quantizations run on the CPU: f16 with --save-logits first, then each name fid_mq_add queues
# ($FID/measure.queue, one a line; fid_quant and each fit add theirs when the package is
# written), each row into $OUT/fidelity under fid_ppl's names, and after each row FIDELITY.md
# rebuilt from what is there (fid_md), so that pipeline.sh's logs tarball ($OUT is inside
# $WORK/logs) carries the rows measured so far at any moment. fidelity_run then measures only
# what is missing ($FID/measure_dir names the folder; fid_row). FID_MEASURE_EARLY=0: no measurer
# (every row in fidelity_run, as before).
fid_mq_pid=
fid_mq_start() {
    local o="$OUT/fidelity"
    [ "${FID_MEASURE_EARLY:-1}" != 0 ] || return 0
    mkdir -p "$o" && o=$(cd "$o" && pwd) || return 0
    cp "$FID/proxy/train.json" "$FID_CORPUS/corpus.json" "$o/" 2>/dev/null
    echo "$o" >"$FID/measure_dir"
    echo f16 >"$FID/measure.queue"
    fid_mq_loop "$o" &
    fid_mq_pid=$!
    stamp "fidelity: measurer started (rows into $o as the packages come)"
}

# fid_mq_add NAME: queue NAME's row (one write of one line: a whole line or none)
fid_mq_add() { [ -z "$fid_mq_pid" ] || echo "$1" >>"$FID/measure.queue"; }

# fid_mq_end: the last row queued; waits until the measurer has measured every queued row
fid_mq_end() {
    [ -n "$fid_mq_pid" ] || return 0
    fid_mq_add END
    wait "$fid_mq_pid"
    fid_mq_pid=
    stamp "fidelity: every row measured as it came"
}

fid_mq_loop() {
    local o=$1 n=0 v
    while :; do
        v=$(sed -n "$((n + 1))p" "$FID/measure.queue")
        [ -n "$v" ] || { sleep 1; continue; }
        n=$((n + 1))
        [ "$v" != END ] || return 0
        fid_row "$v" || continue
        fid_md "$o"
        echo "fidelity: row $v measured; FIDELITY.md has $(fid_md_rows "$o/FIDELITY.md" | wc -l) rows"
    done
}

# fid_key: the settings of a row (a row measured under others is measured again)
fid_key() { echo "ctx ${FIDELITY_CTX:-512} chunks ${FIDELITY_CHUNKS:-64} backend ${FIDELITY_BACKEND:-cuda}"; }

# fid_row NAME: the proxy's perplexity row of $FID/proxy/NAME (f16: --save-logits into
# $FID/proxy_f16.kld; a Q4 package: --kl-base it) into $OUT/fidelity, unless a row is there that
# is not older than the package's data nor than the f16 logits (f16's JSON is written after its
# logits file is complete, often in the same clock tick: hence "not older", not "newer"; a
# rewritten logits file makes every row stale), and for f16 made under the same fid_key; fails
# when it measured nothing. A fit's log comes with its row.
fid_row() {
    local v=$1 d="$FID/proxy" o="$OUT/fidelity" kld="$FID/proxy_f16.kld" j data
    [ -d "$d/$v" ] || return 1
    j="$o/proxy_$v.json" data="$d/$v/decoder/model.onnx.data"
    if [ -s "$j" ] && [ -f "$data" ] && [ -f "$kld" ] && ! [ "$data" -nt "$j" ] && ! [ "$kld" -nt "$j" ]; then
        [ "$v" = f16 ] && [ "$(cat "$o/proxy_f16.key" 2>/dev/null)" != "$(fid_key)" ] || return 1
    fi
    if [ "$v" = f16 ]; then
        fid_key >"$o/proxy_f16.key"
        fid_ppl proxy "$d/f16" f16 --text "$d/test.txt" --ctx "${FIDELITY_CTX:-512}" \
            --chunks "${FIDELITY_CHUNKS:-64}" --save-logits "$kld"
    else
        [ ! -f "$d/$v.dwq.log" ] || cp "$d/$v.dwq.log" "$o/"
        fid_ppl proxy "$d/$v" "$v" --ctx "${FIDELITY_CTX:-512}" --kl-base "$kld"
    fi
    # a copy under $FID (times kept): $OUT is inside $WORK/logs under pipeline.sh, which a later
    # start empties, and fidelity_run there would measure the row again
    mkdir -p "$FID/rows" && cp -p "$o/proxy_$v".* "$FID/rows/" 2>/dev/null
    return 0
}

# fid_md DIR: DIR/FIDELITY.md from what DIR holds (replaced whole: a tar never reads half of it)
fid_md() {
    python3 tools/python/fidelity_report.py "$1" "$1/FIDELITY.md.new" && mv "$1/FIDELITY.md.new" "$1/FIDELITY.md"
}

# fid_md_rows FILE: the proxy's method table's rows in FILE (f16 and each Q4 row)
fid_md_rows() { sed -n '/^| variant |/,/^$/p' "$1" 2>/dev/null | grep '^| ' | grep -v '^| variant |'; }

# bg_start DIR STAGE: run.sh STAGE detached (setsid), logging to $WORK/STAGE.log; the stage
# leaves DIR/READY or DIR/FAILED when it ends.
bg_start() {
    local dir=$1 stage=$2
    mkdir -p "$dir"
    rm -f "$dir/READY" "$dir/FAILED"
    setsid nohup bash tools/gpu/run.sh "$stage" >"$WORK/$stage.log" 2>&1 </dev/null &
    # (pipeline.sh start refuses while it runs: it would replace the tree under it)
    echo $! >"$WORK/$stage.pid"
    echo "$stage started in the background (log $WORK/$stage.log)"
}

# bg_wait DIR STAGE NAME WAIT_S LINES PATTERN: waits up to WAIT_S for bg_start's stage, copies its
# log to $OUT/NAME, prints its last LINES lines matching PATTERN; fails while it is not ready.
bg_wait() {
    local dir=$1 stage=$2 name=$3 limit=$4 lines=$5 pat=$6 n=0
    while [ ! -f "$dir/READY" ] && [ ! -f "$dir/FAILED" ] && [ $n -lt "$limit" ]; do
        sleep 5; n=$((n + 5))
    done
    mkdir -p "$OUT/$name"
    cp "$WORK/$stage.log" "$OUT/$name/" 2>/dev/null
    grep -E "$pat" "$WORK/$stage.log" | tail -"$lines"
    [ -f "$dir/READY" ] || { echo "$name: not ready yet (call ${name}_wait again)"; return 1; }
}

stage_fidelity_bg() { bg_start "$FID" fidelity_make; }

stage_fidelity_wait() {
    bg_wait "$FID" fidelity_make fidelity "${FIDELITY_WAIT_S:-560}" 20 \
        "train_proxy: (tokenizer|[0-9,]+ param|held-out|--minutes|exported)|step [0-9]+/|fidelity:|Error|error"
}

# fid_ppl MODEL PKG VARIANT ARGS...: one g4cu perplexity run, its JSON and decoder bytes in $OUT
fid_ppl() {
    local model=$1 pkg=$2 v=$3 o="$OUT/fidelity" t0
    shift 3
    t0=$(date +%s)
    build-gpu/g4cu perplexity "$pkg" --backend "${FIDELITY_BACKEND:-cuda}" --json "$o/${model}_$v.json" \
        "$@" >"$o/${model}_$v.txt" 2>"$o/${model}_$v.err"
    echo "perplexity $model $v: exit $? ($(($(date +%s) - t0)) s) $(grep -E "^(PPL|Mean KLD|Same top)" "$o/${model}_$v.txt" | tr '\n' ' ')"
    stat -c %s "$pkg/decoder/model.onnx.data" >"$o/${model}_$v.bytes"
}

# fid_linerr: which linears each method helps (issue 33): every proxy package's per-linear
# layer-output error against f16 (g4cu compare --linear-error; q4, k-quant, first in
# FID_VARIANTS: the baseline of the ratios), X^T X from the methods' own calibration tokens (the
# train split, FIDELITY_CALIB_TOKENS as fid_methods); one Hessian run for all packages;
# $OUT/fidelity/proxy_linerr.{txt,md,json,tsv,svg} and proxy_linerr_kind.svg.
fid_linerr() {
    local d="$FID/proxy" o="$OUT/fidelity" v t0 pk=()
    for v in $FID_VARIANTS; do [ -d "$d/$v" ] && pk+=("$d/$v"); done
    [ -d "$d/q4" ] || { echo "fidelity: linear error: no $d/q4 (the baseline)"; return 0; }
    t0=$(date +%s)
    build-gpu/g4cu compare "$d/f16" "${pk[@]}" --linear-error --calib "$FID_CORPUS/train.txt" \
        --calib-tokens "${FIDELITY_CALIB_TOKENS:-2048}" --backend "${FIDELITY_BACKEND:-cuda}" \
        --threads "$(nproc)" --md "$o/proxy_linerr.md" --json "$o/proxy_linerr.json" \
        --tsv "$o/proxy_linerr.tsv" --svg "$o/proxy_linerr.svg" \
        --svg-kind "$o/proxy_linerr_kind.svg" >"$o/proxy_linerr.txt" 2>&1
    echo "linear error proxy (${#pk[@]} packages): exit $? ($(($(date +%s) - t0)) s)"
    head -40 "$o/proxy_linerr.txt" | cut -c1-220
    stamp "fidelity: proxy linear error"
}

stage_fidelity_run() {
    local d="$FID/proxy" o="$OUT/fidelity" ctx=${FIDELITY_CTX:-512} b=${FIDELITY_BACKEND:-cuda}
    mkdir -p "$o"
    [ -f "$FID/READY" ] || { echo "fidelity: $FID/READY missing (fidelity_bg, fidelity_wait)"; return 1; }
    # the rows the measurer made during fidelity_make (another stage's $OUT under pipeline.sh)
    # and fid_row's copies of every row measured on this proxy ($FID/rows: an earlier
    # pipeline.sh start's $OUT is gone) (cp -pu: fid_row reads their times; never over a newer
    # row), then only the rows missing or older than their package or the f16 logits
    local md src
    md=$(cat "$FID/measure_dir" 2>/dev/null)
    for src in "$md" "$FID/rows"; do
        if [ -n "$src" ] && [ -d "$src" ] && [ "$src" != "$(cd "$o" && pwd)" ]; then
            cp -pu "$src"/proxy_* "$o/" 2>/dev/null
            echo "fidelity: $(find "$src" -maxdepth 1 -name 'proxy_*.json' | wc -l) rows measured earlier, from $src"
        fi
    done
    cp "$d/train.json" "$FID_CORPUS/corpus.json" "$o/" 2>/dev/null
    local p # the fits' logs of this FID_DWQ only (an earlier fidelity_methods may have left others)
    for p in $FID_DWQ; do cp "$d/${p%%:*}.dwq.log" "$o/" 2>/dev/null; done
    local text="$d/test.txt" n=0
    for v in f16 $FID_VARIANTS; do fid_row "$v" && n=$((n + 1)); done
    stamp "fidelity: proxy perplexity runs ($n measured here)"
    # per-layer error of plain Q4 (compare's per-tensor report) and the sensitivity ranking, on
    # the first 128 held-out tokens
    local ids
    ids=$(build-gpu/g4cu tokenize "$d/f16/tokenizer.json" --bos "$(head -c 2000 "$text" | sed '$d')" | cut -d, -f1-128)
    build-gpu/g4cu compare "$d/f16" "$d/q4" --ids "$ids" --backend "$b" --md "$o/proxy_layers.md" \
        --svg "$o/proxy_layers.svg" >"$o/proxy_layers.txt" 2>&1
    echo "compare proxy f16 vs q4 (per layer): exit $? $(grep KL "$o/proxy_layers.txt" | head -2 | tr '\n' ' ')"
    build-gpu/g4cu compare "$d/f16" --sensitivity --ids "$ids" --backend "$b" --md "$o/proxy_sens.md" \
        --json "$o/proxy_sens.json" --svg "$o/proxy_sens.svg" >"$o/proxy_sens.txt" 2>&1
    echo "sensitivity proxy: exit $?"; head -16 "$o/proxy_sens.txt" | cut -c1-150
    stamp "fidelity: proxy compare + sensitivity"
    fid_linerr
    if [ -f "$WORK/e2b/READY" ]; then
        local e=$WORK/e2b ec=${FIDELITY_E2B_CHUNKS:-4}
        fid_ppl e2b "$e/f16" f16 --tokenizer "$d/f16/tokenizer.json" --text "$text" --ctx "$ctx" \
            --chunks "$ec" --save-logits "$FID/e2b_f16.kld"
        fid_ppl e2b "$e/q4" q4 --tokenizer "$d/f16/tokenizer.json" --ctx "$ctx" --kl-base "$FID/e2b_f16.kld"
        rm -f "$FID/e2b_f16.kld"
        stamp "fidelity: e2b perplexity runs"
    else
        echo "fidelity: no $WORK/e2b/READY: the E2B rows are left out"
    fi
    python3 tools/python/fidelity_report.py "$o" "$o/FIDELITY.md" && cat "$o/FIDELITY.md"
    # one archive (the device tool brings back only a few files): FIDELITY.md, JSON, SVG, logs
    tar -czf "$OUT/fidelity.tar.gz" -C "$OUT" fidelity && echo "fidelity: $OUT/fidelity.tar.gz"
}

# the names tools/gpu/pipeline.sh's plan uses (it detaches every stage, so train runs in the
# foreground there): train = fidelity_make, fidelity_measure = fidelity_run
stage_train() { stage_fidelity_make; }
stage_fidelity_measure() { stage_fidelity_run; }

# --- issue 35: a proxy that reads and listens ------------------------------------------------
MMD=${MMD:-$WORK/mm}
# MM_CARRY: what travels (tools/gpu/fetch_mm_carry.sh): the item plan (speech.jsonl.gz,
# images.jsonl.gz, data.json), espeak/ and fonts/ (tools/gpu/env.sh), read only. MM_DATA: what
# mm_make makes from it (the plan's copy, speech/, media/, speech.jsonl, ocr_test.jsonl,
# asr_test.jsonl), which mm_run, mm_parity.py, mm_logits_check.py and make_reference.py --mm
# read: under $WORK, not in the tree, as pipeline.sh copies the tree afresh each start and the
# next call's mm_run would find none of it (session 33, call 3). Set MM_DATA to keep it elsewhere.
MM_CARRY=${MM_CARRY:-.carry/mmdata}
MM_DATA=${MM_DATA:-$MMD/data}
# the text proxy's quantize variants, but gptq_imx as the text proxy's best row of issue 33,
# q4_gptq_imx_16k (-39.6% there: ${MM_CALIB_TOKENS_LONG:-16384} tokens in windows of 512, the
# same flags), not from the other rows' ${MM_CALIB_TOKENS:-2048} in one sequence
MM_VARIANTS="${FID_QUANT_VARIANTS/ q4_gptq_imx/} q4_gptq_imx_16k"

# mm_quant NAME ARGS...: the multimodal proxy's ($MMD/proxy/NAME)
mm_quant() { quant_into "$MMD/proxy" mm "$@"; }

# mm_want NAME: NAME is among ${MM_QUANTS} (default: all of $MM_VARIANTS)
mm_want() { case " ${MM_QUANTS:-$MM_VARIANTS} " in *" $1 "*) return 0 ;; esac; return 1; }

# mm_check_quants: every MM_QUANTS name is one of MM_VARIANTS (else one line naming it, 1)
mm_check_quants() {
    local v
    for v in ${MM_QUANTS:-}; do
        case " $MM_VARIANTS " in *" $v "*) ;; *) echo "mm: MM_QUANTS: no variant $v (of: $MM_VARIANTS)"; return 1 ;; esac
    done
}

# mm_data_init: $MM_DATA holds a copy of the carried plan ($MM_CARRY), which make_mm_data.py's
# speech and media steps read and extend there (data.json gains the speech's seconds); nothing is
# copied when MM_DATA is the carried folder itself
mm_data_init() {
    mkdir -p "$MM_DATA" || return 1
    [ "$(cd "$MM_CARRY" && pwd -P)" != "$(cd "$MM_DATA" && pwd -P)" ] || return 0
    cp "$MM_CARRY/speech.jsonl.gz" "$MM_CARRY/images.jsonl.gz" "$MM_CARRY/data.json" "$MM_DATA/"
}

# mm_prepare_data: $MM_DATA made ready for training: the carried plan copied, espeak-ng
# unpacked into $MMD/espeak, the speech rendered and the held-out media and manifests written;
# the python modules the training needs checked first (1 and one line on any failure)
mm_prepare_data() {
    local d="$MMD" t0
    [ -f "$MM_CARRY/speech.jsonl.gz" ] && [ -f "$MM_CARRY/espeak/espeak-ng-data-en.tar.xz" ] ||
        { echo "mm: $MM_CARRY has no plan or no espeak (tools/gpu/fetch_mm_carry.sh on a CPU machine, carried)"; return 1; }
    mm_data_init || { echo "mm: could not copy the plan from $MM_CARRY to $MM_DATA"; return 1; }
    # PIL renders the images (the image's; a Pillow wheel in .whl/opt/ where it has none)
    if ! python3 -c 'import PIL' 2>/dev/null && ls .whl/opt/pillow-*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/g4site .whl/opt/pillow-*.whl || return 1
    fi
    # what the training needs stops the stage now; what only mm_run's HF dump needs
    # (make_reference.py --mm: Gemma4ImageProcessor is torchvision's, soxr resamples) is said
    # now, 15 minutes before mm_run would find out
    python3 -c 'import numpy, PIL, tokenizers, torch, mobius
from transformers import Gemma4ForConditionalGeneration' ||
        { echo "mm: a python module the training needs is missing (above)"; return 1; }
    python3 -c 'import torchvision, soxr, soundfile' 2>&1 | tail -1 | sed 's/^/mm: WARNING: mm_run'"'"'s HF dump (make_reference.py --mm) will fail: /'
    t0=$(date +%s)
    bash tools/gpu/espeak_prefix.sh "$MM_CARRY/espeak" "$d/espeak" || return 1
    python3 tools/python/make_mm_data.py speech "$MM_DATA" --espeak "$d/espeak" --jobs "$(nproc)" || return 1
    stamp "mm: speech ($(($(date +%s) - t0)) s)"
    t0=$(date +%s)
    python3 tools/python/make_mm_data.py media "$MM_DATA" --jobs "$(nproc)" || return 1
    stamp "mm: held-out media ($(($(date +%s) - t0)) s)"
}

stage_mm_make() {
    local d="$MMD" t0
    rm -rf "$d" && mkdir -p "$d"
    mm_check_quants || { touch "$d/FAILED"; return 1; }
    mm_prepare_data || { touch "$d/FAILED"; return 1; }
    t0=$(date +%s)
    if [ -n "${MM_TRAIN_ARGS_B:-}" ]; then
        mm_train_pair
    else
        python3 tools/python/train_mm_proxy.py "$d/proxy" --data "$MM_DATA" --preset "${MM_PRESET:-proxy}" \
            --minutes "${MM_MINUTES:-10}" ${MM_TRAIN_ARGS:-} 2>&1 | grep -v "Saving \|it/s\]" || true
        # the run's table alone (mm_pair_table.py with one file): printed, $MMD/RUN.md, $OUT/mm
        [ -f "$d/proxy/train.json" ] && mkdir -p "$OUT/mm" &&
            python3 tools/python/mm_pair_table.py "$d/proxy/train.json" --a "${MM_TRAIN_ARGS:-}" \
                --out "$d/RUN.md" && cp "$d/RUN.md" "$OUT/mm/RUN.md"
    fi
    [ -f "$d/proxy/f16/tokenizer.json" ] || { touch "$d/FAILED"; return 1; }
    stamp "mm: trained + exported ($(($(date +%s) - t0)) s)"
    # MM_TRAIN_ARGS="--profile N": the profiler's tables into this log (mm_run copies the file)
    [ -f "$d/proxy/profile.txt" ] && cut -c1-200 "$d/proxy/profile.txt"
    # (the train sentences as the trainer reads them: make_mm_data.train_split, no pieces)
    PYTHONPATH=tools/python python3 -c "
import sys, make_mm_data as m
for it in m.train_split(m.read_jsonl(sys.argv[1])): print(it['text'])" "$MM_DATA/speech.jsonl" >"$d/calib.txt"
    wait_g4cu mm || { touch "$d/FAILED"; return 1; }
    mm_quant_all
    touch "$d/READY"
}

# mm_train_pair (mm_make with MM_TRAIN_ARGS_B): recipe B trained beside A, on the same GPU and
# data, same preset and --minutes, MM_TRAIN_ARGS_B for MM_TRAIN_ARGS, into $MMD/proxy_b with
# --no-export (B is compared, never packaged); each gets half the preset's loader workers (at
# least 1 where the preset has any; an own --workers in MM_TRAIN_ARGS / _B comes later on the
# line and wins: argparse keeps the last). B's log lines are A's filter with "B: " in front
# (both line-buffered: the lines of the two never cut into each other). Both exit codes are
# said; B failing fails nothing (A's package is the stage's product). After both:
# tools/python/mm_pair_table.py's table of their train.json files in $MMD/PAIR.md (mm_run packs
# it and B's train.json as train_b.json) and $OUT/mm/PAIR.md, printed.
mm_train_pair() {
    local d="$MMD" w half pid rc_a rc_b
    w=$(python3 -c 'import sys; sys.path.insert(0, "tools/python")
from train_mm_proxy import PRESETS; print(PRESETS[sys.argv[1]]["workers"])' "${MM_PRESET:-proxy}") ||
        { echo "mm: B: no preset ${MM_PRESET:-proxy} (above)"; return 1; }
    half=$((w > 1 ? w / 2 : w))
    echo "mm: B: MM_TRAIN_ARGS_B=\"$MM_TRAIN_ARGS_B\" beside A, into $d/proxy_b, --workers $half each (preset ${MM_PRESET:-proxy}: $w)"
    (
        # shellcheck disable=SC2086 # word splitting: the arguments' list
        python3 tools/python/train_mm_proxy.py "$d/proxy_b" --data "$MM_DATA" --preset "${MM_PRESET:-proxy}" \
            --minutes "${MM_MINUTES:-10}" --workers "$half" $MM_TRAIN_ARGS_B --no-export 2>&1 |
            grep --line-buffered -v "Saving \|it/s\]" | sed -u 's/^/B: /'
        exit "${PIPESTATUS[0]}"
    ) &
    pid=$!
    # shellcheck disable=SC2086
    python3 tools/python/train_mm_proxy.py "$d/proxy" --data "$MM_DATA" --preset "${MM_PRESET:-proxy}" \
        --minutes "${MM_MINUTES:-10}" --workers "$half" ${MM_TRAIN_ARGS:-} 2>&1 |
        grep --line-buffered -v "Saving \|it/s\]"
    rc_a=${PIPESTATUS[0]}
    wait "$pid"
    rc_b=$?
    echo "mm: A: train_mm_proxy exit $rc_a; B: exit $rc_b$([ "$rc_b" = 0 ] || echo " (B failed: no PAIR.md; the stage goes on with A)")"
    [ "$rc_b" = 0 ] && [ -f "$d/proxy/train.json" ] && [ -f "$d/proxy_b/train.json" ] || return 0
    mkdir -p "$OUT/mm"
    python3 tools/python/mm_pair_table.py "$d/proxy/train.json" "$d/proxy_b/train.json" \
        --a "${MM_TRAIN_ARGS:-}" --b "$MM_TRAIN_ARGS_B" --out "$d/PAIR.md" &&
        cp "$d/PAIR.md" "$OUT/mm/PAIR.md"
    return 0
}

# mm_quant_all: the Q4 variants of $MMD/proxy/f16, calibrated on $MMD/calib.txt
mm_quant_all() {
    local d="$MMD" budget
    local cal=(--calib "$d/calib.txt" --calib-tokens "${MM_CALIB_TOKENS:-2048}" --backend "${MM_BACKEND:-cuda}")
    local long=(--calib "$d/calib.txt" --calib-tokens "${MM_CALIB_TOKENS_LONG:-16384}"
        --calib-ctx 512 --backend "${MM_BACKEND:-cuda}")
    # q4 always: the baseline, and the --keep-auto budget is 10% of its bytes
    mm_quant q4
    budget=$(keep_budget "$d/proxy/q4" 2>/dev/null || echo 0)
    mm_want q4_keep_auto && mm_quant q4_keep_auto --keep-auto "$budget" "${cal[@]}"
    mm_want q4_imatrix && mm_quant q4_imatrix --imatrix "${cal[@]}"
    mm_want q4_rtn && mm_quant q4_rtn --method rtn
    mm_want q4_gptq && mm_quant q4_gptq --method gptq "${cal[@]}"
    mm_want q4_gptq_act && mm_quant q4_gptq_act --method gptq --act-order "${cal[@]}"
    mm_want q4_fit && mm_quant q4_fit --method fit "${cal[@]}"
    # shellcheck disable=SC2086 # FIDELITY_BEST is "METHOD [--act-order]"
    mm_want q4_best_keep_auto && mm_quant q4_best_keep_auto --method ${FIDELITY_BEST:-fit} --keep-auto "$budget" "${cal[@]}"
    mm_want q4_gptq_imx_16k && mm_quant q4_gptq_imx_16k --method gptq_imx "${long[@]}"
    return 0
}

# mm_quant: mm_make's quantize part again on its $MMD/proxy/f16 and $MMD/calib.txt (no data,
# no training; MM_QUANTS as mm_make); READY again once done
stage_mm_quant() {
    local d="$MMD"
    mm_check_quants || return 1
    if [ ! -f "$d/proxy/f16/tokenizer.json" ] || [ ! -f "$d/calib.txt" ]; then
        echo "mm_quant: no $d/proxy/f16 or $d/calib.txt (mm_make first)"
        return 1
    fi
    wait_g4cu mm || return 1
    rm -f "$d/READY"
    mm_quant_all
    touch "$d/READY"
}

stage_mm_bg() { bg_start "$MMD" mm_make; }

stage_mm_wait() {
    bg_wait "$MMD" mm_make mm "${MM_WAIT_S:-560}" 24 \
        "train_mm_proxy: (tokenizer|[0-9,]+ param|--minutes|exported|profiled|held-out|[A-Za-z]+ warm phase done)|step [0-9]+/|skipped|mm:|make_mm_data|Error|error"
}

# mm_det on gpu-tiny (after tiny): its random weights and the mm-tiny-grow fixture's 8 clips (8
# lengths), no trained proxy needed; $OUT/tiny_det/mm_det. gpu-tiny has no tokenizer; the chat
# fixture's ids pass its 512-token vocabulary, so every item fails at the prefill's id check,
# AFTER the audio tower ran on the state's queue: the table then says 0/3 ok (measured in the
# thirty-sixth session), and what the stage still exercises is the tower (sanitize's eval run,
# under initcheck, is the useful check there). A package of CUDA shapes with a fitting
# tokenizer would make it a decode check too.
stage_tiny_det() {
    MM_DET_TOKENIZER=tests/fixtures/chat/chat_bpe.json \
        MM_DET_PKG="$WORK/gpu-tiny/f16" MM_DET_HF="$WORK/gpu-tiny/hf" MM_DET_DATA=tests/fixtures/mm-tiny-grow \
        OUT="$OUT/tiny_det" stage_mm_det
}

# Is toggle NAME in the space-separated list ONLY (an empty list: every toggle)? (mm_det's
# MM_DET_ONLY, mm_deccheck's MM_DECCHECK_ONLY)
mm_toggle_on() {
    [ -z "$2" ] && return 0
    case " $2 " in *" $1 "*) return 0 ;; esac
    return 1
}

# "equal/items" of two predictions files of the same items (mm_parity.py --same: token for token)
mm_same() {
    python3 tools/python/mm_parity.py --same "$1" "$2" 2>&1 | head -1 |
        sed -n 's/^mm_parity same: \([0-9]*\/[0-9]*\).*/\1/p'
}
stage_mm_det() {
    local d=${MM_DET_PKG:-$MMD/proxy/f16} data=${MM_DET_DATA:-$MM_DATA} hf=${MM_DET_HF:-$MMD/proxy/hf}
    local o="$OUT/mm_det" runs=${MM_DET_RUNS:-3} tg name envs r out line
    rm -rf "$o" && mkdir -p "$o"
    [ -d "$d" ] || { echo "mm_det: no $d (mm_make, this call or an earlier start's)"; return 1; }
    [ -f "$data/asr_test.jsonl" ] || { echo "mm_det: no $data/asr_test.jsonl"; return 1; }
    [ -x build-gpu/g4cu ] || { echo "mm_det: no build-gpu/g4cu (the build stage)"; return 1; }
    # the CPU's answers (mm_run's, of the trained proxy): for that package only
    local base="$o/base_1/predictions.jsonl" ref="$MMD/det_ref/predictions.jsonl"
    [ -n "${MM_DET_PKG:-}" ] && ref=${MM_DET_REF:-}
    printf '| setting | env | runs ok | answers equal to its run 1 (each later run) | to base run 1 | to the CPU |\n|---|---|---|---|---|---|\n' >"$o/DET.md"
    for tg in "${MM_DECCHECK_TOGGLES[@]}"; do
        name=${tg%%|*} envs=${tg#*|}
        [ "$name" = text ] && continue # (a prompt change, not a setting)
        mm_toggle_on "$name" "${MM_DET_ONLY:-}" || continue
        local ok=0 self="" tobase="" tocpu=""
        for r in $(seq 1 "$runs"); do
            out="$o/${name}_$r"
            # (env with no assignment runs the command as it is; word splitting is wanted)
            # shellcheck disable=SC2086
            # ok: exit 0 AND no item failed (a run whose items all fail gives equal empty
            # answers: the thirty-sixth session's first tiny_det, every row "8/8" on 8 failures)
            env $envs build-gpu/g4cu eval "$data/asr_test.jsonl" --task librispeech "$d" \
                ${MM_DET_TOKENIZER:+--tokenizer "$MM_DET_TOKENIZER"} --backend "${MM_BACKEND:-cuda}" --out "$out" --max-new "${MM_MAX_NEW:-48}" >"$out.txt" 2>&1 &&
                python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["failed"] != 0)' \
                    "$out/scores.json" && ok=$((ok + 1))
            [ -f "$out/predictions.jsonl" ] || continue
            [ "$r" -gt 1 ] && self="$self $(mm_same "$o/${name}_1/predictions.jsonl" "$out/predictions.jsonl")"
            if [ "$r" = 1 ]; then
                [ -f "$base" ] && tobase=$(mm_same "$base" "$out/predictions.jsonl")
                [ -f "$ref" ] && tocpu=$(mm_same "$ref" "$out/predictions.jsonl")
            fi
        done
        line="| $name | ${envs:-(none)} | $ok/$runs |${self:- -} | ${tobase:--} | ${tocpu:--} |"
        echo "$line" >>"$o/DET.md"
        echo "mm_det: $line"
    done
    stamp "mm_det: $d, ${MM_DET_ONLY:+MM_DET_ONLY, }$runs runs a setting"
    # the prefill side (audio tower + one teacher-forced prefill, no decode step): the same 8
    # items through mm_logits_check twice; a deterministic prefill gives the same rel / max abs
    # against HF bit for bit (HF's side is the same forward both times)
    if [ -f "$base" ] && [ -d "$hf" ]; then
        for r in 1 2; do
            python3 tools/python/mm_logits_check.py --hf "$hf" --package "$d" \
                --data "$data" --preds "$base" --items 8 --backend "${MM_BACKEND:-cuda}" \
                --json "$o/prefill_$r.json" >"$o/prefill_$r.txt" 2>&1
        done
        python3 - "$o/prefill_1.json" "$o/prefill_2.json" "${MM_BACKEND:-cuda}" <<'PY' | tee -a "$o/DET.md"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
be = sys.argv[3]
same = sum(x[be]["rel"] == y[be]["rel"] and x[be]["max_abs"] == y[be]["max_abs"]
           for x, y in zip(a, b))
print(f"\nprefill (g4cu logits, {be}) twice on {len(a)} items: the same error against HF on "
      f"{same} of {min(len(a), len(b))}")
PY
        stamp "mm_det: the prefill twice"
    fi
    cat "$o/DET.md"
}

# mm_speed: issue 35's batch sweep and loader measurement (the header's list says what)
# mm_data: mm_make's data part alone (no training): what mm_speed needs, in ~1 minute
stage_mm_data() {
    mkdir -p "$MMD" && mm_prepare_data
}

stage_mm_speed() {
    local o="$OUT/mm_speed" dev=${MM_SPEED_DEVICE:-cuda} t0 rc busy=()
    rm -rf "$o" && mkdir -p "$o"
    [ -f "$MM_DATA/speech.jsonl" ] || { echo "mm_speed: no $MM_DATA/speech.jsonl (mm_make writes it, this call or an earlier start's)"; return 1; }
    [ "$dev" = cuda ] && busy=(--gpu-busy --top-ops "${MM_SPEED_TOP_OPS:-12}")
    local common=("$MM_DATA" --preset "${MM_PRESET:-proxy}" --device "$dev" --threads 0
        --batch 64 --pad-to 64 --split-digits)
    t0=$(date +%s)
    # shellcheck disable=SC2086 # (MM_SPEED_ARGS: options, split on spaces)
    timeout "${MM_SPEED_SWEEP_S:-150}" python3 tools/python/mm_warm_timing.py "${common[@]}" \
        --batches "${MM_SPEED_BATCHES:-64,128,256}" --rounds "${MM_SPEED_ROUNDS:-5}" --a-warm \
        --strict-determinism --ctc-weight 0.5 --ctc-units chars --ctc-at embed --ctc-tied \
        --a-lr-mult 0.3 --v-pos-init 0.02 --render-workers "$(nproc)" "${busy[@]}" \
        ${MM_SPEED_ARGS:-} >"$o/speed_sweep.log" 2>&1
    rc=$?
    grep "^mm_warm_timing" "$o/speed_sweep.log" >"$o/speed.txt"
    [ $rc = 0 ] || echo "mm_speed: the sweep exited $rc$([ $rc = 124 ] && echo ": stopped by the timeout, ${MM_SPEED_SWEEP_S:-150} s"): $(grep -v '^ *$' "$o/speed_sweep.log" | tail -1)" >>"$o/speed.txt"
    stamp "mm_speed: the sweep ($(($(date +%s) - t0)) s)"
    t0=$(date +%s)
    timeout "${MM_SPEED_LOADER_S:-60}" python3 tools/python/mm_warm_timing.py "${common[@]}" \
        --loader-workers "${MM_SPEED_WORKERS:-7,14}" --loader-batches "${MM_SPEED_LOADER_BATCHES:-24}" \
        --reps 8 --a-speed-perturb 0.1 >"$o/speed_loader.log" 2>&1
    rc=$?
    grep "^mm_warm_timing" "$o/speed_loader.log" >>"$o/speed.txt"
    [ $rc = 0 ] || echo "mm_speed: the loader measurement exited $rc$([ $rc = 124 ] && echo ": stopped by the timeout, ${MM_SPEED_LOADER_S:-60} s"): $(grep -v '^ *$' "$o/speed_loader.log" | tail -1)" >>"$o/speed.txt"
    stamp "mm_speed: the loaders ($(($(date +%s) - t0)) s)"
    cat "$o/speed.txt"
}

stage_mm_run() {
    local d="$MMD/proxy" o="$OUT/mm" b=${MM_BACKEND:-cuda} v t0
    # a fresh folder: g4cu eval refuses an --out that holds an earlier call's predictions
    rm -rf "$o" && mkdir -p "$o"
    [ -f "$MMD/READY" ] || { echo "mm: $MMD/READY missing (mm_bg, mm_wait)"; return 1; }
    if [ ! -f "$MM_DATA/ocr_test.jsonl" ] || [ ! -f "$MM_DATA/asr_test.jsonl" ]; then
        echo "mm: no held-out manifests in $MM_DATA (mm_make writes them there; MM_DATA as mm_make's)"
        return 1
    fi
    [ -x build-gpu/g4cu ] || { echo "mm: no build-gpu/g4cu (the build stage, this call or an earlier start's)"; return 1; }
    cp "$d/train.json" "$o/" 2>/dev/null
    cp "$d/profile.txt" "$o/" 2>/dev/null
    # MM_TRAIN_ARGS_B's pair (mm_make): the table and B's train.json
    cp "$MMD/PAIR.md" "$o/" 2>/dev/null
    cp "$MMD/RUN.md" "$o/" 2>/dev/null  # (A alone: its table)
    cp "$MMD/proxy_b/train.json" "$o/train_b.json" 2>/dev/null
    cp "$MM_DATA/data.json" "$MM_DATA/ocr_test.jsonl" "$MM_DATA/asr_test.jsonl" "$o/" 2>/dev/null
    for v in f16 $MM_VARIANTS; do
        [ -d "$d/$v" ] || continue
        t0=$(date +%s)
        build-gpu/g4cu eval "$MM_DATA/ocr_test.jsonl" --task ocrbench "$d/$v" --backend "$b" \
            --out "$o/eval_${v}_ocr" --max-new "${MM_MAX_NEW:-48}" --batch "${MM_EVAL_BATCH:-1}" >"$o/eval_${v}_ocr.txt" 2>&1
        echo "eval $v ocr: exit $? $(tail -1 "$o/eval_${v}_ocr.txt")"
        build-gpu/g4cu eval "$MM_DATA/asr_test.jsonl" --task librispeech "$d/$v" --backend "$b" \
            --out "$o/eval_${v}_asr" --max-new "${MM_MAX_NEW:-48}" --batch "${MM_EVAL_BATCH:-1}" >"$o/eval_${v}_asr.txt" 2>&1
        echo "eval $v asr: exit $? $(tail -1 "$o/eval_${v}_asr.txt") ($(($(date +%s) - t0)) s)"
        stat -c %s "$d/$v/decoder/model.onnx.data" >"$o/$v.bytes"
    done
    stamp "mm: evals"
    # near ties judged with the fixed compare tolerance of g4cu's backend (cpu-f32 / cuda-f16)
    local tie_tol=cuda-f16
    [ "$b" = cpu ] && tie_tol=cpu-f32
    python3 tools/python/mm_parity.py --hf "$d/hf" --data "$MM_DATA" --ocr "$o/eval_f16_ocr/predictions.jsonl" \
        --asr "$o/eval_f16_asr/predictions.jsonl" --max-new "${MM_MAX_NEW:-48}" --json "$o/parity.json" \
        --tie-tol "$tie_tol" \
        2>&1 | grep -v "^\[transformers\]\|Loading" | tee "$o/parity.txt"
    stamp "mm: parity (HF vs g4cu f16 on $b)"
    # MM_CPU_PARITY=1 (GPU runs): the f16 ASR items again on the CPU backend, mm_parity of them
    # at cpu-f32 and the CPU's tokens against the GPU's, and mm_logits_check on both backends:
    # tells a CUDA-only disagreement with HF from one of the shared audio path, and a decode
    # path's from a prefill's (the twenty-sixth session's ASR parity, 27 of 80 real)
    if [ "${MM_CPU_PARITY:-0}" = 1 ] && [ "$b" != cpu ]; then
        t0=$(date +%s)
        build-gpu/g4cu eval "$MM_DATA/asr_test.jsonl" --task librispeech "$d/f16" --backend cpu \
            --threads "$(nproc)" --out "$o/eval_f16_asr_cpu" --max-new "${MM_MAX_NEW:-48}" \
            >"$o/eval_f16_asr_cpu.txt" 2>&1
        echo "eval f16 asr (cpu backend): exit $? $(tail -1 "$o/eval_f16_asr_cpu.txt") ($(($(date +%s) - t0)) s)"
        python3 tools/python/mm_parity.py --hf "$d/hf" --data "$MM_DATA" \
            --asr "$o/eval_f16_asr_cpu/predictions.jsonl" --max-new "${MM_MAX_NEW:-48}" \
            --json "$o/parity_cpu.json" --tie-tol cpu-f32 \
            2>&1 | grep -v "^\[transformers\]\|Loading" | tee "$o/parity_cpu.txt"
        python3 tools/python/mm_parity.py --same "$o/eval_f16_asr/predictions.jsonl" \
            "$o/eval_f16_asr_cpu/predictions.jsonl" | tee -a "$o/parity_cpu.txt"
        # (mm_det's reference, outside $OUT: a later call's mm_det finds it)
        rm -rf "$MMD/det_ref" && mkdir -p "$MMD/det_ref" &&
            cp "$o/eval_f16_asr_cpu/predictions.jsonl" "$MMD/det_ref/"
        # the first 8 disagreements teacher-forced on g4cu's answers: prefill or decode?
        python3 tools/python/mm_logits_check.py --hf "$d/hf" --package "$d/f16" --data "$MM_DATA" \
            --preds "$o/eval_f16_asr/predictions.jsonl" --parity "$o/parity.json" --items 8 \
            --backend "$b" --backend cpu --json "$o/logits_check.json" \
            2>&1 | grep -v "^\[transformers\]\|Loading" | tee "$o/logits_check.txt"
        stamp "mm: parity (HF vs g4cu f16 on cpu; cpu vs $b)"
    fi
    # what mm_deccheck reads, kept under $WORK for a later start's (pipeline.sh's logs go)
    mkdir -p "$MMD/deccheck_in" && cp "$o/eval_f16_asr/predictions.jsonl" "$o/parity.json" \
        "$MMD/deccheck_in/" 2>/dev/null
    [ "${MM_DECCHECK:-0}" = 1 ] && [ "$b" != cpu ] && mm_deccheck "$o"
    # one image + audio prompt: HF's layer-by-layer dump, g4cu compare of f16 (pass / fail) and
    # of each Q4 variant (the per-layer error, image and audio positions included)
    # (mm_reference.py wants audio whose last conv row is padding, to cover the tower's masked
    # path: 1 held-out utterance in 40 has one (the dry run), so the first held-out utterance is
    # lengthened with silence to the next length that gives one: $MMD/mm_audio.wav)
    local img aud=$MMD/mm_audio.wav
    img=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['image'])" "$MM_DATA/ocr_test.jsonl")
    rm -f "$MMD/mm.npz" "$aud"
    python3 - "$MM_DATA" "$aud" <<'PY' || echo "mm: no reference audio (above)"
import json, os, sys, wave
sys.path.insert(0, "tools/python")
from mm_reference import length_with_padding_frame
src = os.path.join(sys.argv[1], json.loads(open(os.path.join(sys.argv[1], "asr_test.jsonl")).readline())["audio"])
with wave.open(src) as w:
    params, n, pcm = w.getparams(), w.getnframes(), w.readframes(w.getnframes())
m = length_with_padding_frame(n)
with wave.open(sys.argv[2], "wb") as w:
    w.setparams(params)
    w.writeframes(pcm + bytes(2 * params.nchannels * (m - n)))
print(f"mm: reference audio {src} + {m - n} samples of silence")
PY
    python3 tools/python/make_reference.py --hf "$d/hf" --package "$d/f16" --mm "$MMD/mm.npz" \
        --image "$MM_DATA/$img" --audio "$aud" --image-tokens 70 >"$o/mm_reference.txt" 2>&1
    echo "make_reference --mm ($img, $aud): exit $? $(tail -1 "$o/mm_reference.txt")"
    # The CPU backend's reference is HF in float64 on the same case, each tensor within 8x HF's
    # own fp32 error (--tol-from, hf-fp32x8): at the proxy's depth and random-init attention HF
    # fp32 itself drifts past the fixed cpu-f32 1e-4 (bench/NOTES.md, issue 35 drift)
    rm -f "$MMD/mm64.npz"
    [ -f "$MMD/mm.npz" ] && python3 tools/python/make_reference.py --hf "$d/hf" --package "$d/f16" \
        --mm "$MMD/mm64.npz" --image "$MM_DATA/$img" --audio "$aud" --image-tokens 70 \
        --dtype float64 >"$o/mm_reference64.txt" 2>&1
    echo "make_reference --mm --dtype float64: exit $? $(tail -1 "$o/mm_reference64.txt" 2>/dev/null)"
    local bbs=(cpu)
    [ "$b" = cpu ] || bbs+=("$b")
    for bb in "${bbs[@]}"; do
        if [ "$bb" = cpu ]; then
            build-gpu/g4cu compare "$d/f16" "$MMD/mm64.npz" --tol-from "$MMD/mm.npz" --backend cpu \
                --md "$o/compare_f16_cpu.md" --json "$o/compare_f16_cpu.json" >"$o/compare_f16_cpu.txt" 2>&1
        else
            build-gpu/g4cu compare "$d/f16" "$MMD/mm.npz" --backend "$bb" --md "$o/compare_f16_$bb.md" \
                --json "$o/compare_f16_$bb.json" >"$o/compare_f16_$bb.txt" 2>&1
        fi
        echo "compare f16 vs HF (mm prompt, $bb): exit $? $(tail -1 "$o/compare_f16_$bb.txt")"
        python3 tools/python/cmp_spans.py "$o/compare_f16_$bb.json" "  f16 ($bb)"
    done
    # each Q4 variant: the per-layer error on the text, image and audio rows (issue 35's
    # FIDELITY row; tools/python/cmp_spans.py: the worst decoder layer's rel err per span kind)
    for v in $MM_VARIANTS; do
        [ -d "$d/$v" ] || continue
        build-gpu/g4cu compare "$d/$v" "$MMD/mm.npz" --backend "$b" --md "$o/compare_$v.md" \
            --json "$o/compare_$v.json" >"$o/compare_$v.txt" 2>&1
        echo "compare $v vs HF (mm prompt, information): $(tail -1 "$o/compare_$v.txt")"
        python3 tools/python/cmp_spans.py "$o/compare_$v.json" "  $v"
    done
    stamp "mm: compare"
    python3 tools/python/mm_report.py "$o" "$o/MM_FIDELITY.md" && cat "$o/MM_FIDELITY.md"
    tar -czf "$OUT/mm.tar.gz" -C "$OUT" mm && echo "mm: $OUT/mm.tar.gz"
}

# --- issue 35: the decode path against its own prefill, toggle by toggle ---------------------
# NAME|ENV (space-separated assignments; empty: the defaults), in the order worth having first
# if the stage is cut short. Each is a switch that changes the ONE-TOKEN decode step on CUDA with
# an fp16 package (engine/text_decoder.c, kernels/*.cu), read at state creation or once a
# process: the graph replay (G4_EAGER=1: op by op), PDL (G4_PDL=0), the fused add-norm prologue
# of the next linear (G4_FUSE=0: add_rmsnorm_next, then the plain GEMV), q|k|v as one linear
# (G4_QKV=0), the fp16 GEMV design (G4_GEMV_F16=fma: o, down, the PLE projection and the lm_head
# on the CUDA cores; G4_GEMV_F16_NORM=mma: the add-norm forms on the tensor cores), the head
# preparation inside the decode attention (G4_FUSE_ATTN=1), the decode attention's merge inside
# the split kernel (G4_ATTN_MERGE=cluster; below 1024 keys the default is already the separate
# merge launch, "split"), the PLE block as one op (G4_PLE_FUSED=1), the tensor-core GEMV's K
# unsplit (G4_GVM_SPLIT_MAX=1: another fp32 summation order), and all_off (the first five at
# once). "text" is no switch: the defaults on each prompt without its audio block (mm_logits_check
# --text-only), the same answer tokens: does the decode leave its prefill after a text context
# too, or only after the audio's? Left out: G4_PERSIST_MLP=1 (an fp16 package runs the same ops apart: cu_mlp_block),
# G4_GEMV_F16_PIPE=0 (the order of the weight loads, not of the arithmetic), G4_SKINNY,
# G4_GEMM_PREFILL, G4_ATTN_PREFILL (rows > 8 / > 64: the prefill), G4_GEMV* (Q4 weights),
# G4_FUSE_ATTN=0 and G4_BATCH_* (the batch step). "sync": eager with a device sync after every
# launch (G4_SYNC_LAUNCHES=1; a sync cannot run inside a graph capture): one stream at a time,
# so an answer that changes run to run with the defaults and not here is a race between streams.
# "poison": every device allocation starts as 0xFF bytes (NaN), so a read of memory no op wrote
# turns into NaN answers (or an error) every run.
MM_DECCHECK_TOGGLES=(
    "base|"
    "all_off|G4_EAGER=1 G4_PDL=0 G4_FUSE=0 G4_QKV=0 G4_GEMV_F16=fma"
    "text|"
    "eager|G4_EAGER=1"
    "sync|G4_EAGER=1 G4_SYNC_LAUNCHES=1"
    "poison|G4_POISON=1"
    "pdl0|G4_PDL=0"
    "fuse0|G4_FUSE=0"
    "qkv0|G4_QKV=0"
    "gemv_fma|G4_GEMV_F16=fma"
    "norm_mma|G4_GEMV_F16_NORM=mma"
    "attn1|G4_FUSE_ATTN=1"
    "merge_cluster|G4_ATTN_MERGE=cluster"
    "ple_fused|G4_PLE_FUSED=1"
    "gvm_split1|G4_GVM_SPLIT_MAX=1"
)

# mm_deccheck O: the toggles' runs into O (deccheck_NAME.{txt,json}, DECCHECK.md), on the
# predictions and parity that mm_run kept in $MMD/deccheck_in
mm_deccheck() {
    local o=$1 d="$MMD/proxy" in="$MMD/deccheck_in" b=${MM_BACKEND:-cuda} tg name envs t0 rc
    mkdir -p "$o"
    for tg in "${MM_DECCHECK_TOGGLES[@]}"; do
        name=${tg%%|*} envs=${tg#*|}
        mm_toggle_on "$name" "${MM_DECCHECK_ONLY:-}" || continue
        t0=$(date +%s)
        local nohf=--no-hf
        [ "$name" = base ] && nohf=""
        [ "$name" = text ] && nohf="--no-hf --text-only"
        # (env: the toggle's assignments for this run only; word splitting is wanted)
        # shellcheck disable=SC2086
        env $envs python3 tools/python/mm_logits_check.py --hf "$d/hf" --package "$d/f16" \
            --data "$MM_DATA" --preds "$in/predictions.jsonl" --parity "$in/parity.json" \
            --items "${MM_DECCHECK_ITEMS:-8}" --backend "$b" --decode $nohf --g4cu build-gpu/g4cu \
            --json "$o/deccheck_$name.json" 2>&1 | grep -v "^\[transformers\]\|Loading" \
            >"$o/deccheck_$name.txt"
        rc=${PIPESTATUS[0]}
        # the same items through g4cu eval itself under the toggle (a fresh state that saw only
        # them): its tokens against the full eval's tells whether the toggle changes what the
        # eval generates, and (base) whether an item's answer depends on the items before it
        if [ ! -f "$o/deccheck_items.jsonl" ] && [ -f "$o/deccheck_$name.json" ]; then
            python3 -c 'import json, sys
ids = [r["id"] for r in json.load(open(sys.argv[1]))]
items = {json.loads(l)["id"]: l for l in open(sys.argv[2]) if l.strip()}
sys.stdout.write("".join(items[i] for i in ids if i in items))' "$o/deccheck_$name.json" \
                "$MM_DATA/asr_test.jsonl" >"$o/deccheck_items.jsonl"
        fi
        rm -rf "$o/deccheck_eval_$name"
        # shellcheck disable=SC2086
        [ -s "$o/deccheck_items.jsonl" ] && [ "$name" != text ] && env $envs build-gpu/g4cu eval "$o/deccheck_items.jsonl" \
            --task librispeech "$d/f16" --backend "$b" --data-dir "$MM_DATA" \
            --out "$o/deccheck_eval_$name" --max-new "${MM_MAX_NEW:-48}" >"$o/deccheck_eval_$name.txt" 2>&1
        echo "deccheck $name (${envs:-defaults}): exit $rc ($(($(date +%s) - t0)) s) $(grep "$b decode:" "$o/deccheck_$name.txt" | tail -1)"
    done
    python3 - "$o" "$b" "$in/predictions.jsonl" "${MM_DECCHECK_TOGGLES[@]}" <<'PY' | tee "$o/DECCHECK.md"
import json, os, sys
o, be, full = sys.argv[1], sys.argv[2], sys.argv[3]


def tokens(path):
    if not os.path.exists(path):
        return {}
    return {p["id"]: p.get("tokens") for p in map(json.loads, filter(str.strip, open(path)))}


full = tokens(full)
print("| toggle | env | items | dec_rel mean | dec_rel max | dec_pf items (rows) | "
      "dec_own items (rows) | dec_sample rows | first split rows (prefill gap) | "
      "eval = full eval |")
print("|---|---|---|---|---|---|---|---|---|---|")
for tg in sys.argv[4:]:
    name, env = tg.split("|", 1)
    path = os.path.join(o, f"deccheck_{name}.json")
    if not os.path.exists(path):
        print(f"| {name} | {env or '(defaults)'} | not run (no {os.path.basename(path)}) ||||||")
        continue
    rs = [r[be] for r in json.load(open(path)) if be in r]
    if not rs:
        print(f"| {name} | {env or '(defaults)'} | 0 ||||||")
        continue
    rel = [r["dec_rel"] for r in rs]
    firsts = ", ".join(f"{r['dec_first']} ({r['dec_first_gap']:.3g})" for r in rs if "dec_first" in r)
    # the subset eval under this toggle: items whose tokens equal the full (default) eval's
    sub = tokens(os.path.join(o, f"deccheck_eval_{name}", "predictions.jsonl"))
    same = f"{sum(sub[i] == full.get(i) for i in sub)} of {len(sub)}" if sub else "not run"
    print(f"| {name} | {env or '(defaults)'} | {len(rs)} | {sum(rel) / len(rel):.3g} | "
          f"{max(rel):.3g} | {sum(r['dec_pf'] > 0 for r in rs)} ({sum(r['dec_pf'] for r in rs)}) | "
          f"{sum(r['dec_own'] > 0 for r in rs)} ({sum(r['dec_own'] for r in rs)}) | "
          f"{sum(r.get('dec_sample', 0) for r in rs)} | {firsts} | {same} |")
PY
}

stage_mm_deccheck() {
    local d="$MMD/proxy" in="$MMD/deccheck_in" o="$OUT/mm_deccheck" t0
    [ -d "$d/f16" ] && [ -d "$d/hf" ] || { echo "mm_deccheck: no $d/f16 or $d/hf (mm_make / mm_bg first)"; return 1; }
    [ -f "$MM_DATA/asr_test.jsonl" ] || { echo "mm_deccheck: no $MM_DATA/asr_test.jsonl (mm_make writes it)"; return 1; }
    [ -x build-gpu/g4cu ] || { echo "mm_deccheck: no build-gpu/g4cu (the build stage, this call or an earlier start's)"; return 1; }
    rm -rf "$o" && mkdir -p "$o" "$in"
    if [ ! -f "$in/predictions.jsonl" ] || [ ! -f "$in/parity.json" ]; then
        # no mm_run before on this machine: its f16 ASR eval on CUDA and its parity, as mm_run runs them
        t0=$(date +%s)
        build-gpu/g4cu eval "$MM_DATA/asr_test.jsonl" --task librispeech "$d/f16" --backend "${MM_BACKEND:-cuda}" \
            --out "$o/eval_f16_asr" --max-new "${MM_MAX_NEW:-48}" >"$o/eval_f16_asr.txt" 2>&1
        echo "eval f16 asr: exit $? $(tail -1 "$o/eval_f16_asr.txt") ($(($(date +%s) - t0)) s)"
        python3 tools/python/mm_parity.py --hf "$d/hf" --data "$MM_DATA" \
            --asr "$o/eval_f16_asr/predictions.jsonl" --max-new "${MM_MAX_NEW:-48}" \
            --json "$o/parity.json" --tie-tol cuda-f16 2>&1 | grep -v "^\[transformers\]\|Loading" |
            tee "$o/parity.txt" | head -3
        cp "$o/eval_f16_asr/predictions.jsonl" "$o/parity.json" "$in/" || return 1
    fi
    mm_deccheck "$o"
    stamp "mm_deccheck: done"
}

stage_cli() {
    local d="$WORK/e2b" wav="$WORK/long_600s.wav" tok=${E2B_TOKENIZER:-$WORK/e2b_tok.json}
    # Gemma's special ids (the audio placeholder 258881) and a decodable id for all 262144.
    python3 tools/gpu/pad_tokenizer.py tests/fixtures/chat/chat_bpe.json "$WORK/e2b_tok.json" 262144
    python3 - "$wav" <<'PY' # 600 s of speech-like noise under a 3 Hz envelope, 16 kHz 16-bit
import math, random, struct, sys, wave
random.seed(21)
rate, n = 16000, 600 * 16000
with wave.open(sys.argv[1], "wb") as w:
    w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate)
    w.writeframes(b"".join(struct.pack("<h", int(8000 * (0.5 + 0.5 * math.sin(6.2832 * 3 * i / rate))
                                                  * (random.random() - 0.5))) for i in range(n)))
PY
    if [ -f "$d/READY" ] && [ -f "$tok" ]; then
        local t0 t1
        t0=$(date +%s.%N)
        build-gpu/g4cu asr "$d/f16" "$wav" --backend cuda --tokenizer "$tok" --json \
            >"$OUT/cli_asr_600s.json" 2>"$OUT/cli_asr_600s.err"
        local rc=$?
        t1=$(date +%s.%N)
        echo "cli: asr 600 s (e2b f16, cuda): exit $rc, $(grep -o '"window_start"' "$OUT/cli_asr_600s.json" | wc -l) windows, wall $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f s, RTF %.4f", b - a, (b - a) / 600 }')"
        build-gpu/g4cu bench "$d/f16" --reps 5 -o md >"$OUT/cli_bench.md" 2>"$OUT/cli_bench.err"
        echo "cli: bench -o md: exit $?"; cat "$OUT/cli_bench.md"
    else
        echo "cli: skipped the E2B runs: $d/READY or the tokenizer $tok is missing"
    fi
    local ids=2,105,258880,107,368,563,506,760,881,106,107,105,436,107 n # one image placeholder
    for n in 1 "$(nproc)"; do
        local t0 t1
        t0=$(date +%s.%N)
        build-gpu/g4cu logits tests/fixtures/mobius-tiny-f16/package --ids "$ids" --threads "$n" \
            --image tests/fixtures/frontends/media/square_rgb.png --tokenizer tests/fixtures/chat/chat_bpe.json \
            --out "$WORK/logits_$n.npy" >/dev/null 2>&1
        local rc=$?
        t1=$(date +%s.%N)
        echo "cli: tiny logits + image on the CPU, --threads $n: exit $rc, $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f s", b - a }')"
    done
    cmp -s "$WORK/logits_1.npy" "$WORK/logits_$(nproc).npy" && echo "cli: --threads 1 and $(nproc): bit-identical logits"
}

# llama.cpp for the peers stage: .carry/llama.tar.xz (tools/peers/pack_llamacpp.sh: the
# llama-cpp-python 0.3.36 sdist's vendor/llama.cpp, only what the build and the converter need)
# unpacked to $WORK/llama and built there with CUDA for sm_90a (llama-bench, llama-quantize).
# CPU and GPU-light: the pipeline runs it beside e2b_make. Line to read: "llamacpp.sh: built".
stage_llama_build() {
    local tar=.carry/llama.tar.xz
    [ -f "$tar" ] || { echo "llama_build: $tar missing (carry it; tools/peers/pack_llamacpp.sh makes it)"; return 1; }
    rm -rf "$WORK/llama"
    tools/peers/llamacpp.sh build "$tar" "$WORK/llama" cuda 2>&1 | tee "$OUT/llama_build.log" | tail -20
    [ -x "$WORK/llama/build/bin/llama-bench" ]
}

# llama.cpp's conversion (convert_hf_to_gguf.py f16) and Q4_K_M quantization of the full-size
# checkpoint, CPU work the pipeline runs beside the GPU benchmarks (after llama_build and
# e2b_make); the peers stage's llama-bench then reuses the GGUFs.
stage_llama_convert() {
    [ -f "$WORK/e2b/READY" ] || { echo "llama_convert: no $WORK/e2b/READY"; return 1; }
    mkdir -p "$WORK/llama_models"
    tools/peers/llamacpp.sh convert "$WORK/llama" "$WORK/e2b/hf" "$WORK/llama_models" 2>&1 | tail -5
    ls "$WORK/llama_models"/*.gguf 2>/dev/null
}

# The peers beside g4cu on the full-size random E2B (after e2b_make; llama_build for llama.cpp),
# one after another on the same GPU, with g4cu bench's definitions: g4cu bench f16 + Q4,
# onnxruntime-genai 0.18 (CUDA) on the same two packages (from $WORK/ort: onnxruntime_genai/ and
# onnxruntime/ unpacked from the onnxruntime-genai-cuda 0.18.0 and onnxruntime-gpu 1.31.1 wheels,
# ../shared/bench/PEERS.md), HF transformers bf16 / fp16 on the checkpoint, llama.cpp on the same
# checkpoint converted to F16 and Q4_K_M GGUFs, then the logits parity (one teacher-forced
# 64-id prompt: onnxruntime-genai CUDA and g4cu CUDA on the f16 package vs HF fp32). Writes
# $OUT/peers.md (the table, versions, build flags, parity) and $OUT/peers.json; the drivers' own
# JSON and logs in $OUT/peers/. A peer that cannot run gets its exact reason in the table.
# PEERS_SKIP: names among "ort hf llama parity" to leave out; PEERS_HF_REPS (default 3);
# PEERS_BACKEND=cpu runs g4cu and the parity's g4cu / HF on the CPU (a dry run of the stage).
stage_peers() {
    local d="$WORK/e2b" p="$OUT/peers" k skip=" ${PEERS_SKIP:-} " be=${PEERS_BACKEND:-cuda}
    [ -f "$d/READY" ] || { echo "peers: no $d/READY (run e2b_make first)"; return 1; }
    mkdir -p "$p"
    build-gpu/g4cu --version | head -1 >"$p/g4cu_version.txt"
    build-gpu/g4cu bench "$d/f16" "$d/q4" --backend "$be" --json "$p/g4cu.json" >"$p/g4cu_bench.log" 2>&1 ||
        echo "g4cu bench: $(tail -1 "$p/g4cu_bench.log")" | tee "$p/g4cu.json.error"
    stamp "peers: g4cu bench done"
    # onnxruntime-genai: its own onnxruntime first on PYTHONPATH (the image's 1.30 is CPU-only),
    # the CUDA 13 libraries of the image's python nvidia packages on LD_LIBRARY_PATH
    local ort_pp="" ort_ld=""
    if [ -d "$WORK/ort/onnxruntime_genai" ]; then
        local nv
        nv=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null)
        ort_pp=$WORK/ort
        ort_ld=$( [ -n "$nv" ] && find "$nv" -maxdepth 2 -type d -name lib | paste -sd:)
    fi
    export G4_ORT_PYTHONPATH=$ort_pp G4_ORT_LD_LIBRARY_PATH=$ort_ld
    for k in f16 q4; do
        rm -f "$p/ort_$k.json" "$p/ort_$k.json.error"
        if [[ $skip == *" ort "* ]]; then
            echo "skipped (PEERS_SKIP)" >"$p/ort_$k.json.error"
        elif [ -z "$ort_pp" ]; then
            echo "onnxruntime-genai: not available ($WORK/ort missing)" | tee "$p/ort_$k.json.error"
        else
            PYTHONPATH="$ort_pp${PYTHONPATH:+:$PYTHONPATH}" LD_LIBRARY_PATH="$ort_ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
                python3 tools/peers/ort_genai.py "$d/$k" --json "$p/ort_$k.json" >"$p/ort_$k.log" 2>&1 ||
                echo "onnxruntime-genai $k: $(grep -v '^ *$' "$p/ort_$k.log" | tail -1)" | tee "$p/ort_$k.json.error"
            grep "^ort_genai" "$p/ort_$k.log" | tail -8
        fi
    done
    stamp "peers: onnxruntime-genai done"
    rm -f "$p/hf.json" "$p/hf.json.error"
    if [[ $skip == *" hf "* ]]; then
        echo "skipped (PEERS_SKIP)" >"$p/hf.json.error"
    else
        python3 tools/python/bench_hf.py "$d/hf" --reps "${PEERS_HF_REPS:-3}" --long "${PEERS_HF_LONG:-4096,16384}" \
            --json "$p/hf.json" >"$p/hf.log" 2>&1 ||
            echo "HF transformers: $(grep -v '^ *$' "$p/hf.log" | tail -1)" | tee "$p/hf.json.error"
        grep "^hf " "$p/hf.log"
    fi
    stamp "peers: HF done"
    rm -f "$p/parity.json" "$p/parity.json.error"
    if [[ $skip == *" parity "* ]]; then
        echo "skipped (PEERS_SKIP)" >"$p/parity.json.error"
    else
        local no_ort=""; [ -z "$ort_pp" ] && no_ort=--no-ort
        python3 tools/peers/logits_parity.py --pkg "$d/f16" --hf "$d/hf" --g4cu build-gpu/g4cu \
            --backend "$be" --hf-device "$be" --n 64 $no_ort --work "$WORK/parity" \
            --json "$p/parity.json" >"$p/parity.log" 2>&1 ||
            echo "logits parity: $(grep -v '^ *$' "$p/parity.log" | tail -1)" | tee "$p/parity.json.error"
        grep -E "^(logits_parity|onnxruntime-genai|g4cu)" "$p/parity.log"
    fi
    rm -f "$p/llama.json" "$p/llama.json.error"
    if [[ $skip == *" llama "* ]]; then
        echo "skipped (PEERS_SKIP)" >"$p/llama.json.error"
    elif [ ! -x "$WORK/llama/build/bin/llama-bench" ]; then
        echo "llama.cpp: not built ($WORK/llama/build/bin/llama-bench missing: run llama_build)" | tee "$p/llama.json.error"
    else
        local n=0 # a pipeline that plans llama_convert (beside the GPU work) makes the GGUFs
        while grep -qw llama_convert "$WORK/logs/plan.txt" 2>/dev/null &&
            [ ! -f "$WORK/logs/llama_convert.done" ] && [ $n -lt 900 ]; do sleep 5; n=$((n + 5)); done
        tools/peers/llamacpp.sh bench "$WORK/llama" "$d/hf" "$WORK/llama_models" "$p/llama.json" \
            >"$p/llama.log" 2>&1 ||
            echo "llama.cpp: $(grep -v '^ *$' "$p/llama.log" | tail -1)" | tee "$p/llama.json.error"
        grep "^llama" "$p/llama.log"
        cp "$WORK/llama_models"/*.log "$p/" 2>/dev/null
        cp -r "$WORK/llama_models/llama_results" "$p/" 2>/dev/null
        # the GGUFs are ~10 + 3.5 GB of a 64 GB disk that already holds the E2B packages
        [ "${PEERS_KEEP_GGUF:-0}" = 1 ] || rm -f "$WORK/llama_models"/*.gguf
    fi
    stamp "peers: llama.cpp done"
    python3 tools/python/peers_table.py --g4cu "$p/g4cu.json" --g4cu-version "$(cat "$p/g4cu_version.txt")" \
        --ort-f16 "$p/ort_f16.json" --ort-q4 "$p/ort_q4.json" --hf "$p/hf.json" \
        --llama "$p/llama.json" --parity "$p/parity.json" --md "$OUT/peers.md" --json "$OUT/peers.json"
    tar -czf "$OUT/peers.tar.gz" -C "$OUT" peers && echo "peers: $OUT/peers.md, $OUT/peers.json, $OUT/peers.tar.gz"
}

# Test-only stages (G4_PIPETEST=1, tests/test_pipeline_keep.sh; refused otherwise): the shape of
# "build / mm_make" in one pipeline.sh start and "mm_run" in the next, without the GPU or the
# models. pipetest_make lays out $MM_DATA as mm_make does (mm_data_init: the carried plan's copy)
# and writes a manifest there, as make_mm_data.py media does; pipetest_run reads what mm_run
# reads: build-gpu/g4cu (run, its output printed), the manifest and the plan's copy.
pipetest_gate() {
    [ "${G4_PIPETEST:-0}" = 1 ] || { echo "pipetest: test-only stages (tests/test_pipeline_keep.sh sets G4_PIPETEST=1)"; return 1; }
}
stage_pipetest_make() {
    pipetest_gate || return 1
    rm -rf "$MMD" && mkdir -p "$MMD" && mm_data_init || return 1
    echo '{"id": "pipetest"}' >"$MM_DATA/ocr_test.jsonl"
    sleep "${G4_PIPETEST_SLEEP:-0}" # (a stage still running when the next start comes)
    touch "$MMD/READY"
    echo "pipetest_make: $MM_DATA"
}
stage_pipetest_run() {
    pipetest_gate || return 1
    [ -f "$MMD/READY" ] || { echo "pipetest_run: $MMD/READY missing"; return 1; }
    echo "pipetest_run: g4cu says $(build-gpu/g4cu 2>&1)"
    echo "pipetest_run: manifest $(cat "$MM_DATA/ocr_test.jsonl" 2>&1)"
    echo "pipetest_run: plan $(gzip -dc "$MM_DATA/speech.jsonl.gz" 2>&1 | head -1)"
}

for s in "${stages[@]}"; do
    stamp "stage $s"
    "stage_$s" || echo "stage $s FAILED"
done
stamp "done"
