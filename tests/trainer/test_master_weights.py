"""``--precision.master_weights optimizer``: bf16 parameters, fp32 masters in the Triton AdamW's state.

The kernel runs in Triton's interpreter on CPU (``TRITON_INTERPRET=1``): in a subprocess for the optimizer checks
(see test_adamw.py), and in real torchrun jobs over gloo for the trainer checks.
"""

from __future__ import annotations

import pytest
import torch
from conftest import TINY, assert_ok, run_trainer
from test_adamw import _run

pytest.importorskip("triton")
pytestmark = pytest.mark.timeout(300)

INTERPRET = {"TRITON_INTERPRET": "1"}
# bf16 compute and reduction: what the masters change is where the fp32 values live, not the arithmetic.
BF16 = [
    *TINY,
    "--precision.mode",
    "bf16",
    "--precision.reduce_dtype",
    "bf16",
    "--train.adamw",
    "triton",
    "--train.micro_batch_size",
    "2",
    "--parallel.api",
    "fsdp2",
]


def test_master_step_matches_torch_adamw_on_fp32_weights():
    _run("""
    from fsdp_trainer.optim.triton_adamw import TritonAdamW
    ref = [torch.nn.Parameter(p.detach().bfloat16().float()) for p in params(5)]  # start from bf16-exact values
    mine = [torch.nn.Parameter(p.detach().bfloat16()) for p in ref]
    opt = TritonAdamW(groups(mine), lr=1e-2, betas=(0.9, 0.95), master_weights=True)
    torch_opt = torch.optim.AdamW(groups(ref), lr=1e-2, betas=(0.9, 0.95), foreach=False)
    for step in range(3):
        gs = [g.bfloat16() for g in grads(ref, 20 + step)]  # FSDP's reduced gradients are bf16
        for p, q, g in zip(mine, ref, gs):
            p.grad, q.grad = g.clone(), g.float()
        opt.step()
        torch_opt.step()
        masters = [opt.master_of(p) for p in mine]
        close(masters, ref, f"masters after step {step + 1}")
        for p, m in zip(mine, masters):
            assert p.dtype == torch.bfloat16 and m.dtype == torch.float32
            assert torch.equal(p, m.bfloat16()), "the parameter is its master's bf16 rounding"
            assert opt.state[p]["exp_avg"].dtype == torch.float32 and opt.state[p]["master_low"].dtype == torch.int16
            assert "master" not in opt.state[p], "no fp32 copy beside the remainder"
    # load_state_dict keeps the fp32 state fp32 and the remainders int16 (torch's casts both to the parameters' bf16)
    fresh = [torch.nn.Parameter(p.detach().clone()) for p in mine]
    again = TritonAdamW(groups(fresh), lr=1e-2, betas=(0.9, 0.95), master_weights=True)
    again.load_state_dict(opt.state_dict())
    for p, q in zip(mine, fresh):
        for key, dtype in (("exp_avg", torch.float32), ("exp_avg_sq", torch.float32), ("master_low", torch.int16)):
            assert again.state[q][key].dtype == dtype and torch.equal(again.state[q][key], opt.state[p][key]), key
        assert torch.equal(again.master_of(q), opt.master_of(p))
    # a state dict holding fp32 masters (how other optimizers keep them) is split on load, the parameters rewritten
    legacy = opt.state_dict()
    for i, p in enumerate(mine):
        legacy["state"][i] = {k: v for k, v in legacy["state"][i].items() if k != "master_low"}
        legacy["state"][i]["master"] = opt.master_of(p)
    stale = [torch.nn.Parameter(torch.zeros_like(p)) for p in mine]
    third = TritonAdamW(groups(stale), lr=1e-2, betas=(0.9, 0.95), master_weights=True)
    third.load_state_dict(legacy)
    for p, q in zip(mine, stale):
        assert "master" not in third.state[q] and torch.equal(q, p) and torch.equal(third.master_of(q), opt.master_of(p))
    """)


