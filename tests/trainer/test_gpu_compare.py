"""``bench/gpu_compare.py``: every variant is a trainer command that parses, and what ``--telemetry`` makes of
nvidia-smi's samples (the GPU runs use it as is)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import gpu_compare


def test_busy_samples_decide_the_medians():
    text = "\n".join(
        [
            "0, 1980, 80.5, 0x0000000000000001",  # start-up: idle, full clock
            "1, 1980, 90.0, 0x0000000000000001",
            "0, 1455, 690.0, 0x0000000000000004",  # training at the power cap
            "1, 1440, 692.0, 0x0000000000000004",
            "0, 1470, 688.0, 0x0000000000000004",
            "1, [N/A], 690.0, 0x0000000000000004",  # a field nvidia-smi could not read: skipped
            "0, 1500, 400.0, 0x0000000000000000",
        ]
    )
    s = gpu_compare.smi_summary(text)
    assert s["telemetry_samples"] == 4 and s["power_w_max"] == 692.0
    assert s["sm_clock_mhz_median"] == 1462.5 and s["power_w_median"] == 689.0
    assert s["clock_event_reasons"] == "0x0000000000000004"
    row = gpu_compare.table(
        [{"variant": "v", "ok": True, "tokens_per_s_per_gpu": 1.0, "tflops_per_gpu": 1.0, "mfu": 0.5, **s}]
    )
    assert row.splitlines()[-1].endswith("| 1462, 689 (0x0000000000000004) |")


def test_no_samples_is_reported_not_raised():
    s = gpu_compare.smi_summary('Field "clocks_event_reasons.active" is not a valid field to query.\n')
    assert s == {"telemetry_error": 'Field "clocks_event_reasons.active" is not a valid field to query.'}


def test_telemetry_without_nvidia_smi_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(gpu_compare.shutil, "which", lambda name: None)
    monkeypatch.setattr(sys, "argv", ["gpu_compare.py", "--telemetry", "--only", "smoke-fsdp2"])
    with pytest.raises(SystemExit) as exit_:
        gpu_compare.main()
    assert exit_.value.code == 2
    assert "--telemetry: nvidia-smi is not on PATH" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(gpu_compare.TRAINER_VARIANTS))
def test_every_trainer_variant_is_a_valid_config(name):
    from fsdp_trainer.config import load_config

    overrides = {**gpu_compare.BASE, **gpu_compare.TRAINER_VARIANTS[name]}
    flags = [part for key, value in overrides.items() for part in (f"--{key}", value.replace("{tt_assets}", "/tt"))]
    load_config(None, flags)


def test_suites_name_known_variants():
    known = {**gpu_compare.TRAINER_VARIANTS, **gpu_compare.TORCHTITAN_VARIANTS, **gpu_compare.ACCELERATE_VARIANTS}
    for suite, names in gpu_compare.SUITES.items():
        assert set(names) <= set(known), suite


def test_every_variant_reproduces_a_reported_figure():
    """A variant stays only while a report (or the current-best table) names it, alone or through a suite."""
    bench = Path(gpu_compare.__file__).resolve().parent
    text = "".join(p.read_text() for p in (bench / "reports").glob("*.md")) + (bench / "README.md").read_text()
    cited_suites = {name for name in gpu_compare.SUITES if f"--suite {name}" in text}
    in_suites = {v for name in cited_suites for v in gpu_compare.SUITES[name]}
    known = {**gpu_compare.TRAINER_VARIANTS, **gpu_compare.TORCHTITAN_VARIANTS, **gpu_compare.ACCELERATE_VARIANTS}
    assert sorted(n for n in known if n not in text and n not in in_suites) == []
