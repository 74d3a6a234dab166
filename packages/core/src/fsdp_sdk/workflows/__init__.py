"""What :class:`fsdp_sdk.Client` does, apart from its face: one shared :class:`~fsdp_sdk.workflows.context.Context`
(the configuration resolved once, its plugins, backend, progress and kubeconfig) and the workflows over it.

* :mod:`~fsdp_sdk.workflows.context`: the context, with what both workflows use (preflight checks, prices, the fit
  check, monitoring components).
* :mod:`~fsdp_sdk.workflows.cluster`: the cluster's life (plan, up, status, scale, down; its checkpoint bucket, cost
  ledger, prerequisites and monitoring); the cluster's side of a job (:class:`fsdp_sdk.runner.ClusterSite`).
* :mod:`~fsdp_sdk.workflows.jobs`: jobs (render, submit, run, the runner, images, estimates).

``Client`` and the CLI (through ``Client``) are the only callers; :mod:`fsdp_sdk.launch` composes both workflows.
"""
