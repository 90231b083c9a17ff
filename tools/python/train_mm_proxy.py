#!/usr/bin/env python3
"""Trains a Gemma-4 proxy that reads and listens (issue 35): its vision and audio towers and its
decoder learn to read rendered text (image + "What is written in the image?" -> the text) and to
transcribe espeak-ng speech (audio + the ASR prompt -> the sentence), then exports it with the
mobius exporter like the text proxy (tools/python/train_proxy.py).

    python3 tools/python/train_mm_proxy.py OUT --data DATA [--preset proxy|tiny]
                                               [--seed 0] [--minutes 10] [--steps N]
                                               [--device cuda|cpu] [--workers W]
                                               [--a-lr-mult X] [--a-warmup N]
                                               [--ctc-weight W] [--ctc-at embed|tower]
                                               [--ctc-units tokens|chars]
                                               [--ctc-tied [--ctc-tied-weight W]
                                                [--ctc-tied-scale S] [--ctc-tied-center]
                                                [--ctc-tied-joint-only]]
                                               [--v-aux-tied [--v-aux-tied-weight W]]
                                               [--a-var-weight W] [--a-var-gamma G]
                                               [--a-var-per clip|frame] [--a-cov-weight C]
                                               [--a-res-scale X] [--reps N]
                                               [--a-speed-perturb F] [--split-digits]
                                               [--v-pos-init S] [--v-res-scale X]
                                               [--v-proj-init STD] [--v-chars N]
                                               [--v-aux-weight W]
                                               [--lm-warm-steps N [--lm-copy P [--lm-copy-kind K]]]
                                               [--answer-mask P [--answer-mask-kind K]]
                                               [--dec-freeze-steps N] [--a-pieces P]
                                               [--v-warm-steps N] [--v-warm-batch B]
                                               [--a-warm] [--tower-joint-lr-mult X]
                                               [--pad-to N] [--no-cudnn-sdpa]
                                               [--strict-determinism] [--profile N]
                                               [--pad-frames N] [--compile]
                                               [--adamw auto|fused|foreach|loop]
                                               [--eval-every N] [--eval-items K]
                                               [--eval-decode]

DATA is tools/python/make_mm_data.py's folder after its `plan`, `speech` and `media` steps (the held-out
media and manifests exist; train items are rendered here, in the data loader, by the same
functions that wrote the held-out files).

1. Tokenizer: train_proxy.py's (Gemma's special ids, BPE with byte fallback) trained on the train
   sentences and strings and the two prompts -> OUT/hf/tokenizer.json.
2. Prompts exactly as `g4cu eval` builds them (engine/chat.h, the E2B chat template):
     <bos><|turn>system\\nYou are a helpful assistant. <turn|>\\n<|turn>user\\n{media}{text}<turn|>\\n
     <|turn>model\\n
   media = <|image> + N x <|image|> + <image|> (N = the image's patches / 9) or <|audio> +
   M x <|audio|> + <audio|> (M: the feature mask through the two stride-2 convolutions, as
   Gemma4Processor.replace_audio_token counts); text = the ocrbench question or the librispeech
   prompt (eval/eval_task.c). The target is the answer followed by <turn|> (an eos id of the
   config), and the loss is on the target tokens only.
3. Model: transformers' Gemma4ForConditionalGeneration; the text decoder of train_proxy.py's
   preset, the towers of the same layer kinds as E2B's with fewer / narrower layers (vision
   head_dim 64, audio head_dim 64: shapes the CUDA kernels take), the media token ids those of
   the tokenizer (8 audio heads: the mobius exporter assumes 8). Images at 70 soft tokens (vision default_output_length 70; the exported
   image_processor.json says 70, so `g4cu eval` uses the same budget).
     proxy  text 768 x 15 layers (train_proxy.py's proxy), vocab 4096; vision 384 x 6 layers;
            audio 512 x 6 layers, not trained (its random tower: trained, it collapsed); batch
            32 (half images, half audio); bf16 autocast; one H200
     tiny   text train_proxy.py's tiny shapes, vocab 1024; towers 64 wide, 1 layer; batch 4;
            for trying the pipeline on a CPU (--device cpu) in a minute (it learns nothing)
     ci     tests/fixtures/mm-tiny (tools/make_mm_tiny.sh): make_mm_data.py's `ci` plan (8
            strings, 8 sentences) memorised on one CPU thread: tiny's text shapes at 6 layers
            and 512 positions, vocab 480, audio subsampling channels [128, 8]; every item in
            every step (rendered once); the vision side at 3x the decoder's learning rate, the
            audio side not trained (its random tower: trained, it collapsed)
   Each item is seen in `reps` renderings (proxy 8: other noise and placement seeds; --reps N).
   --a-speed-perturb F: each clip's renderings after the first also play its speech at a speed
   drawn in [1 - F, 1 + F] (rendering(), make_mm_data.speed_perturb: resampled, so tempo and
   pitch together, Kaldi's speed perturbation; its soft-token count follows the new length);
   rendering 0, the held-out clips and F 0 (the default) as before.
   --split-digits: the tokenizer learns no merge that joins a digit to anything (train_proxy's
   train_tokenizer), so a number is one id a digit, as in Gemma's own tokenizer; without it the
   BPE of the train texts cuts numbers anywhere ("835,618" -> 83 5 ,6 18, "25/07/1974" -> 25
   /07/19 74 on the proxy plan), and an answer's ids do not follow its characters.
   The audio side's options (proxy and ci: lr x 0, none of the others; tiny has no
   a_lr_mult, so its audio side trains at x 1): --a-lr-mult X its
   learning rate over the decoder's; --a-warmup N frozen for N steps first; --ctc-weight W an
   auxiliary CTC loss (CtcHead, training only, not exported) from embed_audio's output (--ctc-at
   tower: the tower's) to the vocabulary + a blank, added to the audio items' loss. Measured on
   the CPU (tools/python/mm_audio_probe.py, bench/NOTES.md "An auxiliary CTC loss"): none of
   them made the decoder read the audio better than the frozen random tower (CTC from step 0
   stalls at its all-blank plateau and collapses the tower further). --ctc-units chars: the
   head reads the frames into the transcript's characters instead (AudioChars, VisionAux's
   audio twin: space, a-z, apostrophe + a blank; bench/NOTES.md "Does a direct signal make the
   AUDIO side read?"). --ctc-tied (needs --ctc-weight and --ctc-at embed) adds a second audio
   CTC head, TiedCtcHead, at --ctc-tied-weight W (default --ctc-weight's): the soft tokens read
   into the answer's token ids (CtcHead's targets and CTC) with the decoder's own input
   embeddings (embed_tokens x embed_scale, detached: the loss never moves the LM's table) + a
   learned blank as the classes, logits s x cosine (s learned from 10, or from
   --ctc-tied-scale S; --ctc-tied-center: the frames and the rows less the table's mean row;
   bench/NOTES.md "The tied head's plateau"), so that the frames where a token is heard point
   at that token's embedding, which the decoder can copy (the session-35 run: the char head
   read held-out clips at CER 0.165 and the decoder's answers ignored them; bench/NOTES.md
   "ctctied"); with --a-warm its loss (x W / --ctc-weight) joins the warm step too, unless
   --ctc-tied-joint-only (on its plateau it held the char head on its own there: "The tied
   head's plateau"); --v-aux-tied [--v-aux-tied-weight W] (needs --v-aux-weight) is its image
   twin on VisionAux's soft-token columns (added to VisionAux's loss, in the --v-warm-steps
   phase too). --a-var-weight W
   [--a-var-gamma G --a-var-per clip|frame --a-cov-weight C]: an anti-collapse term (SpreadTerm,
   VICReg's variance hinge on the RMS-normalised soft tokens across the half-batch's clips,
   training only) added to the audio items' loss (bench/NOTES.md "A variance term"): on the
   probe it kept the clips apart (82-136% against x 1's 0.15%) but the decoder read nothing of
   it that held for held-out sentences. --a-res-scale X: the audio layers' residual-branch
   output scales x X at init (scale_audio_residuals; no preset sets it): at 1 each random
   layer replaces most of a frame, and CTC read-outs of the frozen 512 x 6 tower lose more than
   half of what they read from the log-mel by its sixth layer; at 0.1 its output reads as the
   log-mel (tools/python/mm_audio_readout.py, bench/NOTES.md "What a read-out finds").
   The vision side's init options (no preset sets them): --v-pos-init S draws the patch
   embedder's position table N(0, S) (init_vision_positions, its own generator at --seed);
   transformers sets it to ones, so every patch starts with the same vector 2 x (1, ..., 1),
   97% of the patch embedding's and 96% of the soft tokens' sum of squares at the proxy's
   384 x 6, the glyphs 0.4% (drawn at 0.02: 14% common, 38% glyph; tools/python/
   mm_vision_readout.py, bench/NOTES.md "What the random vision tower keeps of the glyphs"; on
   the CPU probe it did not bring reading forward by 6,800 images). --v-res-scale X: the
   vision layers' two residual-branch post-norm weights x X (scale_vision_residuals, the twin
   of --a-res-scale). --v-proj-init STD: the patch embedder's input_proj drawn N(0, STD)
   (init_vision_proj; transformers' 0.02): with --v-pos-init 0.02 the patch embedding is the
   pixels' projection alone, RMS ~0.35, and the first layer's RMSNorm multiplies the gradient
   by its inverse: at the proxy's shapes the tower's gradient at step 0 is 100,800 against the
   decoder's 10,030 (the H100 run's first norm 41,343, s26's with the ones table 3,302);
   at 0.3 it is 7,240 against 8,490 (bench/NOTES.md "Why the proxy does not read").
   --v-chars N: the first N steps' image half-batches show one character of each train string
   (char_items: its font, colours, noise; the answer one token that only the pixels tell),
   then the strings (a curriculum; measured on the CPU at the tiny preset: no held-out gap).
   --v-aux-weight W: an auxiliary CTC read-out (VisionAux, training only, not exported: the
   package keeps the Gemma-4 layout; its head's weights from their own generator) from the image
   soft-token columns (embed_vision's output, each column of the pooled grid averaged over its
   rows) to the answer's characters, W x its loss added to the image items' loss: a gradient
   for the vision tower that does not wait for the decoder (whose share of the tower's gradient
   falls to ~0.003 once it has the answers' text statistics; bench/NOTES.md "A direct signal
   for the vision tower"). Answers longer than their image's columns are skipped and counted.
   --v-warm-steps N (needs --v-aux-weight): before the joint steps, N steps of the vision side
   (tower + embed_vision) and that head alone on image half-batches (--v-warm-batch B: another
   size, from a stream of its own), the aux CTC loss alone, no decoder forward (vision_warm:
   a warm step costs a fraction of a joint step), with an AdamW of its own dropped after the
   phase; the joint phase's schedule (warm-up, cosine over --steps) starts after it, and
   --minutes counts it (bench/NOTES.md "vpre: a vision-only warm phase"). --a-warm (needs
   --v-warm-steps and --ctc-weight, and the audio side's lr x > 0): each warm step also takes
   the run's audio half-batch through the audio tower and embed_audio only and adds the
   --ctc-weight head's CTC loss (its units, its tap) to the vision aux loss: one backward, one
   clip, one step of the warm AdamW, which then also holds the audio side (at a_lr_mult) and
   that head; --a-warmup still freezes the audio side for the joint phase's first N steps.
   --tower-joint-lr-mult X (needs --v-warm-steps): the joint phase's vision and audio lr
   multipliers x X (the decoder and the heads x 1), so its fresh AdamW's warm-up to the peak lr
   does not undo what the warm phase taught the towers (bench/NOTES.md "awarm: the warm phase
   for the audio side").
   --lm-warm-steps N: before all that, N steps of the decoder ALONE as a causal LM on the plan's
   train texts (the train sentences and strings; a plan whose held-out item shares a train text
   is refused unless the item says category "memorised", the ci plan's test split), each as the
   joint phase's answer appears after its prompt (<|turn> "model\n" answer <turn|>), packed
   whole after a <bos> into p["batch"] rows of min(256, positions) ids, the loss on the answer
   and closing ids (lm_rows); input_ids only, so neither tower runs; its own AdamW over the
   decoder (embed_tokens included) at warm_schedule's lr, dropped after the phase, and its own
   data order (numpy PCG64 at (seed, 36)): the towers' warm phase and the joint phase see the
   data they see without it. The session-35 decoder started random (held-out answer loss 8.48
   at step 0, ln 4096 = 8.32) and spent its 503 joint steps on the answers' spelling; a table
   that already models the language is also the fixed target --ctc-tied wants. train.json's
   lm_warm and losses' lm_warm; a held-out row at step 0 after it (tests/mm_lmwarm_check.py).
   --lm-copy P (needs --lm-warm-steps): each of that phase's rows is, with probability P (numpy
   PCG64 at (seed, 37), its own: P 0 draws nothing and is the run without the option bit for
   bit), a copy row: <bos> then whole segments <sep> TEXT <sep> TEXT (lm_copy_segment; sep
   <unk>, id 3: lm_copy_sep says why not another id), the labels the second copy's ids only,
   so that the decoder grows copy (induction) heads before it meets the soft tokens, whose job
   is a lookup of the same kind: the session-37 decoder ignored clips its CTC head read
   (held-out rolled gap +0.002). TEXT (--lm-copy-kind): words (the default) as many words as a
   train text, each drawn from all the train texts' words, which only copying predicts; texts
   the train text itself (on the ci plan the decoder then memorised the pairs: copy loss 0.01,
   and a new string's second copy no better predicted than its first). The plain rows keep
   their texts' order. The loss is the
   mean over every labelled id as before; the log prints the copy rows' and the plain rows'
   beside it ("lm_warm L (copy C, plain P)"); train.json's lm_warm.copy (p, sep, sep_id, rows
   of `of`, ids, each kind's losses_every_25, first, last, final); P outside [0, 1) or without
   --lm-warm-steps refused (tests/mm_copy_check.py, bench/NOTES.md "Copy warm-up and a frozen
   decoder").
   --answer-mask P [--answer-mask-kind audio|image|both (default audio)]: word dropout on the
   joint phase's teacher-forced answer inputs (AnswerMask): each answer id that is an input
   (after the model turn's "model\n", before the closing <turn|>: the positions whose input is
   the previous position's target) of an item of that kind becomes <mask> with probability P,
   the labels the true ids; its own generator (torch seed + 8), so the data order and every
   other stream are as without it, and P 0 is the run without the option bit for bit. The
   session-35 decoder read its answers' sentence prior from those inputs and ignored the audio
   (held-out rolled gap +0.03, one stock sentence for every clip); with some of them hidden the
   next id has to come from the media too. Never in the warm phases nor the held-out
   evaluation; train.json's answer_mask (p, kinds, id, positions and masked a kind, share);
   P outside [0, 1) refused (tests/mm_ansmask_check.py, bench/NOTES.md "Answer-input masking").
   --dec-freeze-steps N: the joint phase's first N steps leave the decoder (embed_tokens, the
   layers, the per-layer inputs, the norms: make_optimizer's decoder groups) frozen: its
   groups at lr 0 and no gradient (joint_lrs, train_groups), so AdamW skips its tensors (no
   moment, no step count, no weight decay; decoder_state counts what it holds: 0 at the
   unfreeze), while the towers, embed_vision, embed_audio and the read-out heads learn from the
   answer loss through the decoder as it is (LLaVA's and SLAM-ASR's alignment stage: the soft
   tokens must become readable by the LM that exists; with --lm-warm-steps, the LM it learned).
   From step N + 1 everything trains as without it (the decoder's AdamW moments start there;
   the lr schedule is the run's, not restarted). An audio half-batch whose loss reaches no
   trained tensor (its side frozen too, no audio head) is not back-propagated. train.json's
   dec_freeze (steps, decoder_tensors, decoder_parameters, frozen_steps, unfrozen_at,
   decoder_state_at_unfreeze); N < 0 refused (tests/mm_copy_check.py).
   --a-pieces P: a plan made with make_mm_data.py --speech-pieces N holds N train clips of
   category "piece" that say 1-4 words of a train sentence (train_split leaves them out of
   every other use: the tokenizer, the LM phase, the whole-clip stream; so without --a-pieces
   a plan with pieces trains the weights of the plan without them, bit for bit). With P > 0
   each audio half-batch is half - k whole clips from the run's audio stream (its seed, its
   batches cut at half - k) and k = round(P x half) piece clips from a stream of their own
   (item_stream at seed + 9, the same reps and speed perturbation), joined (join_halves: the
   tensors collate gives the joined list) in that order: a fixed count, so each step's share
   is exact. The images' answers are 1-4 words that only the pixels decide, and the decoder
   reads them; the clips' are sentences, and it falls back on its LM prior (held-out rolled gap
   ~0 since session 24): short clips whose words only the audio decides. The held-out
   evaluation stays on the whole sentences. train.json's a_pieces (p, clips, per_batch); P
   outside [0, 1), P > 0 on a plan without pieces, and a k of 0 or of the whole half-batch
   refused in one line (tests/mm_pieces_check.py, bench/NOTES.md "Short train clips").
   AdamW (beta2 0.95 for proxy, 0.98 for the others; --lr, --beta2, --warmup override), warm-up
   then cosine decay, each step guarded (StepGuard: a non-finite loss or gradient norm skips the
   step, --max-skips in a row stop the run); the data order and the items' renderings come from
   --seed (torch.manual_seed, numpy PCG64 per item), deterministic algorithms: the same seed,
   steps and device give the same weights (on the CPU; on a GPU only with --strict-determinism:
   without it cuDNN's and memory-efficient attention's backward are let through, each warning
   once). --minutes stops a run that would overrun the step count (it says so; the result then
   depends on the machine's speed). --profile N: where N steps' time goes (torch.profiler's
   tables in OUT/profile.txt). The GPU step is CPU-bound (~11,600 launches a step; bench/
   NOTES.md "The multimodal proxy's step is CPU-bound"): --pad-to N rounds each half-batch's
   lengths up to a multiple of N (inert padding, tests/mm_pad_check.py) so cuDNN's attention
   plans and the allocator see few shapes; --no-cudnn-sdpa keeps attention off cuDNN.
   Launches (bench/NOTES.md "Fewer launches a step"; tests/mm_fast_check.py): train_step syncs
   the host once a step (both losses and the clipped gradient norm read together: the guard's
   check is that one norm, not finite when any trained gradient is not); AdamW runs fused on
   CUDA, foreach on the CPU (--adamw; foreach gives the per-tensor loop's bits, fused rounds
   otherwise: one ulp of a weight after a step); requires_grad is set only when a side starts
   or stops training; the GPU's batches come from pinned memory. Those are ~1% of a step's
   ~14,000 launch-like ops (step_ops, the proxy's shapes): the rest are the model's per-layer
   small ops, which --compile fuses (torch.compile of each half-batch's forward and loss,
   inductor, fixed shapes: needs --pad-to, and --pad-frames 512 leaves the proxy's audio half
   one shape; refused with --strict-determinism, --ctc-weight and --v-aux-weight; each new
   padded shape compiles first, ~2 minutes a shape on one CPU thread; a compiler error is
   printed, kept in train.json's compile_failed, and the run goes on eagerly from that step).
   --eval-every N (default 200; 0: off) --eval-items K (default 32): every N steps and at the
   end, the held-out answer loss of K held-out images and K held-out clips (the same every
   time, drawn from --seed) as is, with the media's soft tokens zeroed and rolled to the batch
   neighbour's (HeldOut, mm_probe.SoftTokens): the gaps say whether the answers use this item's
   media long before exact match moves off 0. Eval mode, no gradient, no random stream moved:
   the run's data order and weights are the same with it on or off (tests/mm_fast_check.py).
   Its time counts in --minutes (estimated ~1% of a proxy run at 200; bench/NOTES.md "The
   trainer measures whether it uses the media"). --eval-decode: each of those items' greedy
   answer too (greedy_decode: the KV cache, one left-padded batch a kind, at most the longest
   held-out answer + DECODE_SLACK ids), scored as `g4cu eval` scores (tools/python/
   mm_metrics.py: OCRBench's normalisation, Whisper's for WER): exact match, OCRBench accuracy
   (images), WER (clips), CER, CER against another item's reference, the mean length gap in
   characters; a log line a kind, the rows' "decode" (bench/NOTES.md "The trainer's held-out
   answers"; tests/mm_exact_check.py). With --ctc-units chars (AudioChars) or --v-aux-weight
   (VisionAux) on, the held-out items are read by those heads too (no flag of its own): the
   read-out's CTC a label, its greedy CER and CER against another item's; items too long for
   their frames counted and skipped; a held-out log line "read-out heads" (bench/NOTES.md "The
   read-out heads on the held-out items"; tests/mm_audchars_check.py). With --ctc-tied the
   held-out clips are read by the tied head too: its CTC a label, its greedy token read decoded
   to text and scored by CER (and against another clip's text), the share of frames read as a
   token (not the blank) and their cosine to that token's embedding; a log line "tied read-out"
   (tests/mm_ctctied_check.py); with --v-aux-tied the held-out images likewise.
4. Saves OUT/hf (float16 safetensors, config, tokenizer.json), OUT/train.json (preset, seed,
   steps, losses, seconds, step_seconds, the flags; adamw, compile, compile_stats: graphs and
   graph breaks; profiled_ops: --profile's step_ops count a step; heldout: HeldOut's rows
   {step, image: {loss, zeroed, rolled, soft_rms, soft_cos[, decode][, ctc, ctc_cer,
   ctc_cer_other, ctc_items, ctc_skipped]}, audio: {...}, text_rms, seconds; step 0: after
   --v-warm-steps' phase}, eval_decode,
   eval_items; grad_norm_sides_every_25: each side's gradient norm as the optimizer took it,
   side_grad_norms; v_aux: --v-aux-weight's weight, characters, images read and skipped, and
   its loss in losses_every_25 / final_loss; v_warm: the warm phase's steps, images, seconds and
   step seconds, tower_joint_lr_mult, its loss as losses_every_25 / final_loss's v_warm; with
   --a-warm also a_warm, a_lr_mult, clips, clips_too_short, the audio loss as a_warm; with
   --ctc-tied: ctc.tied {weight, classes, scale_init, center, warm (whether it joined the warm
   phase), scale_final, clips, clips_too_short}, its loss as ctc_tied (and a_warm_tied,
   v_warm's tied_clips, tied_clips_too_short, tied_mult with --a-warm and without
   --ctc-tied-joint-only), the held-out audio rows' tied_ctc, tied_cer, tied_cer_other,
   tied_items, tied_skipped, tied_peaks, tied_peak_cos, tied_example, table_cos0
   (HeldOut.table_drift: how far the decoder's token table turned since the first row) and
   table_mean_cos (the table's rows' mean cosine to each other, table_mean_cos()); with
   --v-aux-tied:
   v_aux.tied {weight, scale_init, scale_final, images, images_too_short}, v_aux_tied,
   v_warm_tied, v_warm's tied_images, tied_images_too_short, vtied_mult, the held-out image
   rows' tied_*; with --answer-mask: answer_mask; with --lm-copy: lm_warm.copy; with
   --dec-freeze-steps: dec_freeze), exports
   OUT/f16 with tools/python/export_package.py, copies the tokenizer, and sets
   image_processor.json's max_soft_tokens to 70.
"""
import argparse
import functools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_mm_data as mmd  # noqa: E402
from make_mm_data import train_parts, train_split  # noqa: E402 (the probes: tmp.train_split)
from train_proxy import PRESETS as TEXT_PRESETS  # noqa: E402
from train_proxy import ROPE, train_tokenizer  # noqa: E402

SYSTEM = "You are a helpful assistant."  # eval/eval_task.h G4_EVAL_SYSTEM_PROMPT
ASR_PROMPT = "Please recognize the speech and only output the recognized content:"
OCR_PROMPT = mmd.QUESTION
SOFT_TOKENS = 70

PRESETS = {
    # The audio side keeps its random initialisation (lr x 0; --a-lr-mult overrides): trained
    # on held-out-style ASR (tools/python/mm_audio_probe.py, CPU, 400 utterances of this plan)
    # its output collapsed to one vector for every clip within the first ~100 steps, before the
    # decoder read any audio (x 1: the clips differ by 0.2%, x 0.3 by 0.7%; the random tower's
    # 19%, this preset's 512 x 6 tower 22%), and the gradient into it faded (bench/NOTES.md
    # "The audio tower's learning rate").
    # beta2 0.95 (train_proxy.py's; the others keep AdamW's 0.98 of their fixtures): at 0.98
    # the first GPU run went NaN at step ~425 (bench/NOTES.md "The multimodal proxy's NaN"): a
    # second-moment estimate that lags the gradient lets an update through far above lr.
    "proxy": dict(text="proxy", vocab=4096, v_hidden=384, v_layers=6, v_heads=6, v_mlp=1536,
                  a_hidden=512, a_layers=6, a_heads=8, batch=32, lr=5e-4, warmup=200,
                  steps=3000, workers=14, reps=8, a_lr_mult=0.0, beta2=0.95),
    "tiny": dict(text="tiny", vocab=1024, v_hidden=64, v_layers=1, v_heads=1, v_mlp=128,
                 a_hidden=64, a_layers=1, a_heads=8, batch=4, lr=3e-3, warmup=5, steps=30,
                 workers=1, reps=1),
    # tests/fixtures/mm-tiny: make_mm_data.py's `ci` plan (8 strings, 8 sentences) memorised on
    # one CPU thread. The decoder is tiny's at 6 layers (S S F S S F, the last two KV-shared: the
    # package stays small) with a window that holds the whole prompt (the answer's first token
    # sees every media token on every layer: memorising is quick); every item in every step.
    # The audio side (tower and embedder) keeps its random initialisation (lr x 0): trained
    # (x 1, 3, 10) its output collapsed to one vector for every clip (x 3, x 10: the items
    # then differ by < 0.1%) or stayed unread, the ASR loss stuck at ln(8) on the first word
    # (bench/NOTES.md "mm-tiny"); the decoder learns to read the random tower's output. The
    # vision side learns faster at x 3.
    "ci": dict(text=dict(TEXT_PRESETS["tiny"], layers=6, shared=2, window=128, positions=512,
                         types=["sliding_attention", "sliding_attention", "full_attention"] * 2),
               vocab=480, v_hidden=64, v_layers=1, v_heads=1, v_mlp=128, a_hidden=64,
               a_layers=1, a_heads=8, a_conv=[128, 8], batch=16, lr=3e-3, warmup=20, steps=400,
               workers=0, reps=1, v_lr_mult=3.0, a_lr_mult=0.0),
}


