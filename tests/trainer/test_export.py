"""Hugging Face export and pretrained loading.

A sharded run exports a ``save_pretrained`` directory; it must hold exactly the
weights of the run's last DCP checkpoint (same logits), reload with transformers'
own ``from_pretrained``, and start new runs as ``model.name_or_path``: loading on
rank 0 and broadcasting (FSDP2 ``set_model_state_dict``, FSDP1 ``sync_module_states``)
must give the same losses as a plain single-process load.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY, assert_ok, run_trainer

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def exported(bpe_tokenizer_dir, corpus_file, tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    hf_dir = root / "hf"
    run = run_trainer(
        [
            *TINY,
            "--model.preset",
            "tiny-gqa",
            "--model.tokenizer",
            str(bpe_tokenizer_dir),
            "--data.path",
            str(corpus_file),
            "--train.steps",
            "3",
            "--train.micro_batch_size",
            "2",
            "--checkpoint.export_hf",
            str(hf_dir),
        ],
        root / "out",
        nproc=2,
    )
    assert_ok(run)
    return hf_dir, root / "out" / "checkpoints" / "step_00000003"


def test_export_matches_the_checkpoint(exported, bpe_tokenizer_dir, tmp_path):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from transformers import AutoTokenizer, LlamaForCausalLM

    hf_dir, ckpt = exported
    hf = LlamaForCausalLM.from_pretrained(hf_dir).eval()
    assert hf.config.num_key_value_heads == 2 and hf.dtype == torch.float32

    dcp_to_torch_save(str(ckpt), str(tmp_path / "full.pt"))
    full = torch.load(tmp_path / "full.pt", weights_only=False)["model"]
    again = LlamaForCausalLM(hf.config).eval()
    again.load_state_dict({k.removeprefix("lm."): v for k, v in full.items()}, strict=True)

    ids = torch.randint(0, hf.config.vocab_size, (2, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, again(ids).logits, rtol=0, atol=1e-6)
    fresh = LlamaForCausalLM(hf.config).eval()
    with torch.no_grad():
        assert not torch.allclose(hf(ids).logits, fresh(ids).logits, atol=1e-3), "export must hold the trained weights"

    tok, ref = AutoTokenizer.from_pretrained(hf_dir), AutoTokenizer.from_pretrained(bpe_tokenizer_dir)
    text = "Return a new dictionary initialized from an optional positional argument."
    assert tok(text)["input_ids"] == ref(text)["input_ids"]


@pytest.fixture(scope="module")
def pretrained_args(exported, corpus_file):
    hf_dir, _ = exported
    return [
        *TINY,
        "--model.name_or_path",
        str(hf_dir),
        "--data.path",
        str(corpus_file),
        "--train.steps",
        "2",
        "--checkpoint.enabled",
        "false",
    ]


@pytest.fixture(scope="module")
def single_process_pretrained(pretrained_args, tmp_path_factory):
    run = run_trainer(
        [*pretrained_args, "--parallel.api", "none", "--train.micro_batch_size", "4"],
        tmp_path_factory.mktemp("pre") / "out",
    )
    assert_ok(run)
    return run.losses()


def test_pretrained_first_loss_is_the_models_loss(exported, corpus_file, single_process_pretrained):
    """Step 1's loss is computed before any update: it must be the exported model's loss on the first batch."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    from fsdp_trainer.config import DataConfig
    from fsdp_trainer.data import build_dataloader

    hf_dir, _ = exported
    model = LlamaForCausalLM.from_pretrained(hf_dir).eval()
    loader = build_dataloader(
        DataConfig(source="text", path=str(corpus_file), seq_len=64, seed=42),
        AutoTokenizer.from_pretrained(hf_dir),
        model.config.vocab_size,
        4,
        0,
        1,
        torch.device("cpu"),
    )
    batch = loader.next_batch()
    with torch.no_grad():
        logits = model(batch.input_ids).logits
    loss = F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten())
    assert single_process_pretrained[1] == pytest.approx(loss.item(), rel=1e-5)


@pytest.mark.parametrize("api", ["fsdp2", "fsdp1"])
def test_pretrained_broadcast_from_rank0(api, pretrained_args, single_process_pretrained, tmp_path):
    run = run_trainer(
        [*pretrained_args, "--parallel.api", api, "--train.micro_batch_size", "2"], tmp_path / "out", nproc=2
    )
    assert_ok(run)
    for step, ref in single_process_pretrained.items():
        assert run.losses()[step] == pytest.approx(ref, rel=1e-4), f"{api} step {step}"


def test_pretrained_from_s3_trains_and_exports_to_s3(
    aws, exported, pretrained_args, single_process_pretrained, tmp_path
):
    """A Hugging Face directory under an s3:// prefix (moto): config and tokenizer fetched, weights streamed by rank 0
    into memory; the run's losses are the local directory's, and its export lands back on S3 and reloads."""
    import boto3
    from transformers import AutoTokenizer, LlamaForCausalLM

    hf_dir, _ = exported
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="models", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    for path in hf_dir.iterdir():
        s3.upload_file(str(path), "models", f"tiny/{path.name}")
    args = [a if a != str(hf_dir) else "s3://models/tiny" for a in pretrained_args]
    run = run_trainer(
        [
            *args,
            "--parallel.api",
            "fsdp2",
            "--train.micro_batch_size",
            "2",
            "--checkpoint.export_hf",
            "s3://models/out",
        ],
        tmp_path / "out",
        nproc=2,
    )
    assert_ok(run)
    for step, ref in single_process_pretrained.items():
        assert run.losses()[step] == pytest.approx(ref, rel=1e-4), f"step {step}"
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="models", Prefix="out/")["Contents"]}
    assert {"out/config.json", "out/model.safetensors", "out/tokenizer.json"} <= keys, keys
    back = tmp_path / "back"
    back.mkdir()
    for key in keys:
        s3.download_file("models", key, str(back / key.removeprefix("out/")))
    model = LlamaForCausalLM.from_pretrained(back)
    assert model.config.num_key_value_heads == 2
    assert (
        AutoTokenizer.from_pretrained(back)("def")["input_ids"]
        == AutoTokenizer.from_pretrained(hf_dir)("def")["input_ids"]
    )
