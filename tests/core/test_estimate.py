"""``fsdp-sdk estimate`` and ``Client.estimate``: the trainer's model against peaks measured on H200s, speed, cost,
scaling and ``--recommend``; the estimate where users already are (``up --dry-run``, refusals); bad inputs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp_sdk.client import Client
from fsdp_sdk.errors import ConfigError
from fsdp_sdk.estimate import EstimateUnavailable, parse_tokens, read_model

from .conftest import FSDP_SDK

H200 = "p5en.48xlarge"
SEQ = 4096

# Peaks measured on H200s (torch.cuda.max_memory_allocated, GiB), FSDP2 unless said, seq 4096, bf16, the trainer's
# defaults of the time (fused loss; fused kernels for eager runs): (label, model, GPUs, trainer settings, measured
# GiB, record under bench/results/ and its variant).
MEASURED_PEAKS = [
    ("7B eager mb1", "llama2-7b", 2, {}, 58.7, "2026-11-30-h200x2-fused-kernels.json fsdp2-noac-mb1"),
    (
        "7B eager mb2",
        "llama2-7b",
        2,
        {"train.micro_batch_size": 2},
        78.3,
        "2026-11-30-h200x2-fused-kernels.json fsdp2-noac-mb2",
    ),
    (
        "7B eager full AC mb1",
        "llama2-7b",
        2,
        {"ac.mode": "full"},
        51.9,
        "2026-11-30-h200x2-fused-kernels.json fsdp2-ac-mb1",
    ),
    (
        "7B eager full AC mb2",
        "llama2-7b",
        2,
        {"ac.mode": "full", "train.micro_batch_size": 2},
        52.7,
        "2026-11-30-h200x2-fused-kernels.json fsdp2-ac-mb2",
    ),
    (
        "7B FSDP1 full AC mb1",
        "llama2-7b",
        2,
        {"parallel.api": "fsdp1", "ac.mode": "full"},
        51.7,
        "2026-11-30-h200x2-fused-kernels.json fsdp1-ac-mb1",
    ),
    (
        "7B compiled mb3",
        "llama2-7b",
        2,
        {"compiled": 3},
        88.8,
        "2026-11-30-h200x2-7b-fp8-throughput-2.json fsdp2-noac-mb3-compile",
    ),
    (
        "7B compiled mb4",
        "llama2-7b",
        2,
        {"compiled": 4},
        105.4,
        "2026-11-30-h200x2-fused-loss-micro-batches.json fsdp2-noac-mb4-compile",
    ),
    ("7B compiled mb3, 1 GPU", "llama2-7b", 1, {"compiled": 3}, 125.8, "2026-11-30-h200x2-scaling-1-to-2-gpus.json x1"),
    (
        "8B compiled mb3",
        "llama3.1-8b",
        2,
        {"compiled": 3},
        110.0,
        "2026-11-30-h200x2-fused-kernels.json 8b-...-mb3-compile",
    ),
    (
        "8B compiled mb2, no resharding",
        "llama3.1-8b",
        2,
        {"compiled": 2, "parallel.reshard_after_forward": False},
        104.1,
        "2026-11-30-h200x2-8b-nccl-ctas-and-resharding.json 8b-...-mb2-compile-noreshard",
    ),
    (
        "8B --auto's mb5, budget 0.7",
        "llama3.1-8b",
        2,
        {"compiled": 5, "compile.memory_budget": 0.7},
        111.3,
        "2026-12-01-h200x2-speed-suite.json 8b-auto",
    ),
    (
        "8B mb6, budget 0.7, bf16 reduction",
        "llama3.1-8b",
        2,
        {"compiled": 6, "compile.memory_budget": 0.7, "precision.reduce_dtype": "bf16"},
        122.9,
        "2026-11-30-h200x2-speed-suite-3.json 8b-...-mb6-...-bf16reduce-symm-budget7",
    ),
    (
        "7B mb6, budget 0.7, bf16 reduction",
        "llama2-7b",
        2,
        {"compiled": 6, "compile.memory_budget": 0.7, "precision.reduce_dtype": "bf16"},
        109.7,
        "2026-11-30-h200x2-speed-suite-3.json fsdp2-noac-mb6-...-budget7",
    ),
    (
        "7B FP8 mb6, bf16 reduction",
        "llama2-7b",
        2,
        {"compiled": 6, "fp8.enabled": True, "fp8.all_gather": True, "precision.reduce_dtype": "bf16"},
        113.7,
        "2026-11-30-h200x2-speed-suite-1.json fsdp2-noac-mb6-compile-fp8-bf16reduce-symm",
    ),
]


RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def _master_weights(record: str) -> str:
    """How the recorded run kept its master weights: ``optimizer`` or ``params`` (runs from before the trainer could
    keep them in the optimizer recorded nothing, and kept fp32 parameters)."""
    name, variant = record.split(" ", 1)
    pattern = re.compile("^" + ".*".join(map(re.escape, variant.split("..."))) + "$")
    data = json.loads((RESULTS / name).read_text())
    runs = data["records"] if isinstance(data, dict) else data
    found = [run for run in runs if pattern.match(str(run.get("variant", run.get("label", ""))).split()[-1])]
    assert found, f"no variant {variant!r} in {name}"
    return str(found[0].get("master_weights", "params"))


def _overrides(settings: dict, record: str | None = None) -> dict:
    out = {"data.seq_len": SEQ, **settings}
    if record is not None:
        out.setdefault("precision.master_weights", _master_weights(record))
    mb = out.pop("compiled", None)
    if mb is not None:
        out.update({"compile.enabled": True, "compile.loss": True, "train.micro_batch_size": mb})
    return out


@pytest.fixture
def client() -> Client:
    return Client.from_sources(overrides={"cluster.instance_type": H200}, read_default_env_file=False)


@pytest.mark.parametrize(
    "label, model, gpus, settings, measured, record", MEASURED_PEAKS, ids=[m[0] for m in MEASURED_PEAKS]
)
def test_estimate_reproduces_peaks_measured_on_h200s(client, label, model, gpus, settings, measured, record):
    est = client.estimate(
        model=model, nodes=1, gpus_per_node=gpus, trainer_overrides=_overrides(settings, record), scaling=False
    )
    assert est.memory.peak_gib == pytest.approx(measured, rel=0.10), (label, record)
    assert est.memory.device_gib == 141 and est.memory.usable_gib == pytest.approx(141 * 0.85)


def test_auto_in_the_estimate_is_the_trainers_auto(client):
    """One model: the estimate's --auto choice is what the trainer's apply_auto chooses on the same GPUs."""
    from fsdp_trainer.autotune import GiB, apply_auto
    from fsdp_trainer.config import load_config
    from fsdp_trainer.presets import PRESETS

    est = client.estimate(
        model="llama3.1-8b", nodes=1, gpus_per_node=2, trainer_overrides={"auto.enabled": True, "data.seq_len": SEQ}
    )
    cfg = load_config(None, ["--model.preset", "llama3.1-8b", "--data.seq_len", str(SEQ), "--auto.enabled", "true"])
    record = apply_auto(
        cfg,
        PRESETS["llama3.1-8b"](),
        world_size=2,
        local_world_size=2,
        device_bytes=141 * GiB,
        on_gpu=True,
        master_weights=True,
    )
    assert est.auto is not None and est.auto["chosen"] == record["chosen"]
    assert est.settings["micro_batch_size"] == cfg.train.micro_batch_size == 5
    assert est.settings["memory_budget"] == 0.7 and est.settings["compile"]
    assert est.memory.peak_gib == pytest.approx(record["estimated_peak_gib"], abs=0.1)
    # at the settings the MFU was measured at, the estimate computes at that MFU (59.4%, stated as measured)
    assert est.speed.compute_mfu == pytest.approx(0.594)
    assert "measured 59.4% on H200" in est.speed.mfu_basis
    assert est.memory.peak_gib == pytest.approx(111.3, rel=0.05)  # s13 call A, the trainer's --auto run


def test_speed_cost_and_scaling_hang_together(client):
    est = client.estimate(
        model="llama2-70b",
        nodes=16,
        instance_type="p4de.24xlarge",
        trainer_overrides={"ac.mode": "full", "data.seq_len": SEQ, "compile.enabled": True, "compile.loss": True},
        tokens=2e9,
    )
    sp, cost = est.speed, est.cost
    assert est.gpus == 128 and est.settings["shard_degree"] == 128 and est.gpu_model == "A100"
    assert est.memory.fits and est.memory.device_gib == 80
    assert sp.tokens_per_step == 128 * SEQ and sp.tokens_per_s == pytest.approx(sp.tokens_per_step / sp.step_s)
    assert sp.step_s == pytest.approx(sp.compute_s + sp.exposed_communication_s)
    assert 0 < sp.exposed_communication_s < sp.communication_s
    assert {c["kind"] for c in sp.collectives} == {"all-gather", "reduce-scatter"}
    assert cost.usd_per_hour == pytest.approx(16 * 27.45)
    assert cost.usd_per_billion_tokens == pytest.approx(cost.usd_per_hour / (sp.tokens_per_s * 3600) * 1e9)
    assert cost.hours_to_train == pytest.approx(2e9 / sp.tokens_per_s / 3600)
    assert cost.usd_to_train == pytest.approx(2 * cost.usd_per_billion_tokens)
    assert any("not measured on A100" in a for a in est.assumptions)
    assert [p.nodes for p in est.scaling] == [1, 2, 4, 8, 16]
    assert est.scaling[0].efficiency == 1.0 and not est.scaling[0].fits and est.scaling[-1].fits
    effs = [p.efficiency for p in est.scaling]
    assert effs == sorted(effs, reverse=True) and 0.5 < effs[-1] < 1.0
    assert est.scaling[-1].tokens_per_s == pytest.approx(sp.tokens_per_s)
    # p5's network: the same job scales better, and an instance type without a price says so
    p5 = client.estimate(
        model="llama2-70b", nodes=16, instance_type="p5.48xlarge", trainer_overrides={"ac.mode": "full"}
    )
    assert p5.scaling[-1].efficiency > est.scaling[-1].efficiency
    # a network that reaches less of its nominal bandwidth scales worse (what a measured sweep calibrates)
    slower = client.estimate(
        model="llama2-70b",
        nodes=16,
        instance_type="p5.48xlarge",
        trainer_overrides={"ac.mode": "full"},
        network_efficiency=0.2,
    )
    assert slower.scaling[-1].efficiency < p5.scaling[-1].efficiency and "20% of 3200 Gbit/s" in " ".join(
        slower.assumptions
    )
    p5e = client.estimate(model="llama2-7b", nodes=1, instance_type="p5e.48xlarge")
    assert p5e.cost.usd_per_hour is None and p5e.cost.usd_per_billion_tokens is None
    assert "no on-demand price" in p5e.cost.price_note


def test_every_sharding_strategy_and_api(client):
    common = {"model": "llama2-13b", "nodes": 2, "instance_type": "p5.48xlarge"}
    peaks, speeds = {}, {}
    for sharding in ("full_shard", "hybrid_shard", "shard_grad_op", "no_shard"):
        est = client.estimate(
            **common, trainer_overrides={"parallel.sharding": sharding, "ac.mode": "full"}, scaling=False
        )
        peaks[sharding], speeds[sharding] = est.memory.peak_gib, est.speed
    assert peaks["full_shard"] < peaks["hybrid_shard"] < peaks["no_shard"]
    assert peaks["full_shard"] < peaks["shard_grad_op"]
    assert {c["kind"] for c in speeds["hybrid_shard"].collectives} == {"all-gather", "reduce-scatter", "all-reduce"}
    assert [c["kind"] for c in speeds["no_shard"].collectives] == ["all-reduce"]
    fsdp1 = client.estimate(**common, trainer_overrides={"parallel.api": "fsdp1"}, scaling=False)
    assert fsdp1.settings["api"] == "fsdp1" and fsdp1.settings["master_weights"] == "params"


def test_a_config_json_is_read_without_transformers(client, tmp_path: Path):
    spec = {
        "model_type": "llama",
        "vocab_size": 128256,
        "hidden_size": 3072,
        "intermediate_size": 8192,
        "num_hidden_layers": 28,
        "num_attention_heads": 24,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "tie_word_embeddings": True,
    }
    (tmp_path / "config.json").write_text(json.dumps(spec))
    for model in (str(tmp_path), str(tmp_path / "config.json")):
        est = client.estimate(model=model, nodes=1, scaling=False)
        assert est.model.source == "config.json" and est.params == pytest.approx(3.21e9, rel=0.01)
    code = f"import sys; from fsdp_sdk.estimate import read_model; read_model({str(tmp_path)!r}); print('transformers' in sys.modules, 'torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split() == [
        "False",
        "False",
    ]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    with pytest.raises(ConfigError, match="has no positive integer vocab_size"):
        read_model(str(tmp_path / "bad"))
    with pytest.raises(EstimateUnavailable, match=r"huggingface-cli download meta-llama/Llama-2-7b-hf config\.json"):
        read_model("meta-llama/Llama-2-7b-hf")


def test_recommend_ranks_what_fits_fastest_first(client):
    found = client.recommend(
        model="llama3.1-8b", nodes=1, trainer_overrides={"data.seq_len": SEQ, "compile.enabled": True}
    )
    assert found and all(e.memory.fits for e in found)
    speeds = [round(e.speed.tokens_per_s) for e in found]
    assert speeds == sorted(speeds, reverse=True)
    assert {e.settings["sharding"] for e in found} <= {"full_shard", "shard_grad_op", "no_shard"}
    assert found[0].settings["ac_mode"] == "none" and found[0].settings["micro_batch_size"] >= 4
    nothing = client.recommend(model="llama2-70b", nodes=1, instance_type="g5.48xlarge")
    assert nothing == []


def test_the_trainer_missing_is_one_line_naming_the_install(client, monkeypatch):
    monkeypatch.setitem(sys.modules, "fsdp_trainer", None)
    monkeypatch.setitem(sys.modules, "fsdp_trainer.autotune", None)
    with pytest.raises(EstimateUnavailable) as err:
        client.estimate(model="llama2-7b")
    assert str(err.value) == (
        "estimate: the memory and speed model comes with the trainer (fsdp-trainer), which is not installed here; "
        "pip install 'fsdp-sdk[local]'"
    )


def test_the_command_without_the_trainer_says_how_to_get_it(invoke, monkeypatch):
    monkeypatch.setitem(sys.modules, "fsdp_trainer", None)
    result = invoke("estimate", "--model", "llama2-7b")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert result.stderr.endswith("pip install 'fsdp-sdk[local]'\n")


def test_tokens_and_mfu_inputs():
    assert parse_tokens("300B") == 3e11 and parse_tokens("2T") == 2e12 and parse_tokens("1e9") == 1e9
    assert parse_tokens("1_000_000") == 1e6
    for bad in ("", "abc", "-5", "0", "1X"):
        with pytest.raises(ConfigError):
            parse_tokens(bad)


# ----------------------------------------------------------------------------- the command


def test_estimate_command_table_and_json(invoke):
    args = ["estimate", "--model", "llama2-70b", "--instance-type", "p5.48xlarge", "--nodes", "16", "--ac", "full"]
    result = invoke(*args, "--seq-len", "4096", "--compile", "--tokens", "300B")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert out.startswith("llama2-70b (69.0B) on 16 x p5.48xlarge = 128 GPUs, fsdp2 full_shard")
    for text in (
        "MEMORY PER GPU, GIB",
        "optimizer state (shard)",
        "unsharded blocks in flight",
        "activations",
        "fits,",
        "tokens/s",
        "MFU",
        "time to train 300B tokens",
        "per billion tokens",
        "weak scaling",
        "EFFICIENCY",
        "assumptions:",
        "not measured on H100",
    ):
        assert text in out, text
    data = json.loads(invoke(*args, "--json", "--", "--data.seq_len", "4096").stdout)
    assert data["nodes"] == 16 and data["settings"]["seq_len"] == 4096 and data["memory"]["fits"] is True
    assert data["speed"]["tokens_per_s"] > 0 and data["cost"]["usd_per_hour"] == pytest.approx(16 * 55.04)
    assert len(data["scaling"]) == 5
    recommended = json.loads(invoke(*args, "--recommend", "--top", "3", "--json").stdout)
    assert len(recommended["candidates"]) == 3 and recommended["fitting"] >= 3
    text = invoke(*args, "--recommend", "--top", "3").stdout
    assert "combinations fit, fastest first" in text and "SHARDING" in text


def test_a_plugin_instance_type_is_estimated(invoke, example_plugin):
    data = json.loads(
        invoke("estimate", "--model", "llama2-70b", "--instance-type", "p6-b200.48xlarge", "--json").stdout
    )
    assert data["gpu_model"] == "B200" and data["memory"]["device_gib"] == 180
    assert any("not measured on B200" in a for a in data["assumptions"])


@pytest.mark.parametrize(
    "args, names",
    [
        (["--model", "llama9-1t"], "model: unknown model 'llama9-1t'"),
        (["--model", "meta-llama/Llama-2-7b-hf"], "huggingface-cli download"),
        (["--instance-type", "p9.48xlarge"], "unknown instance type 'p9.48xlarge'"),
        (["--sharding", "zero3"], "'zero3' is not one of"),
        (["--nodes", "0"], "--nodes"),
        (["--mfu", "1.5"], "mfu: 1.5 is not a fraction"),
        (["--network-efficiency", "0"], "network efficiency: 0.0 is not a fraction"),
        (["--tokens", "lots"], "--tokens: 'lots' is not a number of tokens"),
        (["--fp8", "--instance-type", "p4de.24xlarge"], "no float8 tensor cores"),
        (["--", "--parallel.sharding", "hybrid_shard", "--parallel.shard_size", "3"], "shard_size 3"),
    ],
)
def test_bad_inputs_are_one_line_exit_2(invoke, args, names):
    result = invoke("estimate", "--model", "llama2-7b", *args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert names in result.stderr
    assert result.stderr.count("\n") == 1 and result.stdout == ""


def test_estimate_imports_no_torch():
    result = subprocess.run(
        [sys.executable, "-X", "importtime", FSDP_SDK, "estimate", "--model", "llama2-7b", "--json"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    modules = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "fsdp_trainer.autotune" in modules, "the importtime output was not parsed"
    assert not {m.split(".")[0] for m in modules} & {"torch", "transformers", "numpy", "boto3", "kubernetes", "yaml"}


# ----------------------------------------------------------------------------- where users already are


def test_up_dry_run_shows_the_estimate_when_a_model_is_given(invoke):
    plain = invoke("up", "--dry-run", "--set", "job.rdzv_backend=c10d")
    assert plain.exit_code == 0 and "Estimate for" not in plain.stdout
    args = ["up", "--dry-run", "--set", "job.rdzv_backend=c10d", "--set", "model.preset=llama2-70b"]
    args += ["--set", "cluster.instance_type=p4de.24xlarge", "--set", "job.num_workers=4", "--set", "ac.mode=full"]
    shown = invoke(*args)
    assert shown.exit_code == 0, shown.stderr
    assert "Estimate for llama2-70b (69.0B) on 4 x p4de.24xlarge, full_shard" in shown.stdout
    assert "memory per GPU:" in shown.stdout and "per billion tokens" in shown.stdout
    plan = json.loads(invoke(*args, "--json").stdout)["plan"]
    assert plan["estimate"]["nodes"] == 4 and plan["estimate"]["memory"]["fits"] is True
    hub = invoke(
        "up",
        "--dry-run",
        "--set",
        "job.rdzv_backend=c10d",
        "--set",
        "model.name_or_path=meta-llama/Llama-2-7b-hf",
        "--set",
        "data.source=synthetic",
    )
    assert hub.exit_code == 0 and "estimate skipped" in hub.stderr and "Estimate for" not in hub.stdout


@pytest.mark.parametrize("day, control_plane", [("2026-12-02", 0.10), ("2026-12-03", 0.60)])
def test_an_eks_cluster_adds_its_control_plane_at_the_price_of_its_support_state(
    monkeypatch: pytest.MonkeyPatch, day: str, control_plane: float
) -> None:
    import datetime

    from fsdp_sdk import pins

    monkeypatch.setattr(pins, "today", lambda: datetime.date.fromisoformat(day))
    eks = Client.from_sources(
        overrides={"cluster.backend": "eksctl", "cluster.kubernetes_version": "1.34"}, read_default_env_file=False
    )
    est = eks.estimate(model="llama2-7b", nodes=2, instance_type="p4de.24xlarge", scaling=False)
    assert est.cost.usd_per_hour == pytest.approx(2 * 27.45 + control_plane)
    assert f"the EKS control plane, ${control_plane:.2f}/h (Kubernetes 1.34" in est.cost.price_note
    monkeypatch.setattr(pins, "today", lambda: datetime.date(2027, 12, 3))  # past extended support: refused
    with pytest.raises(ConfigError, match=r"^cluster.kubernetes_version: Kubernetes 1.34 left EKS extended support"):
        eks.estimate(model="llama2-7b", nodes=2, instance_type="p4de.24xlarge", scaling=False)


def test_estimate_json_of_a_cluster_backend_carries_the_control_plane_price_of_extended_support(
    invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datetime

    from fsdp_sdk import pins

    monkeypatch.setattr(pins, "today", lambda: datetime.date(2026, 12, 3))  # 1.34's standard support ended 12-02
    args = ["estimate", "--model", "llama2-7b", "--instance-type", "p4de.24xlarge", "--nodes", "2"]
    cluster = [*args, "--set", "cluster.backend=eksctl", "--set", "cluster.kubernetes_version=1.34"]
    result = invoke(*cluster, "--json")
    assert result.exit_code == 0, result.stderr
    cost = json.loads(result.stdout)["cost"]
    assert cost["control_plane"] == {
        "kubernetes_version": "1.34",
        "support": "extended",
        "usd_per_hour": 0.6,
        "on": "2026-12-03",
        "until": "2027-12-02",
    }
    assert cost["usd_per_hour"] == pytest.approx(2 * 27.45 + 0.6)
    text = invoke(*cluster)
    assert (
        "plus the EKS control plane, $0.60/h (Kubernetes 1.34, extended support on 2026-12-03, until 2027-12-02)"
        in text.stdout
    )
    assert "warning: Kubernetes 1.34 is in EKS extended support until 2027-12-02" in text.stderr
    local = json.loads(invoke(*args, "--json").stdout)["cost"]  # the local backend runs no control plane
    assert local["control_plane"] is None and local["usd_per_hour"] == pytest.approx(2 * 27.45)


@pytest.mark.parametrize("compiled", [False, True])
def test_recommend_prints_the_flags_that_apply_its_top_row(invoke, compiled):
    args = ["estimate", "--model", "llama3.1-8b", "--instance-type", "p5.48xlarge", "--nodes", "2", "--seq-len", "4096"]
    args += ["--compile"] if compiled else []
    text = invoke(*args, "--recommend", "--top", "2").stdout
    assert "budget: compile.memory_budget, the share of activation memory compiled blocks keep" in text
    apply = next(line for line in text.splitlines() if line.startswith("apply #1: fsdp-sdk run [options] -- "))
    flags = apply.split(" -- ", 1)[1].split()
    assert flags[:2] == ["--parallel.sharding", flags[1]] and "--train.micro_batch_size" in flags
    assert ("--compile.memory_budget" in flags) == compiled
    sets = next(line for line in text.splitlines() if line.startswith("  (on any command"))
    assert "--set parallel.sharding=" in sets and "--set train.micro_batch_size=" in sets
    top = json.loads(invoke(*args, "--recommend", "--top", "1", "--json").stdout)["candidates"][0]
    assert top["trainer_args"] == flags
    # the flags give exactly the top row
    applied = json.loads(invoke(*args, "--json", "--", *flags).stdout)
    if top["settings"]["ac_mode"] != "selective":  # ac.every means nothing then
        applied["settings"].pop("ac_every"), top["settings"].pop("ac_every")
    assert applied["settings"] == top["settings"] and applied["memory"]["peak_gib"] == top["memory"]["peak_gib"]
    assert applied["speed"]["tokens_per_s"] == pytest.approx(top["speed"]["tokens_per_s"])
