"""The Kubernetes job layer: prepare a cluster, render, validate and run training jobs.

Modules, in the order data flows through them:

* :mod:`~fsdp_sdk.k8s.render`: configuration -> job objects (pure);
* :mod:`~fsdp_sdk.k8s.prereqs`: the cluster prerequisites (etcd, Training Operator);
* :mod:`~fsdp_sdk.k8s.validate`: offline schema validation of rendered objects;
* :mod:`~fsdp_sdk.k8s.kube`: the connection to an API server, on the ``kubernetes`` client's public API;
* :mod:`~fsdp_sdk.k8s.retry`: which failures are retried, and how long to wait between tries;
* :mod:`~fsdp_sdk.k8s.follow`: following a job through the API's watch and its pods' logs;
* :mod:`~fsdp_sdk.k8s.jobs`: :class:`~fsdp_sdk.k8s.jobs.JobClient` (submit, status, logs, stop, wait);
* :mod:`~fsdp_sdk.rendezvous` (shared with the local backend): clearing a stopped job's rendezvous keys in etcd;
* :mod:`~fsdp_sdk.k8s.image`: the trainer image (Dockerfile, build, push to ECR).

Nothing is imported here, so ``import fsdp_sdk.k8s`` stays cheap.
"""
