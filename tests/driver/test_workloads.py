"""Reference workloads: deterministic map-style datasets, and models whose loss falls in a
few in-process steps (no Ray)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from driver import optim
from driver.config.compose import compose
from driver.data.feed import Feed
from driver.workloads import build
from driver.workloads.shapes import ShapesDataset
from driver.workloads.text import VOCAB, TextDataset, make_corpus, tokenize
from tests.driver.conftest import TINY_DIT, TINY_LM


def test_corpus_is_deterministic_and_in_vocabulary():
    text = make_corpus(500, seed=5)
    assert text == make_corpus(500, seed=5) and text != make_corpus(500, seed=6)
    assert set(text.split()) <= set(VOCAB)
    assert (tokenize(text) > 0).all()


def test_text_dataset_items_are_shifted_pairs():
    data = TextDataset(size=10, seq_len=8, seed=1)
    x, y = data[3]
    assert x.shape == y.shape == (8,) and np.array_equal(x[1:], y[:-1])
    with pytest.raises(IndexError):
        data[10]


def test_shapes_are_deterministic_per_index():
    data = ShapesDataset(size=4, image_size=16, channels=3, seed=2)
    assert data[1].shape == (3, 16, 16) and data[1].dtype == np.float32
    assert np.array_equal(data[1], ShapesDataset(4, 16, 3, seed=2)[1])
    assert not np.array_equal(data[1], data[2])
    assert -1.0 <= data[0].min() and data[0].max() <= 1.0


@pytest.mark.parametrize(("path", "steps"), [(TINY_LM, 25), (TINY_DIT, 40)])
def test_loss_falls_in_process(path, steps):
    torch.set_num_threads(1)  # like a worker with one CPU slot; fast on a busy machine
    torch.manual_seed(0)
    cfg, _ = compose(path, ["data.size=512", "optimizer.warmup_steps=3"])
    work = build(cfg.model, cfg.data)
    opt, sched = optim.build(work.model, cfg.optimizer, steps)
    feed = Feed(work.dataset, micro_batch=16, slots=1, seed=0)
    losses = []
    for step in range(steps):
        loss = work.loss(work.model, feed.batch(step, 0))
        loss.backward()
        opt.step()
        opt.zero_grad()
        sched.step()
        losses.append(loss.item())
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:3])
