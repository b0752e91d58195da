"""A digit-friendly byte-level BPE tokenizer in Hugging Face tokenizer.json form.

Pre-tokenizer: one Split regex, then ByteLevel (bytes to characters, no regex of its
own). Every digit is its own piece (with its leading space, if any), so numbers are
sequences of single-digit tokens; words keep their leading space. The BPE merges are
learned from the generated corpus until every piece of it is one token, so encoding the
task's text is: split with the regex, look each piece up. latte's C++ tokenizer gives the
same ids (train/train.py checks that through `latte tokenize` when asked).
"""
import collections
import json
import re

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
PAD = "<｜▁pad▁｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
SPECIALS = [BOS, EOS, PAD, USER, ASSISTANT]  # ids 0..4

# The Split regex (PCRE / Oniguruma syntax) and its ASCII equivalent for Python's re.
SPLIT_REGEX = r"[ ]?\p{N}|[ ]?\p{L}+|[ ]?[^\s\p{L}\p{N}]+|\s+"
PY_SPLIT = re.compile(r"[ ]?[0-9]|[ ]?[A-Za-z]+|[ ]?[^\sA-Za-z0-9]+|\s+")

CHAT_TEMPLATE = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}"
    "{% endif %}{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] }}"
    "{% elif message['role'] == 'user' %}{{ '<｜User｜>' + message['content'] }}"
    "{% elif message['role'] == 'assistant' %}"
    "{{ '<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}")


def _byte_chars():
    """GPT-2's byte-to-character map, as ByteLevel uses."""
    printable = [b for b in range(256)
                 if ord("!") <= b <= ord("~") or 0xA1 <= b <= 0xAC or b >= 0xAE]
    table, nxt = {}, 256
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(nxt)
            nxt += 1
    return table


BYTE_CHARS = _byte_chars()


def to_byte_level(text):
    return "".join(BYTE_CHARS[b] for b in text.encode("utf-8"))


class Tokenizer:
    def __init__(self, vocab, merges):
        self.vocab = vocab            # byte-level string -> id
        self.merges = merges          # [(left, right)] in rank order
        self.inv = {i: s for s, i in vocab.items()}
        self.byte_of = {c: b for b, c in BYTE_CHARS.items()}
        self.special_ids = {s: i for i, s in enumerate(SPECIALS)}
        self.special_re = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS) + ")")
        self.ranks = {m: r for r, m in enumerate(merges)}

    @property
    def size(self):
        return len(self.vocab)

    def encode(self, text):
        ids = []
        for part in self.special_re.split(text):
            if not part:
                continue
            if part in self.special_ids:
                ids.append(self.special_ids[part])
                continue
            for piece in PY_SPLIT.findall(part):
                bl = to_byte_level(piece)
                if bl in self.vocab:
                    ids.append(self.vocab[bl])
                else:  # a word the BPE was not trained on: apply the merges
                    ids += [self.vocab[s] for s in self.bpe(bl)]
        return ids

    def bpe(self, word):
        """The byte-level BPE of one pre-tokenized piece: repeatedly merge the adjacent
        pair of lowest rank (as Hugging Face's BPE model does)."""
        syms = list(word)
        while len(syms) > 1:
            best, at = None, -1
            for i in range(len(syms) - 1):
                r = self.ranks.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            a, b = syms[at], syms[at + 1]
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            syms = out
        return syms

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            s = self.inv[i]
            if s in self.special_ids:
                out += s.encode()
            else:
                out += bytes(self.byte_of[c] for c in s)
        return out.decode("utf-8", errors="replace")

    def to_json(self):
        added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": False, "special": True} for i, s in enumerate(SPECIALS)]
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added,
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": SPLIT_REGEX}, "behavior": "Isolated",
                 "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                 "use_regex": False}]},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False,
                      "vocab": dict(sorted(self.vocab.items(), key=lambda kv: kv[1])),
                      "merges": [a + " " + b for a, b in self.merges]},
        }


def train_bpe(texts):
    """Merges (most frequent pair first, ties by the pair's text) until every
    pre-tokenized piece of `texts` is a single token."""
    counts = collections.Counter()
    for t in texts:
        for part in re.split("|".join(re.escape(s) for s in SPECIALS), t):
            for piece in PY_SPLIT.findall(part):
                counts[to_byte_level(piece)] += 1
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for b in range(256):
        vocab[BYTE_CHARS[b]] = len(vocab)
    words = {w: list(w) for w in counts}
    merges = []
    while True:
        pairs = collections.Counter()
        for w, syms in words.items():
            for a, b in zip(syms, syms[1:]):
                pairs[(a, b)] += counts[w]
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], [-ord(c) for c in kv[0][0] + " " + kv[0][1]]))[0]
        merges.append(best)
        merged = best[0] + best[1]
        if merged not in vocab:
            vocab[merged] = len(vocab)
        for w, syms in words.items():
            i, out = 0, []
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == best[0] and syms[i + 1] == best[1]:
                    out.append(merged)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            words[w] = out
    return Tokenizer(vocab, merges)


def tokenizer_config(max_len):
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "model_max_length": max_len,
        "tokenizer_class": "LlamaTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
    }
