"""Associative-recall task with a byte-level tokenizer.

Tokenizer (vocab 258): token id = byte value (0..255), BOS = 256, EOS = 257.

A sample is the token sequence

    BOS  "a3:x7 k1:q2 c5:b1 ?k1="  "q2"  EOS
         '------- prompt -------'  answer

* 4..8 key:value pairs, separated by single spaces; keys are distinct within a
  prompt, values are random (may repeat).
* a key is one letter of KEY_LETTERS followed by one digit of KEY_DIGITS; a
  value is one letter of VAL_LETTERS followed by one digit of VAL_DIGITS
  (2 bytes each).
* after the last pair: " ?" + query key + "=". The query key is one of the keys
  of the prompt.
* answer = exactly the bytes between '=' and EOS (the value of the query key).

Everything is deterministic given a seed (numpy Generator, PCG64).
The held-out set (seed HELDOUT_SEED) is disjoint from the training stream:
training samples whose prompt appears in the held-out set are skipped.
"""
import numpy as np

VOCAB = 258
BOS = 256
EOS = 257

KEY_LETTERS = "abcdefgh"
KEY_DIGITS = "12345678"
VAL_LETTERS = "pqrstuvw"
VAL_DIGITS = "12345678"
SEP = "="          # key-value separator in the pairs; the query also ends with "="
MIN_PAIRS = 4
MAX_PAIRS = 8

HELDOUT_SEED = 1234567
TRAIN_SEED = 42


def prompt_len(n_pairs):
    """Token count of BOS + prompt for n_pairs pairs."""
    return 1 + 5 * n_pairs + (n_pairs - 1) + 5  # BOS, "kk:vv" x n, spaces, " ?kk="


MAX_SEQ_LEN = prompt_len(MAX_PAIRS) + 2 + 1  # + answer + EOS = 56


