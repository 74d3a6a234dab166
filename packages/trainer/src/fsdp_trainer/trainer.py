"""The training loop: build everything from the config, then step, log, checkpoint and export.

Features that change the model or the optimizer (float8, master weights, fused kernels, activation offloading, the
experiments) are model converters (``fsdp_trainer.converters``): the loop builds the list the config asks for and
calls it at fixed points, without naming any of them. Gradients are clipped one way for every model
(``optim.clip_grad_norm_``).

Loss and gradients: each optimizer step first fetches its micro-batches and
all-reduces their count of non-ignored labels, so the loss is the mean over every
token of the global batch. A rank backpropagates ``loss_sum * dp_size / global_count``;
FSDP averages gradients over the ``dp_size`` data-parallel ranks, which leaves
exactly the gradient of the global mean (the same as one process on the whole
batch). The reported loss is the all-reduced sum over the all-reduced count.

Host syncs: none inside a step, and none between steps. The count of label
tokens is all-reduced on the device; loss and grad norm stay there; a step's
metrics record is written once the next step has been queued, when its values are
ready (``StepClock`` times steps with CUDA events), so the host is a step ahead of
the GPU instead of idling it at every step boundary. Checkpoint, fault-injection, profiled,
garbage-collection and final steps are recorded at once (a sync point). Python's cyclic garbage collector is switched
off during training and run every ``GC_EVERY`` steps instead: an automatic
collection in the middle of a step stalls the host for tens of milliseconds at
an arbitrary point (seen as single slow steps on H200).

Testing aid: ``FSDP_TRAINER_FAULT_AFTER_STEP=<step>`` SIGKILLs every rank right
after that step (and its checkpoint, if one is due) completes.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .checkpoint import Checkpointer, export_hf
from .config import TrainerConfig
from .converters import build_converters
from .data import build_dataloader
from .distributed import DistEnv, build_mesh, shard_group
from .flops import flops_per_token
from .heartbeat import phase
from .materialize import build_model
from .metrics import Metrics
from .model import DTYPES
from .optim import (
    build_grad_scaler,
    build_optimizer,
    build_scheduler,
    clip_grad_norm_,
    describe_optimizer,
)
from .tokenizer import load_tokenizer

log = logging.getLogger(__name__)

FAULT_AFTER_STEP = "FSDP_TRAINER_FAULT_AFTER_STEP"
#: Steps between explicit garbage collections while the automatic collector is off.
GC_EVERY = 50


class StepClock:
    """Step times without stopping the host: CUDA events on GPUs, ``perf_counter`` on CPU.

    A step's time runs from the previous step's end mark (or from a fresh mark after a
    sync point) to its own end mark, so all wall time on the device is counted, including
    any wait for the host.
    """

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start: Any, end: Any) -> float:
        if not self.cuda:
            return end - start
        end.synchronize()
        return start.elapsed_time(end) / 1000.0


@dataclass
class PendingStep:
    """A queued step whose record waits for its results on the device."""

    step: int
    loss: torch.Tensor
    lr: float
    grad_norm: torch.Tensor
    tokens: int
    peak_mem_gib: float | None
    start: Any
    end: Any
    profiled: bool = False


class StepProfiler:
    """``metrics.profile_steps``: a torch.profiler trace of steps A..B on every rank.

    The traced steps are sync points (the trace starts and ends on an idle device), so a
    trace holds exactly those steps. Every rank writes ``trace-rank<R>.json.gz`` (Perfetto or
    chrome://tracing open it); the leader also writes ``kernels.txt``, GPU time by kernel.
    """

    def __init__(self, steps: tuple[int, int] | None, out_dir: Path, env: DistEnv):
        self.first, self.last = steps or (0, -1)
        self.out_dir, self.env = out_dir, env
        self.prof: Any = None

    def covers(self, step: int) -> bool:
        return self.first <= step <= self.last

    def before(self, step: int) -> None:
        """Called before ``step`` runs: starts the trace at the first profiled step (or the first one left after a resume)."""
        if self.prof is not None or not self.covers(step):
            return
        if step != self.first:
            log.info(
                "metrics.profile_steps: the run resumed inside %d-%d; tracing steps %d-%d",
                self.first,
                self.last,
                step,
                self.last,
            )
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.env.device.type == "cuda" else [])
        self._sync()
        self.prof = profile(activities=activities, record_shapes=False, with_stack=False)
        self.prof.start()

    def after(self, step: int) -> None:
        """Called after ``step`` is queued: at the last profiled step, waits for it and writes the trace."""
        if step != self.last or self.prof is None:
            return
        self._sync()
        self.prof.stop()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        trace = self.out_dir / f"trace-rank{self.env.rank}.json.gz"
        self.prof.export_chrome_trace(str(trace))
        if self.env.is_leader:
            sort = "self_device_time_total" if self.env.device.type == "cuda" else "self_cpu_time_total"
            (self.out_dir / "kernels.txt").write_text(self.prof.key_averages().table(sort_by=sort, row_limit=60))
            log.info("profiled steps %d-%d: %s", self.first, self.last, self.out_dir)
        self.prof = None

    def _sync(self) -> None:
        if self.env.device.type == "cuda":
            torch.cuda.synchronize(self.env.device)


class Trainer:
    """One training run on this rank."""

    def __init__(self, cfg: TrainerConfig, env: DistEnv):
        self.cfg, self.env = cfg, env
        self.start_time = time.perf_counter()
        phase("model")
        self.mesh = build_mesh(cfg.parallel, env)
        self.converters = build_converters(cfg, env.device, self.mesh)
        built = build_model(cfg, env, self.mesh, self.converters)
        self.model, self.hf_config = built.model, built.hf_config
        self.shard_group = shard_group(self.mesh)
        self.tokenizer = load_tokenizer(cfg.model.tokenizer) if cfg.model.tokenizer else None
        self.data = build_dataloader(
            cfg.data,
            self.tokenizer,
            self.hf_config.vocab_size,
            cfg.train.micro_batch_size,
            dp_rank=env.rank,
            dp_size=env.world_size,
            device=env.device,
            is_leader=env.is_leader,
            barrier=env.barrier,
        )
        self.optimizer = build_optimizer(self.model, cfg, env.device)
        self.converters.attach_optimizer(self.model, self.optimizer)
        self.scheduler = build_scheduler(self.optimizer, cfg.train)
        self.scaler = build_grad_scaler(cfg, env.device)
        self.checkpointer = Checkpointer(
            cfg.checkpoint,
            env,
            self.model,
            self.optimizer,
            {"data": self.data, "scheduler": self.scheduler, "scaler": self.scaler},
            stage_on_device=cfg.experimental.stage_on_device,
        )
        hf = self.hf_config
        head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
        fpt = flops_per_token(
            built.num_params,
            built.num_embedding_params,
            hf.num_hidden_layers,
            hf.num_attention_heads,
            head_dim,
            cfg.data.seq_len,
        )
        self.metrics = Metrics(
            cfg.metrics.file,
            env.is_leader,
            cfg.train.log_every,
            fpt,
            env.device,
            cfg.metrics.peak_tflops,
            cfg.fp8.enabled,
        )
        if cfg.metrics.prometheus_port:
            from .prometheus_export import serve_metrics

            serve_metrics(self.metrics, cfg.metrics, env)
        self.step = 0
        self.tokens_processed = 0

    def _autocast(self) -> contextlib.AbstractContextManager:
        # FSDP casts parameters itself (MixedPrecisionPolicy / MixedPrecision); the plain model uses autocast.
        dtype = DTYPES[self.cfg.precision.param_dtype or "fp32"]
        if self.cfg.parallel.api != "none" or dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.env.device.type, dtype=dtype)

    def _no_grad_sync(self, last: bool) -> contextlib.AbstractContextManager:
        """Skip the gradient reduction on all but the last micro-step of an accumulation."""
        api = self.cfg.parallel.api
        if api == "fsdp2":
            self.model.set_requires_gradient_sync(last)
        elif api == "fsdp1" and not last:
            return self.model.no_sync()  # keeps unsharded gradients: more memory under full_shard
        return contextlib.nullcontext()

    def _optimizer_step(self) -> bool:
        """Step optimizer, converters and schedule; returns False when the fp16 scaler skipped the step (inf/nan
        gradients).

        A skipped step leaves the weights as they were, so the schedule does not advance
        either (the scaler lowered its scale: compare before and after ``update``; one
        host sync per step, fp16 only).
        """
        stepped = True
        if self.cfg.checkpoint.enabled:
            self.checkpointer.before_update()  # a background save has finished copying the weights it saves
        if self.scaler is not None:
            scale_before = self.scaler.get_scale()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            stepped = self.scaler.get_scale() >= scale_before
        else:
            self.optimizer.step()
        if stepped:
            self.converters.post_optimizer_hook(self.model)
        self.optimizer.zero_grad(set_to_none=True)
        if stepped:
            self.scheduler.step()
        else:
            log.warning(
                "step %d: fp16 gradients overflowed; optimizer step skipped, grad scale lowered to %g",
                self.step + 1,
                self.scaler.get_scale(),
            )
        return stepped

    def train_step(self) -> tuple[torch.Tensor, torch.Tensor, int]:
        """One optimizer step over ``grad_accum_steps`` micro-batches.

        :return: (global mean loss, grad norm) as device tensors, and the tokens this rank consumed.
        """
        accum = self.cfg.train.grad_accum_steps
        phase("data", self.step + 1)
        batches = [self.data.next_batch() for _ in range(accum)]
        # The global count of label tokens, all-reduced on the device: the host does not wait for it.
        # torch.full fills on the device (the value travels as a kernel argument): no host-to-device copy to wait for.
        global_count = torch.full(
            (), float(sum(b.num_targets for b in batches)), dtype=torch.float64, device=self.env.device
        )
        if self.env.world_size > 1:
            torch.distributed.all_reduce(global_count)
        global_count = global_count.clamp(min=1.0)
        scale = self.env.world_size / global_count
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.env.device)
        for i, batch in enumerate(batches):
            with self._no_grad_sync(i == accum - 1):
                phase("forward")
                with self._autocast():
                    micro_loss, _ = self.model(batch.input_ids, batch.labels)
                backward_loss = micro_loss * scale
                if self.scaler is not None:
                    backward_loss = self.scaler.scale(backward_loss)
                phase("backward")
                backward_loss.backward()
            loss_sum += micro_loss.detach().double()
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        phase("clip")
        grad_norm = clip_grad_norm_(self.model.parameters(), self.cfg.train.max_grad_norm, self.shard_group)
        phase("optimizer")
        self._optimizer_step()
        phase("loss")
        dist_loss = loss_sum.clone()
        if self.env.world_size > 1:
            torch.distributed.all_reduce(dist_loss)  # queued on the device; read after the step's sync
        tokens = sum(b.input_ids.numel() for b in batches)
        return dist_loss / global_count, grad_norm, tokens

    def fit(self) -> dict[str, Any]:
        """Resume if asked, train to ``train.steps``, save, export; returns the summary (leader prints it)."""
        cfg, env = self.cfg, self.env
        if cfg.checkpoint.enabled:
            self.checkpointer.take_ownership(cfg)  # one run per checkpoint.dir (ownership.py): before it is touched
            self.checkpointer.clean_partial()
            phase("resume")
            resume = self.checkpointer.find_resume()
            if resume is not None:
                self.step = self.checkpointer.load(resume)
                if cfg.checkpoint.resume != "auto":  # an explicit resume abandons the later checkpoints (checkpoint.py)
                    self.checkpointer.prune_newer_than(self.step)
        self.metrics.open(self.step)
        self.model.train()
        fault_step = int(os.environ.get(FAULT_AFTER_STEP, "0"))
        every = cfg.checkpoint.every_steps
        nothing_to_do = self.step >= cfg.train.steps
        if nothing_to_do:  # a finished run relaunched: no training, no second export
            log.info(
                "nothing to train: resumed at step %d and train.steps is %d; skipping training and export",
                self.step,
                cfg.train.steps,
            )
        gc.disable()
        gc.collect()
        try:
            self._train_loop(fault_step, every)
        finally:
            gc.enable()
        if cfg.checkpoint.enabled:
            self.checkpointer.close()  # the last save, if asynchronous, is written before the run ends
        if cfg.checkpoint.export_hf and not nothing_to_do:
            export_hf(
                self.model,
                self.hf_config,
                self.tokenizer,
                cfg.checkpoint.export_hf,
                cfg.checkpoint.export_dtype or "fp32",
                env,
                self.optimizer,
            )
        (tokens_processed,) = env.all_reduce_sum([self.tokens_processed])
        summary = self.metrics.summary(
            cfg.metrics.warmup_steps,
            world_size=env.world_size,
            tokens_processed=int(tokens_processed),
            wall_time_s=time.perf_counter() - self.start_time,
            config=cfg.to_dict(),
            auto=cfg.auto_choice,
            **describe_optimizer(self.optimizer),
            **self.converters.summary(),
            **self._checkpoint_summary(),
        )
        if env.is_leader:
            out = Path(cfg.train.output_dir)
            out.mkdir(parents=True, exist_ok=True)
            (out / "summary.json").write_text(json.dumps(summary, indent=1))
        self.metrics.close()
        return summary

    def _checkpoint_summary(self) -> dict[str, Any]:
        """What the saves cost: seconds each one kept training waiting, the final wait for the last one, and for
        asynchronous saves where those seconds went (``Checkpointer.timings``)."""
        ck = self.checkpointer
        if not self.cfg.checkpoint.enabled or not ck.blocking_s:
            return {}
        return {
            "checkpoint": {
                "async": bool(ck._async),
                "saves": len(ck.blocking_s),
                "blocking_s": [round(s, 4) for s in ck.blocking_s],
                "final_wait_s": round(ck.final_wait_s, 4),
                **{k: [round(s, 4) for s in v] for k, v in ck.timings.items() if v},
                **({"staged_on": "device" if ck.staged_on_device else "host"} if ck.timings["stage_s"] else {}),
                **({"store_advice": ck.advice} if ck.advice else {}),
            }
        }

    def _train_loop(self, fault_step: int, every: int) -> None:
        """Train to ``train.steps``. Each step's record is written once the *next* step is queued (see the module docstring)."""
        cfg = self.cfg
        clock = StepClock(self.env.device)
        profiler = StepProfiler(cfg.metrics.profile_range(), Path(cfg.train.output_dir) / "profile", self.env)
        pending: PendingStep | None = None
        mark = None
        while self.step < cfg.train.steps:
            if profiler.covers(self.step + 1) and pending is not None:  # a traced step starts on an idle device
                self._record(pending, clock)
                pending = None
            profiler.before(self.step + 1)
            if pending is None:  # after a sync point (start, checkpoint, collection): time from here
                mark = clock.mark()
            lr = self.optimizer.param_groups[0]["lr"]
            self.metrics.start_step()
            try:
                loss, grad_norm, tokens = self.train_step()
            except Exception:  # the previous step did finish: write its record before the error goes on
                if pending is not None:
                    with contextlib.suppress(Exception):
                        self._record(pending, clock)
                raise
            peak = (
                self.metrics.peak_mem_gib()
            )  # the allocator's count is kept on the host: read it before the next step resets it
            self.step += 1
            self.tokens_processed += tokens
            step = PendingStep(
                self.step, loss, lr, grad_norm, tokens, peak, mark, clock.mark(), profiler.covers(self.step)
            )
            mark = step.end
            if pending is not None:
                self._record(pending, clock)  # waits for the previous step only: this one is queued behind it
            pending = step
            checkpoint_due = cfg.checkpoint.enabled and (
                self.step == cfg.train.steps or (every and self.step % every == 0)
            )
            profiler.after(self.step)
            sync_point = profiler.covers(self.step) or self.step % GC_EVERY == 0 or self.step == cfg.train.steps
            if checkpoint_due or self.step == fault_step or sync_point:
                self._record(pending, clock)
                pending = None
            if checkpoint_due:
                phase("checkpoint", self.step)
                self.checkpointer.save(self.step)
            elif cfg.checkpoint.enabled:
                self.checkpointer.poll()  # a background save that failed fails the run here, with its cause
            if self.step == fault_step:
                if cfg.checkpoint.enabled:
                    self.checkpointer.wait()  # "after the step and its checkpoint", asynchronous or not
                log.warning("%s=%d: killing this process", FAULT_AFTER_STEP, fault_step)
                os.kill(os.getpid(), signal.SIGKILL)
            if self.step % GC_EVERY == 0:
                gc.collect(1)
        if pending is not None:
            self._record(pending, clock)

    def _record(self, step: PendingStep, clock: StepClock) -> None:
        step_time = clock.seconds(step.start, step.end)  # waits for the step's end on the device
        self.metrics.end_step(
            step.step,
            step.loss.item(),
            step.lr,
            step.grad_norm.item(),
            step.tokens,
            step_time,
            peak_mem_gib=step.peak_mem_gib,
            profiled=step.profiled,
        )
