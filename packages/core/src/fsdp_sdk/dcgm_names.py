"""The names DCGM exporter metrics go by: the ones before dcgm-exporter 4.9 and the ones 4.9 renamed them to.

dcgm-exporter 4.9.0 renamed the default fields DCGM 4.7 deprecates to their new DCGM names, and some changed unit
(its release notes: "clocks from MHz to hertz, energy from millijoules to joules, utilization from a percentage to
a 0 to 1 ratio, GPU memory from MiB to bytes, and NVLink throughput from MB/s to bytes per second"), and the node
label ``Hostname`` became ``hostname`` (NVIDIA/dcgm-exporter d5e5f51, #655). The new names are DCGM's own: the
canonical names of the same field ids in go-dcgm's ``pkg/dcgm/const_fields.go`` (NVIDIA/go-dcgm b7fa315), whose
legacy-name map lists the old ones; the clock and energy fields that changed unit are new field ids of their own
there (``DCGM_FI_DEV_SM_CLOCK_HERTZ`` 1603, ``DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL`` 1611).

Everything that reads DCGM series (the report's Prometheus source, the Grafana dashboard) reads both names and
turns the new unit into the old one with :data:`RENAMED`'s factor, so a cluster running either exporter (ours,
pinned, or a GPU Operator's newer one) gives the same figures.
"""

from __future__ import annotations

__all__ = ["HOST_LABELS", "RENAMED", "either", "host_of", "names_of"]

#: Old name -> (dcgm-exporter 4.9's name, factor from the new unit to the old one).
RENAMED: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("DCGM_FI_DEV_GPU_UTIL_RATIO", 100.0),  # field 203: a 0-1 ratio, was percent
    "DCGM_FI_DEV_SM_CLOCK": ("DCGM_FI_DEV_SM_CLOCK_HERTZ", 1e-6),  # 1603: Hz, was MHz (field 100)
    "DCGM_FI_DEV_MEM_CLOCK": ("DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", 1e-6),  # 1604: Hz, was MHz (101)
    "DCGM_FI_DEV_GPU_TEMP": ("DCGM_FI_DEV_GPU_TEMP_CELSIUS", 1.0),  # 150
    "DCGM_FI_DEV_MEMORY_TEMP": ("DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", 1.0),  # 140
    "DCGM_FI_DEV_POWER_USAGE": ("DCGM_FI_DEV_BOARD_POWER_WATTS", 1.0),  # 155
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", 1000.0),  # 1611: J, was mJ (156)
    "DCGM_FI_DEV_XID_ERRORS": ("DCGM_FI_DEV_XID_ERROR", 1.0),  # 230
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("DCGM_FI_DEV_PCIE_REPLAY_TOTAL", 1.0),  # 202
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": ("DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL", 1e-6),  # 449: B/s, was MB/s
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", 1.0),  # 393
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("DCGM_FI_DEV_ROW_REMAP_FAILED", 1.0),  # 395
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", 1.0),  # 1001
    "DCGM_FI_PROF_SM_ACTIVE": ("DCGM_FI_PROF_SM_UTIL_RATIO", 1.0),  # 1002
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("DCGM_FI_PROF_TENSOR_UTIL_RATIO", 1.0),  # 1004
    "DCGM_FI_PROF_DRAM_ACTIVE": ("DCGM_FI_PROF_DRAM_UTIL_RATIO", 1.0),  # 1005
}
#: The label naming the node, in the exporter's spelling of each era (4.9: lowercase).
HOST_LABELS = ("hostname", "Hostname")


def names_of(metric: str) -> list[tuple[str, float]]:
    """``[(name, factor)]``: ``metric`` (factor 1) and, when 4.9 renamed it, its new name with the factor that turns
    the new unit into ``metric``'s."""
    renamed = RENAMED.get(metric)
    return [(metric, 1.0)] + ([renamed] if renamed else [])


def either(metric: str, selector: str = "") -> str:
    """A PromQL expression of ``metric``'s series under either name, in the old unit: ``(old{s}) or (new{s} * k)``.

    ``or`` matches series by their labels without the metric name, so a GPU whose exporter serves both (a custom
    collector naming both fields) is counted once.
    """
    braces = f"{{{selector}}}" if selector else ""
    parts = [f"{name}{braces}" + ("" if factor == 1.0 else f" * {factor:g}") for name, factor in names_of(metric)]
    return parts[0] if len(parts) == 1 else " or ".join(f"({p})" for p in parts)


def host_of(labels: dict[str, str]) -> str | None:
    """The node of a DCGM series: its ``hostname`` (4.9) or ``Hostname`` label."""
    return next((labels[k] for k in HOST_LABELS if labels.get(k)), None)
