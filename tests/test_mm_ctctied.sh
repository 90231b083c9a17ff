#!/usr/bin/env bash
# test_mm_ctctied.sh: train_mm_proxy's --ctc-tied (TiedCtcHead: a CTC read-out of the audio soft
# tokens into the answer's token ids whose classes are the decoder's own token embeddings,
# detached, + a learned blank, cosine logits; issue 35), on the CPU (tests/mm_ctctied_check.py):
# the classes are embed_tokens x embed_scale (a change to the table shows in the logits); the
# loss equals torch's full-vocabulary CTC of those logits; no gradient reaches embed_tokens
# while the audio tower and embed_audio get one; a few steps lower it; the held-out read-out by
# hand; --ctc-tied-scale and --ctc-tied-center (the default scale bit for bit, centered
# classes and cosines by hand, table_mean_cos by hand); the trainer's records, its determinism
# and --ctc-tied-weight's default; tools/python/mm_tied_plateau.py at a small size;
# tools/python/mm_tied_grad.py by hand and on the ci plan; refusals in one line. The
# interpreter needs torch, transformers 5.17, tokenizers, safetensors and numpy: $G4_TORCH_PYTHON
# (CI's tools/install_deps.sh installs no torch); without them the test skips (77) saying why.
set -u
: "${G4_SOURCE_DIR:?run through ctest}"
source "$(dirname "${BASH_SOURCE[0]}")/mm_torch.sh"
torch_python test_mm_ctctied "torch, transformers, tokenizers, safetensors, numpy" 5.17
"$py" "$G4_SOURCE_DIR/tests/mm_ctctied_check.py"
