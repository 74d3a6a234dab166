"""The leader's output is found by the line rank 0 prints first, ``master_addr=ADDR host=FQDN`` (the trainer's log
line, or ``fsdp_sdk.code_entry``'s print), under whatever prefix the log or torchrun puts before it; torchrun's own
rendezvous result, which every agent logs at ``LOGLEVEL=INFO``, is not it (on a cluster it made a worker that was not
rank 0 look like the leader; locally it would have made every agent look like one)."""

from __future__ import annotations

import pytest

from fsdp_sdk.runs import is_leader_line


@pytest.mark.parametrize(
    ("line", "leader"),
    [
        ("[rank0] 12:00:00 INFO fsdp_trainer.distributed: master_addr=w0 host=w0.ns.svc", True),
        ("master_addr=10.0.0.1 host=ip-10-0-0-1.ec2.internal code=train.py", True),
        ("[default0]:master_addr=10.0.0.1 host=ip-10-0-0-1 code=pkg.train", True),
        ("[rank0] master_addr=127.0.0.1 host=localhost", True),
        (
            "I1207 02:07:17.766000 19697 torch/distributed/elastic/agent/server/api.py:553]   master_addr=fsdp-worker-1",
            False,
        ),
        ("  master_addr=fsdp-worker-1", False),
        ("restart_count=0 my_master_addr=1 host=2", False),
        ('{"step": 1, "master_addr": "x"}', False),
    ],
)
def test_the_leader_line_and_not_torchruns(line: str, leader: bool) -> None:
    assert is_leader_line(line) is leader