def test_kernel_splits_masters_as_the_torch_split_does():
    """The kernel's rounding and remainder on the values that test them: halfway values rounding up and down, both
    signs, subnormals, the largest finite values and infinities. A step at learning rate 0 without weight decay
    leaves each master's value as it is, so the kernel must write back the split torch makes of it. The halfway
    values that round down are held exactly (the upper half one above, odd, and the remainder -2**15: a split torch
    never makes), so the kernel meets them and must store them one unit short, as torch's split does."""
    _run("""
    from fsdp_trainer.optim.triton_adamw import join_master, split_master
    g = torch.Generator().manual_seed(3)
    tie = lambda upper: ((upper << 16) | 0x8000).to(torch.int32).view(torch.float32)
    uppers = torch.tensor([0x3F80, 0x3F81, 0x4000, 0x4001, 0x0001, 0x7F7E, 0x7F7F], dtype=torch.int64)
    special = torch.cat([tie(uppers), -tie(uppers), torch.tensor([1e-45, -1e-40, 3.4028235e38, -3.4028235e38,
                                                                  float("inf"), float("-inf"), 0.0, -0.0])])
    masters = torch.cat([special, torch.randn(BLOCK + 5, generator=g)])
    even = tie(uppers[uppers % 2 == 0])  # halfway, the upper half already even: rounds down (toward zero)
    down = torch.isin(masters, torch.cat([even, -even]))
    assert int(down.sum()) == 6
    p = torch.nn.Parameter(torch.empty_like(masters, dtype=torch.bfloat16))
    opt = TritonAdamW([p], lr=0.0, weight_decay=0.0, master_weights=True)
    opt.set_master(p, masters)
    with torch.no_grad():
        p.view(torch.int16)[down] += 1
        opt.state[p]["master_low"][down] = -2**15
    assert torch.equal(opt.master_of(p).view(torch.int32), masters.view(torch.int32)), "every master held exactly"
    p.grad = torch.zeros_like(p)
    opt.step()
    expected = torch.empty_like(p)
    expected_low = split_master(masters, expected)
    assert torch.equal(p.detach().view(torch.int16), expected.view(torch.int16)), "the kernel rounds as torch casts"
    assert torch.equal(opt.state[p]["master_low"], expected_low), "the kernel's remainders, clamped alike"
    joined = opt.master_of(p).view(torch.int32)
    assert torch.equal(joined[down], masters[down].view(torch.int32) - 1), "one unit short, toward the parameter"
    assert torch.equal(joined[~down], masters[~down].view(torch.int32)), "every other master bit for bit"
    """)


def test_remainders_hold_every_fp32_value():
    """The bf16 parameter (the master rounded to nearest even: torch's cast) and the int16 remainder give back the fp32
    master bit for bit, across signs, exponents, subnormals and the largest finite values, except a master exactly
    halfway that rounded down, which comes back one unit in its last place short (the remainder 2**15 does not fit)."""
    from fsdp_trainer.optim.triton_adamw import join_master, split_master

    g = torch.Generator().manual_seed(0)
    random_bits = torch.randint(-(2**31), 2**31 - 1, (200_000,), dtype=torch.int64, generator=g).to(torch.int32)
    values = random_bits.view(torch.float32)
    values = values[torch.isfinite(values)]
    edges = torch.tensor(
        [
            0.0,
            -0.0,
            1.0,
            -1.0,
            1.0 + 2**-8,
            -(1.0 + 2**-8),
            1.0 + 3 * 2**-8,
            1.0 + 2**-9,
            1e-45,
            -1e-45,
            1e-40,
            3.4028235e38,
            -3.4028235e38,
            float("inf"),
            float("-inf"),
        ],
        dtype=torch.float32,
    )
    values = torch.cat([values, edges, torch.randn(10_000, generator=g) * 1e-3])
    param = torch.empty_like(values, dtype=torch.bfloat16)
    low = split_master(values, param)
    assert low.dtype == torch.int16
    assert torch.equal(param, values.bfloat16()), "the parameter is torch's cast of the master"
    bits, joined = values.view(torch.int32), join_master(param, low).view(torch.int32)
    down = ((bits & 0xFFFF) == 0x8000) & ((bits >> 16) & 1 == 0)  # halfway, and the upper half already even
    assert down.sum() >= 2 and (~down).sum() > 200_000
    assert torch.equal(joined[~down], bits[~down]), "bit for bit"
    assert torch.equal(joined[down], bits[down] - 1), "one unit in the last place, toward the parameter"
    # a NaN master stays a NaN parameter
    nan = torch.tensor([float("nan"), 1.0])
    halves = torch.empty_like(nan, dtype=torch.bfloat16)
    split_master(nan, halves)
    assert torch.isnan(halves[0]) and halves[1] == 1.0