def make_pairs(rng, min_pairs=MIN_PAIRS, max_pairs=MAX_PAIRS):
    """Random (keys, values): min_pairs..max_pairs pairs, distinct keys."""
    n = int(rng.integers(min_pairs, max_pairs + 1))
    n_keys = len(KEY_LETTERS) * len(KEY_DIGITS)
    key_ids = rng.choice(n_keys, size=n, replace=False)
    keys = [KEY_LETTERS[i // len(KEY_DIGITS)] + KEY_DIGITS[i % len(KEY_DIGITS)] for i in key_ids]
    vals = [VAL_LETTERS[int(rng.integers(len(VAL_LETTERS)))] + VAL_DIGITS[int(rng.integers(len(VAL_DIGITS)))]
            for _ in range(n)]
    return keys, vals


def make_sample(rng, min_pairs=MIN_PAIRS, max_pairs=MAX_PAIRS):
    """Return (prompt_str, answer_str) drawn from rng, with min_pairs..max_pairs pairs."""
    keys, vals = make_pairs(rng, min_pairs, max_pairs)
    q = int(rng.integers(len(keys)))
    prompt = " ".join(f"{k}{SEP}{v}" for k, v in zip(keys, vals)) + f" ?{keys[q]}="
    return prompt, vals[q]


def encode(s):
    """Bytes of s as token ids (no BOS/EOS)."""
    return list(s.encode("utf-8"))


def decode(tokens):
    """Token ids -> str; BOS/EOS are dropped."""
    return bytes(t for t in tokens if t < 256).decode("utf-8", errors="replace")


def sample_tokens(prompt, answer):
    """Full training sequence: BOS prompt answer EOS. Returns (tokens, n_prompt)
    where n_prompt = len(BOS + prompt)."""
    p = [BOS] + encode(prompt)
    return p + encode(answer) + [EOS], len(p)


def heldout_set(n=200, seed=HELDOUT_SEED):
    """List of n (prompt, answer) pairs, distinct prompts, deterministic."""
    rng = np.random.default_rng(seed)
    out, seen = [], set()
    while len(out) < n:
        p, a = make_sample(rng)
        if p not in seen:
            seen.add(p)
            out.append((p, a))
    return out


class TrainStream:
    """Deterministic stream of training batches that never yields a held-out prompt.

    Training-only augmentation (the evaluation format is unchanged): a training
    sequence may carry up to max_queries queries, each with its answer,

        BOS "a3:x7 k1:q2 c5:b1 ?k1=" "q2" " ?a3=" "x7" EOS

    The first query segment is exactly an evaluation sample. Loss is taken on the
    answer bytes of every query and on the final EOS only: the separator after an
    intermediate answer (" ?...") is never a target, so after an answer the model
    only ever learns to emit EOS. More queries per sequence = more supervised
    tokens per step for the same retrieval skill.

    A fraction copy_frac of the sequences are copy sequences instead,

        BOS s "|" s EOS      (s: 6..24 random bytes of the task's alphabet)

    with loss on the 2nd..last byte of the second copy. Every one of those
    targets needs an induction head (find the earlier place with the same
    preceding bytes, read the byte after it), the circuit recall needs too;
    with this dense signal it forms in hundreds of steps instead of thousands."""

    COPY_ALPHABET = KEY_LETTERS + KEY_DIGITS + VAL_LETTERS

    def __init__(self, seed=TRAIN_SEED, exclude=(), min_pairs=MIN_PAIRS, max_pairs=MAX_PAIRS, max_queries=1,
                 copy_frac=0.0):
        self.rng = np.random.default_rng(seed)
        self.exclude = set(exclude)
        self.min_pairs, self.max_pairs, self.max_queries = min_pairs, max_pairs, max_queries
        self.copy_frac = copy_frac

    def copy_sample(self):
        L = int(self.rng.integers(6, 25))
        s = "".join(self.COPY_ALPHABET[i] for i in self.rng.integers(len(self.COPY_ALPHABET), size=L))
        toks = [BOS] + encode(s + "|" + s) + [EOS]
        mask = [0] * (L + 2) + [1] * (L - 1) + [0, 0]
        return toks, mask

    def sample(self):
        """Returns (tokens, targets_mask) for one training sequence; mask[t] = 1 when
        predicting tokens[t + 1] from tokens[..t] is trained."""
        while True:
            keys, vals = make_pairs(self.rng, self.min_pairs, self.max_pairs)
            nq = int(self.rng.integers(1, min(self.max_queries, len(keys)) + 1))
            qs = self.rng.choice(len(keys), size=nq, replace=False)
            ctx = " ".join(f"{k}{SEP}{v}" for k, v in zip(keys, vals))
            if ctx + f" ?{keys[qs[0]]}=" not in self.exclude:
                break
        toks = [BOS] + encode(ctx)
        mask = [0] * len(toks)
        for j, qi in enumerate(qs):
            seg = encode(f" ?{keys[qi]}=")
            toks += seg
            mask += [0] * len(seg)
            mask[-1] = 1                         # '=' predicts answer byte 0
            ans = encode(vals[qi])
            toks += ans
            mask += [1] * (len(ans) - 1) + [1 if j == nq - 1 else 0]   # last answer byte -> EOS only at the end
        toks.append(EOS)
        mask.append(0)
        return toks, mask

    def batch(self, batch_size):
        """Returns (tokens [B, T] int64 array padded with EOS, loss_mask [B, T] float32)
        where loss_mask[b, t] = 1 when the prediction of tokens[b, t+1] is trained."""
        seqs = [self.copy_sample() if self.rng.random() < self.copy_frac else self.sample()
                for _ in range(batch_size)]
        T = max(len(s) for s, _ in seqs)
        tokens = np.full((batch_size, T), EOS, dtype=np.int64)
        mask = np.zeros((batch_size, T), dtype=np.float32)
        for b, (s, m) in enumerate(seqs):
            tokens[b, :len(s)] = s
            mask[b, :len(m)] = m
        return tokens, mask


def write_heldout(path, samples):
    """One line per sample: prompt, a TAB, expected answer. Prompts contain no TAB."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for p, a in samples:
            assert "\t" not in p and "\n" not in p
            f.write(f"{p}\t{a}\n")


if __name__ == "__main__":
    for p, a in heldout_set(5):
        print(repr(p), repr(a), len(sample_tokens(p, a)[0]))
    print("max seq len", MAX_SEQ_LEN)
