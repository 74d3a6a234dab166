"""``bench/estimate_check.py``, the estimate against the trainer on one GPU: its H200 plan is checked here without a
GPU (estimates made, trainer flags accepted), and the whole script runs on CPU with tiny shapes."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "estimate_check.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("estimate_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_h200_plan_estimates_and_its_flags_are_the_trainers(check, tmp_path: Path) -> None:
    from fsdp_trainer.config import load_config

    args = argparse.Namespace(instance_type="p5en.48xlarge", seq_len=4096, compile=True)
    plan = check.PLANS["h200"]
    assert len({model for model, _ in plan.values()}) >= 2
    assert len({settings["ac.mode"] for _, settings in plan.values()}) >= 2
    for model, own in plan.values():
        settings = check._settings(args, own)
        estimate_model, model_flags = check._model_flag(model, tmp_path / "models")
        est = check.estimate(estimate_model, settings, args)
        assert est["memory"]["fits"] and est["nodes"] == 1 and est["gpus_per_node"] == 1
        assert est["speed"]["step_s"] > 0.1 and est["gpu_model"] == "H200"
        flags = [*model_flags]
        for key, value in settings.items():
            flags += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
        cfg = load_config(None, flags)
        assert cfg.train.micro_batch_size == own["train.micro_batch_size"]
    assert json.loads((tmp_path / "models" / "llama-3.2-3b" / "config.json").read_text())["hidden_size"] == 3072


def test_compare_judges_both_tolerances(check) -> None:
    est = {
        "memory": {"peak_gib": 100.0, "fits": True},
        "speed": {"step_s": 1.0, "tokens_per_s_per_gpu": 8192, "mfu": 0.5},
    }
    settings = {"train.micro_batch_size": 2}
    good = check.compare(est, {"peak_mem_gib": 108.0, "tokens_per_s_per_gpu": 8192 / 1.1}, settings, 4096)
    assert good["memory_error"] == pytest.approx(0.08) and good["step_error"] == pytest.approx(0.1)
    assert good["memory_within_10pct"] and good["step_within_15pct"]
    bad = check.compare(est, {"peak_mem_gib": 85.0, "tokens_per_s_per_gpu": 8192 / 1.2}, settings, 4096)
    assert not bad["memory_within_10pct"] and not bad["step_within_15pct"]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_script_runs_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--plan",
            "cpu",
            "--out",
            str(out),
            "--device",
            "cpu",
            "--seq-len",
            "64",
            "--steps",
            "3",
            "--warmup",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=380,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "estimate-check.json").read_text())
    assert record["plan"] == "cpu" and set(record["runs"]) == {"tiny-tied-noac-mb2", "tiny-fullac-mb2"}
    for run in record["runs"].values():
        assert run["status"] == "ok"
        assert run["measured"]["tokens_per_s_per_gpu"] > 0 and run["measured"]["peak_gib"] is None  # CPU
        assert run["estimated"]["fits"] and run["estimate_assumptions"]
    assert "| tiny-fullac-mb2 |" in done.stdout
