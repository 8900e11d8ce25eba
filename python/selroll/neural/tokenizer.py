"""A word-level tokenizer with phrase pieces and a byte fallback.

Text is split into units (a word or a number with at most one leading space, or any single
character); a greedy longest match over the units picks pieces from the vocabulary (single units
and frequent phrases of up to MAX_PHRASE units). A unit the vocabulary lacks is written as its
UTF-8 bytes, one id each, so any text round-trips: decode(encode(t)) == t for every string t, and
decode of any id sequence is the concatenation of its pieces' bytes.

Ids: 0 is the end-of-text token (special, decodes to nothing), 1..256 the bytes 0..255, then the
pieces. The tokenizer is saved as JSON beside the weights.
"""
import collections
import json
import re

UNIT_RE = re.compile(r" ?[A-Za-z]+| ?[0-9]+|.", re.DOTALL)
MAX_PHRASE = 8
EOS = 0
N_SPECIAL = 1
BYTE0 = N_SPECIAL


def units(text):
    return UNIT_RE.findall(text)


class Tokenizer:
    def __init__(self, pieces):
        self.pieces = list(pieces)  # strings, id = BYTE0 + 256 + index
        self.lookup = {}
        self.max_n = 1
        for i, p in enumerate(self.pieces):
            u = tuple(units(p))
            self.lookup[u] = BYTE0 + 256 + i
            self.max_n = max(self.max_n, len(u))
        self.piece_bytes = [b""] * N_SPECIAL + [bytes([b]) for b in range(256)] + [p.encode() for p in self.pieces]

    @property
    def vocab_size(self):
        return len(self.piece_bytes)

    def encode(self, text):
        us = units(text)
        ids = []
        i, n = 0, len(us)
        lookup = self.lookup
        while i < n:
            for k in range(min(self.max_n, n - i), 0, -1):
                t = lookup.get(tuple(us[i:i + k]))
                if t is not None:
                    ids.append(t)
                    i += k
                    break
            else:
                ids.extend(BYTE0 + b for b in us[i].encode())
                i += 1
        return ids

    def decode_bytes(self, ids):
        pb = self.piece_bytes
        return b"".join(pb[i] for i in ids)

    def decode(self, ids):
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def token_text(self, i):
        if i == EOS:
            return ""
        return self.piece_bytes[i].decode("utf-8", errors="replace")

    def to_json(self):
        return {"kind": "selroll-phrase-v1", "max_phrase": MAX_PHRASE, "pieces": self.pieces}

    @classmethod
    def from_json(cls, d):
        if d.get("kind") != "selroll-phrase-v1":
            raise ValueError("unknown tokenizer kind %r" % d.get("kind"))
        return cls(d["pieces"])

    def save(self, path):
        with open(path, "w") as f:
            json.dump(self.to_json(), f)

    @classmethod
    def load(cls, path):
        with open(path) as f:
            return cls.from_json(json.load(f))


def build(texts, min_count=2, n_phrases=400):
    """Builds the vocabulary from sample texts: every unit seen min_count times, then the phrases
    (2..MAX_PHRASE units) that save the most ids, picked greedily."""
    unit_count = collections.Counter()
    seqs = []
    for t in texts:
        us = units(t)
        seqs.append(us)
        unit_count.update(us)
    words = sorted(u for u, c in unit_count.items() if c >= min_count and len(u.encode()) > 1)
    gram = collections.Counter()
    for us in seqs:
        for n in range(2, MAX_PHRASE + 1):
            for i in range(len(us) - n + 1):
                gram[tuple(us[i:i + n])] += 1
    # Savings of a phrase: (n - 1) ids each time it is used; overlapping phrases are scored
    # independently, which is good enough to pick a useful set.
    scored = sorted(((c * (len(g) - 1), g) for g, c in gram.items() if c >= 20), reverse=True)
    phrases = []
    seen = set()
    for _, g in scored:
        s = "".join(g)
        if s in seen:
            continue
        seen.add(s)
        phrases.append(s)
        if len(phrases) >= n_phrases:
            break
    return Tokenizer(words + phrases)