def model_config(p, tok):
    from transformers import Gemma4Config

    t = dict(p["text"] if isinstance(p["text"], dict) else TEXT_PRESETS[p["text"]])
    L = t["layers"]
    text = dict(
        vocab_size=p["vocab"], vocab_size_per_layer_input=p["vocab"], hidden_size=t["hidden"],
        intermediate_size=t["mlp"], num_hidden_layers=L, num_attention_heads=t["heads"],
        num_key_value_heads=t["kv"], head_dim=t["head_dim"], global_head_dim=t["global_hd"],
        layer_types=t.get("types", ((["sliding_attention"] * 4 + ["full_attention"]) * L)[:L]),
        sliding_window=t["window"], num_kv_shared_layers=t["shared"], use_double_wide_mlp=True,
        hidden_size_per_layer_input=t["ple"], final_logit_softcapping=30.0,
        max_position_embeddings=t.get("positions", 4096), rms_norm_eps=1e-6, rope_parameters=ROPE,
        hidden_activation="gelu_pytorch_tanh", pad_token_id=0, bos_token_id=2, eos_token_id=1,
        tie_word_embeddings=True, attention_k_eq_v=False, enable_moe_block=False,
        attention_bias=False, use_bidirectional_attention=None,
    )
    vision = dict(
        hidden_size=p["v_hidden"], intermediate_size=p["v_mlp"], num_hidden_layers=p["v_layers"],
        num_attention_heads=p["v_heads"], num_key_value_heads=p["v_heads"],
        head_dim=p["v_hidden"] // p["v_heads"], patch_size=16, pooling_kernel_size=3,
        position_embedding_size=128, use_clipped_linears=True, standardize=False,
        default_output_length=SOFT_TOKENS,
        rope_parameters={"rope_type": "axial", "rope_theta": 100.0},
        hidden_activation="gelu_pytorch_tanh",
    )
    audio = dict(
        hidden_size=p["a_hidden"], num_hidden_layers=p["a_layers"],
        num_attention_heads=p["a_heads"], subsampling_conv_channels=p.get("a_conv", [128, 32]),
        conv_kernel_size=5, attention_chunk_size=12, attention_context_left=13,
        attention_context_right=0, attention_logit_cap=50.0, residual_weight=0.5,
        output_proj_dims=t["hidden"], use_clipped_linears=True, rms_norm_eps=1e-6,
        hidden_act="silu",
    )
    ids = {k: tok.token_to_id(k) for k in ("<|image|>", "<|audio|>", "<|image>", "<image|>",
                                            "<|audio>", "<audio|>", "<turn|>")}
    return Gemma4Config(text_config=text, vision_config=vision, audio_config=audio,
                        tie_word_embeddings=True, image_token_id=ids["<|image|>"],
                        audio_token_id=ids["<|audio|>"], boi_token_id=ids["<|image>"],
                        eoi_token_id=ids["<image|>"], boa_token_id=ids["<|audio>"],
                        eoa_token_index=ids["<audio|>"], eos_token_id=[1, ids["<turn|>"]])


# --- inputs ---------------------------------------------------------------------------------
def image_inputs(img):
    """Gemma4ImageProcessor's output for an image it does not resize (make_mm_data's sizes):
    rescale by 1/255, 16 x 16 patches (row-major, each patch [y][x][rgb]), padded to 70 x 9
    rows with zeros at position (-1, -1); position ids (x = column, y = row)."""
    a = np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0
    h, w = a.shape[:2]
    ph, pw = h // 16, w // 16
    patches = a.reshape(ph, 16, pw, 16, 3).transpose(0, 2, 1, 3, 4).reshape(ph * pw, -1)
    pos = np.stack(np.meshgrid(np.arange(pw), np.arange(ph), indexing="xy"), -1).reshape(-1, 2)
    n_max = SOFT_TOKENS * 9
    if ph * pw > n_max or h % 48 or w % 48:
        raise SystemExit(f"train_mm_proxy: image {w}x{h} is not one the processor keeps")
    pv = np.zeros((n_max, 768), np.float32)
    pp = np.full((n_max, 2), -1, np.int64)
    pv[:ph * pw], pp[:ph * pw] = patches, pos
    return pv, pp, ph * pw // 9


def audio_token_count(mask):
    m = np.asarray(mask)
    for _ in range(2):  # Gemma4Processor.replace_audio_token
        t = (len(m) + 2 - 3) // 2 + 1
        m = m[::2][:t]
    return int(m.sum())


def make_tokenizer(texts, vocab, path, split_digits=False):
    """The trainer's tokenizer (written to PATH): train_proxy's BPE of VOCAB ids on the train
    TEXTS twice and the prompts and role names 50 times (the probes build theirs the same way);
    split_digits: --split-digits."""
    texts = list(texts) * 2 + [SYSTEM, OCR_PROMPT, ASR_PROMPT, "system", "user", "model"] * 50
    return train_tokenizer("\n\n".join(texts), vocab, path, split_digits)


class Prompter:
    def __init__(self, tok):
        self.tok = tok
        self.id = {k: tok.token_to_id(k) for k in ("<bos>", "<|turn>", "<turn|>", "<|image>",
                                                    "<|image|>", "<image|>", "<|audio>",
                                                    "<|audio|>", "<audio|>")}
        if any(v is None for v in self.id.values()):
            raise SystemExit(f"train_mm_proxy: the tokenizer lacks a special token: {self.id}")

    def enc(self, s):
        return self.tok.encode(s, add_special_tokens=False).ids

    def prompt(self, kind, n_soft):
        i = self.id
        media = ([i["<|image>"]] + [i["<|image|>"]] * n_soft + [i["<image|>"]] if kind == "image"
                 else [i["<|audio>"]] + [i["<|audio|>"]] * n_soft + [i["<audio|>"]])
        text = OCR_PROMPT if kind == "image" else ASR_PROMPT
        return ([i["<bos>"], i["<|turn>"]] + self.enc(f"system\n{SYSTEM} ") + [i["<turn|>"]] +
                self.enc("\n") + [i["<|turn>"]] + self.enc("user\n") + media + self.enc(text) +
                [i["<turn|>"]] + self.enc("\n") + [i["<|turn>"]] + self.enc("model\n"))

    def target(self, text):
        return self.enc(text) + [self.id["<turn|>"]]


def char_items(items):
    """--v-chars: each train image item with its text cut to one of its characters (not a space;
    which one from the item's own "shape" seed, so the same plan gives the same characters) and
    an id of its own; font, size, colours, background, rotation, noise and canvas choice as
    planned. The answer is then one token and <turn|>: it cannot be guessed from the strings'
    language statistics (as most of a word's tokens can, given the first), only read."""
    out = []
    for it in items:
        cs = [c for c in it["text"] if not c.isspace()]
        if cs:
            out.append(dict(it, id=it["id"] + "_c", text=cs[it["shape"] % len(cs)]))
    return out


SPEED_STREAM = 2  # speed_of's generator: (noise seed, 2), not the noise's (noise seed)


def speed_of(noise_seed, spread):
    """--a-speed-perturb's factor for a rendering whose noise seed is noise_seed: uniform in
    [1 - spread, 1 + spread] from a generator of that seed's own (numpy's PCG64 of (noise_seed,
    SPEED_STREAM): the silence and noise draws of make_mm_data.audio_samples stay as they are),
    rounded to a multiple of 1 / make_mm_data.SPEED_STEP within the range."""
    q = mmd.SPEED_STEP
    u = np.random.default_rng([noise_seed, SPEED_STREAM]).uniform(1 - spread, 1 + spread)
    return min(max(round(u * q), math.ceil((1 - spread) * q - 1e-9)),
               math.floor((1 + spread) * q + 1e-9)) / q


def rendering(items, k, speed=0.0):
    """Item k % n of items (n of them) as its rendering k // n draws it: rendering 0 is the
    planned item, rendering v > 0 moves its shape and noise seeds by 7919 v (another placement
    and noise, the same text, font and colours) and, given speed F > 0 (--a-speed-perturb), an
    audio item's "speed" is speed_of(its moved noise seed, F): its speech played that much
    faster (make_mm_data.speed_perturb). A copy: items is not changed."""
    it, v = dict(items[k % len(items)]), k // len(items)
    for key, mod in (("shape", 1 << 30), ("noise_seed", 1 << 31)):
        if v and key in it:
            it[key] = (it[key] + 7919 * v) % mod
    if v and speed and "noise_seed" in it:
        it["speed"] = speed_of(it["noise_seed"], speed)
    return it


class Items(torch.utils.data.Dataset):
    """Train items of one kind, each rendered when asked (make_mm_data's functions). Index k is
    item k % n in its rendering k // n: rendering 0 is the planned one, the others draw the
    noise (and the image's placement) from another seed, so repeated passes do not see the same
    pixels and samples; speed F > 0 (audio, --a-speed-perturb): the other passes also play the
    speech at a speed in [1 - F, 1 + F] (rendering())."""

    def __init__(self, items, kind, data_dir, fonts, prompter, fe, renderings, cache=False,
                 speed=0.0):
        self.items, self.kind, self.data, self.fonts = items, kind, data_dir, fonts
        self.pr, self.fe, self.reps, self.speed = prompter, fe, renderings, speed
        self.cache = {} if cache else None  # a handful of items seen every step: render once

    def __len__(self):
        return len(self.items) * self.reps

    def __getitem__(self, k):
        if self.cache is None:
            return self.render(k)
        if k not in self.cache:
            self.cache[k] = self.render(k)
        return self.cache[k]

    def render(self, k):
        it = rendering(self.items, k, self.speed)
        if self.kind == "image":
            pv, pp, n = image_inputs(mmd.render_image(it, self.fonts))
            return dict(kind="image", pv=pv, pp=pp, ids=self.pr.prompt("image", n),
                        tgt=self.pr.target(it["text"]))
        x = mmd.audio_samples(it, self.data).astype(np.float32) / 32768.0
        f = self.fe([x], return_tensors="np", padding="longest")
        feats, mask = f["input_features"][0], f["input_features_mask"][0]
        return dict(kind="audio", feats=feats, mask=mask,
                    ids=self.pr.prompt("audio", audio_token_count(mask)),
                    tgt=self.pr.target(it["text"]))


class AudioTap:
    """Forward hooks that keep the last audio forward's frames (at="embed": embed_audio's
    output, the soft tokens the decoder reads; at="tower": the tower's output, before
    embed_audio) and valid mask (B x T, True: a frame of the clip); take() hands them over once.
    The training-only audio terms (CtcHead, SpreadTerm) read the audio side through it."""

    def __init__(self, model, at, who):
        m = model.model
        self.at, self.who, self.frames, self.valid = at, who, None, None
        m.audio_tower.register_forward_hook(self._tower)
        if at == "embed":
            m.embed_audio.register_forward_hook(self._embed)

    def _tower(self, mod, inp, out):
        self.valid = out.attention_mask
        if self.at == "tower":
            self.frames = out.last_hidden_state

    def _embed(self, mod, inp, out):
        self.frames = out

    def take(self):
        """The captured frames (B x T x D) and their valid mask (B x T), then forgotten."""
        if self.frames is None or self.valid is None:
            raise SystemExit(f"train_mm_proxy: the {self.who} saw no audio forward")
        x, v = self.frames, self.valid
        self.frames = self.valid = None
        return x, v


def ctc_collapse(ids, blank):
    """A greedy CTC path (a list of ids) read out: repeats merged, then blanks dropped."""
    return [c for k, c in enumerate(ids) if c != blank and (k == 0 or c != ids[k - 1])]


def ctc_fits(n_frames, lab):
    """CTC has a path when the frames cover the labels (a list) plus a blank between each pair
    of equal neighbours."""
    return len(lab) + sum(a == b for a, b in zip(lab, lab[1:])) <= n_frames


class CtcHead(torch.nn.Module):
    """An auxiliary CTC loss on the audio side (training only: never saved nor exported, the
    package keeps the Gemma-4 layout), the hybrid CTC / attention remedy for an encoder the
    decoder does not read yet: a linear map from the audio frames to the vocabulary + a blank
    (id `vocab`), its CTC loss against each clip's transcript. at="embed": embed_audio's output
    (the soft tokens the decoder reads); at="tower": the tower's output, before embed_audio.
    loss() consumes the last audio forward's frames and valid mask (AudioTap)."""

    def __init__(self, model, vocab, at):
        super().__init__()
        m = model.model
        if at not in ("embed", "tower"):
            raise SystemExit(f"train_mm_proxy: --ctc-at {at}: embed or tower")
        emb = m.embed_audio
        dim = emb.text_hidden_size if at == "embed" else emb.multimodal_hidden_size
        self.proj = torch.nn.Linear(dim, vocab + 1)
        self.vocab, self.at = vocab, at
        self.used = self.skipped = 0  # clips with a loss / clips with fewer frames than labels
        self.tap = AudioTap(model, at, "CTC head")

    def logits(self, x):
        with torch.autocast(x.device.type, enabled=False):
            return self.proj(x.float())

    def loss(self, labels):
        """Mean CTC loss (per label, over the clips that fit) of the last audio forward; labels
        is collate's (B x S: next-token targets, -100 elsewhere), each row's transcript its
        targets less the closing <turn|>. A clip needs as many frames as labels plus one blank
        between each pair of equal neighbours, else CTC has no path: such clips are skipped
        and counted (self.skipped). Returns None when no clip fits."""
        return self.loss_of(*self.tap.take(), labels)

    def loss_of(self, x, valid, labels):
        """loss() of frames x (B x T x D) with valid mask (B x T) given."""
        rows, tgts, n_in = self.fit(labels, valid)
        self.skipped += labels.shape[0] - len(rows)
        self.used += len(rows)
        if not rows:
            return None
        z = self.logits(x if len(rows) == len(x) else self.rows_of(x, rows))  # R x T x (V+1)
        return self.ctc_of(z, tgts, n_in, "mean")

    @staticmethod
    def rows_of(x, rows):
        """x's rows `rows` (the clips that fit)."""
        return x[rows]

    @staticmethod
    def fit(labels, valid):
        """The rows of collate's labels (B x S) that CTC can align to their frames (valid: B x T,
        True on a clip's frames): (their indices, their transcripts as id tensors on the CPU,
        their frame counts). A row's transcript is its targets less the closing <turn|>; a row
        with none, or with fewer frames than its labels need (ctc_fits), is left out."""
        rows, tgts, n_in = [], [], []
        lab, ns = labels.cpu(), valid.sum(-1).tolist()  # (two copies to the host, not 2 a row)
        for b in range(lab.shape[0]):
            t = lab[b][lab[b] != -100][:-1]
            n = ns[b]
            if len(t) == 0 or not ctc_fits(n, t.tolist()):
                continue
            rows.append(b)
            tgts.append(t)
            n_in.append(n)
        return rows, tgts, n_in

    def ctc_of(self, z, tgts, n_in, reduction):
        """CTC of logits z (R x T x (V+1), blank last) against tgts (R id tensors) over each
        row's first n_in frames; reduction "mean" (the training loss: per label, then over the
        rows) or "none" (each row's negative log-likelihood, a tensor of R)."""
        # The CTC recursion reads only the blank's and the transcript's columns: run it on those
        # (+ one column holding the rest of the probability), on the CPU, where ctc_loss's
        # backward is deterministic (torch's CUDA one is not) and the tensor is small. The
        # columns are picked by a one-hot product (index gradients are not deterministic on
        # CUDA). The reduced rows sum to one exactly: torch's ctc_loss gradient assumes
        # normalised log-probabilities (it returns p - occupancy, not -occupancy).
        uniq = [torch.unique(t) for t in tgts]
        K = 1 + max(len(u) for u in uniq)  # blank, each clip's distinct labels (padded)
        R = len(tgts)
        sel = torch.zeros(R, self.vocab + 1, K)
        far = torch.zeros(R, 1, K)  # -1e4 on padding columns
        rest = torch.zeros(R, 1, self.vocab + 1)  # -1e4 on picked columns
        T_max = max(len(t) for t in tgts)
        target = torch.zeros(R, T_max, dtype=torch.long)
        for r, (t, u) in enumerate(zip(tgts, uniq)):
            sel[r, self.vocab, 0] = 1.0
            sel[r, u, 1 + torch.arange(len(u))] = 1.0
            far[r, 0, 1 + len(u):] = -1e4
            rest[r, 0, self.vocab] = rest[r, 0, u] = -1e4
            target[r, :len(t)] = 1 + torch.searchsorted(u, t)
        dev = z.device
        picked = torch.bmm(z, sel.to(dev)) + far.to(dev)  # R x T x K
        other = torch.logsumexp(z + rest.to(dev), -1, keepdim=True)  # R x T x 1
        lp = torch.log_softmax(torch.cat([picked, other], -1), -1)
        lp = lp.transpose(0, 1).cpu().double()  # T x R x (K+1)
        loss = torch.nn.functional.ctc_loss(lp, target, torch.tensor(n_in),
                                            torch.tensor([len(t) for t in tgts]), blank=0,
                                            reduction=reduction, zero_infinity=False)
        return loss.float().to(dev)

    def greedy(self, x, valid):
        """Greedy CTC transcription of captured frames: per clip, the label ids (repeats merged,
        blanks dropped)."""
        return [ctc_collapse(e[v].tolist(), self.vocab)
                for e, v in zip(self.logits(x).argmax(-1), valid)]


TIED_SCALE_INIT = 10.0  # TiedCtcHead's logit scale at init (learned as its log)
# TiedCtcHead's blank drawn N(0, TIED_BLANK_STD) a component: only its direction counts (cosine
# logits), and AdamW moves each component by about the lr a step whatever its size, so a vector
# of N(0, 1) components (norm ~28 at 768) would turn by ~5e-4 / 1 a step at the proxy's lr; at
# 0.02 (transformers' initializer_range) it can turn toward the frames' common direction in tens
# of steps, where CTC wants the blank on most frames
TIED_BLANK_STD = 0.02


def table_mean_cos(w):
    """The mean cosine between two different rows of a token table (w, V x D; rows of zeros,
    the pad's, left out): ~0 for random rows; a trained table's rows share a direction, and at
    c the tied head's cosine logits of every token sit near s x c, so a frame on its token's
    row gets ~1 / (1 + V exp(-s (1 - c))) of the probability at scale s (bench/NOTES.md "The
    tied head's plateau")."""
    w = w.detach().float()
    u = torch.nn.functional.normalize(w[w.norm(dim=-1) > 0], dim=-1)
    n = u.shape[0]
    t = u.sum(0)
    return float(((t @ t) - n) / (n * (n - 1))) if n > 1 else None


class TiedCtcHead(CtcHead):
    """--ctc-tied: a CTC read-out of embed_audio's output (the soft tokens) into the answer's
    token ids whose class vectors are the decoder's own input embeddings (training only: never
    saved nor exported). CtcHead's classes are a free linear map: the soft tokens become
    readable by it in a direction space of their own, and the decoder must still learn that
    space from the joint loss (the session-35 run: the AudioChars head read held-out clips at
    CER 0.165, the decoder's answer moved +0.03 nats when another clip's soft tokens were put in
    their place). Here class v (< vocab) is the row the decoder reads for token v:
    embed_tokens.weight[v] x embed_scale (Gemma4TextScaledWordEmbedding; Gemma4Model.forward
    writes the soft tokens into that scaled inputs_embeds with masked_scatter, so the two share
    one space), DETACHED: the loss moves the soft tokens toward the embeddings, never the
    embeddings (nor the tied LM head) toward the soft tokens. Class `vocab` (the blank) is a
    learned vector. logits = s x cos(soft token, class vector), s = exp(log_scale) learned
    from TIED_SCALE_INIT: the cosine, not the dot product, because a dot product ranks the rows
    by their norms too and is lowered by growing the soft tokens (the decoder's RMSNorm undoes
    a scale, the residual stream does not: soft_rms would drift from text_rms), and the scale
    cancels in it, so the comparison does not depend on the embed_scale. At s = 10 a frame
    whose cosine to its token is 1 (the others ~0) gives that token ~0.84 of the probability
    over 4,097 classes. The loss, its fitting rule and the column-picking CTC are CtcHead's
    (targets: each clip's answer ids less <turn|>). Its parameters (the blank, log_scale) come
    from their own generator (torch seed `seed` + 6): the run's other draws are unchanged.
    kind "image" (--v-aux-tied): the same head on the image soft-token columns (soft_columns,
    VisionAux's frames, left to right; loss_of with the columns' mask, column_mask) against the
    answer's ids: no tap (the columns come from VisionAux's hook), its generator at seed + 7."""

    def __init__(self, model, vocab, seed, kind="audio", scale=TIED_SCALE_INIT, center=False):
        torch.nn.Module.__init__(self)
        m = model.model
        emb = m.language_model.embed_tokens
        if emb.weight.shape[0] < vocab:
            raise SystemExit(f"train_mm_proxy: --ctc-tied: {emb.weight.shape[0]} token "
                             f"embeddings for a vocabulary of {vocab}")
        # a plain attribute, not a submodule: the table stays the decoder's (not this head's
        # parameters, not its optimizer group, not moved by .to())
        self.__dict__["embed"] = emb
        dim = emb.weight.shape[1]
        if kind not in ("audio", "image"):
            raise SystemExit(f"train_mm_proxy: a tied CTC head for {kind!r}: audio or image")
        g = torch.Generator().manual_seed(seed + (6 if kind == "audio" else 7))
        self.blank_vec = torch.nn.Parameter(torch.randn(dim, generator=g) * TIED_BLANK_STD)
        self.log_scale = torch.nn.Parameter(torch.tensor(math.log(scale)))
        self.vocab, self.at, self.kind = vocab, "embed" if kind == "audio" else "columns", kind
        self.center = center
        self.used = self.skipped = 0
        self.tap = AudioTap(model, "embed", "tied CTC head") if kind == "audio" else None

    @staticmethod
    def rows_of(x, rows):
        """x's rows `rows` as a one-hot product (R x B by B x T x D): the image head skips the
        images whose answers outnumber their columns, and an index's gradient on the GPU
        (index_put / index_add) is not deterministic; a product's is, and it is exact (each
        value x 1 plus zeros)."""
        pick = torch.zeros(len(rows), x.shape[0], device=x.device, dtype=x.dtype)
        pick[torch.arange(len(rows), device=x.device), torch.tensor(rows, device=x.device)] = 1.0
        return torch.einsum("rb,btd->rtd", pick, x)

    def table(self):
        """The decoder's scaled token embeddings (vocab x D, float32, detached)."""
        e = self.embed
        return e.weight[:self.vocab].detach().float() * e.embed_scale.float()

    def classes(self, rows=None):
        """The class vectors ((vocab + 1) x D, float32): the decoder's scaled token embeddings
        (rows: table()'s when given), less their mean row with --ctc-tied-center, then the
        blank."""
        rows = self.table() if rows is None else rows
        if self.center:
            rows = rows - rows.mean(0)
        return torch.cat([rows, self.blank_vec.float()[None]], 0)

    def cosines(self, x):
        """cos(frame, class vector) for frames x (... x D): ... x (vocab + 1). Centered
        (--ctc-tied-center): the frames less the table's mean row too, so a frame equal to a
        token's row has cosine 1 to its class, as uncentered."""
        with torch.autocast(x.device.type, enabled=False):
            rows, x = self.table(), x.float()
            if self.center:
                x = x - rows.mean(0)
            a = torch.nn.functional.normalize(x, dim=-1)
            c = torch.nn.functional.normalize(self.classes(rows), dim=-1)
            return a @ c.T

    def logits(self, x):
        return self.cosines(x) * self.log_scale.float().exp()

    def items(self, x, valid, labels):
        """The held-out read-out of frames x (B x T x D) with valid mask (B x T) against
        collate's labels, for a measurement (the caller sets no_grad; used / skipped are left
        alone): (each fitting row's CTC loss a label, its greedy ids, its target ids, the rows
        skipped, the share of the valid frames whose argmax is not the blank, their mean cosine
        to the class they pick: 1 when the soft token IS that token's embedding direction)."""
        rows, tgts, n_in = self.fit(labels, valid)
        cos = self.cosines(x)
        top, arg = cos.max(-1)
        peak = valid & (arg != self.vocab)
        n_valid = int(valid.sum())
        share = int(peak.sum()) / n_valid if n_valid else None
        peak_cos = float(top[peak].mean()) if bool(peak.any()) else None
        if not rows:
            return [], [], [], labels.shape[0], share, peak_cos
        z = cos[rows] * self.log_scale.float().exp()
        per = self.ctc_of(z, tgts, n_in, "none").cpu() / torch.tensor([len(t) for t in tgts])
        reads = self.greedy(x[rows], valid[rows])
        return (per.tolist(), reads, [t.tolist() for t in tgts], labels.shape[0] - len(rows),
                share, peak_cos)