def test_auto_uses_masters_only_where_they_apply(monkeypatch):
    from fsdp_trainer.config import ConfigError, load_config
    from fsdp_trainer.optim import triton_adamw, use_master_weights

    monkeypatch.setattr(triton_adamw, "available", lambda: True)

    def uses(flags, device="cuda"):
        return use_master_weights(load_config(None, flags), device)

    assert uses([])
    assert not uses(["--precision.master_weights", "params"])
    assert not uses(["--fp8.enabled", "true"])
    assert not uses(["--train.grad_accum_steps", "2"])
    cfg = load_config(None, ["--train.grad_accum_steps", "2"])
    assert use_master_weights(cfg, "cuda", grad_accum_steps=1), "--auto asks as if it chose one micro-batch per step"
    assert not uses(["--parallel.api", "fsdp1"])
    assert not uses(["--precision.mode", "fp32"])
    assert not uses(["--train.adamw", "fused"])
    assert not uses([], "cpu")
    explicit = load_config(None, ["--precision.master_weights", "optimizer"])
    explicit.train.grad_accum_steps = 2  # what --auto may choose after the config was checked
    with pytest.raises(
        ConfigError, match=r"^--precision.master_weights: optimizer needs --train.grad_accum_steps 1 \(got 2\)"
    ):
        use_master_weights(explicit, "cuda")
    monkeypatch.setattr(triton_adamw, "available", lambda: False)
    assert not uses([])
    with pytest.raises(ConfigError, match=r"^--precision.master_weights: optimizer needs the Triton AdamW"):
        uses(["--precision.master_weights", "optimizer"])


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--parallel.api", "fsdp1"], "needs --parallel.api fsdp2"),
        (["--precision.mode", "fp32"], "needs bf16 parameters"),
        (["--fp8.enabled", "true"], "cannot be combined with --fp8.enabled"),
        (["--train.grad_accum_steps", "4"], "needs --train.grad_accum_steps 1"),
        (["--train.adamw", "fused"], "needs the Triton AdamW"),
    ],
)
def test_explicit_masters_are_refused_in_one_line_where_they_cannot_apply(flags, message):
    from fsdp_trainer.config import ConfigError, load_config

    with pytest.raises(ConfigError) as e:
        load_config(None, ["--precision.master_weights", "optimizer", *flags])
    assert str(e.value).startswith("--precision.master_weights: optimizer ") and message in str(e.value)
    assert "\n" not in str(e.value)


