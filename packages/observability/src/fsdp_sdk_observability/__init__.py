"""fsdp-sdk observability plugin: GPU and training metrics side by side.

Installed with ``pip install fsdp-sdk-observability``; fsdp-sdk loads it through its entry point
(group ``fsdp_sdk``, name ``observability``). It renders, as plain Kubernetes objects and pure
functions of the configuration:

* ``dcgm-exporter``: NVIDIA's DCGM exporter on every GPU node (:mod:`.dcgm`);
* ``prometheus``: a Prometheus that discovers the exporter and the training pods (:mod:`.prometheus`),
  or, where the cluster runs the Prometheus Operator, ``ServiceMonitor``/``PodMonitor`` objects for it;
* ``grafana``: Grafana with the Prometheus data source and the training dashboard provisioned
  (:mod:`.grafana`, :mod:`.dashboard`);
* ``node-tools``: htop on every node and nvtop on GPU nodes (:mod:`.node_tools`);
* ``cloudwatch``: the Amazon CloudWatch Observability EKS add-on, installed only when named (:mod:`.cloudwatch`).

It also adds the trainer's Prometheus endpoint to rendered jobs (:mod:`.training`). Its settings are
the ``monitoring`` section (:mod:`.settings`). fsdp-sdk's core applies everything (``fsdp-sdk monitor``).
"""

__version__ = "0.1.0"
