"""EKS Pod Identity associations for tests: moto lacks the API, so botocore's Stubber answers every call from a small
state kept here (each request is checked against the real EKS service model); every other EKS call goes to moto."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

_IDS = itertools.count(1)


class PodIdentity:
    """An EKS client: the Pod Identity operations answered through the Stubber, the rest by moto's EKS client (whose
    clusters are the ones that exist).

    :param stubbed: the ``stubbed`` fixture (``stubbed("eks") -> (client, stubber)``).
    :param region: the region of its clusters.
    """

    def __init__(self, stubbed: Callable[..., tuple[Any, Any]], region: str = "us-west-2") -> None:
        self._client, self._stubber = stubbed("eks", region)
        self.region = region
        self.associations: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    @property
    def _moto(self) -> Any:
        from fsdp_sdk.aws.session import aws_client

        return aws_client("eks", self.region)  # the moto server of the ``aws`` fixture

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._moto, name)

    def _cluster_exists(self, name: str) -> bool:
        clusters = self._moto.list_clusters()["clusters"]
        for key in [k for k, a in self.associations.items() if a["clusterName"] not in clusters]:
            del self.associations[key]  # EKS deletes a cluster's associations with it
        return name in clusters

    def _answer(self, operation: str, params: dict[str, Any], response: dict[str, Any] | None) -> Any:
        self.calls.append((operation, params))
        if response is None:
            self._stubber.add_client_error(
                operation,
                service_error_code="ResourceNotFoundException",
                service_message=f"No cluster found for name: {params['clusterName']}.",
                http_status_code=404,
                expected_params=params,
            )
        else:
            self._stubber.add_response(operation, response, params)
        return getattr(self._client, operation)(**params)

    def create_pod_identity_association(self, **params: Any) -> Any:
        if not self._cluster_exists(params["clusterName"]):
            return self._answer("create_pod_identity_association", params, None)
        association_id = f"a-{next(_IDS):017d}"
        association = {
            "clusterName": params["clusterName"],
            "namespace": params["namespace"],
            "serviceAccount": params["serviceAccount"],
            "roleArn": params["roleArn"],
            "associationArn": f"arn:aws:eks:{self.region}:123456789012:podidentityassociation/"
            f"{params['clusterName']}/{association_id}",
            "associationId": association_id,
            "tags": params.get("tags") or {},
        }
        self.associations[association_id] = association
        return self._answer("create_pod_identity_association", params, {"association": association})

    def list_pod_identity_associations(self, **params: Any) -> Any:
        if not self._cluster_exists(params["clusterName"]):
            return self._answer("list_pod_identity_associations", params, None)
        found = [
            {k: a[k] for k in ("clusterName", "namespace", "serviceAccount", "associationArn", "associationId")}
            for a in self.associations.values()
            if a["clusterName"] == params["clusterName"]
            and params.get("namespace") in (None, a["namespace"])
            and params.get("serviceAccount") in (None, a["serviceAccount"])
        ]
        return self._answer("list_pod_identity_associations", params, {"associations": found})

    def describe_pod_identity_association(self, **params: Any) -> Any:
        association = self.associations[params["associationId"]]
        return self._answer("describe_pod_identity_association", params, {"association": association})

    def delete_pod_identity_association(self, **params: Any) -> Any:
        association = self.associations.pop(params["associationId"])
        return self._answer("delete_pod_identity_association", params, {"association": association})
