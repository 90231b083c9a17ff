# utils.py: the functions of the local lmms-eval tasks g4cu_ocr_local and g4cu_asr_local (the
# YAML files beside this one; tools/lmms_eval_check.sh runs them against `g4cu serve`).
#
# The prompt of every item is the one `g4cu eval` builds (eval/eval_task.h): a system turn "You
# are a helpful assistant." sent as a text part, then one user turn with the image or the audio
# first and the task's text after it. The text and the scoring are lmms-eval's own functions
# (tasks/ocrbench/utils.py, tasks/librispeech/utils.py); only the media come from a local path,
# as the manifest (one JSONL for both routes) gives it, instead of the hub dataset's decoded
# image or audio array.
from lmms_eval.tasks.librispeech.utils import (  # noqa: F401 (named by the YAML)
    librispeech_doc_to_text,
    librispeech_process_result,
    librispeech_wer,
)
from lmms_eval.tasks.ocrbench.utils import (  # noqa: F401 (named by the YAML)
    ocrbench_aggregate_accuracy,
    ocrbench_doc_to_text,
    ocrbench_process_results,
)

# G4_EVAL_SYSTEM_PROMPT (eval/eval_task.h)
SYSTEM_PROMPT = "You are a helpful assistant."


def _messages(kind, path, text):
    return [
        {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
        {"role": "user", "content": [{"type": kind, "url": path}, {"type": "text", "text": text}]},
    ]


def ocr_doc_to_visual(doc):
    return [doc["image"]]


def ocr_doc_to_messages(doc, lmms_eval_specific_kwargs=None):
    kw = lmms_eval_specific_kwargs or {"pre_prompt": "", "post_prompt": ""}
    return _messages("image", doc["image"], ocrbench_doc_to_text(doc, kw))


def asr_doc_to_audio(doc):
    return [doc["audio"]]


def asr_doc_to_messages(doc, lmms_eval_specific_kwargs=None):
    kw = lmms_eval_specific_kwargs or {"pre_prompt": "", "post_prompt": ""}
    return _messages("audio", doc["audio"], librispeech_doc_to_text(doc, kw))
