"""Data pipeline: tokenizers, document loading, packing, and the data-parallel sampler's guarantees."""

from __future__ import annotations

import json
import re

import pytest
import torch

from fsdp_trainer.config import DataConfig
from fsdp_trainer.data import (
    GlobalBatchSampler,
    SyntheticDataset,
    build_dataloader,
    jsonl_documents,
    pack,
    text_documents,
)
from fsdp_trainer.errors import ConfigError
from fsdp_trainer.tokenizer import byte_tokenizer, encode_documents, load_tokenizer

pytestmark = pytest.mark.timeout(60)


def drain(sampler: GlobalBatchSampler, micro_steps: int) -> list[list[int]]:
    return [sampler.next_local() for _ in range(micro_steps)]


def test_ranks_read_disjoint_samples_that_cover_the_global_batch():
    dp, mb, steps = 4, 3, 50  # 600 draws over 100 samples: crosses several epochs
    per_rank = [drain(GlobalBatchSampler(100, 7, r, dp, mb), steps) for r in range(dp)]
    for step in range(steps):
        slices = [per_rank[r][step] for r in range(dp)]
        flat = [i for s in slices for i in s]
        assert len(set(flat)) == len(flat) == dp * mb, f"ranks overlap at micro-step {step}"
    single = drain(GlobalBatchSampler(100, 7, 0, 1, dp * mb), steps)
    for step in range(steps):
        assert single[step] == [i for r in range(dp) for i in per_rank[r][step]]


def test_one_epoch_visits_every_sample_once():
    sampler = GlobalBatchSampler(96, 3, 0, 1, 8)
    seen = [i for _ in range(12) for i in sampler.next_local()]
    assert sorted(seen) == list(range(96))
    assert sampler.state_dict() == {"epoch": 0, "position": 96}
    sampler.next_local()
    assert sampler.state_dict() == {"epoch": 1, "position": 8}


def test_an_epoch_tail_shorter_than_a_global_batch_is_skipped():
    sampler = GlobalBatchSampler(10, 3, 0, 2, 2)  # global micro-batch of 4: two per epoch, 2 samples left over
    batches = [sampler.next_global() for _ in range(6)]
    for b in batches:
        assert len(set(b)) == 4
    assert len(set(batches[0] + batches[1])) == 8
    assert sampler.state_dict() == {"epoch": 2, "position": 8}


def test_seed_fixes_the_order():
    a = drain(GlobalBatchSampler(1000, 1, 1, 2, 4), 20)
    assert a == drain(GlobalBatchSampler(1000, 1, 1, 2, 4), 20)
    assert a != drain(GlobalBatchSampler(1000, 2, 1, 2, 4), 20)
    first_epoch = GlobalBatchSampler(10, 1, 0, 1, 10).next_local()
    second_epoch = (s := GlobalBatchSampler(10, 1, 0, 1, 10), s.next_local(), s.next_local())[2]
    assert sorted(first_epoch) == sorted(second_epoch) and first_epoch != second_epoch


def test_epoch_orders_of_neighbouring_seeds_differ():
    """Seed 1's second epoch is not seed 2's first (seed + epoch made them collide)."""
    from fsdp_trainer.data import epoch_seed

    seeds = {epoch_seed(seed, epoch) for seed in range(50) for epoch in range(50)}
    assert len(seeds) == 50 * 50
    second_of_1 = (s := GlobalBatchSampler(100, 1, 0, 1, 100), s.next_local(), s.next_local())[2]
    first_of_2 = GlobalBatchSampler(100, 2, 0, 1, 100).next_local()
    assert second_of_1 != first_of_2


def test_sampler_state_resumes_the_stream():
    straight = GlobalBatchSampler(50, 5, 1, 2, 3)
    expected = drain(straight, 30)
    first = GlobalBatchSampler(50, 5, 1, 2, 3)
    head = drain(first, 11)
    resumed = GlobalBatchSampler(50, 5, 1, 2, 3)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert head + drain(resumed, 19) == expected


def test_too_little_data_is_a_config_error():
    with pytest.raises(ConfigError, match=re.escape("--data.seq_len")):
        GlobalBatchSampler(3, 0, 0, 2, 2)


def test_synthetic_samples_are_seeded_per_index():
    a, b = SyntheticDataset(300, 16, 9), SyntheticDataset(300, 16, 9)
    assert torch.equal(a[5], b[5]) and not torch.equal(a[5], a[6])
    assert a[5].shape == (17,) and int(a[5].max()) < 300
    sampler = GlobalBatchSampler(None, 9, 1, 2, 2)
    assert sampler.next_local() == [2, 3] and sampler.next_local() == [6, 7]


