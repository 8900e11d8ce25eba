"""The neural agent's tokenizer: every text round-trips, every id sequence decodes to its pieces."""
import random

import pytest

pytest.importorskip("torch", reason="python3-torch is not installed (scripts/deps.sh --test installs it)")

from neural_util import SAMPLE_TEXTS  # noqa: E402
from selroll.neural import tokenizer  # noqa: E402


def test_any_text_round_trips_and_household_text_is_compact():
    tok = tokenizer.build(SAMPLE_TEXTS, n_phrases=20)
    rng = random.Random(5)
    texts = SAMPLE_TEXTS[:1] + ["", "Nothing happens.", "ünïcödé ✓ 日本 \x00\x7f", "  two  spaces\n\ttab",
                                "take zebra 99 from cabinet 1000"]
    alphabet = "abc XYZ 0123456789'\",.[]<>/\n\té✓"
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80))) for _ in range(200)]
    for t in texts:
        ids = tok.encode(t)
        assert tok.decode(ids) == t
        assert all(0 < i < tok.vocab_size for i in ids)
    household = SAMPLE_TEXTS[0]
    assert len(tok.encode(household)) < len(household) / 4, "words and phrases, not bytes"
    # Any id sequence decodes to the concatenation of its pieces (the end token to nothing).
    ids = [rng.randrange(tok.vocab_size) for _ in range(300)]
    assert tok.decode_bytes(ids) == b"".join(tok.piece_bytes[i] for i in ids)
    assert tok.decode([tokenizer.EOS]) == ""


def test_saved_tokenizer_encodes_the_same(tmp_path):
    tok = tokenizer.build(SAMPLE_TEXTS, n_phrases=20)
    tok.save(str(tmp_path / "tok.json"))
    back = tokenizer.Tokenizer.load(str(tmp_path / "tok.json"))
    for t in SAMPLE_TEXTS[:1] + ["ü go to fridge 1"]:
        assert back.encode(t) == tok.encode(t)
