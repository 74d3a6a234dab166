"""The AWS code every AWS backend shares (eksctl, Terraform, and the observability plugin's CloudWatch add-on).

* :mod:`~fsdp_sdk.aws.session`: one lazily created boto3 session per region, and
  :func:`~fsdp_sdk.aws.session.aws_errors`, which turns botocore errors into one-line
  :class:`~fsdp_sdk.errors.ConfigError` / :class:`~fsdp_sdk.errors.BackendError` messages;
* :mod:`~fsdp_sdk.aws.preflight`: credentials, region and zones, instance type offerings,
  the GPU vCPU quota, capacity reservations and Capacity Blocks, as
  :class:`~fsdp_sdk.preflight.PreflightResult` records;
* :mod:`~fsdp_sdk.aws.kubeconfig`: the kubeconfig of an EKS cluster, written atomically
  under the state directory;
* :mod:`~fsdp_sdk.aws.pricing`: on-demand prices (the AWS Price List API when credentials allow it,
  else the instance types' dated table).
* :mod:`~fsdp_sdk.aws.checkpoint_bucket`: an EKS cluster's checkpoint bucket and the training pods'
  access to it (an EKS Pod Identity role scoped to the job namespace's prefix).

External tools (eksctl, terraform, kubectl) run through :func:`fsdp_sdk.tools.run_tool`.
boto3 is imported inside functions only: importing this package costs nothing.
"""
