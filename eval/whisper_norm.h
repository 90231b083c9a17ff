// whisper_norm.h: OpenAI Whisper's text normalisers, ported from whisper/normalizers/
// (english.py, basic.py; MIT) as lmms-eval 0.7.2 vendors them for LibriSpeech WER
// (see ../shared/spec/eval-metrics.md section 6). Each function mirrors one Python callable
// with the same steps in the same order, regexes through PCRE2 (eval/pyre.h) and Unicode through
// utf8proc (eval/pystr.h).
//
// Inputs must be valid UTF-8 (the functions check and fail with G4_EUSER otherwise). Outputs are
// new strings. Where the result can differ from Python 3.11: characters new in Unicode 15 (Python
// 3.11 has Unicode 14), and the two approximations documented in pystr.h.
#ifndef G4_WHISPER_NORM_H
#define G4_WHISPER_NORM_H

#include <stddef.h>

// EnglishTextNormalizer()(s): lowercase; drop [..] <..> (..) spans and fillers (hmm, uh, ...);
// expand contractions and titles; drop commas between digits and periods not before a digit;
// NFKD + strip diacritics, symbols -> space (keeping . % $ ¢ € £); EnglishNumberNormalizer;
// EnglishSpellingNormalizer; drop stray . $ ¢ € £ %; collapse whitespace (no strip).
int g4_whisper_english(const char *s, char **out);

// BasicTextNormalizer()(s) (remove_diacritics=False, split_letters=False): lowercase; drop
// [..] <..> (..) spans; NFKC, and every mark / symbol / punctuation character -> space;
// lowercase; collapse whitespace (no strip).
int g4_whisper_basic(const char *s, char **out);

// EnglishNumberNormalizer()(s) on its own: spelled-out numbers to digits ("twenty five" ->
// "25", "nineteen o five" -> "1905", "two point five million" -> "2500000", "ten dollars" ->
// "$10", "ninety percent" -> "90%", "first" -> "1st"), with Python's arbitrary-size integers.
int g4_whisper_numbers(const char *s, char **out);

// remove_symbols_and_diacritics(s, keep) and remove_symbols(s) from basic.py.
int g4_whisper_remove_symbols_and_diacritics(const char *s, const char *keep, char **out);
int g4_whisper_remove_symbols(const char *s, char **out);

// EnglishSpellingNormalizer's map (english.json), generated into whisper_spelling.c by
// tools/python/gen_whisper_spelling.py: g4_whisper_spelling[i] = {british, american}, sorted
// by strcmp of the British word.
extern const char *const g4_whisper_spelling[][2];
extern const size_t g4_whisper_spelling_n;
// The American spelling of word, or NULL when the map has none.
const char *g4_whisper_spelling_lookup(const char *word);

#endif
