"""fsdp-sdk-eksctl: the ``eksctl`` cluster backend of fsdp-sdk.

``fsdp-sdk up --backend eksctl`` plans an EKS cluster with a system node group and a GPU node group
(EFA, capacity reservations and Capacity Blocks, the EKS-accelerated AMIs), creates it with the real
``eksctl``, writes its kubeconfig, and leaves it ready for jobs (core then installs etcd and the
Kubeflow Training Operator). ``scale``, ``status`` and ``down`` work on the same cluster.

Modules: :mod:`~fsdp_sdk_eksctl.plugin` (hooks), :mod:`~fsdp_sdk_eksctl.settings` (the ``eksctl``
settings section), :mod:`~fsdp_sdk_eksctl.render` (the ClusterConfig, pure),
:mod:`~fsdp_sdk_eksctl.device_plugins` (DaemonSets, pure),
:mod:`~fsdp_sdk_eksctl.plan`, :mod:`~fsdp_sdk_eksctl.commands` (eksctl argument lists),
:mod:`~fsdp_sdk_eksctl.observe` (boto3 reads), :mod:`~fsdp_sdk_eksctl.state` (local state),
:mod:`~fsdp_sdk_eksctl.preflight` and :mod:`~fsdp_sdk_eksctl.backend`.
"""

__version__ = "0.1.0"