def test_cpu_run_without_triton_interpreter_is_refused(tmp_path):
    run = run_trainer(
        [*TINY, "--precision.mode", "bf16", "--precision.master_weights", "optimizer", "--train.steps", "1"],
        tmp_path / "out",
    )
    assert run.returncode == 2
    assert (
        "error: --precision.master_weights: optimizer needs the Triton AdamW, which does not run here (cpu)"
        in run.stderr
    )
    assert not (tmp_path / "out" / "checkpoints").exists()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both modes, 6 steps on 2 ranks, checkpoint and fp32 export at the end."""
    out = {}
    for mode in ("params", "optimizer"):
        root = tmp_path_factory.mktemp(mode)
        args = [
            *BF16,
            "--train.steps",
            "6",
            "--precision.master_weights",
            mode,
            "--checkpoint.export_hf",
            str(root / "hf"),
            "--checkpoint.export_dtype",
            "fp32",
        ]
        run = run_trainer(args, root / "out", nproc=2, env=INTERPRET)
        assert_ok(run)
        out[mode] = run
    return out


def test_masters_train_like_fp32_parameters(runs):
    assert (
        runs["optimizer"].summary["master_weights"] == "optimizer"
        and runs["params"].summary["master_weights"] == "params"
    )
    # The masters start from the fp32 weights as drawn (not their bf16 rounding), the forward and backward see the
    # same bf16 weights, and with bf16 reduction the gradients are the same: the runs agree to rounding. The first
    # step's are equal; after it, a clipped step (the tiny model's norms are above 1 at every step) multiplies the
    # gradients in place, in bf16 beside masters and in fp32 beside fp32 parameters: one more rounding per clipped
    # step (without clipping the two runs are bit for bit equal), 1e-5 of the loss and 1e-4 of the norm by step 6.
    assert any(r["grad_norm"] > 1.0 for r in runs["params"].records), "clipping was active"
    for field in ("loss", "grad_norm"):
        a = [r[field] for r in runs["params"].records]
        b = [r[field] for r in runs["optimizer"].records]
        assert len(a) == len(b) == 6
        assert b[0] == pytest.approx(a[0], rel=1e-6), field
        assert b == pytest.approx(a, rel=5e-4), field


def test_tied_weights_get_their_master_under_every_name():
    import torch.nn as nn

    from fsdp_trainer.converters.master_weights import cast_params_keeping_masters_, masters_by_key, with_masters
    from fsdp_trainer.optim.triton_adamw import TritonAdamW

    emb = nn.Embedding(5, 3)
    head = nn.Linear(3, 5, bias=False)
    head.weight = emb.weight
    model = nn.ModuleDict({"embed": emb, "head": head})
    model.register_buffer("inv_freq", torch.ones(2))
    drawn = emb.weight.detach().clone()
    seeds = cast_params_keeping_masters_(model, torch.bfloat16)
    assert head.weight is emb.weight and emb.weight.dtype == torch.bfloat16, "still tied, now bf16"
    assert model.inv_freq.dtype == torch.float32, "buffers keep their dtype"
    assert list(seeds) == ["embed.weight"] and torch.equal(seeds["embed.weight"], drawn)

    opt = TritonAdamW(model.parameters(), master_weights=True)
    opt.seed_masters({emb.weight: seeds["embed.weight"]})
    assert not opt.state, "seeds wait for the first step (torch's state-dict helpers step an optimizer with no state)"
    assert torch.equal(masters_by_key(model, opt)["head.weight"], drawn)
    opt.set_master(emb.weight, seeds["embed.weight"])  # as a checkpoint load attaches it
    assert set(masters_by_key(model, opt)) == {"embed.weight", "head.weight"}
    model_sd = model.state_dict()  # a tied weight appears under both names
    optim_sd = {"state": {"embed.weight": dict(opt.state[emb.weight])}}
    with_masters(model, opt, model_sd, optim_sd)
    assert model_sd["head.weight"] is model_sd["embed.weight"], "one master for both names"
    assert torch.equal(model_sd["embed.weight"], drawn), "the weights as drawn, not their rounding"
    assert "master_low" not in optim_sd["state"]["embed.weight"] and "master_low" in opt.state[emb.weight]
    assert torch.equal(opt.master_of(head.weight), drawn), "the live optimizer keeps its masters"


def test_seeds_cover_only_stepped_parameters_and_give_way_to_a_loaded_state():
    from fsdp_trainer.optim.triton_adamw import TritonAdamW

    stepped, frozen = (
        torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16)),
        torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16)),
    )
    opt = TritonAdamW([stepped], master_weights=True)
    seeds = {stepped: torch.tensor([1.0, 2.0, 3.0, 1.0 + 2**-12]), frozen: torch.ones(4)}
    opt.seed_masters(seeds)
    assert torch.equal(opt.master_of(stepped), seeds[stepped]) and opt.master_of(frozen) is None
    assert torch.equal(frozen, torch.zeros(4, dtype=torch.bfloat16)), (
        "a parameter the optimizer does not step is left alone"
    )
    with pytest.raises(ValueError, match="in none of the optimizer's groups"):
        opt.set_master(frozen, torch.ones(4))
    # a loaded state replaces the seeds; without remainders in it, the master is the parameter's value
    opt.load_state_dict(
        TritonAdamW([torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16))], master_weights=True).state_dict()
    )
    assert opt.master_of(stepped) is None and not opt._seeded


def test_checkpoint_holds_fp32_masters_in_the_same_layout(runs):
    import torch.distributed.checkpoint as dcp

    layouts = {}
    for mode, run in runs.items():
        meta = (
            dcp.FileSystemReader(str(run.output_dir / "checkpoints" / "step_00000006"))
            .read_metadata()
            .state_dict_metadata
        )
        layouts[mode] = {k: v.properties.dtype for k, v in meta.items() if hasattr(v, "properties")}
    assert layouts["params"] == layouts["optimizer"], "the same keys and dtypes in both modes"
    model_keys = [k for k in layouts["optimizer"] if k.startswith("model.")]
    assert model_keys and all(layouts["optimizer"][k] == torch.float32 for k in model_keys)
    assert not any("master" in k for k in layouts["optimizer"])


def test_export_writes_the_masters(runs):
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file

    run = runs["optimizer"]
    exported = {}
    for f in (run.output_dir.parent / "hf").glob("*.safetensors"):
        exported.update(load_file(f))
    key = "model.layers.0.mlp.down_proj.weight"
    sd = {f"model.lm.{key}": torch.empty(exported[key].shape, dtype=torch.float32)}
    dcp.load(sd, checkpoint_id=str(run.output_dir / "checkpoints" / "step_00000006"))
    assert exported[key].dtype == torch.float32
    assert torch.equal(exported[key], sd[f"model.lm.{key}"]), "the export is the checkpoint's fp32 masters"
    assert not torch.equal(exported[key], exported[key].bfloat16().float()), "not their bf16 rounding"


def test_resume_with_masters_matches_the_straight_run(runs, tmp_path):
    out = tmp_path / "out"
    args = [*BF16, "--train.steps", "6", "--precision.master_weights", "optimizer", "--checkpoint.every_steps", "3"]
    killed = run_trainer(args, out, nproc=2, env={**INTERPRET, "FSDP_TRAINER_FAULT_AFTER_STEP": "3"})
    assert killed.returncode != 0
    resumed = run_trainer(args, out, nproc=2, env=INTERPRET)
    assert_ok(resumed)
    assert "resumed from" in resumed.stderr
    straight = runs["optimizer"].losses()
    for step in range(4, 7):
        assert resumed.losses()[step] == pytest.approx(straight[step], abs=1e-6), f"step {step}"
    # A save in the middle leaves the run's masters alone (it once took them out of the live optimizer state).
    saved = run_trainer(args, tmp_path / "saved", nproc=2, env=INTERPRET)
    assert_ok(saved)
    assert saved.losses() == pytest.approx(straight, abs=1e-6)


def test_checkpoints_move_between_modes(runs, tmp_path):
    """A params run's checkpoint resumes with masters, and the other way round (the layout is the same)."""
    import shutil

    for source, target in (("params", "optimizer"), ("optimizer", "params")):
        out = tmp_path / f"{source}-to-{target}"
        # the checkpoints without the source run's OWNER.json: this is a new run of its own (ownership.py)
        shutil.copytree(
            runs[source].output_dir / "checkpoints", out / "checkpoints", ignore=shutil.ignore_patterns("OWNER.json")
        )
        args = [*BF16, "--train.steps", "7", "--precision.master_weights", target, "--checkpoint.enabled", "true"]
        run = run_trainer(args, out, nproc=2, env=INTERPRET)
        assert_ok(run)
        assert "resumed from" in run.stderr and run.summary["master_weights"] == target
        assert [r["step"] for r in run.records] == [7]
        # the first step after the resume uses the source run's weights: its loss is what the source would see next
        assert run.losses()[7] == pytest.approx(runs[source].losses()[6], rel=0.05)


def test_sharded_init_seeds_the_masters_with_the_drawn_weights(tmp_path):
    """Weights drawn per shard on the device (the path of models above 1B): cast after drawing, masters from the draw.
    Without clipping (a clipped step rounds bf16 gradients once more, see test_masters_train_like_fp32_parameters) the
    two modes train alike to rounding."""
    records = {}
    for mode in ("params", "optimizer"):
        run = run_trainer(
            [
                *BF16,
                "--model.random_init",
                "sharded",
                "--train.steps",
                "3",
                "--checkpoint.enabled",
                "false",
                "--precision.master_weights",
                mode,
                "--train.max_grad_norm",
                "0",
            ],
            tmp_path / mode,
            nproc=2,
            env=INTERPRET,
        )
        assert_ok(run)
        records[mode] = [r[field] for r in run.records for field in ("loss", "grad_norm")]
    assert len(records["params"]) == 6
    assert records["optimizer"] == pytest.approx(records["params"], rel=1e-5)
