"""The Kubernetes job layer: prepare a cluster, render, validate and run training jobs.

Modules, in the order data flows through them:

* :mod:`~fsdp_sdk.k8s.render`: configuration -> job objects (pure);
* :mod:`~fsdp_sdk.k8s.cluster_objects`: configuration and the backend's plan -> what ``up`` and
  ``prereqs install`` apply (device plugins, etcd, the Training Operator's overlay, monitoring; pure);
* :mod:`~fsdp_sdk.k8s.prereqs`: applying those prerequisites, and ``prereqs status``;
* :mod:`~fsdp_sdk.k8s.validate`: offline schema validation of rendered objects;
* :mod:`~fsdp_sdk.k8s.kube`: the connection to an API server, on the ``kubernetes`` client's public API;
* :mod:`~fsdp_sdk.k8s.retry`: which failures are retried, and how long to wait between tries;
* :mod:`~fsdp_sdk.k8s.job_pods`: a job's pods and its leader (the pod that printed ``master_addr=``);
* :mod:`~fsdp_sdk.k8s.follow`: following a job through the API's watch and its pods' logs;
* :mod:`~fsdp_sdk.k8s.jobs`: :class:`~fsdp_sdk.k8s.jobs.JobClient` (submit, status, logs, stop, wait);
* :mod:`~fsdp_sdk.k8s.rendezvous`: the cluster's etcd through the API server's service proxy, for clearing a
  stopped job's rendezvous keys (what is cleared is shared with the local backend: :mod:`fsdp_sdk.rendezvous`);
* :mod:`~fsdp_sdk.k8s.image`: the trainer image (Dockerfile, build, push to ECR).

Nothing is imported here, so ``import fsdp_sdk.k8s`` stays cheap.
"""