def char_ctc_loss(head, x, w, texts):
    """Mean CTC loss (per label, over the rows that fit) of a character read-out head (VisionAux,
    AudioChars: head.labels(text) -> label list, head.logits(x), head.blank; head.used and
    head.skipped count the rows) on frames x (B x T x D, row i's first w[i] frames valid) against
    texts (one string a row); None when no row fits. A row with no label or fewer frames than its
    label needs (ctc_fits) is skipped and counted. ctc_loss runs on the CPU in float64, where its
    backward is deterministic (torch's CUDA one is not)."""
    rows, tgts, n_in = [], [], []
    for i, t in enumerate(texts):
        lab = head.labels(t)
        if not lab or not ctc_fits(w[i], lab):
            head.skipped += 1
            continue
        rows.append(i)
        tgts.append(torch.tensor(lab))
        n_in.append(w[i])
    head.used += len(rows)
    if not rows:
        return None
    # every row's frames to the CPU, the ones that fit picked there: an index's gradient on the
    # GPU (index_add) is not deterministic, the CPU's is
    lp = torch.log_softmax(head.logits(x), -1).transpose(0, 1).cpu().double()
    if len(rows) < len(x):
        lp = lp[:, rows]  # T x R x (C+1)
    tgt = torch.nn.utils.rnn.pad_sequence(tgts, batch_first=True, padding_value=0)
    loss = torch.nn.functional.ctc_loss(lp, tgt, torch.tensor(n_in),
                                        torch.tensor([len(t) for t in tgts]),
                                        blank=head.blank, reduction="mean",
                                        zero_infinity=False)
    return loss.float().to(x.device)


def char_ctc_greedy(head, x, w):
    """Greedy CTC read of frames x (B x T x D, row i's first w[i] valid) by a character head:
    one string a row (repeats merged, blanks dropped)."""
    return ["".join(head.chars[c] for c in ctc_collapse(e[:k], head.blank))
            for e, k in zip(head.logits(x).argmax(-1).tolist(), w)]


def char_target(head, text):
    """The string a character read-out head (VisionAux, AudioChars) is trained to spell for
    text: its labels' characters (AudioChars: the transcript as heard; VisionAux: the answer less
    the characters outside its alphabet). The reference its greedy read is scored against."""
    return "".join(head.chars[c] for c in head.labels(text))


def char_ctc_items(head, x, w, texts):
    """A character read-out head's CTC on frames x (B x T x D, row i's first w[i] valid) against
    texts, item by item, for a measurement (HeldOut; the caller sets no_grad): the rows that fit
    (char_ctc_loss's rule: a label, and frames for it, ctc_fits) and, of those, each one's CTC
    loss a label (ctc_loss's "mean" before its batch mean: the training loss is the mean of
    these), its greedy read (char_ctc_greedy) and its reference (char_target). head.used and
    head.skipped (train.json's counts of the training rows) are left alone. Returns (losses,
    reads, references, the number of rows skipped)."""
    labs = [head.labels(t) for t in texts]
    rows = [i for i, lab in enumerate(labs) if lab and ctc_fits(w[i], lab)]
    if not rows:
        return [], [], [], len(texts)
    z = head.logits(x)
    lp = torch.log_softmax(z, -1).transpose(0, 1).cpu().double()[:, rows]  # T x R x (C+1)
    tgts = [torch.tensor(labs[i]) for i in rows]
    n_tg = torch.tensor([len(t) for t in tgts])
    per = torch.nn.functional.ctc_loss(
        lp, torch.nn.utils.rnn.pad_sequence(tgts, batch_first=True, padding_value=0),
        torch.tensor([w[i] for i in rows]), n_tg, blank=head.blank, reduction="none",
        zero_infinity=False) / n_tg
    reads = char_ctc_greedy(head, x[rows], [w[i] for i in rows])
    return per.tolist(), reads, [char_target(head, texts[i]) for i in rows], len(texts) - len(rows)


def soft_columns(x, pos):
    """The image soft tokens as left-to-right column sequences. x: embed_vision's output for a
    half-batch, the images' valid soft tokens one after another (sum n_i x D, as
    get_image_features flattens them); pos: the half-batch's image_position_ids (B x P x 2,
    (x, y), -1 on padding). The pooler numbers an image's soft tokens row-major over its
    (rows / 3) x (cols / 3) grid (Gemma4VisionPooler: x // 3 + (cols / 3) * (y // 3)), so image
    i's n_i tokens reshape to (n_i / w_i) x w_i with w_i = cols_i / 3; each column is averaged
    over its rows. Returns (B x W_max x D, the column counts w_i as a list)."""
    valid = (pos != -1).all(-1)
    n = (valid.sum(-1) // 9).tolist()
    w = ((pos[..., 0].max(-1).values + 1) // 3).tolist()
    if sum(n) != x.shape[0] or any(k <= 0 or a % b for k, a, b in zip(w, n, w)):
        raise SystemExit(f"train_mm_proxy: soft tokens {tuple(x.shape)} do not fit the images' "
                         f"grids (tokens {n}, columns {w})")
    out = x.new_zeros(len(n), max(w), x.shape[-1])
    for i, part in enumerate(torch.split(x, n)):
        out[i, :w[i]] = part.reshape(n[i] // w[i], w[i], -1).mean(0)
    return out, w


def column_mask(w, n, dev):
    """The valid mask (len(w) x n on dev, True on row i's first w[i]) of soft_columns'
    columns."""
    return torch.arange(n, device=dev)[None] < torch.tensor(w, device=dev)[:, None]


def seeded_linear(dim, n_out, seed):
    """nn.Linear(dim, n_out) with nn.Linear's own init (U(-1/sqrt(dim), 1/sqrt(dim)), weight then
    bias) drawn from a generator of its own at `seed`: a read-out head that moves none of the
    run's random streams (nn.Linear's init draws from the global one)."""
    g = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        lin = torch.nn.Linear(dim, n_out)
    with torch.no_grad():
        bound = 1.0 / math.sqrt(dim)
        lin.weight.copy_(torch.rand(lin.weight.shape, generator=g) * 2 * bound - bound)
        lin.bias.copy_(torch.rand(lin.bias.shape, generator=g) * 2 * bound - bound)
    return lin


class VisionAux(torch.nn.Module):
    """--v-aux-weight: an auxiliary read-out loss on the image soft tokens (training only: never
    saved nor exported, the package keeps the Gemma-4 layout). The decoder hands the vision
    tower almost no gradient once it has the answers' text statistics (bench/NOTES.md "Why the
    proxy does not read its media": the tower's share of the gradient falls to ~0.003 by step
    100), so this gives the tower a direct one: a linear map from each soft-token column
    (soft_columns: embed_vision's output, what the decoder reads) to the answer's characters + a
    blank, CTC against the answer's text (left to right, as the columns run). A character of
    the answer outside `chars` is dropped from its label; an image with fewer columns than its
    label needs (ctc_fits) is skipped and counted. Its weights are drawn from their own
    generator (torch seed `seed` + 3): the run's other draws are unchanged. loss() consumes the
    last image forward's embed_vision output (a forward hook)."""

    def __init__(self, model, chars, seed, tok=None, closing=None):
        super().__init__()
        self.tok, self.closing = tok, closing  # (loss_from_labels: the answers' decoding)
        m = model.model
        self.chars = "".join(sorted(set(chars)))
        self.index = {c: k for k, c in enumerate(self.chars)}
        self.blank = len(self.chars)
        self.proj = seeded_linear(m.embed_vision.text_hidden_size, len(self.chars) + 1, seed + 3)
        self.used = self.skipped = 0
        self.frames = None
        m.embed_vision.register_forward_hook(self._embed)

    def _embed(self, mod, inp, out):
        self.frames = out

    def labels(self, text):
        return [self.index[c] for c in text if c in self.index]

    def logits(self, x):
        with torch.autocast(x.device.type, enabled=False):
            return self.proj(x.float())

    def columns(self, pos):
        """The last image forward's soft-token columns (soft_columns), then forgotten."""
        if self.frames is None:
            raise SystemExit("train_mm_proxy: the vision aux head saw no image forward")
        x, self.frames = self.frames, None
        return soft_columns(x, pos)

    def loss(self, pos, texts):
        """Mean CTC loss (per label, over the images that fit) of the last image forward against
        texts (one answer string per image); None when no image fits."""
        return self.loss_of(*self.columns(pos), texts)

    def loss_of(self, cols, w, texts):
        """loss() of columns (soft_columns' cols, w): char_ctc_loss."""
        return char_ctc_loss(self, cols, w, texts)

    def loss_from_labels(self, pos, labels):
        """loss() against the answers collate's labels hold (answer_texts)."""
        return self.loss(pos, answer_texts(self.tok, labels, self.closing))

    def greedy(self, pos):
        """Greedy CTC read of the last image forward's columns: one string per image."""
        return self.greedy_of(*self.columns(pos))

    def greedy_of(self, cols, w):
        """greedy() of columns (soft_columns' cols, w)."""
        return char_ctc_greedy(self, cols, w)


class AudioChars(torch.nn.Module):
    """--ctc-weight W --ctc-units chars: the audio twin of VisionAux (training only: never saved
    nor exported). CtcHead reads the audio frames into the BPE vocabulary (4096 ids at the
    proxy: a token a few frames long, from a random tower; its CTC sat at the blank plateau in
    every CPU probe, bench/NOTES.md "An auxiliary CTC loss"); this head reads them into the
    transcript's sounds' nearest labels, its characters: a linear map from each frame (at="embed":
    embed_audio's output, the soft tokens the decoder reads; at="tower": the tower's) to
    ALPHABET + a blank, CTC against the answer's text (answer_texts) lower-cased, every run of
    characters outside the alphabet (punctuation) one space (mm_audio_readout's alphabet: a small
    read-out of the log-mel reaches CER 0.3-0.5 on it). A clip with fewer frames than
    its label needs (ctc_fits) is skipped and counted. Its weights come from their own generator
    (torch seed `seed` + 4; VisionAux's is + 3): the run's other draws are unchanged. loss()
    consumes the last audio forward's frames and valid mask (AudioTap)."""

    ALPHABET = " abcdefghijklmnopqrstuvwxyz'"

    def __init__(self, model, at, seed, tok=None, closing=None):
        super().__init__()
        if at not in ("embed", "tower"):
            raise SystemExit(f"train_mm_proxy: --ctc-at {at}: embed or tower")
        self.tok, self.closing, self.at = tok, closing, at
        emb = model.model.embed_audio
        dim = emb.text_hidden_size if at == "embed" else emb.multimodal_hidden_size
        self.chars = self.ALPHABET
        self.index = {c: k for k, c in enumerate(self.chars)}
        self.blank = len(self.chars)
        self.proj = seeded_linear(dim, len(self.chars) + 1, seed + 4)
        self.used = self.skipped = 0
        self.tap = AudioTap(model, at, "CTC head")

    @staticmethod
    def normalise(text):
        """The transcript as heard: lower case, each run of characters outside the alphabet's
        letters and apostrophe one space, no leading / trailing / doubled space."""
        return " ".join(re.sub(r"[^a-z']+", " ", text.lower()).split())

    def labels(self, text):
        return [self.index[c] for c in self.normalise(text)]

    def logits(self, x):
        with torch.autocast(x.device.type, enabled=False):
            return self.proj(x.float())

    def loss_of(self, texts):
        """Mean CTC loss (per label, over the clips that fit) of the last audio forward against
        texts (one transcript a clip); None when no clip fits."""
        x, valid = self.tap.take()
        return char_ctc_loss(self, x, valid.sum(-1).tolist(), texts)

    def loss(self, labels):
        """loss_of() against the answers collate's labels hold (CtcHead.loss's interface)."""
        return self.loss_of(answer_texts(self.tok, labels, self.closing))

    def greedy(self):
        """Greedy CTC read of the last audio forward: one string a clip."""
        x, valid = self.tap.take()
        return char_ctc_greedy(self, x, valid.sum(-1).tolist())


def image_aux_losses(vaux, vtied, pos, labels):
    """VisionAux's loss and the image TiedCtcHead's (--v-aux-tied) on one set of columns (the
    last image forward's, soft_columns: taken once, so both read the same frames) against
    collate's labels: (aux loss or None, tied loss or None)."""
    cols, w = vaux.columns(pos)
    v = vaux.loss_of(cols, w, answer_texts(vaux.tok, labels, vaux.closing))
    return v, vtied.loss_of(cols, column_mask(w, cols.shape[1], cols.device), labels)


def answer_texts(tok, labels, closing):
    """Each row's answer text from collate's labels (B x S: next-token targets, -100 elsewhere):
    its target ids less the closing token, decoded (the trainer's BPE decodes its encoding back
    exactly: tests/mm_visaux_check.py)."""
    out = []
    for row in labels.tolist():
        ids = [t for t in row if t != -100]
        if ids and ids[-1] == closing:
            ids = ids[:-1]
        out.append(tok.decode(ids, skip_special_tokens=False))
    return out


def bucket(n, pad):
    """n rounded up to a multiple of pad (pad 0: n itself)."""
    return -(-n // pad) * pad if pad > 0 else n


# collate's padding of each tensor it makes (inert: see collate; join_halves pads the same)
PAD_FILL = {"input_ids": 0, "attention_mask": 0, "labels": -100, "input_features": 0.0,
            "input_features_mask": False}


def collate(batch, pad=0, pad_frames=None):
    """The half-batch's tensors, right-padded to its longest sequence (and an audio half-batch
    to its longest clip); pad > 0 (--pad-to) rounds both lengths up to a multiple of pad, so
    the GPU's planners, allocator and autotuners see a few shapes instead of a new one each
    step. Padding is inert: input id 0 at attention mask 0 (a causal row never attends to a
    later position), label -100 (no loss), audio frames 0 at feature mask False (the tower's
    output there is dropped before it reaches the decoder); tests/mm_pad_check.py checks it.
    pad_frames (--pad-frames) rounds the audio frames to its own multiple instead (None: pad's):
    a coarser one leaves --compile one audio shape where the clips' lengths vary."""
    seqs = [b["ids"] + b["tgt"] for b in batch]
    T = bucket(max(len(s) for s in seqs), pad)
    ids = torch.full((len(batch), T), PAD_FILL["input_ids"], dtype=torch.long)
    att = torch.full((len(batch), T), PAD_FILL["attention_mask"], dtype=torch.long)
    lab = torch.full((len(batch), T), PAD_FILL["labels"], dtype=torch.long)
    for r, (b, s) in enumerate(zip(batch, seqs)):  # right padding
        ids[r, :len(s)] = torch.tensor(s)
        att[r, :len(s)] = 1
        lab[r, len(b["ids"]) - 1:len(s) - 1] = torch.tensor(b["tgt"])  # next-token targets
    out = dict(input_ids=ids, attention_mask=att, labels=lab)
    if batch[0]["kind"] == "image":
        out["pixel_values"] = torch.from_numpy(np.stack([b["pv"] for b in batch]))
        out["image_position_ids"] = torch.from_numpy(np.stack([b["pp"] for b in batch]))
    else:
        F = bucket(max(len(b["feats"]) for b in batch),
                   pad if pad_frames is None else pad_frames)
        feats = np.full((len(batch), F, batch[0]["feats"].shape[1]), PAD_FILL["input_features"],
                        np.float32)
        mask = np.full((len(batch), F), PAD_FILL["input_features_mask"], bool)
        for r, b in enumerate(batch):
            feats[r, :len(b["feats"])], mask[r, :len(b["mask"])] = b["feats"], b["mask"]
        out["input_features"], out["input_features_mask"] = (torch.from_numpy(feats),
                                                             torch.from_numpy(mask))
    return out


NATIVE_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# (what a native library loaded later in a worker reads for its pool's size)
OPENBLAS_NAMES = [(a, b) for a in ("scipy_openblas", "openblas") for b in ("64_", "_64_", "")]
# (numpy >= 2's scipy-openblas wheels name them scipy_openblas_set_num_threads64_, numpy 1's
# openblas_set_num_threads64_; a plain OpenBLAS build openblas_set_num_threads)


def openblas_pools():
    """The OpenBLAS libraries this process has loaded (numpy's own, bundled in its wheel), each
    as (its path, its get_num_threads, its set_num_threads), from /proc/self/maps; a library
    whose functions go by none of OPENBLAS_NAMES is left out. Nothing is loaded (RTLD_NOLOAD)."""
    import ctypes

    paths = []
    with open("/proc/self/maps") as f:
        for line in f:
            f6 = line.split(maxsplit=5)  # address, perms, offset, dev, inode[, path]
            path = f6[5].strip() if len(f6) == 6 else ""
            if "openblas" in path.lower() and path not in paths:  # (Debian's: openblas*/libblas)
                paths.append(path)
    out = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD)
        except OSError:
            continue
        for a, b in OPENBLAS_NAMES:
            get = getattr(lib, f"{a}_get_num_threads{b}", None)
            put = getattr(lib, f"{a}_set_num_threads{b}", None)
            if get is not None and put is not None:
                get.restype, get.argtypes, put.restype, put.argtypes = (ctypes.c_int, [], None,
                                                                       [ctypes.c_int])
                out.append((path, get, put))
                break
    return out


def limit_native_threads(n=1):
    """This process's native thread pools held to n threads: numpy's OpenBLAS (openblas_pools:
    it sizes its pool to the machine's cores when numpy is imported, and a forked DataLoader
    worker keeps that size; torch sets its own intra-op pool to 1 in a worker, not numpy's) and,
    for libraries loaded later, NATIVE_THREAD_VARS. Returns the OpenBLAS pools' sizes after, one
    a library. Single-threaded OpenBLAS computes the same numbers (each output's dot product is
    one thread's either way; tests/mm_threads_check.py compares batches and a training)."""
    for k in NATIVE_THREAD_VARS:
        os.environ[k] = str(n)
    sizes = []
    for _, get, put in openblas_pools():
        put(n)
        sizes.append(get())
    return sizes


def worker_init(_worker_id):
    """forever's DataLoader workers' worker_init_fn: limit_native_threads(1). A clip's rendering
    (make_mm_data.resample's strided products, the feature extractor's mel product) calls
    OpenBLAS; with the parent's pool size each worker started one thread a core (14 workers x 16
    threads on the H100 host's 16 cores, issue 35)."""
    limit_native_threads(1)


def forever(ds, batch, seed, workers, pad=0, pin=False, pad_frames=None):
    """ds's batches, reshuffled each pass, without end; pin: in page-locked memory (the copy to
    the GPU then runs without blocking the host). Each worker's native pools: one thread
    (worker_init)."""
    g = torch.Generator()
    g.manual_seed(seed)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, generator=g,
                                     drop_last=True,
                                     collate_fn=functools.partial(collate, pad=pad,
                                                                  pad_frames=pad_frames),
                                     num_workers=workers,
                                     persistent_workers=workers > 0, pin_memory=pin,
                                     prefetch_factor=4 if workers else None,
                                     worker_init_fn=worker_init if workers else None)
    while True:
        yield from dl


ANSWER_MASK_STREAM = 8  # AnswerMask's torch generator: seed + 8 (the loaders +0, +1, +2, +5;
# the heads' inits +3, +4, +6, +7): its draws are no other stream's numbers
PIECE_STREAM = 9  # --a-pieces' loader: seed + 9, beside the others above


def pad_rows(x, n, fill):
    """x (B x L x ...) right-padded with `fill` to B x n x ... (x itself when L is n)."""
    if x.shape[1] == n:
        return x
    out = torch.full((x.shape[0], n) + tuple(x.shape[2:]), fill, dtype=x.dtype)
    out[:, :x.shape[1]] = x
    return out


def join_halves(a, b):
    """collate(A + B) from a = collate(A) and b = collate(B) (the same pad and pad_frames), for
    --a-pieces' audio half-batches: each of a's and b's tensors right-padded to the longer of
    the two as collate pads, a's rows above b's. bucket is monotone, so the longer of two
    bucketed lengths is the bucketed length of the longer: the same tensors as collate of the
    joined list (tests/mm_pieces_check.py compares them). Audio only (an image half-batch
    keeps its patches' shape)."""
    if "pixel_values" in a:
        raise SystemExit("train_mm_proxy: join_halves joins audio half-batches only")
    out = {}
    for k, x in a.items():
        n = max(x.shape[1], b[k].shape[1])
        out[k] = torch.cat([pad_rows(x, n, PAD_FILL[k]), pad_rows(b[k], n, PAD_FILL[k])])
    return out


def piece_mix(whole, pieces, pin=False):
    """--a-pieces' audio stream: each batch of `whole` (half - k whole clips) joined with one of
    `pieces` (k piece clips), join_halves; pin: in page-locked memory, as the loaders'."""
    while True:
        b = join_halves(next(whole), next(pieces))
        yield {k: v.pin_memory() for k, v in b.items()} if pin else b


def answer_inputs(labels):
    """The answer input positions of collate's labels (B x S: next-token targets, -100
    elsewhere), B x S bool: the positions whose input id is itself the target of the position
    before, i.e. the answer's ids after the model turn's "model\\n" up to but excluding the
    closing <turn|> (whose position has no target). The first target's position (its input the
    prompt's last id) is not one: only the answer's own ids are teacher-forced answer inputs."""
    t = labels != -100
    out = torch.zeros_like(t)
    out[:, 1:] = t[:, 1:] & t[:, :-1]
    return out


class AnswerMask:
    """--answer-mask P (--answer-mask-kind audio|image|both): word dropout on the joint phase's
    teacher-forced answer INPUTS. Each answer input position (answer_inputs) of a half-batch of
    a chosen kind gets the id `mask_id` instead of its own with probability P; the labels stay
    the true answer ids. The session-35 decoder learned the answers' sentence prior from the
    teacher-forced answer tokens and ignored the audio (held-out rolled gap +0.03 against the
    images' +1.49, one stock sentence for every clip): with a share of the previous answer ids
    hidden, the next id cannot be had from them alone and the media's soft tokens are the other
    source. Draws from a torch generator of its own (seed + ANSWER_MASK_STREAM), so torch's and
    numpy's global generators and the loaders' (the data order) do not move; P 0 is never built
    (the run is the run without the option, bit for bit). The held-out evaluation (HeldOut,
    --eval-decode) builds its own batches and never masks. Counts, per kind: positions (answer
    input positions seen) and masked."""

    def __init__(self, p, kinds, mask_id, seed):
        self.p, self.kinds, self.id = p, tuple(kinds), mask_id
        self.g = torch.Generator().manual_seed(seed + ANSWER_MASK_STREAM)
        self.positions = {k: 0 for k in self.kinds}
        self.masked = {k: 0 for k in self.kinds}

    def apply(self, kind, b):
        """b: collate's dict of one half-batch of `kind`, on the CPU. Returns b itself for a kind
        not chosen, else a copy whose input_ids is a new tensor (the loader's is not written)
        with the drawn answer input positions set to the mask id; one draw of B x S uniforms a
        chosen half-batch."""
        if kind not in self.kinds:
            return b
        ans = answer_inputs(b["labels"])
        hit = ans & (torch.rand(ans.shape, generator=self.g) < self.p)
        self.positions[kind] += int(ans.sum())
        self.masked[kind] += int(hit.sum())
        ids = b["input_ids"].masked_fill(hit, self.id)
        if b["input_ids"].is_pinned():  # (a copy from pageable memory would sync the stream)
            ids = ids.pin_memory()
        return dict(b, input_ids=ids)

    def record(self):
        """train.json's answer_mask."""
        n, m = sum(self.positions.values()), sum(self.masked.values())
        return {"p": self.p, "kinds": list(self.kinds), "id": self.id, "positions": self.positions,
                "masked": self.masked, "share": m / n if n else None}


def lr_at(step, steps, p):
    if step < p["warmup"]:
        return p["lr"] * (step + 1) / p["warmup"]
    t = (step - p["warmup"]) / max(1, steps - p["warmup"])
    return p["lr"] * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * t)))


def joint_lrs(opt, step, steps, p, a_warm=0, dec_freeze=0):
    """Sets each of the joint phase's AdamW groups' lr for the 0-based `step`: lr_at x the
    group's multiplier, 0 for the audio side's groups inside --a-warmup (step < a_warm) and for
    the decoder's inside --dec-freeze-steps (step < dec_freeze). Returns each group's lr > 0,
    for train_groups: a group at 0 gets no gradient at all, and AdamW skips a parameter whose
    gradient is None (no moment, no step count and no weight decay move; a group at lr 0 WITH
    a gradient would still move its moments, and its decay is lr x wd = 0 only by the lr)."""
    for g in opt.param_groups:
        frozen = (g["audio"] and step < a_warm) or (g.get("decoder") and step < dec_freeze)
        g["lr"] = 0.0 if frozen else lr_at(step, steps, p) * g["mult"]
    return [g["lr"] > 0 for g in opt.param_groups]


