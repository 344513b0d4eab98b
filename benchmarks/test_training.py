"""Loop overhead of ``fastbptt train``: its step against `grad` alone on the same batches.

Group "training", two cases, each timing 20 consecutive batches of the default corpus with
the command's default sizes (B=32 cursors, T=50, H=256, float32, truncate=stride=T) and one
Elman layer (`ELMAN`, what `grad` alone computes):

- ``grad-alone``: ``fastbptt.grad(x, y, params, truncate=T, stride=T, h0=h0)`` per batch;
- ``train-step``: `Trainer.train_step`, i.e. the batcher, `bptt` with the carried state,
  clipping and the Adam update in place.

Characters per second = 20 * B * T / the round's time (``extra_info`` holds B * T * 20).
The command adds a progress bar, samples and validation estimates between steps; its own
summary line reports the characters per second of the whole loop.
"""
import functools

import numpy as np
import pytest

import fastbptt
from fastbptt.corpus import default_corpus
from fastbptt.text import Codec, StreamBatcher
from fastbptt.train import TrainOptions, Trainer

CALLS = 20
ELMAN = dict(cell="elman", layers=1)


@functools.lru_cache(maxsize=None)
def corpus_ids():
    corpus = default_corpus()
    codec = Codec.from_text(corpus.text)
    train, _ = corpus.split(0.1)
    return codec, codec.encode(train)


def grad_alone():
    options = TrainOptions(**ELMAN)
    codec, ids = corpus_ids()
    params = fastbptt.init_params(len(codec), options.hidden, len(codec), seed=0)
    batcher = StreamBatcher(ids, options.batch, options.seq_length)
    h0 = np.zeros((options.batch, options.hidden), np.float32)
    T = options.seq_length

    def run():
        for _ in range(CALLS):
            x, y, _ = batcher.next()
            fastbptt.grad(x, y, params, truncate=T, stride=T, h0=h0)
    return run


def train_step():
    codec, ids = corpus_ids()
    trainer = Trainer(TrainOptions(**ELMAN), ids, codec)

    def run():
        for _ in range(CALLS):
            trainer.train_step()
    return run


@pytest.mark.parametrize("case", ["grad-alone", "train-step"])
def test_training_loop(benchmark, case):
    run = {"grad-alone": grad_alone, "train-step": train_step}[case]()
    run()                                             # warm-up (compile or load the cache)
    options = TrainOptions()
    benchmark.group = "training"
    benchmark.extra_info.update(characters=CALLS * options.batch * options.seq_length)
    benchmark(run)
