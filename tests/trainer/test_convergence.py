"""``bench/convergence.py``: the fast configuration's numerics against the plain reference, on CPU, end to end.

The script runs here as it runs on the GPU (``--device cpu``: the tiny shape, fp32, 20 steps): it prepares the text,
a BPE tokenizer and the initial weights once, trains the plain reference (Hugging Face Llama, ``torch.optim.AdamW``,
FSDP2) and the trainer's fast configuration with every option that runs on CPU (compiled blocks and loss under the
lean memory budget, fused loss and kernels, flat shards, the Triton AdamW in Triton's interpreter) from the same
weights on the same batches, with two data-order seeds, then analyses the records into a report and a plot. In fp32
the two must agree to rounding: every step's loss within 1e-5. The GPU configurations' command lines are checked
against the trainer's config, so the GPU call does not fail on a typo.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import convergence  # noqa: E402

SEEDS = (1, 2)


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("convergence")
    cmd = [
        sys.executable,
        str(BENCH / "convergence.py"),
        "run",
        "--device",
        "cpu",
        "--configs",
        "reference,fast",
        "--seeds",
        ",".join(map(str, SEEDS)),
        "--out",
        str(root / "out"),
        "--work",
        str(root / "work"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return root / "out"


def _records(out: Path) -> dict[tuple[str, int], dict]:
    return {(r["config"], r["seed"]): r for r in convergence.load_runs([out])}


@pytest.mark.slow
@pytest.mark.timeout(1600)
def test_fast_configuration_matches_the_plain_reference_to_rounding(cpu_runs):
    records = _records(cpu_runs)
    assert sorted(records) == [(c, s) for c in ("fast", "reference") for s in SEEDS]
    for seed in SEEDS:
        ref, fast = records["reference", seed], records["fast", seed]
        assert ref["ok"] and fast["ok"], (ref.get("error"), fast.get("error"))
        assert len(ref["steps"]) == len(fast["steps"]) == 20
        for a, b in zip(ref["steps"], fast["steps"], strict=True):
            assert a["step"] == b["step"] and a["lr"] == pytest.approx(b["lr"], rel=1e-12)
            assert abs(a["loss"] - b["loss"]) <= 1e-5, f"seed {seed}, step {a['step']}: {a['loss']} vs {b['loss']}"
            assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4), f"seed {seed}, step {a['step']}"
        assert ref["steps"][-1]["loss"] < ref["steps"][0]["loss"] - 0.3, "the reference learned"
        # what the fast run was: the options that run on CPU, all on
        assert fast["summary"]["adamw"] == "triton"
        assert fast["summary"]["converters"] == ["fused_kernels", "experimental.flat_shards"]
        for flag in ("--compile.enabled true", "--compile.loss true", "--compile.memory_budget 0.7"):
            assert flag in fast["command"]
    assert records["reference", 1]["steps"][0]["loss"] != records["reference", 2]["steps"][0]["loss"], (
        "the seeds change the data order"
    )


@pytest.mark.slow
@pytest.mark.timeout(1600)
def test_analysis_writes_the_report_plot_and_raw_losses(cpu_runs, tmp_path):
    pytest.importorskip("matplotlib")  # the dev dependency group's; analysis draws the curves with it
    report = tmp_path / "reports" / "convergence.md"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "convergence.py"), "analyze", str(cpu_runs), "--report", str(report)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = json.loads((tmp_path / "reports" / "convergence-checks.json").read_text())
    assert checks["passed"] and checks["same_start"]
    assert [c["check"].split(":")[0] for c in checks["checks"]][1:] == ["fast", "fast"]
    text = report.read_text()
    assert "**PASSED**" in text and "![loss curves" in text
    for line in (
        "**Claim.**",
        "- Hardware: CPU",
        "- Date: ",
        "- Versions: torch ",
        "- Command: `python bench/convergence.py run",
    ):
        assert line in text, f"the report follows bench/README.md's conventions: {line}"
    for seed in SEEDS:  # links relative to the report
        assert f"[json]({os.path.relpath(cpu_runs / 'runs' / f'fast-seed{seed}.json', report.parent)})" in text
    assert (tmp_path / "reports" / "convergence.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = (tmp_path / "reports" / "convergence-losses.csv").read_text().splitlines()
    assert len(rows) == 21 and rows[0].startswith("step,fast-seed1 loss")


def _fake(config: str, seed: int, losses: list[float], norms: list[float]) -> dict:
    return {
        "config": config,
        "seed": seed,
        "ok": True,
        "setup": {"digests": {"weights": "w"}},
        "hyperparameters": {"warmup_steps": 2},
        "steps": [
            {"step": i + 1, "loss": a, "grad_norm": b, "lr": 1.0}
            for i, (a, b) in enumerate(zip(losses, norms, strict=False))
        ],
    }


def test_the_checks_use_the_references_own_spread_and_catch_departures():
    flat = [1.0] * 6
    ref = [_fake("reference", 1, [2.0] * 6, flat), _fake("reference", 2, [2.04] * 6, flat)]  # a 2% seed spread
    within = [_fake("fast", s, [2.05] * 6, flat) for s in (1, 2)]  # 1.5% above the mean: inside the spread
    result = convergence.analyze(ref + within, window=3)
    assert result["passed"] and result["reference"]["seed_spread"] == pytest.approx(0.04 / 2.02)
    outside = [_fake("fast", s, [2.1] * 6, flat) for s in (1, 2)]  # 4% above
    assert not convergence.analyze(ref + outside, window=3)["passed"]
    spike = [_fake("fast", 1, [2.02] * 6, [1.0, 1.5, 1.0, 1.2, 1.0, 1.0]), _fake("fast", 2, [2.02] * 6, flat)]
    result = convergence.analyze(ref + spike, window=3)
    grad = next(c for c in result["checks"] if "gradient norm" in c["check"])
    assert not grad["passed"] and "step 4" in grad["detail"], "step 2 is in the warm-up; step 4 departs by 20%"
    fp8 = [_fake("fp8", s, [2.04] * 6, flat) for s in (1, 2)]  # +1%: within FP8's 1.5%
    assert convergence.analyze(ref + within + fp8, window=3)["passed"]
    other_weights = _fake("fast", 2, [2.05] * 6, flat) | {"setup": {"digests": {"weights": "other"}}}
    assert not convergence.analyze([*ref, within[0], other_weights], window=3)["passed"]


def test_a_same_seed_rerun_measures_the_noise_the_gradient_check_allows():
    steps = 30
    flat = [1.0] * steps
    ref = [_fake("reference", s, [2.0] * steps, flat) for s in (1, 2)]
    noisy = [1.0 + (0.3 if i % 7 == 3 else 0.0) for i in range(steps)]  # single-step spikes: 10-step means stay close
    rerun = _fake("reference", 1, [2.0] * steps, noisy)
    fast = [_fake("fast", 1, [2.0] * steps, noisy), _fake("fast", 2, [2.0] * steps, flat)]
    result = convergence.analyze(ref + fast, window=3, reruns=[rerun])
    noise = result["rerun_noise"]["reference-seed1"]
    assert noise["max_step_departure"] == pytest.approx(0.3) and noise["steps_over_tolerance"] == 4
    aware = [c for c in result["checks"] if c.get("noise_aware")]
    assert [c["passed"] for c in aware] == [True] and aware[0]["check"].endswith("(10.0%)")
    literal = next(c for c in result["checks"] if "at every step" in c["check"])
    assert not literal["passed"]  # the step-by-step check fails on the noise the rerun shows the reference has too
    # every run against the reference of its seed, by the rerun's measures (where an ablation would stand out)
    assert result["departures"]["fast-seed1"] == noise and result["departures"]["fast-seed2"]["max_step_departure"] == 0
    assert set(result["departures"]) == {"fast-seed1", "fast-seed2"}
    drift = [_fake("fast", 1, [2.0] * steps, [1.5] * steps), fast[1]]  # a steady 50% departure is not noise
    assert not next(c for c in convergence.analyze(ref + drift, 3, [rerun])["checks"] if c.get("noise_aware"))["passed"]


@pytest.mark.parametrize("config", sorted(convergence.GPU_FLAGS))
def test_every_gpu_configuration_is_a_valid_trainer_command(config, tmp_path, capsys):
    """What the GPU call will run, through the trainer's own command line (``--print-config``: every flag exists,
    every value is valid, the settings combine)."""
    from fsdp_trainer.cli import main

    args = argparse.Namespace(device="cuda", work=str(tmp_path), **convergence.DEFAULTS["cuda"])
    setup = {"weights": str(tmp_path / "w"), "tokenizer": str(tmp_path / "t"), "corpus": str(tmp_path / "c.jsonl")}
    cmd = convergence.command(config, 1, setup, args, tmp_path / "out")
    assert cmd[1:3] == ["-m", "fsdp_trainer"]
    assert main([*cmd[3:], "--print-config"]) == 0, capsys.readouterr().err
    cfg = json.loads(capsys.readouterr().out)
    assert (cfg["data"]["seq_len"], cfg["train"]["micro_batch_size"], cfg["train"]["steps"]) == (1024, 8, 300)
    assert cfg["model"]["init"] == "pretrained" and cfg["data"]["seed"] == 1
    assert cfg["fp8"]["enabled"] is config.startswith("fp8")
    assert cfg["auto"]["enabled"] is (config != "default")


def test_the_reference_command_parses(tmp_path, monkeypatch):
    args = argparse.Namespace(device="cuda", work=str(tmp_path), **convergence.DEFAULTS["cuda"])
    setup = {"weights": "w", "tokenizer": "t", "corpus": "c"}
    cmd = convergence.command("reference", 2, setup, args, tmp_path / "out")
    parser_args = cmd[2:]
    seen = {}
    monkeypatch.setattr(convergence, "train_reference", lambda a: seen.update(vars(a)))
    assert convergence.main(parser_args) == 0
    assert seen["seed"] == 2 and seen["steps"] == 300 and seen["dtype"] == "bf16" and seen["device"] == "cuda"