def train_groups(opt, now):
    """requires_grad on the parameters of the groups that train (now: joint_lrs' list), off on
    the rest (a frozen side needs no backward pass at all, and no gradient keeps it out of
    AdamW's step); returns trained_params(opt)."""
    for g, on in zip(opt.param_groups, now):
        for x in g["params"]:
            x.requires_grad_(on)
    return trained_params(opt)


def decoder_state(opt):
    """How many of the decoder groups' tensors hold AdamW state (moments, step count): 0 while
    --dec-freeze-steps holds them out."""
    return sum(1 for g in opt.param_groups if g.get("decoder") for x in g["params"]
               if opt.state.get(x))


def trained_params(opt):
    """The parameters of the groups at lr > 0 (those this step updates)."""
    return [x for g in opt.param_groups if g["lr"] > 0 for x in g["params"]]


def clip_trained(opt, max_norm=1.0, live=None):
    """Clips the gradient of the parameters this step updates (groups at lr > 0; live: that list
    when the caller keeps it) to max_norm and returns its norm before clipping as a 0-dim tensor
    (clip_grad_norm_'s; not finite when a gradient is not; no host sync).
    A frozen side (audio x 0, or inside --a-warmup) keeps its gradient out of the norm: counted,
    it rescaled the trained parameters' step by the size of a gradient nothing applies (bench/
    NOTES.md, "An auxiliary CTC loss on the audio side")."""
    return torch.nn.utils.clip_grad_norm_(trained_params(opt) if live is None else live,
                                          max_norm)


def parse_inject(spec):
    """--inject-nonfinite STEP:KIND:WHAT[,...] (a test hook, tests/mm_guard_check.py): at step
    STEP (counted from 1, as the log) the KIND (image|audio) half-batch's loss is multiplied by
    inf (WHAT=loss) or, after its backward, one gradient of the trained decoder is set to inf
    (WHAT=grad)."""
    out = set()
    for part in (spec.split(",") if spec else []):
        f = part.split(":")
        if len(f) != 3 or not f[0].isdigit() or f[1] not in ("image", "audio") or \
                f[2] not in ("loss", "grad"):
            raise SystemExit(f"train_mm_proxy: --inject-nonfinite {part!r}: expected "
                             "STEP:image|audio:loss|grad")
        out.add((int(f[0]), f[1], f[2]))
    return out


class StepGuard:
    """Never lets a non-finite update land (issue 35's first GPU run went NaN at step ~425 and
    exported NaN weights): a half-batch whose loss is not finite is not back-propagated and its
    step is skipped (its gradients, back-propagated with the rest since train_step syncs once a
    step, are dropped: no opt.step); a step whose gradient norm (clip_trained's) is not finite
    is skipped too. Each skip is printed with the step and what was bad and
    kept in `skipped` (train.json); `limit` skips in a row stop the run with a one-line error
    (exit 1) instead of exporting garbage."""

    def __init__(self, limit=10):
        self.limit, self.skipped, self.run = limit, [], 0

    def step_ok(self, step, bad):
        """step: 0-based; bad: what was not finite this step ([] when nothing). True: apply
        the step. The records and messages count steps from 1, as the log does."""
        if not bad:
            self.run = 0
            return True
        self.skipped.append({"step": step + 1, "bad": bad})
        self.run += 1
        print(f"train_mm_proxy: step {step + 1} skipped (not finite: {'; '.join(bad)}); "
              f"{len(self.skipped)} skipped, {self.run} in a row", flush=True)
        if self.run >= self.limit:
            raise SystemExit(f"train_mm_proxy: error: {self.run} steps in a row skipped (the "
                             f"last at step {step + 1}: {'; '.join(bad)}): the training "
                             "diverged; nothing saved or exported")
        return False


def spread_terms(x, valid, gamma, per="clip", eps=1e-4):
    """VICReg's variance and covariance terms (Bardes et al., 2022) on audio soft tokens.
    x: B x T x D (embed_audio's output), valid: B x T (True: a frame of the clip). The vectors:
    per="clip" each clip's mean over its valid frames (B of them), per="frame" every valid frame.
    Each vector is divided by its RMS over D first: the decoder's first layer normalises what it
    reads, so a larger scale is no larger spread (unnormalised, growing embed_audio's weights
    would meet the hinge while the clips' relative difference shrinks). Then, with s_d the
    standard deviation across the vectors of feature d (unbiased, sqrt(var_d + eps)):
      var = mean_d max(0, gamma - s_d)
      cov = sum_{d != e} C_de^2 / D   (C: the vectors' covariance)
    Returns (var, cov), or None with fewer than two vectors."""
    if per == "clip":
        m = valid.unsqueeze(-1).to(x.dtype)
        vec = (x * m).sum(1) / m.sum(1).clamp_min(1.0)
    elif per == "frame":
        vec = x[valid]
    else:
        raise SystemExit(f"train_mm_proxy: --a-var-per {per}: clip or frame")
    n, d = vec.shape
    if n < 2:
        return None
    vec = vec / vec.pow(2).mean(-1, keepdim=True).add(1e-12).sqrt()
    c = vec - vec.mean(0)
    var = c.pow(2).sum(0) / (n - 1)
    hinge = torch.relu(gamma - (var + eps).sqrt()).mean()
    cov = c.T @ c / (n - 1)
    off = (cov.pow(2).sum() - cov.diagonal().pow(2).sum()) / d
    return hinge, off


class SpreadTerm:
    """An anti-collapse term on the audio soft tokens (training only, no weights: the package
    keeps the Gemma-4 layout): spread_terms() over the audio half-batch's clips, weight x var +
    cov_weight x cov added to the audio items' loss. Trained, the audio side collapsed to one
    vector for every clip in the warm-up (bench/NOTES.md "The audio tower's learning rate");
    this keeps the clips apart. loss() consumes the last audio forward's embed_audio output
    (AudioTap)."""

    def __init__(self, model, weight, gamma, per="clip", cov_weight=0.0):
        if per not in ("clip", "frame"):
            raise SystemExit(f"train_mm_proxy: --a-var-per {per}: clip or frame")
        if gamma <= 0 or weight < 0 or cov_weight < 0:
            raise SystemExit(f"train_mm_proxy: --a-var-gamma {gamma} (> 0), --a-var-weight "
                             f"{weight}, --a-cov-weight {cov_weight} (>= 0)")
        self.weight, self.gamma, self.per, self.cov_weight = weight, gamma, per, cov_weight
        self.tap = AudioTap(model, "embed", "spread term")

    def loss(self):
        """(weighted total, var, cov) of the last audio forward, or None (one clip)."""
        x, v = self.tap.take()
        with torch.autocast(x.device.type, enabled=False):
            r = spread_terms(x.float(), v, self.gamma, self.per)
        if r is None:
            return None
        var, cov = r
        return self.weight * var + self.cov_weight * cov, var, cov


def scale_audio_residuals(model, x):
    """Multiplies the audio tower's residual branches' output scales by x (an init option: x < 1
    keeps each conformer layer near identity, so a random tower passes its input on): per layer
    the two half-step feed-forwards' post norms, the attention's post norm (the weights of
    RMSNorms whose output is added to the residual) and the light convolution's output linear.
    norm_out (the layer's last norm, on the sum) is left as it is."""
    if not x > 0:
        raise SystemExit(f"train_mm_proxy: --a-res-scale {x}: expected > 0")
    with torch.no_grad():
        for layer in model.model.audio_tower.layers:
            for w in (layer.feed_forward1.post_layer_norm.weight, layer.norm_post_attn.weight,
                      layer.lconv1d.linear_end.linear.weight,
                      layer.feed_forward2.post_layer_norm.weight):
                w.mul_(x)


def scale_vision_residuals(model, x):
    """Multiplies the vision tower's residual branches' output scales by x (an init option, the
    vision twin of scale_audio_residuals): per encoder layer the weights of the two RMSNorms
    whose output is added to the residual (post_attention_layernorm, post_feedforward_layernorm).
    x < 1 keeps each random layer near identity."""
    if not x > 0:
        raise SystemExit(f"train_mm_proxy: --v-res-scale {x}: expected > 0")
    with torch.no_grad():
        for layer in model.model.vision_tower.encoder.layers:
            for w in (layer.post_attention_layernorm.weight,
                      layer.post_feedforward_layernorm.weight):
                w.mul_(x)


def init_vision_positions(model, std, seed):
    """Draws the vision patch embedder's position table (2 x 128 x D: the x and y embeddings a
    patch's two coordinates look up and add) from N(0, std) with its own generator (torch seed
    `seed`: the global stream the rest of the run draws from is untouched). transformers'
    _init_weights sets it to ones: every patch then gets the same vector 2 x (1, ..., 1), RMS 2,
    which carries no position and buries the pixels' projection (RMS ~0.3 at std 0.02)."""
    if not std >= 0:
        raise SystemExit(f"train_mm_proxy: --v-pos-init {std}: expected >= 0")
    t = model.model.vision_tower.patch_embedder.position_embedding_table
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        t.copy_(torch.randn(t.shape, generator=g, dtype=torch.float32).to(t) * std)


def init_vision_proj(model, std, seed):
    """--v-proj-init: draws the patch embedder's input_proj (pixels -> D) from N(0, std) with its
    own generator (torch seed `seed` + 1: --v-pos-init's is `seed`). At transformers' 0.02 the
    pixels' projection has an RMS of ~0.3; with the position table drawn small (--v-pos-init
    0.02) that is the whole patch embedding, and the first layer's RMSNorm divides the gradient
    by it: the proxy tower's gradient at step 0 is ~10x the decoder's (bench/NOTES.md "Why the
    proxy does not read"). A larger std keeps the patch embedding near unit RMS with the same
    content (the shares of pixels, position and glyph do not change with its scale)."""
    if not std > 0:
        raise SystemExit(f"train_mm_proxy: --v-proj-init {std}: expected > 0")
    w = model.model.vision_tower.patch_embedder.input_proj.weight
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        w.copy_(torch.randn(w.shape, generator=g, dtype=torch.float32).to(w) * std)


def build_model(p, tok, seed, a_res_scale=None, v_pos_init=None, v_res_scale=None,
                v_proj_init=None):
    """The proxy's Gemma-4 from preset p (fp32; sdpa everywhere: transformers 5.17's eager audio
    attention inverts its band mask, tools/python/mm_reference.py, and g4cu computes the band the
    sdpa path uses) with the init options that are not None applied; the caller seeds torch."""
    from transformers import Gemma4ForConditionalGeneration

    model = Gemma4ForConditionalGeneration._from_config(model_config(p, tok), dtype=torch.float32,
                                                        attn_implementation="sdpa")
    if a_res_scale is not None:
        scale_audio_residuals(model, a_res_scale)
    if v_pos_init is not None:
        init_vision_positions(model, v_pos_init, seed)
    if v_res_scale is not None:
        scale_vision_residuals(model, v_res_scale)
    if v_proj_init is not None:
        init_vision_proj(model, v_proj_init, seed)
    return model


SIDES = {"vision": ("model.vision_tower.", "model.embed_vision."),
         "audio": ("model.audio_tower.", "model.embed_audio.")}


def side_of(name):
    """The side a parameter name belongs to: "vision", "audio" (SIDES' prefixes) or
    "decoder" (everything else; the test scripts' split of the weights)."""
    return next((k for k, pres in SIDES.items() if name.startswith(pres)), "decoder")


def side_grad_norms(model):
    """The norm of each side's gradient as the optimizer takes it (after clip_trained's scaling,
    which is the same for every side, so the ratios are the raw gradients'): decoder,
    vision_tower, embed_vision, audio_tower, embed_audio; a side without a gradient (frozen)
    is left out. One host sync (train.json's grad_norm_sides_every_25)."""
    sides = {pre.split(".")[1]: pre for pres in SIDES.values() for pre in pres}
    sq = {}
    for n, x in model.named_parameters():
        if x.grad is not None:
            k = next((k for k, v in sides.items() if n.startswith(v)), "decoder")
            sq.setdefault(k, []).append(x.grad.float().pow(2).sum())
    if not sq:
        return {}
    vals = torch.stack([torch.stack(v).sum() for v in sq.values()]).sqrt().tolist()
    return {k: float(f"{v:.4g}") for k, v in zip(sq, vals)}


def bad_grads(model, head=None, vaux=None, tied=None, vtied=None):
    """The sides (decoder, vision, audio, ctc head, vision aux head, tied ctc head, image tied
    ctc head) with a gradient that is not finite."""
    out = set()
    named = list(model.named_parameters()) + \
        ([("ctc." + n, x) for n, x in head.named_parameters()] if head is not None else []) + \
        ([("vaux." + n, x) for n, x in vaux.named_parameters()] if vaux is not None else []) + \
        ([("tied." + n, x) for n, x in tied.named_parameters()] if tied is not None else []) + \
        ([("vtied." + n, x) for n, x in vtied.named_parameters()] if vtied is not None else [])
    for n, x in named:
        if x.grad is not None and not torch.isfinite(x.grad).all():
            out.add("ctc head" if n.startswith("ctc.") else
                    "vision aux head" if n.startswith("vaux.") else
                    "tied ctc head" if n.startswith("tied.") else
                    "image tied ctc head" if n.startswith("vtied.") else
                    next((k for k, v in SIDES.items() if n.startswith(v)), "decoder"))
    return sorted(out)


def half_loss(model, b, lab, amp):
    """One half-batch's forward and its cross-entropy on the target tokens (--compile compiles
    this function: the model's forward and the loss, the part with the per-layer small ops)."""
    with torch.autocast(lab.device.type, dtype=torch.bfloat16, enabled=amp):
        logits = model(**b).logits
    return torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), lab.reshape(-1), ignore_index=-100)


def compile_loss(model):
    """--compile: half_loss (each half-batch's forward and loss) through torch.compile, inductor
    at its default mode (fused kernels; no CUDA graphs: the towers' masks make data-dependent
    shapes and the model syncs the host ~14 times a step, which CUDA graphs cannot hold), fixed
    shapes (dynamic=False: --pad-to is required, so the image half keeps one shape and the
    audio half a few). Measured on the CPU (bench/NOTES.md "Fewer launches a step"): with
    dynamo's defaults the towers break each half's graph 9 (image) and 15 (audio) times; with
    the two capture options below and the HF modules' cached properties computed first (dynamo
    cannot trace functools.cached_property's lock, the audio convolutions' left_pad) each half
    is one graph."""
    import torch._dynamo

    cfg = torch._dynamo.config
    cfg.capture_dynamic_output_shape_ops = True  # hidden[pooler_mask], audio[mask]: no break
    cfg.capture_scalar_outputs = True  # the vision pooler's split sizes (.tolist())
    cfg.recompile_limit = max(cfg.recompile_limit, 32)  # a graph per half and padded shape
    for m in model.modules():
        for k in type(m).__mro__:
            for n, v in vars(k).items():
                if isinstance(v, functools.cached_property):
                    getattr(m, n)
    return torch.compile(half_loss, dynamic=False)


def compile_stats():
    """torch.compile's counters so far: graphs compiled, graph breaks (train.json)."""
    from torch._dynamo.utils import counters

    return {"graphs": int(counters["stats"]["unique_graphs"]),
            "graph_breaks": int(sum(counters["graph_break"].values())),
            "break_reasons": sorted(counters["graph_break"])[:20]}


# how StepGuard's records name a non-finite value train_step tracked (the rest: "<kind> loss")
BAD_NAMES = {"ctc": "audio ctc loss", "ctc_tied": "audio tied ctc loss",
             "v_aux": "image aux loss", "v_aux_tied": "image tied ctc loss",
             "a_var": "audio spread variance term",
             "a_cov": "audio spread covariance term"}


def train_step(model, opt, batches, step, guard, losses, head=None, ctc_w=0.0, amp=False,
               inject=(), norms=None, live=None, loss_fn=half_loss, spread=None, vaux=None,
               vaux_w=0.0, tied=None, tied_w=0.0, vtied=None, vtied_w=0.0):
    """One optimizer step on one half-batch of each kind (gradients summed), guarded (StepGuard).
    batches: {kind: collate's dict on the device}; step: 0-based; inject: parse_inject's set;
    norms: a list that gets the step's gradient norm before clipping (nan: a loss was bad);
    live: the parameters the step trains (trained_params'; None: computed here); loss_fn:
    half_loss or its compiled form; spread: a SpreadTerm added to the audio loss (losses["a_var"],
    ["a_cov"] get its terms); vaux: a VisionAux whose loss x vaux_w is added to the image loss
    (losses["v_aux"]); tied: a TiedCtcHead whose loss x tied_w is added to the audio loss
    after the head's (losses["ctc_tied"]); vtied: an image TiedCtcHead (--v-aux-tied) on the
    same columns as vaux, its loss x vtied_w added to the image loss (losses["v_aux_tied"]).
    Returns True when the step was applied.
    One host sync a step: both half-batches are back-propagated whatever their loss, and the
    losses and the gradient norm (one fused reduction over every trained gradient, clip_trained's:
    not finite when any gradient is not) come to the host together. A non-finite loss makes
    every gradient non-finite or leaves it unapplied: the step is skipped as before (gradients
    dropped, no opt.step), with the same records (the bad loss named first; the norm only when
    every loss was finite)."""
    opt.zero_grad(set_to_none=True)
    tracked = []  # (label, 0-dim loss tensor), in the order the records name them
    for kind in ("image", "audio"):
        b = dict(batches[kind])
        lab = b.pop("labels")
        with torch.profiler.record_function(f"mm_forward_{kind}"):
            loss = loss_fn(model, b, lab, amp)
        if (step + 1, kind, "loss") in inject:
            loss = loss * float("inf")
        tracked.append((kind, loss.detach()))
        if kind == "image" and vaux is not None:
            if vtied is None:
                v = vaux.loss_from_labels(b["image_position_ids"], lab)
            else:
                v, t = image_aux_losses(vaux, vtied, b["image_position_ids"], lab)
            if v is not None:
                tracked.append(("v_aux", v.detach()))
                loss = loss + vaux_w * v
            if vtied is not None and t is not None:
                tracked.append(("v_aux_tied", t.detach()))
                loss = loss + vtied_w * t
        if kind == "audio" and head is not None:
            c = head.loss(lab)
            if c is not None:
                tracked.insert(len(tracked) - 1, ("ctc", c.detach()))
                loss = loss + ctc_w * c
        if kind == "audio" and tied is not None:
            c = tied.loss(lab)
            if c is not None:
                tracked.insert(len(tracked) - 1, ("ctc_tied", c.detach()))
                loss = loss + tied_w * c
        if kind == "audio" and spread is not None:
            r = spread.loss()
            if r is not None:
                tracked[-1:-1] = [("a_var", r[1].detach()), ("a_cov", r[2].detach())]
                loss = loss + r[0]
        with torch.profiler.record_function(f"mm_backward_{kind}"):
            if loss.requires_grad:  # (not: nothing it reaches trains, e.g. the audio half
                (loss / 2).backward()  # with its side and the decoder frozen)
        if (step + 1, kind, "grad") in inject:
            x = next(x for n, x in model.named_parameters()
                     if x.grad is not None and not n.startswith(SIDES["vision"] + SIDES["audio"]))
            x.grad.view(-1)[0] = float("inf")
    with torch.profiler.record_function("mm_clip"):
        norm_t = clip_trained(opt, live=live)
    vals = torch.stack([t.float() for _, t in tracked] + [norm_t.float()]).tolist()  # the sync
    bad = []
    for (kind, _), v in zip(tracked, vals):
        losses[kind].append(v)
        if not math.isfinite(v):
            bad.append(f"{BAD_NAMES.get(kind, kind + ' loss')} {v}")
    norm = float("nan") if bad else vals[-1]
    if not bad and not math.isfinite(norm):
        bad.append(f"gradient norm {norm} (sides: "
                   f"{', '.join(bad_grads(model, head, vaux, tied, vtied))})")
    if norms is not None:
        norms.append(norm)
    if not guard.step_ok(step, bad):
        opt.zero_grad(set_to_none=True)
        return False
    with torch.profiler.record_function("mm_optimizer"):
        opt.step()
    return True


def warm_optimizer(model, p, vaux, impl, head=None, tied=None, vtied=None):
    """--v-warm-steps: the warm phase's own AdamW over the vision side (the tower and
    embed_vision, where VisionAux reads: weight decay 0.05 on matrices, 0 on the rest, at the
    preset's v_lr_mult) and the aux head (0, x 1), with the main optimizer's betas and
    implementation (make_optimizer's impl, already resolved); head (--a-warm: the audio CTC
    head) adds the audio side (the tower and embed_audio, at the run's a_lr_mult) and that head
    (x 1) after them; tied (--a-warm with --ctc-tied: the TiedCtcHead) its group next (x 1),
    vtied (--v-aux-tied: the image TiedCtcHead) its group last (x 1).
    Its own state, dropped after the phase: the joint phase's AdamW then starts from no moments
    with its own warm-up, as without the phase (moments of a CTC-only loss would size the
    towers' first joint updates)."""
    named = [x for n, x in model.named_parameters() if n.startswith(SIDES["vision"])]
    groups = decay_groups(named, p.get("v_lr_mult", 1.0)) + [head_group(vaux)]
    if head is not None:
        named = [x for n, x in model.named_parameters() if n.startswith(SIDES["audio"])]
        groups += decay_groups(named, p.get("a_lr_mult", 1.0), True) + [head_group(head)]
    groups += [head_group(h) for h in (tied, vtied) if h is not None]
    return adamw(groups, p, impl)


