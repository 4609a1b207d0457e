"""A generated text corpus with learnable structure, and its map-style token dataset.

Nothing is downloaded: `make_corpus(n_words, seed)` writes sentences from a small grammar with
three kinds of structure a small model learns in stages: word order (articles, adjectives,
verbs), facts to memorise (each person lives in one fixed city and likes one fixed food), and
counting (`count : four five six seven .`). `TextDataset` tokenises it by word and serves
`(input, target)` pairs of `seq_len` tokens as numpy arrays. Print a sample with
`python -m driver.workloads.text`.
"""

from __future__ import annotations

import random

import numpy as np

PEOPLE = "ada bob cleo dan eve finn gus hana ivo jun kai lea".split()
CITIES = "paris lima oslo kyoto cairo quito perth accra".split()
FOODS = "rice soup bread figs plums tea cheese noodles".split()
ANIMALS = "fox cat owl dog hen yak".split()
ADJECTIVES = "red blue small quick old green".split()
VERBS = "sees follows chases greets".split()
NUMBERS = "one two three four five six seven eight nine ten".split()
SPECIAL = ["<unk>", ".", ":", "the", "lives", "in", "likes", "count", "and"]
VOCAB = SPECIAL + PEOPLE + CITIES + FOODS + ANIMALS + ADJECTIVES + VERBS + NUMBERS


def _facts() -> dict[str, tuple[str, str]]:
    """Fixed per-person facts: the same on every machine (seeded independently of the data)."""
    rng = random.Random(7)
    return {p: (rng.choice(CITIES), rng.choice(FOODS)) for p in PEOPLE}


def _sentence(rng: random.Random, facts: dict[str, tuple[str, str]]) -> list[str]:
    kind = rng.random()
    if kind < 0.4:
        return [
            "the", rng.choice(ADJECTIVES), rng.choice(ANIMALS), rng.choice(VERBS),
            "the", rng.choice(ADJECTIVES), rng.choice(ANIMALS), ".",
        ]  # fmt: skip
    if kind < 0.8:
        person = rng.choice(PEOPLE)
        city, food = facts[person]
        if rng.random() < 0.5:
            return [person, "lives", "in", city, "and", "likes", food, "."]
        return [person, "likes", food, "and", "lives", "in", city, "."]
    start = rng.randrange(len(NUMBERS) - 4)
    return ["count", ":", *NUMBERS[start : start + 4], "."]


def make_corpus(n_words: int, seed: int) -> str:
    """At least n_words words of generated text, deterministic for a seed."""
    rng, facts, words = random.Random(seed), _facts(), []
    while len(words) < n_words:
        words.extend(_sentence(rng, facts))
    return " ".join(words)


def tokenize(text: str) -> np.ndarray:
    """Word ids of a text over VOCAB (unknown words map to <unk>)."""
    index = {word: i for i, word in enumerate(VOCAB)}
    return np.array([index.get(word, 0) for word in text.split()], dtype=np.int64)


class TextDataset:
    """Map-style dataset: item i is (tokens[i*L : i*L+L], tokens[i*L+1 : i*L+L+1])."""

    vocab_size = len(VOCAB)

    def __init__(self, size: int, seq_len: int, seed: int):
        self.size, self.seq_len = size, seq_len
        self.tokens = tokenize(make_corpus(size * seq_len + 1, seed))

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        if not 0 <= index < self.size:
            raise IndexError(index)
        start = index * self.seq_len
        chunk = self.tokens[start : start + self.seq_len + 1]
        return chunk[:-1], chunk[1:]


if __name__ == "__main__":
    print(make_corpus(120, seed=1234))
