"""The Kubernetes job layer: prepare a cluster, render, validate and run training jobs.

Modules, in the order data flows through them:

* :mod:`~fsdp_sdk.k8s.render`: configuration -> job objects (pure);
* :mod:`~fsdp_sdk.k8s.prereqs`: the cluster prerequisites (etcd, Training Operator);
* :mod:`~fsdp_sdk.k8s.validate`: offline schema validation of rendered objects;
* :mod:`~fsdp_sdk.k8s.kube`: the REST layer over the ``kubernetes`` client;
* :mod:`~fsdp_sdk.k8s.jobs`: :class:`~fsdp_sdk.k8s.jobs.JobClient` (submit, status, logs, stop, wait);
* :mod:`~fsdp_sdk.rendezvous` (shared with the local backend): clearing a stopped job's rendezvous keys in etcd;
* :mod:`~fsdp_sdk.k8s.image`: the trainer image (Dockerfile, build, push to ECR).

Nothing is imported here, so ``import fsdp_sdk.k8s`` stays cheap.
"""
