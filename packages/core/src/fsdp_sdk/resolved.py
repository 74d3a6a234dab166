"""A configuration resolved once, with what resolving found: its instance type and the plugin set it used.

Resolving (:func:`fsdp_sdk.config.resolution.resolve`) fills the derived values and checks the cross-field
rules; it finds the :class:`~fsdp_sdk.instance_types.InstanceType` on the way. A :class:`Resolved` keeps that
instance type and the :class:`~fsdp_sdk.plugins.Plugins` it was found in, so what comes after (a backend's :meth:`~fsdp_sdk.backends.base.ClusterBackend.plan`, the preflight
hooks, the job renderer, the estimate) reads them instead of looking them up again, perhaps in
another plugin set. An application embedding the SDK with its own plugin set
(``Client.from_dict(..., plugins=...)``) therefore never reaches the process-wide one::

    from fsdp_sdk.resolved import Resolved

    resolved = Resolved.of(config, plugins)
    resolved.instance.gpu_count          # the type cluster.instance_type names, from `plugins`
    backend.plan(resolved)
"""

from __future__ import annotations

# A resolved configuration keeps the plugin set it was resolved in, and that plugin set's hooks are given resolved
# configurations: the class lives beside the plugin set (fsdp_sdk.plugins), and this is the path to import it by.
from fsdp_sdk.plugins import Resolved

__all__ = ["Resolved"]
