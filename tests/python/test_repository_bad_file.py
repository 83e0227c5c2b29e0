"""A truncated file dropped over a good dataset in a 3-replica repository (issue 32 item 3):
every replica keeps serving the version it holds, byte for byte, while its poll finds the new
file unloadable, and each one's gpusampler_dataset_loads_total{result="error"} rises. A good
file after it is then picked up. Uses the golden dataset of test_repository.py."""

from __future__ import annotations

import os
import time

from test_repository import metric, replicas, sample_all, stub, upload  # noqa: F401

ERRORS = 'gpusampler_dataset_loads_total{result="error"}'


def test_truncated_replacement_keeps_the_good_version_on_every_replica(replicas):  # noqa: F811
    servers = [replicas() for _ in range(3)]
    stubs = [stub(s.target) for s in servers]
    v1 = upload(stubs[0], "rep", 1)
    for s in stubs:
        assert sample_all(s, "rep", {v1.sha256: 1}) == []
    before = [metric(s.metrics_port, ERRORS) for s in servers]

    # The committed file, cut in half and renamed over the original (a new version on disk).
    path = replicas.repo / "rep.dataset"
    data = path.read_bytes()
    tmp = replicas.repo / ".rep.truncated"
    tmp.write_bytes(data[: len(data) // 2])
    os.rename(tmp, path)

    # Several poll intervals (1 s): every answer meanwhile is version 1's, exactly.
    deadline = time.monotonic() + 3.5
    while time.monotonic() < deadline:
        for k, s in enumerate(stubs):
            wrong = sample_all(s, "rep", {v1.sha256: 1})
            assert wrong == [], f"replica {k}: {wrong[:3]}"
    after = [metric(s.metrics_port, ERRORS) for s in servers]
    for k in range(3):
        assert after[k] >= before[k] + 1, (k, before, after, servers[k].log_text()[-2000:])
    # Counted once per version of the file, not once per poll.
    time.sleep(2.5)
    assert [metric(s.metrics_port, ERRORS) for s in servers] == after

    # A good file again (the same bytes): every replica loads it and serves it.
    tmp.write_bytes(data)
    os.rename(tmp, path)
    time.sleep(2.5)
    for k, s in enumerate(stubs):
        assert sample_all(s, "rep", {v1.sha256: 1}) == [], k