def test_byte_tokenizer_round_trips_and_reloads(tmp_path):
    tok = byte_tokenizer()
    text = "naïve café — ok\n\tdone"
    (ids,) = encode_documents(tok, [text])
    assert ids[0] == 256 and ids[-1] == 257 and ids[1:-1] == list(text.encode("utf-8"))
    tok.save_pretrained(tmp_path)
    again = load_tokenizer(str(tmp_path))
    assert again(text, add_special_tokens=False)["input_ids"] == ids[1:-1]
    assert again.decode(ids, skip_special_tokens=True) == text


def test_pack_makes_shifted_windows():
    windows = pack([[1, 2, 3], [4, 5, 6, 7], [8, 9]], seq_len=3)
    assert windows.tolist() == [[1, 2, 3, 4], [5, 6, 7, 8]]


def test_text_and_jsonl_documents(tmp_path):
    (tmp_path / "a.txt").write_text("first doc\nline two\n\n\nsecond doc\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"body": "x"}) + "\n\n" + json.dumps({"body": "y"}) + "\n")
    assert text_documents(str(tmp_path)) == ["first doc\nline two", "second doc"]
    assert jsonl_documents(str(tmp_path / "b.jsonl"), "body") == ["x", "y"]
    with pytest.raises(ConfigError, match=re.escape("--data.text_field: ") + ".*" + re.escape(" has no field 'text'")):
        jsonl_documents(str(tmp_path / "b.jsonl"), "text")
    with pytest.raises(ConfigError, match=re.escape("--data.path: ") + ".*" + re.escape(" does not exist")):
        text_documents(str(tmp_path / "nope"))


def test_dataloader_with_a_trained_bpe_tokenizer(bpe_tokenizer_dir, corpus_file):
    tok = load_tokenizer(str(bpe_tokenizer_dir))
    cfg = DataConfig(source="text", path=str(corpus_file), seq_len=32, seed=3)
    loaders = [build_dataloader(cfg, tok, 512, 2, r, 2, torch.device("cpu")) for r in range(2)]
    b0, b1 = (loader.next_batch() for loader in loaders)
    assert b0.input_ids.shape == (2, 32) and torch.equal(b0.input_ids[:, 1:], b0.labels[:, :-1])
    assert not torch.equal(b0.input_ids, b1.input_ids)
    assert int(b0.input_ids.max()) < len(tok)
    with pytest.raises(
        ConfigError, match=re.escape("--model.tokenizer: token id ") + ".*" + re.escape(" vocabulary of 100")
    ):
        build_dataloader(cfg, tok, 100, 2, 0, 2, torch.device("cpu"))


class FakeHubDataset:
    def __init__(self, rows):
        self.rows, self.column_names = rows, list(rows[0])

    def __iter__(self):
        return iter(self.rows)

    def __getitem__(self, column):
        return [r[column] for r in self.rows]


def test_hub_dataset_uses_the_samsum_prompt(monkeypatch):
    """data.source=hf without the network: a stand-in ``datasets`` module records what is asked for."""
    import sys
    import types

    calls = []
    rows = {
        "knkarthick/samsum": [{"id": "1", "dialogue": "A: hi\nB: hello", "summary": "They greet."}],
        "wiki": [{"text": "Plain text."}],
    }
    fake = types.ModuleType("datasets")
    fake.load_dataset = lambda name, split, token=None: calls.append((name, split)) or FakeHubDataset(rows[name])
    monkeypatch.setitem(sys.modules, "datasets", fake)
    from fsdp_trainer.data import load_documents

    assert DataConfig().dataset == "knkarthick/samsum"  # parquet; the script-based 'samsum' fails with datasets>=4
    docs = load_documents(DataConfig(source="hf", split="train"))
    assert docs == ["Summarize this dialog:\nA: hi\nB: hello\n---\nSummary:\nThey greet."]
    assert load_documents(DataConfig(source="hf", dataset="wiki", split="validation")) == ["Plain text."]
    assert calls == [("knkarthick/samsum", "train"), ("wiki", "validation")]
    with pytest.raises(ConfigError, match=re.escape("--data.text_field: dataset wiki has no column 'body'")):
        load_documents(DataConfig(source="hf", dataset="wiki", text_field="body"))


def test_hub_source_without_datasets_says_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)  # import fails
    from fsdp_trainer.data import load_documents

    with pytest.raises(
        ConfigError, match=r"^--data.source: 'hf' needs the datasets library; pip install fsdp-trainer\[hub\]$"
    ):
        load_documents(DataConfig(source="hf"))
