"""Run reports: a training run's metrics read back and written as a self-contained HTML page with PNG plots.

Modules, in the order data flows through them:

* :mod:`~fsdp_sdk.reports.prometheus_api`: the Prometheus HTTP API (raw samples of a run's series);
* :mod:`~fsdp_sdk.reports.sources`: where a run's metrics come from: Prometheus (the trainer's
  endpoint and the DCGM exporter), else the trainer's per-step JSON (``metrics.jsonl`` of a local
  run, the leader's log lines of a Kubernetes job);
* :mod:`~fsdp_sdk.reports.run_metrics`: the metrics of one run and their summary figures;
* :mod:`~fsdp_sdk.reports.render`: the PNG plots (matplotlib) and the HTML page.

``fsdp-sdk job report NAME`` ties them together. Nothing is imported here.
"""