def warm_schedule(p, n):
    """The warm phase's lr_at preset: the run's peak lr, a linear warm-up of min(the run's
    warm-up, n / 10) steps (at least 1), then cosine to 5% over the n steps."""
    return {"lr": p["lr"], "warmup": max(1, min(p["warmup"], n // 10))}


WARM_NAMES = {"v_warm": "image aux", "a_warm": "audio ctc", "a_warm_tied": "audio tied ctc",
              "v_warm_tied": "image tied ctc"}


def vision_warm_step(model, vaux, opt, b, step, guard, losses, amp, live, head=None, a=None,
                     tied=None, tied_mult=1.0, vtied=None, vtied_mult=1.0):
    """One warm-phase step (--v-warm-steps): the image half-batch b (collate's dict on the
    device) through the vision tower and embed_vision only (get_image_features: no decoder, no
    audio), VisionAux's CTC loss (losses["v_warm"]); with head (--a-warm: the run's audio CTC
    head) also the audio half-batch a through the audio tower and embed_audio only
    (get_audio_features, where the head's tap reads) and that head's loss (losses["a_warm"]),
    the two losses summed into one backward; tied (--ctc-tied with --a-warm: the TiedCtcHead,
    on the same audio forward) adds tied_mult x its loss (losses["a_warm_tied"]; tied_mult:
    --ctc-tied-weight / --ctc-weight, the joint phase's ratio of the two audio heads); vtied
    (--v-aux-tied: the image TiedCtcHead, on VisionAux's columns) adds vtied_mult x its loss
    (losses["v_warm_tied"]; vtied_mult: --v-aux-tied-weight / --v-aux-weight). The
    gradient over `live` (the warm optimizer's
    tensors) clipped to 1.0, guarded as train_step (StepGuard; one host sync). Returns True
    when the step was applied; None when no image (and no clip) of the batch fits its answer
    (no loss: nothing to apply)."""
    opt.zero_grad(set_to_none=True)
    with torch.autocast(b["pixel_values"].device.type, dtype=torch.bfloat16, enabled=amp):
        model.model.get_image_features(b["pixel_values"], b["image_position_ids"])
    vt = None
    if vtied is None:
        v = vaux.loss_from_labels(b["image_position_ids"], b["labels"])
    else:
        v, vt = image_aux_losses(vaux, vtied, b["image_position_ids"], b["labels"])
    if v is None:
        vaux.frames = None
    c = None
    if head is not None:
        with torch.autocast(a["input_features"].device.type, dtype=torch.bfloat16, enabled=amp):
            model.model.get_audio_features(a["input_features"], a["input_features_mask"])
        c = head.loss(a["labels"])  # (takes the tap's frames: none left for the next forward)
    t = None if tied is None else tied.loss(a["labels"])
    parts = [(k, x) for k, x in (("v_warm", v), ("a_warm", c), ("a_warm_tied", t),
                                 ("v_warm_tied", vt)) if x is not None]
    if not parts:
        return None
    # (the vision loss alone backs itself, not 0 + it: without --a-warm the same graph as before)
    # (the terms in parts' order: v + c, then each tied head's x its mult)
    mult = {"v_warm": 1.0, "a_warm": 1.0, "a_warm_tied": tied_mult, "v_warm_tied": vtied_mult}
    total = None
    for k, x in parts:
        total = mult[k] * x if total is None else total + mult[k] * x
    total.backward()
    norm_t = torch.nn.utils.clip_grad_norm_(live, 1.0)
    vals = torch.stack([t.detach().float() for _, t in parts] + [norm_t.float()]).tolist()
    bad = []
    for (k, _), x in zip(parts, vals):
        losses[k].append(x)
        if not math.isfinite(x):
            bad.append(f"warm {WARM_NAMES[k]} loss {x}")
    norm = vals[-1]
    if not bad and not math.isfinite(norm):
        bad.append(f"warm gradient norm {norm} (sides: "
                   f"{', '.join(bad_grads(model, head, vaux, tied, vtied))})")
    if not guard.step_ok(step, bad):
        opt.zero_grad(set_to_none=True)
        return False
    opt.step()
    return True


ADAMW = {"fused": dict(fused=True), "foreach": dict(foreach=True), "loop": dict(foreach=False)}


def make_optimizer(model, p, head=None, dev=None, impl="auto", vaux=None, tower_mult=1.0,
                   tied=None, vtied=None):
    """AdamW over six parameter groups (weight decay 0.05 on matrices, 0 on the rest) x (the
    decoder, the vision side, the audio side; the lr multipliers' "", v_, a_; the vision and
    audio sides' also x tower_mult: --tower-joint-lr-mult, after a warm phase), plus the CTC
    head's group (it learns from step 0, also while the audio side is frozen) and then the
    vision aux head's (VisionAux; at the decoder's lr, as the CTC head), then the tied CTC
    head's (TiedCtcHead, --ctc-tied: its blank and scale, x 1) and the image one's
    (--v-aux-tied). impl (--adamw):
    fused (torch's fused kernel: one launch per group and dtype), foreach (a launch per op per
    chunk of tensors: torch's own CUDA default), loop (one op per tensor: torch's CPU default);
    auto: fused on CUDA, foreach on the CPU (bench/NOTES.md "Fewer launches a step")."""
    groups = []
    sides = {"v": SIDES["vision"], "a": SIDES["audio"]}  # (the lr multipliers' v_ / a_)
    for side in ("", "v", "a"):
        named = [x for n, x in model.named_parameters()
                 if (n.startswith(sides[side]) if side else
                     not n.startswith(sides["v"] + sides["a"]))]
        groups += decay_groups(named, p.get(f"{side}_lr_mult", 1.0) * tower_mult if side else 1.0,
                               side == "a", not side)
    groups += [head_group(h) for h in (head, vaux, tied, vtied) if h is not None]
    if impl == "auto":
        impl = "fused" if dev is not None and dev.type == "cuda" else "foreach"
    if impl not in ADAMW:
        raise SystemExit(f"train_mm_proxy: --adamw {impl}: expected auto, "
                         f"{', '.join(ADAMW)}")
    return adamw(groups, p, impl)


def decay_groups(named, mult, audio=False, decoder=False):
    """Two AdamW groups of the parameters `named` at lr x mult: weight decay 0.05 on the
    matrices, 0 on the rest ("audio": the group the frozen-audio schedule holds at lr 0;
    "decoder": the one --dec-freeze-steps holds at lr 0; joint_lrs)."""
    return [{"params": [x for x in named if x.dim() >= 2], "weight_decay": 0.05, "mult": mult,
             "audio": audio, "decoder": decoder},
            {"params": [x for x in named if x.dim() < 2], "weight_decay": 0.0, "mult": mult,
             "audio": audio, "decoder": decoder}]


def head_group(head):
    """A read-out head's AdamW group (CtcHead, AudioChars, VisionAux): no decay, the run's lr."""
    return {"params": list(head.parameters()), "weight_decay": 0.0, "mult": 1.0, "audio": False,
            "decoder": False}


def adamw(groups, p, impl):
    """The run's AdamW (betas 0.9 / the preset's beta2, eps 1e-8) over groups, in the
    implementation impl (ADAMW's key)."""
    return torch.optim.AdamW(groups, lr=p["lr"], betas=(0.9, p.get("beta2", 0.98)), eps=1e-8,
                             **ADAMW[impl])

def opt_impl(opt):
    """The AdamW implementation opt runs: fused, foreach or loop."""
    d = opt.defaults
    return "fused" if d.get("fused") else "foreach" if d.get("foreach") else "loop"


# aten ops that launch nothing on a GPU: views, allocations, scalar reads, dtype no-ops
QUIET_OPS = frozenset(
    "view t transpose as_strided empty empty_strided slice select expand reshape unsqueeze "
    "squeeze permute _unsafe_view alias detach resolve_conj resolve_neg _reshape_alias "
    "unflatten flatten lift_fresh contiguous chunk split unbind narrow to item "
    "_local_scalar_dense empty_like view_as expand_as is_nonzero result_type resize_ "
    "numpy_T _has_compatible_shallow_copy_type".split())


def step_ops(events):
    """Counts a profiled step's launch-like ops, the CPU's stand-in for a GPU step's kernel
    launches (bench/NOTES.md "Fewer launches a step"): torch.profiler's aten events that compute
    (QUIET_OPS not), counted at the leaves (a composite op through the ops it runs), a
    _foreach_* or _fused_* call as one (on a GPU one kernel per chunk of tensors). events:
    profile().events() (with_stack=True records the model's modules; train_step's ranges
    stand in without it). Returns {"total", "phase": counts under the model's modules or
    train_step's mm_forward_ ranges (forward: the loss's too), autograd (backward),
    Optimizer.step (optimizer) and the rest (other: the clipping, the loss outside a range),
    "by_op": a Counter, "trainer_items": .item() calls in none of those (the trainer's own
    host syncs)}."""
    import collections

    def compute(e):
        return e.name.startswith("aten::") and e.name[6:] not in QUIET_OPS

    multi_ops = ("aten::_foreach_", "aten::_fused_")  # one call, many tensors

    def multi(e):
        return e.name.startswith(multi_ops)

    below = {}  # id(event): it has a computing descendant

    def has_compute_below(e):
        k = id(e)
        if k not in below:
            below[k] = any(compute(c) or has_compute_below(c) for c in e.cpu_children)
        return below[k]

    def phase(names):
        if any(n.startswith("Optimizer.") for n in names):
            return "optimizer"
        if any(n.startswith("autograd::") or "Backward" in n for n in names):
            return "backward"
        if any(n.startswith(("nn.Module:", "mm_forward_")) for n in names):
            return "forward"
        return "other"

    by_op, by_phase, items = collections.Counter(), collections.Counter(), 0
    for e in events:
        names, par = [], e.cpu_parent
        while par is not None:
            names.append(par.name)
            par = par.cpu_parent
        if e.name == "aten::item" and not any(n.startswith("aten::") for n in names) and \
                phase(names) == "other":
            items += 1
        if not compute(e) or any(n.startswith(multi_ops) for n in names):
            continue
        if multi(e) or not has_compute_below(e):
            by_op[e.name] += 1
            by_phase[phase(names)] += 1
    return {"total": sum(by_op.values()), "phase": dict(by_phase), "by_op": by_op,
            "trainer_items": items}


def check_finite(model):
    """The weights about to be saved are all finite (else a one-line error, exit 1)."""
    for n, x in model.named_parameters():
        if not torch.isfinite(x).all():
            raise SystemExit(f"train_mm_proxy: parameter {n} is not finite after training: "
                             "nothing saved or exported")


def load_items(data):
    # speech.jsonl: the plan's utterances once make_mm_data.py's speech step rendered them
    if not os.path.exists(os.path.join(data, "speech.jsonl")):
        raise SystemExit(f"train_mm_proxy: no {data}/speech.jsonl (make_mm_data.py speech)")
    audio = mmd.read_jsonl(os.path.join(data, "speech.jsonl"))
    images = mmd.read_jsonl(os.path.join(data, "images.jsonl"))
    return audio, images


def heldout_pick(ns, k, seed):
    """Which held-out items the periodic evaluation measures (HeldOut): ns, each held-out
    item's soft-token count (images: the rolled pass moves whole images only within a batch of
    one count; audio: give one count for all). The first k of a permutation drawn from numpy's
    PCG64 at (seed, 35) (its own generator: no training stream is drawn from), then each count
    picked only once completed by the next item of that count in the permutation (a lone image
    has no neighbour to take soft tokens from), or dropped when the held-out set has no other.
    Returns the indices, grouped by count (ascending), in permutation order within a count."""
    order = np.random.default_rng([seed, 35]).permutation(len(ns)).tolist()
    chosen = order[:k]
    for n in sorted({ns[i] for i in chosen}):
        if sum(ns[i] == n for i in chosen) == 1:
            more = next((i for i in order[k:] if ns[i] == n and i not in chosen), None)
            chosen = chosen + [more] if more is not None else [i for i in chosen if ns[i] != n]
    return sorted(chosen, key=lambda i: (ns[i], order.index(i)))


def roll_chunks(ns, size):
    """The batches of a rolled measurement (HeldOut here, mm_vision_probe's measure): the indices
    of ns (each item's soft-token count: the roll moves whole images only within a batch of one
    count; give one count for all to roll clips by one along the batch), grouped by count
    (ascending; the given order within a count) and cut into near-equal interleaved chunks of at
    most `size` (>= 2) items, never one alone: a lone item has no neighbour, so its rolled pass
    would equal its as-is pass and pull the rolled gap toward 0. A count of 3, 5, ... items at
    size 2 is cut into pairs and one chunk of 3. Returns (chunks [(count, [indices])], lone [the
    indices of counts that have a single item: left out]); HeldOut's pick has none
    (heldout_pick completes or drops them), the probe reports how many it left out."""
    if size < 2:
        raise SystemExit(f"train_mm_proxy: a rolled measurement's batch of {size}: expected >= 2")
    by_n = {}
    for i, n in enumerate(ns):
        by_n.setdefault(n, []).append(i)
    chunks, lone = [], []
    for n, ids in sorted(by_n.items()):
        if len(ids) == 1:
            lone += ids
            continue
        parts = min(-(-len(ids) // size), len(ids) // 2)
        chunks += [(n, ids[c::parts]) for c in range(parts)]
    return chunks, lone


DECODE_SLACK = 4  # ids the held-out decoding may run past the longest answer and <turn|>


def prompt_batch(batches):
    """The held-out decoding's inputs (HeldOut, --eval-decode) from a kind's measuring batches
    (collate's dicts, labels included, on the CPU): every row's prompt (its ids up to the first
    target, which collate puts at the first label; the answer and the right padding dropped),
    all rows in one batch, left-padded, with position ids counted from each prompt's first id
    (as the training forward numbers them; left padding shifts nothing), and the rows' media
    (an audio half's frames padded to the longest clip of the batches, mask False: inert, as
    collate pads). Returns (the dict for the model's forward, each row's answer ids as
    collate's labels hold them: the closing token included)."""
    rows, targets, media = [], [], {}
    for b in batches:
        lab = b["labels"]
        for r in range(lab.shape[0]):
            on = (lab[r] != -100).nonzero()
            if not len(on):
                raise SystemExit("train_mm_proxy: a held-out row without an answer")
            n = int(on[0]) + 1  # the prompt's length: its last id predicts the first target
            rows.append(b["input_ids"][r, :n])
            targets.append(lab[r][lab[r] != -100].tolist())
        for k, v in b.items():
            if k not in ("input_ids", "attention_mask", "labels"):
                media.setdefault(k, []).append(v)
    T = max(len(x) for x in rows)
    ids = torch.zeros(len(rows), T, dtype=torch.long)
    att = torch.zeros(len(rows), T, dtype=torch.long)
    for r, x in enumerate(rows):
        ids[r, T - len(x):], att[r, T - len(x):] = x, 1
    out = dict(input_ids=ids, attention_mask=att,
               position_ids=(att.cumsum(-1) - 1).clamp_min(0))
    for k, vs in media.items():
        if k in ("input_features", "input_features_mask"):
            F = max(v.shape[1] for v in vs)
            vs = [torch.nn.functional.pad(v, (0, 0) * (v.dim() - 2) + (0, F - v.shape[1]))
                  for v in vs]
        out[k] = torch.cat(vs)
    return out, targets


def greedy_decode(model, g, eos, max_new, amp):
    """Greedy answers of a left-padded prompt batch g (prompt_batch's dict, on the model's
    device) under the training forward's autocast, with the model's KV cache: the prompt's
    forward, then one token a forward, each row's next position one past its last. A row stops
    at its first id in eos (kept out of its answer); the loop stops when every row has, or after
    max_new ids. The caller sets eval mode and no_grad. Returns (each row's answer ids, the
    forwards run, whether each row reached an eos, the rows whose logits were ever not finite).
    The last is a guard, not an expectation: a left pad's query attends to nothing, and SDPA
    returns zeros for such rows (torch >= 2.5; the CPU's path is checked by tests/
    mm_exact_check.py); a kernel that returned NaN there would poison every row through the
    pads' cached values, and the count says so instead of scoring garbage silently."""
    B, dev = g["input_ids"].shape[0], g["input_ids"].device
    eos_t = torch.tensor(sorted(eos), device=dev)
    att, pos, past = g["attention_mask"], g["position_ids"], None
    inputs, toks = dict(g), []
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    bad = torch.zeros(B, dtype=torch.bool, device=dev)
    for t in range(max_new):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            o = model(**inputs, past_key_values=past, use_cache=True, logits_to_keep=1)
        z = o.logits[:, -1]
        nxt = z.argmax(-1)
        bad = bad | ~torch.isfinite(z).all(-1)
        past = o.past_key_values
        toks.append(nxt)
        done = done | torch.isin(nxt, eos_t)
        if t == max_new - 1 or bool(done.all()):
            break
        att = torch.cat([att, att.new_ones(B, 1)], 1)
        pos = pos[:, -1:] + 1
        inputs = dict(input_ids=nxt[:, None], attention_mask=att, position_ids=pos)
    ids = torch.stack(toks, 1).tolist()
    eos_set = set(eos)
    out, ended = [], []
    for row in ids:
        k = next((j for j, x in enumerate(row) if x in eos_set), None)
        out.append(row if k is None else row[:k])
        ended.append(k is not None)
    return out, len(toks), ended, int(bad.sum())


class HeldOut:
    """--eval-every: the held-out answer loss (per answer token, as the training loss counts
    it: half_loss, under the same autocast) of a fixed subset of the held-out items, each three
    ways through mm_probe.SoftTokens on embed_vision and embed_audio: as is, the media's soft
    tokens zeroed, and rolled to the batch neighbour's. The gaps (zeroed or rolled minus as is)
    say how much the answers depend on this item's media, long before exact match moves off 0.
    Rolling: the images are batched by soft-token count (heldout_pick), so a roll by that count
    moves whole images (mm_vision_probe's way); the clips are rolled by one along the batch (each
    clip's valid frames get its neighbour's frames at the same times, the tail of a longer clip
    its neighbour's padding frames: not its own audio either way). Measured in eval mode, no
    gradient, the hooks attached only while measuring, inside torch.random.fork_rng (no random
    stream of the run is drawn from or moved: the data order and weights are the same with the
    evaluation on or off, tests/mm_fast_check.py).
    decode (--eval-decode): then each item's greedy answer too (greedy_decode on prompt_batch of
    the same batches: one left-padded batch a kind, at most the kind's longest answer + <turn|>
    + DECODE_SLACK ids), scored as `g4cu eval` scores (mm_metrics.answer_scores: exact match,
    OCRBench accuracy, WER, CER, the length gap), in each kind's "decode".
    heads ({kind: a character read-out head or None}: AudioChars for "audio", VisionAux for
    "image"; training-only heads the decoder never reads): then, from the as-is pass's frames
    (the heads' own hooks), each kind's head on the held-out items too (char_ctc_items): "ctc"
    (its CTC loss a label, as the training loss counts it: does the tower carry the held-out
    items' characters, or has the head memorised the train items?), "ctc_cer" (its greedy read
    against the items' references, char_target) and "ctc_cer_other" (against the references
    rolled by one, another item's: near ctc_cer when the read is the answers' prior, not this
    item's), "ctc_items" / "ctc_skipped" (items measured / too long for their frames, as the
    training loss skips them). No stream moves and the heads' training counts stay as they were
    (tests/mm_audchars_check.py).
    tied ({kind: a TiedCtcHead or None}: --ctc-tied's for "audio", --v-aux-tied's for "image"):
    then the kind's as-is frames (an image's: VisionAux's columns) are read by it too
    (TiedCtcHead.items, read_tied): "tied_ctc" (its CTC a label), "tied_cer" (its greedy token
    read decoded to text against the answers' text, answer_texts), "tied_cer_other" (against
    another clip's), "tied_items" / "tied_skipped", "tied_peaks" (the share of the valid frames
    whose argmax is a token, not the blank) and "tied_peak_cos" (those frames' mean cosine to
    the embedding of the token they pick), "tied_example" (the first read); a log line
    "tied read-out" (tests/mm_ctctied_check.py)."""

    def __init__(self, model, data, fonts, pr, fe, items, k, seed, batch, pad, pad_frames, dev,
                 amp, decode=False, heads=None, tied=None):
        import mm_probe

        self.model, self.dev, self.amp, self.hooks, self.pr = model, dev, amp, {}, pr
        self.SoftTokens, self.cer = mm_probe.SoftTokens, mm_probe.cer
        self.heads = {kind: h for kind, h in (heads or {}).items() if h is not None}
        self.tied = {kind: h for kind, h in (tied or {}).items() if h is not None}
        self.table0 = None  # (with a tied head: the decoder's table at the first measure)
        self.batches, self.counts = {}, {}
        for kind in ("image", "audio"):
            te = [i for i in items[kind] if i["split"] == "test"]
            ds = Items(te, kind, data, fonts, pr, fe, 1)  # rendering 0: the held-out media's
            soft = pr.id["<|image|>" if kind == "image" else "<|audio|>"]
            if kind == "image":
                ns = [ds.render(k)["ids"].count(soft) for k in range(len(te))]
            else:
                ns = [0] * len(te)
            pick = heldout_pick(ns, k, seed)
            self.counts[kind] = len(pick)
            chunks, lone = roll_chunks([ns[i] for i in pick], max(2, batch))
            assert not lone, lone  # heldout_pick keeps no count alone
            self.batches[kind] = [
                (n if kind == "image" else 1,
                 collate([ds.render(pick[j]) for j in js], pad, pad_frames))
                for n, js in chunks]
        if not all(self.counts.values()):
            raise SystemExit(f"train_mm_proxy: --eval-items {k}: {self.counts} held-out items "
                             f"measurable in {data} (a lone image cannot be rolled)")
        self.decode = {}  # kind: (prompt_batch's dict, the answers' texts, the ids' bound)
        if decode:
            eos = model.config.eos_token_id
            self.eos = list(eos) if isinstance(eos, (list, tuple)) else [eos]
            if pr.id["<turn|>"] not in self.eos:
                raise SystemExit(f"train_mm_proxy: the model's eos ids {self.eos} lack <turn|>")
            for kind, bs in self.batches.items():
                g, targets = prompt_batch([b for _, b in bs])
                refs = [t for _, b in bs for t in answer_texts(pr.tok, b["labels"],
                                                                pr.id["<turn|>"])]
                self.decode[kind] = (g, refs, max(len(t) for t in targets) + DECODE_SLACK)

    def measure(self):
        """{kind: {loss, zeroed, rolled, soft_rms, soft_cos}} on the subset (the losses: means
        over its answer tokens), and text_rms. The scale the decoder sees: soft_rms, the RMS of
        the media's soft tokens (embed_vision / embed_audio's output; the clips' padding frames
        included), against text_rms, the text embeddings' (embed_tokens x sqrt(H), every id);
        soft_cos, the mean cosine of each soft token to its batch's mean soft token (near 1:
        every image or clip hands the decoder nearly the same vector, whatever it shows)."""
        m = self.model.model
        hooks = {"image": self.SoftTokens(), "audio": self.SoftTokens()}
        handles = [m.embed_vision.register_forward_hook(hooks["image"]),
                   m.embed_audio.register_forward_hook(hooks["audio"])]
        devices = [self.dev] if self.dev.type == "cuda" else []
        out = {}
        self.model.eval()
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=devices):
                for kind, hook in hooks.items():
                    sums = {"loss": 0.0, "zeroed": 0.0, "rolled": 0.0}
                    tokens, ms, cs = 0, [], []
                    reads = ([], [], [], 0)  # char_ctc_items' (losses, reads, refs, skipped)
                    tied = ([], [], [], 0, [], [])  # read_tied's, the last two per batch
                    for shift, b in self.batches[kind]:
                        b = {n: v.to(self.dev) for n, v in b.items()}
                        lab = b.pop("labels")
                        n_tok = int((lab != -100).sum())
                        hook.shift = shift
                        for mode, name in ((None, "loss"), ("zero", "zeroed"),
                                           ("shuf", "rolled")):
                            hook.mode = mode
                            sums[name] += float(half_loss(self.model, b, lab, self.amp)) * n_tok
                            if mode is None:
                                x = hook.last.float().reshape(-1, hook.last.shape[-1])
                                ms.append(x.pow(2).mean())
                                cs.append(torch.nn.functional.cosine_similarity(
                                    x, x.mean(0, keepdim=True)).mean())
                                cols = None  # (an image's columns, taken once for both)
                                if kind == "image" and kind in self.tied:
                                    cols = self.heads[kind].columns(b["image_position_ids"])
                                if kind in self.heads:
                                    r = self.read_out(kind, b, lab, cols)
                                    reads = tuple(a + c for a, c in zip(reads, r))
                                if kind in self.tied:
                                    tied = tuple(a + c for a, c in
                                                 zip(tied, self.read_tied(kind, lab, cols)))
                        hook.mode = None
                        tokens += n_tok
                    out[kind] = {name: s / tokens for name, s in sums.items()}
                    out[kind]["soft_rms"] = float(torch.stack(ms).mean().sqrt())
                    out[kind]["soft_cos"] = float(torch.stack(cs).mean())
                    if kind in self.heads:
                        out[kind].update(self.read_scores(*reads))
                    if kind in self.tied:
                        out[kind].update(self.tied_scores(*tied))
                    if kind in self.decode:
                        out[kind]["decode"] = self.answers(kind)
                e = m.language_model.embed_tokens
                out["text_rms"] = float((e.weight.float() * e.embed_scale.float())
                                        .pow(2).mean().sqrt())
                if self.tied:
                    out["table_cos0"] = self.table_drift(e.weight)
                    out["table_mean_cos"] = table_mean_cos(e.weight)
        finally:
            for h in handles:
                h.remove()
            self.model.train()
        return out

    def read_out(self, kind, b, lab, cols=None):
        """char_ctc_items of the kind's head on the frames its hook kept from the batch's as-is
        forward (b: the batch on the device, lab its labels; cols: an image batch's columns
        when already taken), against the batch's answers."""
        head = self.heads[kind]
        if kind == "audio":
            x, valid = head.tap.take()
            w = valid.sum(-1).tolist()
        else:
            x, w = cols if cols is not None else head.columns(b["image_position_ids"])
        return char_ctc_items(head, x, w, answer_texts(self.pr.tok, lab, self.pr.id["<turn|>"]))

    def table_drift(self, w):
        """With a tied head: how far the decoder's token table (w, V x D), the tied heads'
        targets, has turned since the first measure (step 0 after a warm phase): the mean
        cosine of each row to itself then, over the rows that were not zero (the pad's row
        starts at 0); 1 at the first measure. The decoder starts untrained (bench/NOTES.md
        "ctctied"): a table that turns while the audio side follows it at a tenth of its lr is
        what this row shows."""
        w = w.detach().float()
        if self.table0 is None:
            self.table0 = w.clone()
        keep = self.table0.norm(dim=-1) > 0
        return float(torch.nn.functional.cosine_similarity(w[keep], self.table0[keep]).mean())

    def read_tied(self, kind, lab, cols=None):
        """TiedCtcHead.items of the kind's tied head on the batch's as-is frames (audio: its
        tap's; image: cols, soft_columns' of the forward), the reads and references decoded to
        text (answer_texts' way: the ids as the tokenizer decodes them). Returns (losses, reads,
        refs, skipped, [peak share], [peak cosine] with the batch's valid and peak frame counts,
        their weights)."""
        head = self.tied[kind]
        if kind == "audio":
            x, valid = head.tap.take()
        else:
            x, w = cols
            valid = column_mask(w, x.shape[1], x.device)
        losses, reads, refs, skipped, share, cos = head.items(x, valid, lab)
        tok = self.pr.tok
        dec = [tok.decode(r, skip_special_tokens=False) for r in reads]
        ref = [tok.decode(r, skip_special_tokens=False) for r in refs]
        n = int(valid.sum())
        return (losses, dec, ref, skipped, [(share, n)] if share is not None else [],
                [(cos, share * n)] if cos is not None else [])

    def tied_scores(self, losses, reads, refs, skipped, shares, coss):
        """The held-out tied read-out's row (read_tied's lists over the batches): tied_ctc,
        tied_cer, tied_cer_other (None where no clip fit; the rolled references need two),
        tied_items, tied_skipped, tied_peaks, tied_peak_cos (frame-weighted over the batches),
        tied_example (the first read and its reference)."""
        def avg(v):
            n = sum(k for _, k in v)
            return sum(a * k for a, k in v) / n if n else None

        return {"tied_ctc": sum(losses) / len(losses) if losses else None,
                "tied_cer": self.cer(refs, reads) if refs else None,
                "tied_cer_other": (self.cer(refs[1:] + refs[:1], reads) if len(refs) >= 2
                                   else None),
                "tied_items": len(refs), "tied_skipped": skipped, "tied_peaks": avg(shares),
                "tied_peak_cos": avg(coss),
                "tied_example": [reads[0], refs[0]] if refs else None}

    def read_scores(self, losses, reads, refs, skipped):
        """The held-out read-out's row: ctc, ctc_cer, ctc_cer_other (None where no item fit;
        the rolled references need two), ctc_items, ctc_skipped."""
        return {"ctc": sum(losses) / len(losses) if losses else None,
                "ctc_cer": self.cer(refs, reads) if refs else None,
                "ctc_cer_other": (self.cer(refs[1:] + refs[:1], reads) if len(refs) >= 2
                                  else None),
                "ctc_items": len(refs), "ctc_skipped": skipped}

    def answers(self, kind):
        """The kind's greedy answers (inside measure: eval mode, no gradient, the random
        streams forked) and their scores: mm_metrics.answer_scores' plus forwards (the decode
        loop's), eos (the share of answers that ended with an eos id), nonfinite (answers
        whose logits were ever not finite: should be 0), tokens (the answers' mean ids),
        seconds and the answers themselves."""
        import mm_metrics

        t = time.time()
        g, refs, bound = self.decode[kind]
        ids, steps, ended, bad = greedy_decode(self.model,
                                               {n: v.to(self.dev) for n, v in g.items()},
                                               self.eos, bound, self.amp)
        hyps = [self.pr.tok.decode(x, skip_special_tokens=False) for x in ids]
        r = mm_metrics.answer_scores(kind, refs, hyps)
        r.update(forwards=steps, bound=bound, eos=sum(ended) / len(ended), nonfinite=bad,
                 tokens=sum(map(len, ids)) / len(ids), seconds=round(time.time() - t, 3),
                 answers=hyps)
        return r


def minutes_up(args, el, step, n, phase, then):
    """A warm phase's --minutes check after its step `step` (of n) at el seconds: the steps done
    when the budget ran out before its last step (after printing why, and what `then` follows),
    else None."""
    if el > args.minutes * 60 and step < n - 1:
        print(f"train_mm_proxy: --minutes {args.minutes} reached in {phase} after {step + 1}/{n} "
              f"steps: {then}", flush=True)
        return step + 1
    return None


def vision_warm(args, p, model, vaux, opt, streams, image_stream, tr_i, half, pin, dev, amp,
                losses, t1, head=None, tied=None, tied_mult=1.0, vtied=None, vtied_mult=1.0):
    """--v-warm-steps N: N vision_warm_step steps before the joint phase (whose lr schedule,
    warm-up then cosine over --steps, starts after them: its step 0 is the first joint step).
    Only the vision side and the aux head need a gradient (requires_grad off elsewhere: no
    backward into the decoder, which is never run; the joint loop sets every group's flag
    again at its step 0). The image half-batches come from the run's image stream (so the
    joint phase's images follow on) unless --v-warm-batch asks another size (then a stream of
    its own at seed + 5 from image_stream(items, batch, seed), main's image loader, closed
    after). Stops early, saying so, once --minutes is spent (the
    joint phase then stops after its first step). head (--a-warm: the run's audio CTC head):
    each step also trains the audio side and that head on the run's audio half-batch
    (streams["audio"], so the joint phase's clips follow on; vision_warm_step), in the same
    optimizer (warm_optimizer). Returns train.json's v_warm record (+ data_wait, the loader's
    share, for the run's total); with head it also says a_warm, a_lr_mult, clips and
    clips_too_short (the warm phase's; head.used / skipped stay the joint phase's). tied
    (--ctc-tied with --a-warm: the TiedCtcHead): its loss x tied_mult on the same clips
    (vision_warm_step), its group in the warm optimizer; the record adds tied_clips,
    tied_clips_too_short (tied.used / skipped likewise stay the joint phase's). vtied
    (--v-aux-tied): the image tied head's loss x vtied_mult on the same images, its group in the
    warm optimizer; the record adds tied_images, tied_images_too_short."""
    n = args.v_warm_steps
    wb = args.v_warm_batch or half
    if wb == half:
        stream = streams["image"]
    else:
        if len(tr_i) * p["reps"] < wb:  # (drop_last: a loader of no batch never yields)
            raise SystemExit(f"train_mm_proxy: --v-warm-batch {wb}: {len(tr_i)} train images "
                             f"x {p['reps']} renderings")
        stream = image_stream(tr_i, wb, args.seed + 5)
    wopt = warm_optimizer(model, p, vaux, opt_impl(opt), head, tied, vtied)
    live = [x for g in wopt.param_groups for x in g["params"]]
    keep = {id(x) for x in live}
    heads = [h for h in (vaux, head, tied, vtied) if h is not None]
    for x in list(model.parameters()) + [x for h in heads for x in h.parameters()]:
        x.requires_grad_(id(x) in keep)
    sched, guard = warm_schedule(p, n), StepGuard(args.max_skips)
    # each head's used / skipped counts before the phase: train.json's ctc, v_aux and tied
    # records stay the joint phase's (restored at the end); the phase's own go in its record
    counts0 = {id(h): (h.used, h.skipped) for h in heads}

    def phase_counts(h):
        """(used, skipped) of head h during this phase."""
        u, k = counts0[id(h)]
        return h.used - u, h.skipped - k
    tw0, wait, step_s, done, empty, stopped = time.time(), 0.0, [], 0, 0, None
    print(f"train_mm_proxy: vision warm phase: {n} steps of {wb} images, the aux CTC loss "
          f"alone (vision side + head, own AdamW, lr {p['lr']:.2e} warm-up {sched['warmup']})"
          + (f"; --a-warm: + {half} clips a step, the audio CTC head's loss (audio side at lr "
             f"x {p.get('a_lr_mult', 1.0)} + head)" if head is not None else "")
          + (f"; --ctc-tied: + the tied head's loss x {tied_mult:g}" if tied is not None
             else "")
          + (f"; --v-aux-tied: + the image tied head's loss x {vtied_mult:g}"
             if vtied is not None else ""), flush=True)
    for step in range(n):
        for g in wopt.param_groups:
            g["lr"] = lr_at(step, n, sched) * g["mult"]
        tw = time.time()
        b = {k: v.to(dev, non_blocking=pin) for k, v in next(stream).items()}
        a = None if head is None else \
            {k: v.to(dev, non_blocking=pin) for k, v in next(streams["audio"]).items()}
        wait += time.time() - tw
        ts = time.time()
        r = vision_warm_step(model, vaux, wopt, b, step, guard, losses, amp, live, head, a,
                             tied, tied_mult, vtied, vtied_mult)
        step_s.append(time.time() - ts)
        done += 1
        empty += r is None
        el = time.time() - t1
        if step % 50 == 0 or step == n - 1:
            print(f"train_mm_proxy: warm step {step + 1}/{n} v_warm "
                  f"{np.mean(losses['v_warm'][-50:] or [float('nan')]):.3f} "
                  f"({phase_counts(vaux)[1]} images too short) "
                  + (f"v_warm_tied {np.mean(losses['v_warm_tied'][-50:] or [float('nan')]):.3f}"
                     f" ({phase_counts(vtied)[1]} images too short) " if vtied is not None
                     else "")
                  + (f"a_warm {np.mean(losses['a_warm'][-50:] or [float('nan')]):.3f} "
                     f"({phase_counts(head)[1]} clips too short) " if head is not None
                     else "")
                  + (f"a_warm_tied {np.mean(losses['a_warm_tied'][-50:] or [float('nan')]):.3f}"
                     f" ({phase_counts(tied)[1]} clips too short) " if tied is not None
                     else "") + "lr "
                  f"{lr_at(step, n, sched):.2e} {el:.0f} s", flush=True)
        stopped = minutes_up(args, el, step, n, "the warm phase",
                             "the joint phase stops after its first step")
        if stopped:
            break
    med = float(np.median(step_s))
    info = {"steps": n, "done": done, "stopped_at": stopped, "batch": wb,
            "own_stream": wb != half, "lr": p["lr"], "warmup": sched["warmup"],
            "optimizer": "own AdamW (vision side + aux head), dropped after the phase",
            "images": phase_counts(vaux)[0], "images_too_short": phase_counts(vaux)[1],
            "steps_no_image_fits": empty, "skipped_steps": guard.skipped,
            "seconds": round(time.time() - tw0, 3), "data_wait": wait,
            "step_seconds": {"first_5": [round(x, 3) for x in step_s[:5]], "median": med,
                             "max": max(step_s)}}
    if head is not None:
        info.update(a_warm=True, a_lr_mult=p.get("a_lr_mult", 1.0),
                    optimizer="own AdamW (vision side + aux head, audio side + ctc head), "
                    "dropped after the phase",
                    clips=phase_counts(head)[0], clips_too_short=phase_counts(head)[1])
    if tied is not None:
        info.update(tied_clips=phase_counts(tied)[0], tied_clips_too_short=phase_counts(tied)[1],
                    tied_mult=tied_mult)
    if vtied is not None:
        info.update(tied_images=phase_counts(vtied)[0],
                    tied_images_too_short=phase_counts(vtied)[1], vtied_mult=vtied_mult)
    for h in heads:
        h.used, h.skipped = counts0[id(h)]
    last = np.mean(losses["v_warm"][-50:] or [float("nan")])
    print(f"train_mm_proxy: vision warm phase done: {done} steps in {info['seconds']:.1f} s "
          f"(median step {med:.3f} s), v_warm {last:.3f}"
          + (f", a_warm {np.mean(losses['a_warm'][-50:] or [float('nan')]):.3f}"
             if head is not None else "")
          + (f", a_warm_tied {np.mean(losses['a_warm_tied'][-50:] or [float('nan')]):.3f}"
             if tied is not None else "")
          + (f", v_warm_tied {np.mean(losses['v_warm_tied'][-50:] or [float('nan')]):.3f}"
             if vtied is not None else ""), flush=True)
    return info


LM_ROW = 256  # --lm-warm-steps: ids a packed row (at most the decoder's positions)


def lm_texts(audio, images):
    """--lm-warm-steps' text: the plan's TRAIN sentences and strings (the items of split
    "train", as the joint phase reads them) and the count of held-out items whose text is one of
    them. A held-out text in the LM text would let the decoder learn a held-out answer without
    its media, so it is refused in one line, unless every such held-out item says category
    "memorised" (make_mm_data's ci plan: its test split IS the train items under test ids, by
    design; the joint phase learns those answers anyway)."""
    train = [i["text"] for i in train_split(audio + images)]
    seen = set(train)
    held = [i for i in audio + images if i["split"] != "train" and i["text"] in seen]
    bad = [i for i in held if i.get("category") != "memorised"]
    if bad:
        raise SystemExit(f"train_mm_proxy: --lm-warm-steps: {len(bad)} held-out items' text is a "
                         f"train text (e.g. {bad[0]['id']}: {bad[0]['text']!r}): the LM phase "
                         "would teach held-out answers; fix the plan")
    return train, len(held)


def lm_segment(pr, text):
    """One text as the joint phase's decoder sees its answer: the model turn's opening
    (<|turn> "model\\n", the prompt's last ids) then the answer and the closing <turn|>
    (Prompter.target). Chosen over plain concatenated sentences because the joint phase's
    loss is exactly P(answer, <turn|> | ... <|turn>model\\n): the decoder then starts it
    already knowing where an answer starts and ends and the answers' language, and spends the
    joint steps on reading the media. Returns (ids, the index where the targets start)."""
    head = [pr.id["<|turn>"]] + pr.enc("model\n")
    return head + pr.target(text), len(head)


LM_COPY_STREAM = 37  # --lm-copy's generator: numpy PCG64 at (seed, 37); lm_rows' own is 36
LM_COPY_SEP = "<unk>"  # --lm-copy's separator (Gemma's and train_proxy's id 3; lm_copy_sep)


def lm_copy_sep(tok):
    """--lm-copy's separator id: <unk> (id 3 in Gemma's tokenizer and train_proxy's). The
    byte-fallback BPE never emits it, so it occurs in no prompt, answer, padding or eval input:
    its embedding row learns only "a text starts here / copy it". Not <mask> (--answer-mask's
    hidden answer id: the two roles would share a row), <pad> (collate's padding and the
    embedding's padding_idx: no gradient reaches it), <eos> (a stop id of the config) nor the
    turn ids (the chat template's structure: the decoder would learn to copy the user turn's
    text into its answer, i.e. the OCR / ASR prompt). None when the tokenizer lacks it."""
    return tok.token_to_id(LM_COPY_SEP)


def lm_copy_segment(pr, text, sep):
    """--lm-copy's segment: <sep> TEXT <sep> TEXT (TEXT: pr.enc's ids, no closing). The first
    <sep> marks where the source starts (a row holds several segments), the second says "now
    again": at it the next id is the first copy's first, an induction head's lookup. The labels
    are on the second copy only (returned: the index where it starts): the first copy is not
    predictable from anything before it (labelled, it would blur the copy loss with LM loss; the
    plain rows teach the texts), and in the joint phase the source (the media's soft tokens)
    has no labels either. No closing <turn|>: the copy's loss is on the copied ids alone."""
    t = pr.enc(text)
    return [sep] + t + [sep] + t, len(t) + 2


LM_COPY_KINDS = ("words", "texts")


def lm_rows(pr, texts, rows, row_len, rng, copy=0.0, copy_rng=None, sep=None, kind="words"):
    """Endless (input_ids, attention_mask, labels) batches of `rows` rows of row_len ids for
    --lm-warm-steps: each row <bos> then whole lm_segment()s of the texts in the order of
    successive permutations drawn from rng (its own generator: no stream of the run moves),
    while they fit; the rest right-padded as collate pads (id 0, mask 0, label -100). Labels
    as collate's (next-token targets at the position before): the answer ids and the closing
    id, not the turn's opening ids (constant: no signal) nor across a segment's start. A
    segment longer than a row is cut to it (counted in `cut`, the generator's attribute via
    the returned dict). Yields dicts with "tokens" (the target ids counted).
    --lm-copy P (copy > 0; copy_rng its own generator, sep lm_copy_sep's id): each row is a
    copy row with probability P (one copy_rng draw a row), packed the same way with
    lm_copy_segment()s; their TEXTs follow copy_rng's own permutations of the texts: kind
    "texts" the text itself, "words" (--lm-copy-kind's default) as many words as it has, each
    drawn uniformly (copy_rng) from all the texts' words, a sequence no LM can predict, so the
    second copy can only be had by copying (on the ci plan a decoder taught "texts" copies
    memorised the pairs and copied no new string; bench/NOTES.md "Copy warm-up and a frozen
    decoder"). The plain rows hold the texts in the order they hold without the option (later,
    as the copy rows take their places). "copy" (a bool a row) and "copy_tokens" (the copy
    rows' target ids) are added to each dict. copy 0 draws nothing: the rows of the run
    without the option."""
    segs = [lm_segment(pr, t) for t in texts]
    pool = [w for t in texts for w in t.split()]

    def copy_seg(i):
        if kind == "texts":
            return lm_copy_segment(pr, texts[i], sep)
        n = len(texts[i].split())
        return lm_copy_segment(pr, " ".join(pool[j] for j in copy_rng.integers(0, len(pool), n)),
                               sep)

    bos = pr.id["<bos>"]
    cur = {False: {"order": [], "k": 0, "next": None},  # (each kind's order, index, the
           True: {"order": [], "k": 0, "next": None}}  # segment drawn and not yet placed)
    cut = 0
    while True:  # (built as lists, three tensors a batch: an op an id would cost ~0.1 s)
        ids, att, lab, kinds = [], [], [], []
        for r in range(rows):
            is_copy = bool(copy) and copy_rng.random() < copy
            c, g = cur[is_copy], copy_rng if is_copy else rng
            row, tgt = [bos], []
            while True:
                if c["next"] is None:
                    if c["k"] == len(c["order"]):
                        c["order"], c["k"] = g.permutation(len(segs)).tolist(), 0
                    i = c["order"][c["k"]]
                    c["k"] += 1
                    c["next"] = copy_seg(i) if is_copy else segs[i]
                s, st = c["next"]
                if len(row) > 1 and len(row) + len(s) > row_len:
                    break  # (this segment starts the next row of its kind)
                c["next"] = None
                if len(row) + len(s) > row_len:
                    s, cut = s[:row_len - len(row)], cut + 1
                tgt += [len(row) + j for j in range(st, len(s))]
                row += s
                if len(row) == row_len:
                    break
            pad = row_len - len(row)
            ids.append(row + [0] * pad)
            att.append([1] * len(row) + [0] * pad)
            lr = [-100] * row_len
            for j in tgt:
                lr[j - 1] = row[j]
            lab.append(lr)
            kinds.append(is_copy)
        lab = torch.tensor(lab, dtype=torch.long)
        b = dict(input_ids=torch.tensor(ids, dtype=torch.long),
                 attention_mask=torch.tensor(att, dtype=torch.long), labels=lab,
                 tokens=int((lab != -100).sum()), cut=cut)
        if copy:
            b["copy"] = torch.tensor(kinds)
            b["copy_tokens"] = int((lab[b["copy"]] != -100).sum())
        yield b


def lm_optimizer(model, p, impl):
    """--lm-warm-steps' own AdamW over the decoder alone (every parameter outside the vision
    and audio sides: embed_tokens, the layers, the per-layer inputs, the norms; weight decay as
    make_optimizer's decoder groups), the run's betas and implementation; dropped after the
    phase, as warm_optimizer's: the joint AdamW then starts from no moments with its own
    warm-up, as without the phase."""
    named = [x for n, x in model.named_parameters()
             if not n.startswith(SIDES["vision"] + SIDES["audio"])]
    return adamw(decay_groups(named, 1.0), p, impl)


def copy_record(p, sep, rows, of, ids, closs):
    """lm_warm's copy record (--lm-copy): P, the separator, the copy rows among `of` rows and
    their labelled ids, each kind's loss a step (None: no row of it that step) every 25 steps,
    first and last (the first and last step that had such rows) and the mean of the last 50
    steps' values."""
    out = {"p": p, "sep": LM_COPY_SEP, "sep_id": sep, "rows": rows, "of": of, "ids": ids}
    for k, pre in (("copy", ""), ("plain", "plain_")):
        v = [x for x in closs[k] if x is not None]
        out[pre + "losses_every_25"] = closs[k][::25]
        out[pre + "first"] = v[0] if v else None
        out[pre + "last"] = v[-1] if v else None
        tail = [x for x in closs[k][-50:] if x is not None]
        out[pre + "final"] = float(np.mean(tail)) if tail else None
    return out


def lm_warm(args, p, model, opt, pr, texts, n_held, dev, amp, losses, t1, sep=None):
    """--lm-warm-steps N: N steps of the decoder alone as a causal LM on the train texts
    (lm_rows: p["batch"] rows of min(LM_ROW, the decoder's positions) ids a step), before the
    towers' warm phase (--v-warm-steps) and the joint steps: input_ids only (no pixel_values,
    no input_features: neither tower runs, so neither moves), next-token CE on the answer ids
    (losses["lm_warm"]); lm_optimizer at warm_schedule's lr (the run's peak, a short linear
    warm-up, cosine to 5% over N: lr_at), the gradient clipped to 1.0 and guarded
    (StepGuard, one host sync a step). Only the decoder needs a gradient (requires_grad off
    elsewhere; the next phase sets its own). Stops early, saying so, once --minutes is spent.
    --lm-copy P (args.lm_copy > 0; sep: lm_copy_sep's id): a share P of the rows are copy rows
    (lm_rows, lm_copy_segment; numpy PCG64 at (seed, LM_COPY_STREAM)); the loss is then the
    same mean over every labelled id, computed per id so that the copy rows' mean and the plain
    rows' come with it (no gradient; the same host sync): the log's "(copy C, plain L)",
    the record's copy.
    Returns train.json's lm_warm record."""
    n = args.lm_warm_steps
    row_len = min(LM_ROW, model.config.text_config.max_position_embeddings)
    wopt = lm_optimizer(model, p, opt_impl(opt))
    live = [x for g in wopt.param_groups for x in g["params"]]
    keep = {id(x) for x in live}
    for x in model.parameters():
        x.requires_grad_(id(x) in keep)
    sched, guard = warm_schedule(p, n), StepGuard(args.max_skips)
    copy = getattr(args, "lm_copy", 0.0)
    rows = lm_rows(pr, texts, p["batch"], row_len, np.random.default_rng([args.seed, 36]), copy,
                   np.random.default_rng([args.seed, LM_COPY_STREAM]) if copy else None, sep,
                   getattr(args, "lm_copy_kind", None) or "words")
    closs = {"copy": [], "plain": []}  # (a step's value or None: no row of that kind)
    crows, ctokens = 0, 0
    print(f"train_mm_proxy: LM warm phase: {n} steps of {p['batch']} rows x {row_len} ids of "
          f"the {len(texts)} train texts ({n_held} held-out items share a text: the plan's "
          f"memorised ones), the decoder alone (own AdamW, lr {p['lr']:.2e} warm-up "
          f"{sched['warmup']})" + (f"; --lm-copy {copy}: a share {copy} of the rows are copy "
                                   f"rows <sep> TEXT <sep> TEXT (TEXT: "
                                   f"{getattr(args, 'lm_copy_kind', None) or 'words'}; sep "
                                   f"{LM_COPY_SEP}, id {sep}), the loss on the second copy"
                                   if copy else ""), flush=True)
    tw0, step_s, done, tokens, stopped, cut = time.time(), [], 0, 0, None, 0
    for step in range(n):
        for g in wopt.param_groups:
            g["lr"] = lr_at(step, n, sched) * g["mult"]
        b = next(rows)
        tokens, cut = tokens + b["tokens"], b["cut"]
        ts = time.time()
        wopt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            logits = model(input_ids=b["input_ids"].to(dev),
                           attention_mask=b["attention_mask"].to(dev)).logits
        if copy:  # (per id: the same mean, and each kind's with it)
            labels = b["labels"].to(dev)
            per = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                    labels.reshape(-1), ignore_index=-100,
                                                    reduction="none").reshape(labels.shape)
            on = labels != -100
            loss = per.sum() / on.sum()
            kind = b["copy"].to(dev)[:, None]
            with torch.no_grad():
                split = [(per * (on & k)).sum() / (on & k).sum() for k in (kind, ~kind)]
        else:
            loss = torch.nn.functional.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), b["labels"].to(dev).reshape(-1),
                ignore_index=-100)
            split = []
        loss.backward()
        norm_t = torch.nn.utils.clip_grad_norm_(live, 1.0)
        lv, norm, *cp = torch.stack([loss.detach().float(), norm_t.float()] +
                                    [x.float() for x in split]).tolist()
        if copy:  # (0 / 0 where a batch has no row of a kind: None)
            for k, v in zip(("copy", "plain"), cp):
                closs[k].append(v if math.isfinite(v) else None)
            crows, ctokens = crows + int(b["copy"].sum()), ctokens + b["copy_tokens"]
        bad = ([f"LM warm loss {lv}"] if not math.isfinite(lv) else
               [f"LM warm gradient norm {norm}"] if not math.isfinite(norm) else [])
        losses["lm_warm"].append(lv)
        if guard.step_ok(step, bad):
            wopt.step()
        else:
            wopt.zero_grad(set_to_none=True)
        step_s.append(time.time() - ts)
        done += 1
        el = time.time() - t1
        if step % 50 == 0 or step == n - 1:
            print(f"train_mm_proxy: LM warm step {step + 1}/{n} lm_warm "
                  f"{np.mean(losses['lm_warm'][-50:]):.3f}"
                  + (" (copy {}, plain {})".format(*(
                      f"{np.mean(v):.3f}" if v else "-" for v in (
                          [x for x in closs[k][-50:] if x is not None]
                          for k in ("copy", "plain")))) if copy else "")
                  + f" lr {lr_at(step, n, sched):.2e} {el:.0f} s", flush=True)
        stopped = minutes_up(args, el, step, n, "the LM warm phase",
                             "the next phases stop after their first step")
        if stopped:
            break
    med = float(np.median(step_s))
    lw = losses["lm_warm"]
    info = {"steps": n, "done": done, "stopped_at": stopped, "rows": p["batch"],
            "row_ids": row_len, "texts": len(texts), "heldout_texts_shared": n_held,
            "tokens": tokens, "segments_cut": cut, "lr": p["lr"], "warmup": sched["warmup"],
            "optimizer": "own AdamW (the decoder), dropped after the phase",
            "skipped_steps": guard.skipped, "seconds": round(time.time() - tw0, 3),
            "step_seconds": {"first_5": [round(x, 3) for x in step_s[:5]], "median": med,
                             "max": max(step_s)},
            "losses_every_25": lw[::25], "first_loss": lw[0], "last_loss": lw[-1],
            "final_loss": float(np.mean(lw[-50:]))}
    if copy:
        info["copy"] = copy_record(copy, sep, crows, done * p["batch"], ctokens, closs)
        info["copy"]["kind"] = getattr(args, "lm_copy_kind", None) or "words"
    print(f"train_mm_proxy: LM warm phase done: {done} steps in {info['seconds']:.1f} s (median "
          f"step {med:.3f} s), {tokens} target ids, lm_warm {lw[0]:.3f} -> {lw[-1]:.3f}"
          + ("; copy rows {rows} of {of}, {ids} ids, copy {first:.3f} -> {last:.3f}, plain "
             "{plain_first:.3f} -> {plain_last:.3f}".format(**info["copy"])
             if copy and info["copy"]["first"] is not None and
             info["copy"]["plain_first"] is not None else ""), flush=True)
    return info


def deterministic_mode(strict):
    """The run's torch settings (main's, and tools/python/mm_warm_timing.py's sweep, so that it
    times the kernels the run takes): deterministic algorithms, strict (--strict-determinism)
    or warning only."""
    # cuBLAS is deterministic only with a fixed workspace (set before its first use); without
    # it use_deterministic_algorithms warns and the weights vary run to run
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # warn_only (the default) lets two nondeterministic kernels through, each warning once on
    # the H100 (bench/NOTES.md "The multimodal proxy's step is CPU-bound"): cuDNN attention's
    # backward, which SDPA prefers on sm90, and memory-efficient attention's backward with its
    # keys split; --strict-determinism refuses both (torch's sdp_utils.cpp and
    # attention_backward.cu): SDPA falls to memory-efficient attention with one key split
    torch.use_deterministic_algorithms(True, warn_only=not strict)
    # ... without filling every new tensor with NaN first (a debugging aid deterministic mode
    # turns on: ~1/3 of the ops of a step, one kernel each; no result reads unwritten memory,
    # so the weights are the same; bench/NOTES.md "The multimodal proxy's NaN")
    torch.utils.deterministic.fill_uninitialized_memory = False


def stream_workers(workers):
    """How main splits --workers between its two loaders: (the image stream's, the audio
    stream's), the odd one to the images."""
    return workers // 2 + workers % 2, workers // 2


def piece_workers(workers, half, n_pieces):
    """--a-pieces: the audio share of `workers` (stream_workers) split between the whole clips'
    loader and the pieces' (half - n_pieces and n_pieces clips a batch), so the run starts no
    more processes than without it: (whole, pieces), the pieces' in proportion (1 at least)
    while the share has 2 or more; a share of 1 or 0 each (a process more, or none)."""
    wa = stream_workers(workers)[1]
    if wa < 2:
        return wa, wa
    wp = min(max(1, round(wa * n_pieces / half)), wa - 1)
    return wa - wp, wp


def cache_items(workers, n_items):
    """main's rule for Items' cache: a handful of items rendered in this process (no workers)
    are seen every step, so each is rendered once."""
    return workers == 0 and n_items <= 64


def item_stream(items, kind, data, fonts, pr, fe, p, cache, batch, seed, workers, pad_to, pin,
                pad_frames=None, audio_workers=None):
    """One of main's loaders (tools/python/mm_warm_timing.py's loader rows time the same):
    kind "image" or "audio" items of preset p (its reps, the clips' a_speed_perturb) by
    forever, with the image's or the audio's share of `workers` (stream_workers; audio_workers:
    this many instead, --a-pieces' two audio loaders' parts of that share, piece_workers)."""
    wi, wa = stream_workers(workers)
    wa = wa if audio_workers is None else audio_workers
    if kind == "image":
        return forever(Items(items, "image", data, fonts, pr, fe, p["reps"], cache), batch, seed,
                       wi, pad_to, pin)
    return forever(Items(items, "audio", data, fonts, pr, fe, p["reps"], cache,
                         p.get("a_speed_perturb", 0.0)),
                   batch, seed, wa, pad_to, pin, pad_frames)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--data", default=".carry/mmdata")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="proxy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--minutes", type=float, default=10.0, help="training time budget")
    ap.add_argument("--steps", type=int, help="optimizer steps (the preset's)")
    ap.add_argument("--batch", type=int, help="items per batch (the preset's)")
    ap.add_argument("--workers", type=int, help="data loader processes (the preset's)")
    ap.add_argument("--reps", type=int, help="renderings of each train item (the preset's): the "
                    "train items are read in passes of reps x items, in random order")
    ap.add_argument("--a-speed-perturb", type=float, metavar="F",
                    help="each train clip's renderings after the first play its speech at a "
                    "speed drawn in [1 - F, 1 + F] from the rendering's seed, tempo and pitch "
                    "together (Kaldi's speed perturbation; rendering(); 0: off, the default)")
    ap.add_argument("--split-digits", action="store_true", default=None,
                    help="the tokenizer splits every digit from its neighbours (one id a digit, "
                    "as Gemma's tokenizer); off: the BPE's own merges (the default)")
    ap.add_argument("--vocab", type=int, help="vocabulary size (the preset's)")
    ap.add_argument("--lr", type=float, help="peak learning rate (the preset's)")
    ap.add_argument("--beta2", type=float, help="AdamW's beta2 (the preset's, else 0.98)")
    ap.add_argument("--warmup", type=int, help="linear warm-up steps (the preset's)")
    ap.add_argument("--v-lr-mult", type=float,
                    help="the vision side's learning rate over the decoder's (the preset's, else 1)")
    ap.add_argument("--v-chars", type=int, default=0, metavar="N",
                    help="the first N steps' image half-batches are single characters of the "
                    "train strings (char_items), then the strings (0: off)")
    ap.add_argument("--a-lr-mult", type=float,
                    help="the audio side's learning rate over the decoder's (the preset's, else 1)")
    ap.add_argument("--a-warmup", type=int,
                    help="steps with the audio side frozen, then its lr x --a-lr-mult (the "
                    "preset's, else 0)")
    ap.add_argument("--ctc-weight", type=float,
                    help="weight of the auxiliary CTC loss on the audio items (CtcHead; the "
                    "preset's, else 0: none)")
    ap.add_argument("--ctc-at", choices=("embed", "tower"),
                    help="the CTC head reads embed_audio's output or the tower's (the preset's, "
                    "else embed)")
    ap.add_argument("--ctc-units", choices=("tokens", "chars"),
                    help="what --ctc-weight's head reads the audio frames into: the BPE "
                    "vocabulary (CtcHead; the default) or the transcript's characters "
                    "(AudioChars, the audio twin of --v-aux-weight's VisionAux)")
    ap.add_argument("--ctc-tied", action="store_true", default=None,
                    help="a second audio CTC head (needs --ctc-weight, --ctc-at embed): the soft "
                    "tokens read into the answer's token ids with the decoder's own token "
                    "embeddings (detached) as its classes, cosine logits (TiedCtcHead); added to "
                    "the --ctc-weight head's loss, in the --a-warm phase too (unless "
                    "--ctc-tied-joint-only)")
    ap.add_argument("--ctc-tied-weight", type=float, metavar="W",
                    help="the --ctc-tied head's loss weight (default: --ctc-weight's)")
    ap.add_argument("--ctc-tied-scale", type=float, metavar="S",
                    help="the --ctc-tied head's cosine logit scale at init (learned as its log; "
                    f"default {TIED_SCALE_INIT:g}): over a vocabulary of thousands the default "
                    "scale leaves CTC on its all-blank plateau (bench/NOTES.md \"The tied head's "
                    "plateau\")")
    ap.add_argument("--ctc-tied-joint-only", action="store_true", default=None,
                    help="the --ctc-tied head's loss is left out of the --a-warm phase: it trains "
                    "from the joint phase's first step (on its plateau it held the warm phase's "
                    "char head on its own plateau: bench/NOTES.md \"The tied head's plateau\")")
    ap.add_argument("--ctc-tied-center", action="store_true", default=None,
                    help="the --ctc-tied head compares the soft tokens and the token embeddings "
                    "less the table's mean row (detached): a trained table's rows share a "
                    "direction, which crowds the cosines of every token together")
    ap.add_argument("--v-aux-tied", action="store_true", default=None,
                    help="the image twin of --ctc-tied (needs --v-aux-weight): the soft-token "
                    "columns VisionAux reads, read into the answer's token ids with the "
                    "decoder's token embeddings as classes; added to VisionAux's loss, in the "
                    "--v-warm-steps phase too")
    ap.add_argument("--v-aux-tied-weight", type=float, metavar="W",
                    help="the --v-aux-tied head's loss weight (default: --v-aux-weight's)")
    ap.add_argument("--v-aux-weight", type=float,
                    help="weight of the auxiliary CTC read-out of the answer's characters from "
                    "the image soft-token columns (VisionAux; training only, not exported; the "
                    "preset's, else 0: none)")
    ap.add_argument("--v-warm-steps", type=int, default=0, metavar="N",
                    help="before the joint steps, N steps that train only the vision side and "
                    "the --v-aux-weight head on image half-batches, the aux CTC loss alone (no "
                    "decoder forward; own AdamW; --minutes counts them; 0: off)")
    ap.add_argument("--lm-warm-steps", type=int, default=0, metavar="N",
                    help="before the towers' warm phase and the joint steps, N steps of the "
                    "decoder alone as a causal LM on the plan's train texts (no media, no tower "
                    "forward; own AdamW; --minutes counts them; 0: off)")
    ap.add_argument("--lm-copy", type=float, default=0.0, metavar="P",
                    help="a share P of the --lm-warm-steps rows are copy rows <sep> TEXT <sep> "
                    "TEXT (sep <unk>), the loss on the second copy only, so the decoder learns "
                    "to copy before it meets soft tokens (its own generator; 0: off)")
    ap.add_argument("--lm-copy-kind", choices=LM_COPY_KINDS,
                    help="--lm-copy's TEXT: words (default: as many words as a train text, each "
                    "drawn from all the train texts' words: only copying predicts them) or texts "
                    "(the train texts themselves, which the decoder can memorise)")
    ap.add_argument("--dec-freeze-steps", type=int, default=0, metavar="N",
                    help="the joint phase's first N steps leave the decoder frozen (no gradient, "
                    "its AdamW groups out: no moments, no decay) while the towers, embed_vision, "
                    "embed_audio and the heads learn from the answer loss; then all as before "
                    "(0: off)")
    ap.add_argument("--answer-mask", type=float, default=0.0, metavar="P",
                    help="in the joint phase, each teacher-forced answer input id of an item of "
                    "--answer-mask-kind is replaced by <mask> with probability P, the labels "
                    "unchanged (AnswerMask: word dropout, so the next id must come from the "
                    "media; never in the held-out evaluation nor the warm phases; 0: off)")
    ap.add_argument("--answer-mask-kind", choices=("audio", "image", "both"),
                    help="whose answers --answer-mask masks (default audio)")
    ap.add_argument("--a-pieces", type=float, default=0.0, metavar="P",
                    help="a share P (0 <= P < 1) of each audio half-batch, round(P x half) clips, "
                    "from the plan's piece clips (make_mm_data.py --speech-pieces: 1-4 words of "
                    "a train sentence), the rest whole clips as before (0: off; the pieces are "
                    "then not read)")
    ap.add_argument("--a-warm", action="store_true",
                    help="the --v-warm-steps phase also trains the audio side (tower + "
                    "embed_audio, at its lr multiplier) and the --ctc-weight head on the run's "
                    "audio half-batches, that head's CTC loss (no decoder), summed with the "
                    "vision aux loss into one step")
    ap.add_argument("--tower-joint-lr-mult", type=float, metavar="X",
                    help="after a --v-warm-steps phase, the joint phase's vision and audio lr "
                    "multipliers x X (the heads and the decoder x 1; default 1)")
    ap.add_argument("--v-warm-batch", type=int, metavar="B",
                    help="images a warm step (default: the run's image half-batch, from the "
                    "same image stream; another size: a stream of its own)")
    ap.add_argument("--a-var-weight", type=float,
                    help="weight of the anti-collapse variance term on the audio soft tokens "
                    "(SpreadTerm; the preset's, else 0: none)")
    ap.add_argument("--a-var-gamma", type=float,
                    help="its hinge: each feature's std across the clips (RMS-normalised "
                    "vectors) below it is penalised (the preset's, else 0.15)")
    ap.add_argument("--a-var-per", choices=("clip", "frame"),
                    help="its vectors: each clip's time-averaged one, or every frame (the "
                    "preset's, else clip)")
    ap.add_argument("--a-cov-weight", type=float,
                    help="weight of VICReg's covariance term on the same vectors (else 0)")
    ap.add_argument("--v-pos-init", type=float, metavar="S",
                    help="the vision patch position table drawn N(0, S) at init instead of "
                    "transformers' ones (init_vision_positions; the preset's, else ones)")
    ap.add_argument("--v-proj-init", type=float, metavar="STD",
                    help="draw the vision patch embedder's input_proj N(0, STD) (init_vision_proj;"
                    " transformers' 0.02)")
    ap.add_argument("--v-res-scale", type=float, metavar="X",
                    help="the vision layers' residual-branch output scales x X at init "
                    "(scale_vision_residuals; the preset's, else 1)")
    ap.add_argument("--a-res-scale", type=float,
                    help="the audio layers' residual-branch output scales x X at init "
                    "(scale_audio_residuals; X < 1: each layer nearer identity; the preset's, "
                    "else 1)")
    ap.add_argument("--fonts", action="append", help="fonts root (make_mm_data.py's)")
    ap.add_argument("--device", default="cuda",
                    help="cuda (default) or cpu: a CPU run is asked for, never a fallback")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's choice)")
    ap.add_argument("--no-export", action="store_true", help="stop after saving OUT/hf")
    ap.add_argument("--max-skips", type=int, default=10,
                    help="steps skipped in a row (a loss or gradient not finite) that stop the "
                    "run with an error (StepGuard)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="profile steps 21 to 20+N (torch.profiler, CPU and CUDA) into "
                    "OUT/profile.txt: where a step's time goes")
    ap.add_argument("--pad-to", type=int, default=0, metavar="N",
                    help="round each half-batch's sequence length and audio frames up to a "
                    "multiple of N (inert padding: the loss is the same): few shapes for the "
                    "GPU's planners (0: the longest item's, as before)")
    ap.add_argument("--pad-frames", type=int, metavar="N",
                    help="round an audio half-batch's frames up to a multiple of N instead of "
                    "--pad-to's (e.g. 512: one frame count for the proxy's clips, one shape "
                    "for --compile; the frozen tower's share of the step grows)")
    ap.add_argument("--no-cudnn-sdpa", action="store_true",
                    help="keep scaled_dot_product_attention off cuDNN (which builds a plan per "
                    "new shape) so memory-efficient attention runs")
    ap.add_argument("--strict-determinism", action="store_true",
                    help="use_deterministic_algorithms without warn_only: an op with no "
                    "deterministic kernel stops the run instead of warning; SDPA then skips "
                    "cuDNN and runs memory-efficient attention's backward unsplit")
    ap.add_argument("--adamw", choices=("auto",) + tuple(ADAMW), default="auto",
                    help="AdamW's implementation: fused (one kernel per group), foreach, loop "
                    "(per tensor); auto: fused on CUDA, foreach on the CPU")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile each half-batch's forward and loss (inductor, fused "
                    "kernels, no CUDA graphs; needs --pad-to; not with --strict-determinism, "
                    "--ctc-weight or --a-var/cov-weight): far fewer launches a step after a "
                    "first step that compiles")
    ap.add_argument("--eval-every", type=int, default=200, metavar="N",
                    help="every N steps and at the end, the held-out answer loss as is / media "
                    "zeroed / rolled (HeldOut; train.json's heldout, a log line each; 0: off; "
                    "200: ~1%% of a proxy run's time on the GPU, estimated)")
    ap.add_argument("--eval-items", type=int, default=32, metavar="K",
                    help="held-out items the evaluation measures, of each kind (heldout_pick)")
    ap.add_argument("--eval-decode", action="store_true",
                    help="the held-out evaluation also decodes each item's answer greedily and "
                    "scores it as g4cu eval does: exact match, OCRBench accuracy, WER, CER, the "
                    "length gap (HeldOut.answers; a log line a kind, heldout rows' decode)")
    ap.add_argument("--inject-nonfinite", metavar="STEP:KIND:WHAT[,...]",
                    help="test hook (tests/mm_guard_check.py): make that step's KIND half-batch "
                    "loss (WHAT=loss) or a decoder gradient (WHAT=grad) infinite")
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        # a 10-minute budget silently spent on the CPU would export an untrained proxy
        raise SystemExit("train_mm_proxy: --device cuda but torch sees no CUDA device "
                         f"(torch {torch.__version__}); pass --device cpu to train on the CPU")
    if args.v_chars < 0:
        raise SystemExit(f"train_mm_proxy: --v-chars {args.v_chars}: expected 0 or more")
    if args.eval_every < 0 or args.eval_items < 2:
        raise SystemExit(f"train_mm_proxy: --eval-every {args.eval_every} (>= 0), --eval-items "
                         f"{args.eval_items} (>= 2: a roll needs a neighbour)")
    if args.eval_decode and not args.eval_every:
        raise SystemExit("train_mm_proxy: --eval-decode needs --eval-every N (N > 0): it decodes "
                         "at the held-out evaluation's steps")
    if args.compile and not args.pad_to:
        raise SystemExit("train_mm_proxy: --compile needs --pad-to N (N > 0): compiled for "
                         "fixed shapes, each new length would compile anew")
    if args.compile and args.strict_determinism:
        raise SystemExit("train_mm_proxy: --compile with --strict-determinism: inductor's "
                         "kernels are not shown deterministic on the GPU; drop one")
    p = dict(PRESETS[args.preset])
    for k in ("steps", "batch", "workers", "reps", "a_speed_perturb", "split_digits", "vocab",
              "v_lr_mult", "a_lr_mult", "a_warmup", "ctc_weight", "v_aux_weight", "ctc_at",
              "ctc_units", "ctc_tied", "ctc_tied_weight", "ctc_tied_scale", "ctc_tied_center",
              "ctc_tied_joint_only", "v_aux_tied", "v_aux_tied_weight",
              "a_var_weight", "a_var_gamma", "a_var_per", "a_cov_weight", "a_res_scale",
              "v_pos_init", "v_res_scale", "v_proj_init", "lr", "beta2", "warmup"):
        if getattr(args, k) is not None:
            p[k] = getattr(args, k)
    if p["reps"] < 1:
        raise SystemExit(f"train_mm_proxy: --reps {p['reps']}: expected 1 or more")
    if not 0 <= p.get("a_speed_perturb", 0.0) < 0.5:
        raise SystemExit(f"train_mm_proxy: --a-speed-perturb {p['a_speed_perturb']}: expected "
                         "0 <= F < 0.5")
    if p.get("a_speed_perturb") and p["reps"] < 2:
        print(f"train_mm_proxy: --a-speed-perturb with reps {p['reps']}: every clip is read in "
              "its first rendering only, at speed 1 (give --reps 2 or more)", flush=True)
    if p.get("v_aux_weight", 0.0) < 0:
        raise SystemExit(f"train_mm_proxy: --v-aux-weight {p['v_aux_weight']}: expected >= 0")
    if args.v_warm_steps < 0:
        raise SystemExit(f"train_mm_proxy: --v-warm-steps {args.v_warm_steps}: expected 0 or "
                         "more")
    if args.lm_warm_steps < 0:
        raise SystemExit(f"train_mm_proxy: --lm-warm-steps {args.lm_warm_steps}: expected 0 or "
                         "more")
    if not 0 <= args.lm_copy < 1:
        raise SystemExit(f"train_mm_proxy: --lm-copy {args.lm_copy}: expected 0 <= P < 1")
    if args.lm_copy and not args.lm_warm_steps:
        raise SystemExit("train_mm_proxy: --lm-copy needs --lm-warm-steps N (N > 0): its copy "
                         "rows are that phase's rows")
    if args.lm_copy_kind is not None and not args.lm_copy:
        raise SystemExit("train_mm_proxy: --lm-copy-kind needs --lm-copy P (P > 0)")
    if args.dec_freeze_steps < 0:
        raise SystemExit(f"train_mm_proxy: --dec-freeze-steps {args.dec_freeze_steps}: expected "
                         "0 or more")
    if not 0 <= args.answer_mask < 1:
        raise SystemExit(f"train_mm_proxy: --answer-mask {args.answer_mask}: expected 0 <= P < 1")
    if not 0 <= args.a_pieces < 1:
        raise SystemExit(f"train_mm_proxy: --a-pieces {args.a_pieces}: expected 0 <= P < 1")
    if args.answer_mask_kind is not None and not args.answer_mask:
        raise SystemExit("train_mm_proxy: --answer-mask-kind needs --answer-mask P (P > 0)")
    if args.v_warm_steps and not p.get("v_aux_weight", 0.0):
        raise SystemExit("train_mm_proxy: --v-warm-steps needs --v-aux-weight W (W > 0): the "
                         "warm phase trains the tower through that head's loss")
    if args.a_warm and not args.v_warm_steps:
        raise SystemExit("train_mm_proxy: --a-warm needs --v-warm-steps N (N > 0): it trains the "
                         "audio side in that warm phase")
    if args.a_warm and not p.get("ctc_weight", 0.0):
        raise SystemExit("train_mm_proxy: --a-warm needs --ctc-weight W (W > 0): the warm phase "
                         "trains the audio side through that head's loss")
    if args.a_warm and not p.get("a_lr_mult", 1.0):
        raise SystemExit("train_mm_proxy: --a-warm with the audio side at lr x 0 (a_lr_mult 0: "
                         f"preset {args.preset}'s or --a-lr-mult's): give --a-lr-mult X (X > 0)")
    if p.get("ctc_tied") and not p.get("ctc_weight", 0.0):
        raise SystemExit("train_mm_proxy: --ctc-tied needs --ctc-weight W (W > 0): the tied head "
                         "is added to that head's audio CTC loss")
    if p.get("ctc_tied") and p.get("ctc_at", "embed") != "embed":
        raise SystemExit("train_mm_proxy: --ctc-tied with --ctc-at tower: the tied head compares "
                         "the soft tokens (embed_audio's output) with the token embeddings")
    for k in ("ctc_tied_weight", "ctc_tied_scale", "ctc_tied_center", "ctc_tied_joint_only"):
        if k in p and not p.get("ctc_tied"):
            raise SystemExit(f"train_mm_proxy: --{k.replace('_', '-')} needs --ctc-tied")
    for k, v in (("ctc_tied_weight", "W"), ("ctc_tied_scale", "S")):
        if k in p and not 0 < p[k] < math.inf:
            raise SystemExit(f"train_mm_proxy: --{k.replace('_', '-')} {p[k]}: expected a "
                             f"finite {v} > 0")
    if p.get("ctc_tied_joint_only") and not args.a_warm:
        raise SystemExit("train_mm_proxy: --ctc-tied-joint-only needs --a-warm: without a warm "
                         "phase the tied head trains in the joint phase only already")
    if p.get("v_aux_tied") and not p.get("v_aux_weight", 0.0):
        raise SystemExit("train_mm_proxy: --v-aux-tied needs --v-aux-weight W (W > 0): the tied "
                         "head reads the columns that head takes, and adds to its loss")
    if "v_aux_tied_weight" in p and not p.get("v_aux_tied"):
        raise SystemExit("train_mm_proxy: --v-aux-tied-weight needs --v-aux-tied")
    if "v_aux_tied_weight" in p and not 0 < p["v_aux_tied_weight"] < math.inf:
        raise SystemExit(f"train_mm_proxy: --v-aux-tied-weight {p['v_aux_tied_weight']}: "
                         "expected a finite W > 0")
    if args.tower_joint_lr_mult is not None and not args.v_warm_steps:
        raise SystemExit("train_mm_proxy: --tower-joint-lr-mult needs --v-warm-steps N (N > 0): "
                         "it sizes the towers' joint steps after that warm phase")
    if args.tower_joint_lr_mult is not None and not 0 < args.tower_joint_lr_mult < math.inf:
        raise SystemExit(f"train_mm_proxy: --tower-joint-lr-mult {args.tower_joint_lr_mult}: "
                         "expected a finite X > 0")
    if args.v_warm_batch is not None and args.v_warm_batch < 1:
        raise SystemExit(f"train_mm_proxy: --v-warm-batch {args.v_warm_batch}: expected 1 or "
                         "more")
    for k, flag in (("ctc_weight", "--ctc-weight"), ("v_aux_weight", "--v-aux-weight"),
                    ("a_var_weight", "--a-var-weight"),
                    ("a_cov_weight", "--a-cov-weight")):
        if args.compile and p.get(k):
            raise SystemExit(f"train_mm_proxy: --compile with {flag}: its forward hook inside a "
                             "compiled forward is untried; drop one")
    if args.threads:
        torch.set_num_threads(args.threads)
    fonts = mmd.font_roots(args.fonts)
    hf_dir, pkg_dir = os.path.join(args.out, "hf"), os.path.join(args.out, "f16")
    os.makedirs(hf_dir, exist_ok=True)
    times, t0 = {}, time.time()

    audio, images = load_items(args.data)
    (tr_a, pieces), tr_i = train_parts(audio), train_split(images)
    if args.a_pieces and not pieces:
        raise SystemExit(f"train_mm_proxy: --a-pieces {args.a_pieces}: the plan in {args.data} "
                         "has no piece clips (make_mm_data.py plan --speech-pieces N)")
    lm_text, lm_held = lm_texts(audio, images) if args.lm_warm_steps else ([], 0)
    tok_path = os.path.join(hf_dir, "tokenizer.json")
    tok = make_tokenizer([i["text"] for i in tr_a + tr_i], p["vocab"], tok_path,
                         p.get("split_digits", False))
    if tok.get_vocab_size() != p["vocab"]:  # the model could emit ids that decode to nothing
        raise SystemExit(f"train_mm_proxy: the tokenizer has {tok.get_vocab_size()} ids for a "
                         f"vocabulary of {p['vocab']}: give --vocab {tok.get_vocab_size()} or "
                         "more data")
    pr = Prompter(tok)
    sep = lm_copy_sep(tok) if args.lm_copy else None
    if args.lm_copy and sep is None:
        raise SystemExit(f"train_mm_proxy: --lm-copy: the tokenizer has no {LM_COPY_SEP} id")
    amask = None
    if args.answer_mask:
        # <mask> (train_proxy's tokenizer: id 4, Gemma's), not <pad>: it occurs in no prompt,
        # answer or padding, so its embedding row learns only "an answer id is here, unseen";
        # <pad> is collate's padding id and the embedding's padding_idx (a row no gradient
        # reaches). The same id at every masked position: the position says nothing more.
        mask_id = tok.token_to_id("<mask>")
        if mask_id is None:
            raise SystemExit("train_mm_proxy: --answer-mask: the tokenizer has no <mask> id")
        kind = args.answer_mask_kind or "audio"
        amask = AnswerMask(args.answer_mask, ("image", "audio") if kind == "both" else (kind,),
                           mask_id, args.seed)
        print(f"train_mm_proxy: --answer-mask {args.answer_mask}: the joint phase's {kind} "
              f"answer inputs -> <mask> (id {mask_id}), labels unchanged", flush=True)
    times["tokenizer"] = time.time() - t0
    print(f"train_mm_proxy: tokenizer {tok.get_vocab_size()} ids; {len(tr_i)} train images, "
          f"{len(tr_a)} train utterances", flush=True)

    torch.manual_seed(args.seed)
    deterministic_mode(args.strict_determinism)
    if args.no_cudnn_sdpa:
        torch.backends.cuda.enable_cudnn_sdp(False)
    if args.pad_to < 0:
        raise SystemExit(f"train_mm_proxy: --pad-to {args.pad_to}: expected 0 or more")
    if args.pad_frames is not None and args.pad_frames < 1:
        raise SystemExit(f"train_mm_proxy: --pad-frames {args.pad_frames}: expected 1 or more")
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

    fe = Gemma4AudioFeatureExtractor()
    model = build_model(p, tok, args.seed, p.get("a_res_scale"), p.get("v_pos_init"),
                        p.get("v_res_scale"), p.get("v_proj_init")).to(dev)
    n_params = sum(x.numel() for x in model.parameters())
    print(f"train_mm_proxy: {n_params:,} parameters on {dev}", flush=True)
    half = max(1, p["batch"] // 2)
    n_pieces = round(args.a_pieces * half)  # (a fixed count a half-batch: the share is exact)
    if args.a_pieces and not 0 < n_pieces < half:
        raise SystemExit(f"train_mm_proxy: --a-pieces {args.a_pieces}: round(P x {half}) = "
                         f"{n_pieces} piece clips of an audio half-batch of {half}: expected 1 to "
                         f"{half - 1} (another P or --batch)")
    cache = cache_items(p["workers"], len(tr_i) + len(tr_a) + (len(pieces) if n_pieces else 0))
    pin = dev.type == "cuda"
    for kind, items, n in (("image", tr_i, half), ("audio", tr_a, half - n_pieces),
                           ("piece", pieces, n_pieces)):
        if n and len(items) * p["reps"] < n:  # (drop_last: a loader of no batch never yields)
            raise SystemExit(f"train_mm_proxy: {len(items)} train {kind} items x {p['reps']} "
                             f"renderings for batches of {n}: give --batch "
                             f"{2 * len(items) * p['reps']} or less")
    chars = char_items(tr_i) if args.v_chars else []
    if args.v_chars and len(chars) * p["reps"] < half:  # (a loader of no batch never yields)
        raise SystemExit(f"train_mm_proxy: --v-chars: {len(chars)} train strings with a "
                         f"character for half-batches of {half}")

    def stream(items, kind, batch, seed, audio_workers=None):  # (image_stream: also vision_warm's
        return item_stream(items, kind, args.data, fonts, pr, fe, p, cache, batch, seed,  # own)
                           p["workers"], args.pad_to, pin, args.pad_frames, audio_workers)

    def image_stream(items, batch, seed):
        return stream(items, "image", batch, seed)

    wk = piece_workers(p["workers"], half, n_pieces) if n_pieces else (None, None)
    streams = {"image": image_stream(tr_i, half, args.seed),
               "chars": image_stream(chars, half, args.seed + 2) if args.v_chars else None,
               "audio": stream(tr_a, "audio", half - n_pieces, args.seed + 1, wk[0])}
    if n_pieces:  # (the whole clips' loader as without it, its batches cut at half - k)
        streams["audio"] = piece_mix(streams["audio"], stream(pieces, "audio", n_pieces,
                                                              args.seed + PIECE_STREAM, wk[1]),
                                     pin)
        print(f"train_mm_proxy: --a-pieces {args.a_pieces}: each audio half-batch "
              f"{half - n_pieces} whole clips + {n_pieces} of the plan's {len(pieces)} piece "
              f"clips (loader workers {wk[0]} + {wk[1]})", flush=True)
    elif pieces:
        print(f"train_mm_proxy: the plan's {len(pieces)} piece clips are not read (--a-pieces 0)",
              flush=True)
    ctc_w, a_warm = p.get("ctc_weight", 0.0), p.get("a_warmup", 0)
    head = None
    if ctc_w:
        if p.get("ctc_units", "tokens") == "chars":
            head = AudioChars(model, p.get("ctc_at", "embed"), args.seed, tok,
                              pr.id["<turn|>"]).to(dev)
        else:
            head = CtcHead(model, p["vocab"], p.get("ctc_at", "embed")).to(dev)
        if not p.get("a_lr_mult", 1.0):
            print("train_mm_proxy: --ctc-weight with the audio side never trained (lr x 0): "
                  "the CTC loss trains its own head only", flush=True)
    tied, tied_w = None, p.get("ctc_tied_weight", ctc_w)
    if p.get("ctc_tied"):  # (its own generator: the run's streams as without it)
        tied = TiedCtcHead(model, p["vocab"], args.seed, "audio",
                           p.get("ctc_tied_scale", TIED_SCALE_INIT),
                           bool(p.get("ctc_tied_center"))).to(dev)
    # (whether its loss joins the --a-warm phase: the warm call and train.json's ctc.tied.warm)
    tied_warm = bool(tied is not None and args.a_warm and not p.get("ctc_tied_joint_only"))
    spread = None
    if p.get("a_var_weight", 0.0) or p.get("a_cov_weight", 0.0):
        spread = SpreadTerm(model, p.get("a_var_weight", 0.0), p.get("a_var_gamma", 0.15),
                            p.get("a_var_per", "clip"), p.get("a_cov_weight", 0.0))
        if not p.get("a_lr_mult", 1.0):
            print("train_mm_proxy: --a-var-weight with the audio side never trained (lr x 0): "
                  "the term has nothing to move", flush=True)
    vaux_w, vaux = p.get("v_aux_weight", 0.0), None
    if vaux_w:  # the characters of every train string (and so of every --v-chars answer)
        vaux = VisionAux(model, "".join(i["text"] for i in tr_i), args.seed, tok,
                         pr.id["<turn|>"]).to(dev)
    vtied, vtied_w = None, p.get("v_aux_tied_weight", vaux_w)
    if p.get("v_aux_tied"):  # (its own generator, as the audio one's)
        vtied = TiedCtcHead(model, p["vocab"], args.seed, "image").to(dev)
    tower_mult = 1.0 if args.tower_joint_lr_mult is None else args.tower_joint_lr_mult
    opt = make_optimizer(model, p, head, dev, args.adamw, vaux, tower_mult, tied, vtied)
    amp = dev.type == "cuda"
    held, held_rows = None, []
    if args.eval_every:
        th = time.time()
        held = HeldOut(model, args.data, fonts, pr, fe, {"image": images, "audio": audio},
                       args.eval_items, args.seed, half, args.pad_to, args.pad_frames, dev, amp,
                       args.eval_decode,
                       {"audio": head if isinstance(head, AudioChars) else None, "image": vaux},
                       {"audio": tied, "image": vtied})
        times["heldout_setup"] = time.time() - th
        print(f"train_mm_proxy: held-out evaluation every {args.eval_every} steps on "
              f"{held.counts['image']} images, {held.counts['audio']} clips"
              + (" with greedy answers (at most "
                 + ", ".join(f"{k} {v[2]}" for k, v in held.decode.items()) + " ids)"
                 if held.decode else "") + " "
              f"({times['heldout_setup']:.1f} s to render)", flush=True)

    def heldout(done):
        th = time.time()
        r = held.measure()
        held_rows.append(dict(step=done, **r, seconds=round(time.time() - th, 3)))
        print(f"train_mm_proxy: held-out step {done}: " + "; ".join(
            f"{k} loss {v['loss']:.4f} zeroed {v['zeroed']:.4f} ({v['zeroed'] - v['loss']:+.4f})"
            f" rolled {v['rolled']:.4f} ({v['rolled'] - v['loss']:+.4f})"
            for k, v in r.items() if k in ("image", "audio"))
            + f"; soft tokens' RMS image {r['image']['soft_rms']:.3f} audio "
            f"{r['audio']['soft_rms']:.3f} (text {r['text_rms']:.3f}), cosine to their mean "
            f"image {r['image']['soft_cos']:.3f} audio {r['audio']['soft_cos']:.3f}"
            + f" ({time.time() - th:.1f} s)", flush=True)
        if held.heads:  # (train.json's heldout rows: each kind's ctc, ctc_cer, ...)
            print(f"train_mm_proxy: held-out step {done} read-out heads: " + "; ".join(
                f"{k} ctc " + ("-" if r[k]["ctc"] is None else f"{r[k]['ctc']:.3f} a label, cer "
                               f"{r[k]['ctc_cer']:.3f} (against another item's "
                               + ("-" if r[k]["ctc_cer_other"] is None else
                                  f"{r[k]['ctc_cer_other']:.3f}") + ")")
                + f" on {r[k]['ctc_items']} items ({r[k]['ctc_skipped']} too long)"
                for k in ("image", "audio") if k in held.heads), flush=True)
        for k in [k for k in ("image", "audio") if k in held.tied]:
            a = r[k]
            print(f"train_mm_proxy: held-out step {done} tied read-out (the token table's "
                  f"cosine to the first row's {r['table_cos0']:.4f}, its rows' mean cosine "
                  f"{r['table_mean_cos']:.4f}): {k} ctc "
                  + ("-" if a["tied_ctc"] is None else
                     f"{a['tied_ctc']:.3f} a label, cer {a['tied_cer']:.3f} (against another "
                     "item's " + ("-" if a["tied_cer_other"] is None else
                                  f"{a['tied_cer_other']:.3f}") + ")")
                  + f" on {a['tied_items']} items ({a['tied_skipped']} too long); token frames "
                  + ("-" if a["tied_peaks"] is None else f"{a['tied_peaks']:.3f}")
                  + ", their cosine to the token's embedding "
                  + ("-" if a["tied_peak_cos"] is None else f"{a['tied_peak_cos']:.3f}")
                  + (f"; e.g. {a['tied_example'][0]!r} for {a['tied_example'][1]!r}"
                     if a["tied_example"] else ""), flush=True)
        for k in ("image", "audio"):
            d = r[k].get("decode")
            if d:
                print(f"train_mm_proxy: held-out step {done} answers {k}: exact {d['exact']:.3f}"
                      + (f" ocrbench {d['ocrbench']:.3f}" if "ocrbench" in d else "")
                      + (f" wer {d['wer']:.3f}" if "wer" in d else "")
                      + f" cer {d['cer']:.3f} (against another item's {d['cer_other']:.3f})"
                      f" |len diff| {d['len_diff']:.1f} of {d['ref_chars']:.1f} chars; eos "
                      f"{d['eos']:.2f}, {d['tokens']:.1f} ids, {d['forwards']} forwards "
                      f"({d['seconds']:.2f} s)"
                      + (f"; {d['nonfinite']} ANSWERS FROM NON-FINITE LOGITS" if d["nonfinite"]
                         else "")
                      + f"; e.g. {d['answers'][0]!r} for {held.decode[k][1][0]!r}", flush=True)
    loss_fn = compile_loss(model) if args.compile else half_loss
    steps = p["steps"]
    guard, inject = StepGuard(args.max_skips), parse_inject(args.inject_nonfinite)
    model.train()
    losses = {"image": [], "audio": [], "ctc": [], "ctc_tied": [], "a_var": [], "a_cov": [],
              "v_aux": [], "v_aux_tied": [], "v_warm": [], "v_warm_tied": [], "a_warm": [],
              "a_warm_tied": [], "lm_warm": []}
    t1, stopped, norms, wait, step_s, prof_ops = time.time(), None, [], 0.0, [], None
    warm_info, lm_info = None, None
    if args.lm_warm_steps:  # (first: the towers' warm phase and the joint phase follow as
        # without it, their streams untouched; t1 before it: --minutes counts it)
        lm_info = lm_warm(args, p, model, opt, pr, lm_text, lm_held, dev, amp, losses, t1,
                          sep)
        if held is not None and not args.v_warm_steps:
            heldout(0)  # what the LM phase left: step 0 of the joint phase
    if args.v_warm_steps:  # (t1 before it: --minutes counts the warm phase)
        warm_info = vision_warm(args, p, model, vaux, opt, streams, image_stream, tr_i, half,
                                pin, dev, amp, losses, t1, head if args.a_warm else None,
                                tied if tied_warm else None,
                                tied_w / ctc_w if ctc_w else 1.0,
                                vtied, vtied_w / vaux_w if vaux_w else 1.0)
        wait += warm_info.pop("data_wait")
        warm_info["tower_joint_lr_mult"] = tower_mult
        if held is not None:  # what the warm phase left: step 0 of the joint phase
            heldout(0)
    compile_failed, side_norms = None, []
    trained, live = None, None  # each group's lr > 0 and their parameters, as last set
    dec_freeze, dec_info = args.dec_freeze_steps, None
    if dec_freeze:
        dec = [x for g in opt.param_groups if g.get("decoder") for x in g["params"]]
        dec_info = {"steps": dec_freeze, "decoder_tensors": len(dec),
                    "decoder_parameters": sum(x.numel() for x in dec), "frozen_steps": 0,
                    "unfrozen_at": None, "decoder_state_at_unfreeze": None}
        print(f"train_mm_proxy: --dec-freeze-steps {dec_freeze}: the decoder ({len(dec)} "
              f"tensors) frozen for the joint phase's first {dec_freeze} steps (no gradient, out "
              "of AdamW's step); the towers, embedders and heads learn from the answer loss"
              + (f" (the run has {steps} steps: the decoder never trains)"
                 if dec_freeze >= steps else ""), flush=True)
    for step in range(steps):
        now = joint_lrs(opt, step, steps, p, a_warm, dec_freeze)
        if dec_info is not None and step == dec_freeze:  # (what AdamW holds of the decoder)
            dec_info["unfrozen_at"] = step + 1
            dec_info["decoder_state_at_unfreeze"] = decoder_state(opt)
            print(f"train_mm_proxy: step {step + 1}: the decoder trains from here (AdamW state "
                  f"on {dec_info['decoder_state_at_unfreeze']} of its tensors)", flush=True)
        if now != trained:  # a side starts or stops training (step 0, --a-warmup's end,
            trained, live = now, train_groups(opt, now)  # --dec-freeze-steps' end)
        tw = time.time()  # the loader's share: waiting for both half-batches and the copy
        if streams["chars"] is not None and step == args.v_chars:
            streams["chars"] = None  # (its loader's workers go)
        raw = {k: next(streams["chars" if k == "image" and streams["chars"] is not None
                               else k]) for k in ("image", "audio")}
        if amask is not None:  # (the joint phase only: the warm phases read their own batches)
            raw = {k: amask.apply(k, b) for k, b in raw.items()}
        batches = {k: {n: v.to(dev, non_blocking=pin) for n, v in b.items()}
                   for k, b in raw.items()}
        wait += time.time() - tw
        if args.profile and step == 20:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU] + (
                [torch.profiler.ProfilerActivity.CUDA] if dev.type == "cuda" else []))
            prof.__enter__()
            tp = time.time()
        ts = time.time()
        try:
            train_step(model, opt, batches, step, guard, losses, head, ctc_w, amp, inject,
                       norms, live, loss_fn, spread, vaux, vaux_w, tied, tied_w, vtied,
                       vtied_w)
        except Exception as e:  # (not the guard's SystemExit)
            if loss_fn is half_loss:
                raise
            # a GPU call's budget is not spent on a compiler's failure: said, kept in
            # train.json, and the step done again eagerly (train_step starts from no gradient
            # and appends its losses only once it has them all)
            compile_failed = f"step {step + 1}: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
            print(f"train_mm_proxy: --compile failed ({compile_failed}); the run goes on "
                  "eagerly", flush=True)
            loss_fn = half_loss
            train_step(model, opt, batches, step, guard, losses, head, ctc_w, amp, inject,
                       norms, live, loss_fn, spread, vaux, vaux_w, tied, tied_w, vtied,
                       vtied_w)
        step_s.append(time.time() - ts)  # (the host's: train_step syncs once at its end)
        if dec_info is not None and step < dec_freeze:
            dec_info["frozen_steps"] += 1
        if step % 25 == 0:  # (the gradients stay until the next step's zero_grad)
            side_norms.append(side_grad_norms(model))
        if args.profile and step == 20 + args.profile - 1:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            tp = time.time() - tp
            prof.__exit__(None, None, None)
            with open(os.path.join(args.out, "profile.txt"), "w") as f:
                f.write(f"steps 21-{step + 1}: {tp:.3f} s wall (data waits included)\n")
                for key in ("self_cpu_time_total", "self_device_time_total"):
                    if key == "self_device_time_total" and dev.type != "cuda":
                        continue
                    f.write(prof.key_averages().table(sort_by=key, row_limit=40) + "\n")
                ops = step_ops(prof.events())
                prof_ops = {"per_step": ops["total"] / args.profile,
                            "phase": {k: v / args.profile for k, v in ops["phase"].items()},
                            "trainer_items": ops["trainer_items"] / args.profile}
                f.write(f"launch-like ops a step (step_ops): {prof_ops}\n")
            print(f"train_mm_proxy: profiled steps 21-{step + 1} ({tp:.2f} s) -> "
                  f"{os.path.join(args.out, 'profile.txt')}", flush=True)
        if held is not None and (step + 1) % args.eval_every == 0 and step < steps - 1:
            heldout(step + 1)  # (its time counts in --minutes' budget)
        el = time.time() - t1
        if step % 50 == 0 or step == steps - 1:
            print(f"train_mm_proxy: step {step + 1}/{steps} loss image "
                  f"{np.mean(losses['image'][-50:]):.3f} audio {np.mean(losses['audio'][-50:]):.3f}"
                  + (f" ctc {np.mean(losses['ctc'][-50:]):.3f} ({head.skipped} clips too short)"
                     if losses["ctc"] else "") +
                  (f" ctc_tied {np.mean(losses['ctc_tied'][-50:]):.3f} ({tied.skipped} clips too "
                   "short)" if losses["ctc_tied"] else "") +
                  (f" a_var {np.mean(losses['a_var'][-50:]):.4f}" if losses["a_var"] else "") +
                  (f" v_aux {np.mean(losses['v_aux'][-50:]):.3f} ({vaux.skipped} images too "
                   "short)" if losses["v_aux"] else "") +
                  (f" v_aux_tied {np.mean(losses['v_aux_tied'][-50:]):.3f} ({vtied.skipped} "
                   "images too short)" if losses["v_aux_tied"] else "") +
                  f" lr {lr_at(step, steps, p):.2e} grad norm max "
                  f"{np.nanmax(norms[-50:] + [0]):.2f} {el:.0f} s (data wait {wait:.0f} s)",
                  flush=True)
        if el > args.minutes * 60 and step < steps - 1:
            stopped = step + 1
            print(f"train_mm_proxy: --minutes {args.minutes} reached after {stopped}/{steps} "
                  "steps: stopping early (the weights now depend on the machine's speed)",
                  flush=True)
            break
    if held is not None and (not held_rows or held_rows[-1]["step"] != step + 1):
        heldout(step + 1)  # at the end (the last step, or --minutes' stop)
    times["train"], times["data_wait"] = time.time() - t1, wait
    if warm_info is not None:
        times["v_warm"] = warm_info["seconds"]
    if lm_info is not None:
        times["lm_warm"] = lm_info["seconds"]
    if held is not None:
        times["heldout"] = sum(r["seconds"] for r in held_rows)
    del streams
    check_finite(model)

    t2 = time.time()
    model.to(torch.float16).save_pretrained(hf_dir, safe_serialization=True)
    times["save"] = time.time() - t2
    med_s = float(np.median(step_s))
    info = {"preset": args.preset, "shapes": p, "seed": args.seed, "device": str(dev),
            "parameters": n_params, "steps": steps, "stopped_at": stopped,
            "train_images": len(tr_i), "train_audio": len(tr_a),
            "losses_every_25": {k: v[::25] for k, v in losses.items() if v},
            "final_loss": {k: float(np.mean(v[-50:])) for k, v in losses.items() if v},
            "skipped_steps": guard.skipped, "pad_to": args.pad_to,
            "pad_frames": args.pad_frames,
            "no_cudnn_sdpa": args.no_cudnn_sdpa, "strict_determinism": args.strict_determinism,
            "adamw": opt_impl(opt), "compile": args.compile, "profiled_ops": prof_ops,
            "compile_stats": compile_stats() if args.compile else None,
            "compile_failed": compile_failed,
            "eval_every": args.eval_every, "eval_items": held.counts if held else None,
            "eval_decode": args.eval_decode,
            "heldout_refs": {k: v[1] for k, v in held.decode.items()} if held else None,
            "heldout": held_rows,
            "grad_norm_every_25": [None if math.isnan(x) else round(x, 4) for x in norms[::25]],
            "grad_norm_max": float(np.nanmax(norms + [0])),
            "grad_norm_sides_every_25": side_norms, "v_chars": args.v_chars,
            "seconds": times,
            "step_seconds": {"first_5": [round(x, 3) for x in step_s[:5]],
                             "median": med_s, "max": max(step_s),
                             "over_2x_median": int(sum(x > 2 * med_s for x in step_s))}}
    if head is not None:
        info["ctc"] = {"weight": ctc_w, "at": head.at,
                       "units": p.get("ctc_units", "tokens"), "clips": head.used,
                       "clips_too_short": head.skipped}
        if tied is not None:
            info["ctc"]["tied"] = {"weight": tied_w, "classes": "embed_tokens x embed_scale, "
                                   "detached, + a learned blank; cosine x a learned scale",
                                   "scale_init": p.get("ctc_tied_scale", TIED_SCALE_INIT),
                                   "center": tied.center,
                                   "warm": tied_warm,
                                   "scale_final": float(tied.log_scale.detach().exp()),
                                   "clips": tied.used, "clips_too_short": tied.skipped}
    if vaux is not None:
        info["v_aux"] = {"weight": vaux_w, "chars": len(vaux.chars), "images": vaux.used,
                         "images_too_short": vaux.skipped}
        if vtied is not None:
            info["v_aux"]["tied"] = {"weight": vtied_w, "scale_init": TIED_SCALE_INIT,
                                     "scale_final": float(vtied.log_scale.detach().exp()),
                                     "images": vtied.used, "images_too_short": vtied.skipped}
    if warm_info is not None:
        info["v_warm"] = warm_info
    if lm_info is not None:
        info["lm_warm"] = lm_info
    if amask is not None:
        info["answer_mask"] = amask.record()
    if dec_info is not None:
        info["dec_freeze"] = dec_info
    if n_pieces:
        info["a_pieces"] = {"p": args.a_pieces, "clips": len(pieces), "per_batch": n_pieces,
                            "whole_per_batch": half - n_pieces, "workers": list(wk)}
    if spread is not None:
        info["a_var"] = {"weight": spread.weight, "gamma": spread.gamma, "per": spread.per,
                         "cov_weight": spread.cov_weight}
    if args.no_export:
        json.dump(info, open(os.path.join(args.out, "train.json"), "w"), indent=1)
        return
    t3 = time.time()
    subprocess.run([sys.executable, os.path.join(HERE, "export_package.py"), hf_dir, pkg_dir],
                   check=True)
    shutil.copy(tok_path, os.path.join(pkg_dir, "tokenizer.json"))
    ipj = os.path.join(pkg_dir, "image_processor.json")
    j = json.load(open(ipj))
    n_set = 0
    for t in j["processor"]["transforms"]:
        attrs = t["operation"].get("attrs", {})
        if "max_soft_tokens" in attrs:
            attrs["max_soft_tokens"], n_set = SOFT_TOKENS, n_set + 1
    if n_set != 1:
        raise SystemExit(f"train_mm_proxy: {ipj}: expected one max_soft_tokens, found {n_set}")
    json.dump(j, open(ipj, "w"), indent=4)
    times["export"] = time.time() - t3
    print(f"train_mm_proxy: exported {pkg_dir} ({times['export']:.1f} s)", flush=True)
    json.dump(info, open(os.path.join(args.out, "train.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
