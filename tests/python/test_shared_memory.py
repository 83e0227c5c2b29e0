"""SPEC section 9: answers written into POSIX shared memory (docs/shared-memory.md).

One server with --allow-shared-memory (CPU, then cuda-sim), two tokens and a small --max-message-bytes; the
session server (flag off) for the refusal. Every golden case (v1 and v2), with features,
inline and dataset, unary and stream: the region's bytes are exactly the inline answer's.
Each hostile input gets its status, and the server keeps serving."""

from __future__ import annotations

import json
import os
import threading
import urllib.request

import grpc
import numpy as np
import pytest

from conftest import REPO, start_server, stop_server

V1 = [json.loads(line) for line in
      (REPO / "tests/data/golden_samples.jsonl").read_text().splitlines() if line.strip()]
V2 = [json.loads(line) for line in
      (REPO / "tests/data/golden_v2.jsonl").read_text().splitlines() if line.strip()]
FILL = {"FILL_POLICY_BOTH": "both", "FILL_POLICY_NEGATIVES_ONLY": "negatives_only",
        "FILL_POLICY_NONE": "none"}
TOKEN_A, TOKEN_B = "shm-token-a", "shm-token-b"
MAX_MESSAGE = 1 << 20
FIELDS = ("indices", "labels", "features", "num_positive", "num_negative", "num_per_class")
D = 3  # feature row: D float32


@pytest.fixture(scope="module", params=["cpu", "cuda-sim"])
def shm_server(tmp_path_factory, request):
    """On the CPU backend and on the cuda-sim device (the CUDA pipeline: the answer's bytes
    come back from the device and are written into the region from there)."""
    work = tmp_path_factory.mktemp("shm-server")
    tokens = work / "tokens"
    tokens.write_text(f"{TOKEN_A}\n{TOKEN_B}\n")
    s = start_server(work, extra=["--allow-shared-memory", "--auth-token-file", str(tokens),
                                  "--max-message-bytes", str(MAX_MESSAGE)],
                     device=request.param)
    s.device_param = request.param
    yield s
    rc = stop_server(s)
    assert rc == 0, f"server exited {rc}:\n{s.log_text()}"


@pytest.fixture(scope="module")
def shm(shm_server):
    import gpusampler

    with gpusampler.Client(shm_server.target, token=TOKEN_A, timeout=30) as c:
        assert c.info().backend == shm_server.device_param
        yield c


@pytest.fixture(scope="module")
def region(shm):
    r = shm.register_region(8 << 20, name="main")
    yield r
    r.close()


@pytest.fixture(scope="module")
def stub(shm_server):
    from gpusampler.v1 import sampler_pb2_grpc

    channel = grpc.insecure_channel(shm_server.target, options=[
        ("grpc.max_receive_message_length", 64 << 20)])
    yield sampler_pb2_grpc.SamplerStub(channel)
    channel.close()


def auth(token=TOKEN_A):
    return (("authorization", f"Bearer {token}"),)


def assert_serving(client):
    out = client.sample(np.array([1, 0, 1, 0, 0, 1]), num_samples=2, seed=1)
    assert out.indices.shape == (2,)


# ------------------------------------------------------------------- the cases
def case_args(case):
    """(sample() args without labels/features, labels [B, N] or flat + row_splits)."""
    if "spec" in case:  # v1
        s = case["spec"]
        args = dict(num_samples=s["num_samples"], positive_fraction=s["positive_fraction"],
                    positive_label=s["positive_label"], negative_label=s["negative_label"],
                    fill=FILL[s["fill_policy"]], seed=case["seed"])
    else:
        import gpusampler
        from test_golden_v2 import classes_of

        args = dict(num_samples=case["num_samples"], seed=case["seed"],
                    classes=classes_of(case), fill_order=case["fill_order"])
        assert gpusampler  # imported for classes_of
    rows = case["labels"]
    flat = np.concatenate([np.array(r, dtype=np.int64) for r in rows])
    splits = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    scores = None
    if "scores" in case:
        scores = np.concatenate([np.array([np.nan if x is None else x for x in r],
                                          dtype=np.float32) for r in case["scores"]])
    return args, flat, splits, scores


def features_for(n):
    return (np.arange(n * D, dtype=np.float32).reshape(n, D) * 0.5 + 1)


def region_bytes(region, response, offset):
    """The region's bytes of each present tensor of `response`, laid out as SPEC says."""
    out, end = {}, 0
    for field in FIELDS:
        if not response.HasField(field):
            continue
        t = getattr(response, field)
        from gpusampler import _tensors

        n = _tensors.wire_nbytes(t)
        start = (end + 255) // 256 * 256
        out[field] = bytes(region.buf[offset + start:offset + start + n])
        end = start + n
    return out


def check_raw_equal(stub, region, request, offset=512):
    """The same request inline and into the region, raw: tensor data empty, dtype and shape
    kept, and the region's bytes == the inline bytes."""
    from gpusampler.v1 import sampler_pb2 as pb

    inline = stub.Sample(request, metadata=auth())
    into = pb.SampleRequest()
    into.CopyFrom(request)
    into.output_region.CopyFrom(pb.OutputRegion(name=region.name, offset=offset))
    region.buf[offset:offset + (1 << 16)] = b"\xa5" * (1 << 16)  # stale bytes must be overwritten
    answer = stub.Sample(into, metadata=auth())
    written = region_bytes(region, answer, offset)
    present = [f for f in FIELDS if inline.HasField(f)]
    assert sorted(written) == sorted(present)
    for f in present:
        a, b = getattr(inline, f), getattr(answer, f)
        assert b.data == b"" and b.dtype == a.dtype and list(b.shape) == list(a.shape), f
        assert written[f] == a.data, f
    assert answer.seed == inline.seed
    return inline


def inline_request(shm, args, flat, splits, scores, with_features):
    req, _ = __import__("gpusampler._requests", fromlist=["prepare"]).prepare(
        dict(args, labels=flat, row_splits=splits,
             features=features_for(len(flat)) if with_features else None,
             **({"scores": scores} if scores is not None else {})),
        iter(range(1 << 30)), 1 << 30)
    return req


def same_arrays(a, b):
    """Every tensor of two decoded answers, byte for byte (dtype and shape too)."""
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert (x is None) == (y is None), f
        if x is not None:
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), f


ALL = [("v1", c) for c in V1] + [("v2", c) for c in V2]


@pytest.mark.parametrize("which,case", ALL, ids=[f"{w}-{c['name']}" for w, c in ALL])
def test_golden_region_bytes_equal_inline(shm, stub, region, which, case):
    args, flat, splits, scores = case_args(case)
    for with_features in (False, True):
        check_raw_equal(stub, region, inline_request(shm, args, flat, splits, scores,
                                                     with_features))
    # The Python client's views give the same arrays as its inline decode, and the golden
    # indices.
    inline = shm.sample(flat, features_for(len(flat)), row_splits=splits, scores=scores,
                        **args)
    viewed = shm.sample(flat, features_for(len(flat)), row_splits=splits, scores=scores,
                        output_region=region.window(4096), **args)
    same_arrays(inline, viewed)
    np.testing.assert_array_equal(viewed.indices, np.array(case["indices"], dtype=np.int64))
    # No copy: the arrays view the region's memory.
    assert np.shares_memory(viewed.features, np.frombuffer(region.buf, dtype=np.uint8))


@pytest.mark.parametrize("which,case", ALL, ids=[f"{w}-{c['name']}" for w, c in ALL])
def test_golden_dataset_and_stream_region_bytes(shm, stub, region, which, case):
    from gpusampler.v1 import sampler_pb2 as pb

    args, flat, splits, scores = case_args(case)
    name = f"shm-{which}-{case['name']}"[:128]
    shm.create_dataset(name, flat, features_for(len(flat)), row_splits=splits, replace=True,
                       scores=scores)
    try:
        ds = shm.sample(dataset=name, return_features=True, **args)
        np.testing.assert_array_equal(ds.indices, np.array(case["indices"], dtype=np.int64))
        req = pb.SampleRequest(dataset=name, return_features=True, seed=args["seed"])
        req.spec.CopyFrom(inline_request(shm, args, flat, splits, None, False).spec)
        inline = check_raw_equal(stub, region, req)
        assert inline.features.data == ds.features.tobytes()
        # Stream: three requests into three slots of the region, in order.
        slot = 1 << 20
        items = [dict(dataset=name, return_features=True,
                      output_region=region.window(i * slot, slot), **args) for i in range(3)]
        outs = 0
        for out in shm.sample_stream(items, window=3):
            same_arrays(out, ds)
            assert np.shares_memory(out.indices, np.frombuffer(region.buf, dtype=np.uint8))
            outs += 1
        assert outs == 3
        # Inline requests on the stream too.
        items = [dict(labels=flat, row_splits=splits, features=features_for(len(flat)),
                      output_region=region.window(i * slot, slot),
                      **({"scores": scores} if scores is not None else {}), **args)
                 for i in range(2)]
        want = shm.sample(flat, features_for(len(flat)), row_splits=splits, scores=scores,
                          **args)
        np.testing.assert_array_equal(want.indices, np.array(case["indices"], dtype=np.int64))
        outs = 0
        for out in shm.sample_stream(items, window=2):
            same_arrays(out, want)
            outs += 1
        assert outs == 2
    finally:
        shm.delete_dataset(name)


def test_answer_four_times_over_max_message_bytes(shm, region):
    import gpusampler

    n, d = 1024, 1024  # K = n rows of D float32: 4 MiB of features, 4x --max-message-bytes
    labels = (np.arange(n) % 2).astype(np.int64)
    feats = np.random.default_rng(1).random((n, d), dtype=np.float32)
    shm.create_dataset("shm-big", labels, feats, replace=True, chunk_bytes=256 << 10)
    try:
        with pytest.raises(gpusampler.ResourceExhaustedError, match="max-message-bytes"):
            shm.sample(dataset="shm-big", return_features=True, num_samples=n, seed=5)
        out = shm.sample(dataset="shm-big", return_features=True, num_samples=n, seed=5,
                         output_region=region)
        assert out.features.nbytes == 4 * MAX_MESSAGE
        np.testing.assert_array_equal(out.features, feats[out.indices])
    finally:
        shm.delete_dataset("shm-big")


# ------------------------------------------------------------------- hostile input
def test_flag_off_is_failed_precondition(client):
    import gpusampler

    before = set(os.listdir("/dev/shm"))
    with pytest.raises(gpusampler.FailedPreconditionError, match="--allow-shared-memory"):
        client.register_region(4096)
    assert set(os.listdir("/dev/shm")) == before  # the object was removed again


def test_key_outside_prefix(shm):
    import gpusampler

    with pytest.raises(gpusampler.InvalidArgumentError, match='"/gpusampler"') as e:
        shm.register_region(4096, shm_key_prefix="/other")
    assert "/other-" not in str(e.value)  # keys never appear in errors
    assert_serving(shm)


def test_missing_object_and_window_past_end(shm, stub):
    from gpusampler.v1 import sampler_pb2 as pb

    with pytest.raises(grpc.RpcError) as e:
        stub.RegisterRegion(pb.RegisterRegionRequest(name="x", shm_key="/gpusampler-missing-1",
                                                     byte_size=10), metadata=auth())
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert "missing" not in e.value.details()
    r = shm.register_region(10000, name="small")
    try:
        with pytest.raises(grpc.RpcError) as e:
            stub.RegisterRegion(pb.RegisterRegionRequest(name="y", shm_key=r.key, offset=5000,
                                                         byte_size=5001), metadata=auth())
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "5000 + 5001" in e.value.details() and "10000" in e.value.details()
        assert r.key not in e.value.details()
        with pytest.raises(grpc.RpcError) as e:  # the same name again
            stub.RegisterRegion(pb.RegisterRegionRequest(name="small", shm_key=r.key,
                                                         byte_size=100), metadata=auth())
        assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
    finally:
        r.close()


def test_region_too_small_names_bytes_before_launch(shm):
    import gpusampler

    labels = np.zeros((2, 100), dtype=np.int64)
    labels[:, ::3] = 1
    with shm.register_region(4096, name="tiny") as r:
        # indices 2*64*8 = 1024, labels 1024 @1024, counts 8 @2048 and 8 @2304: 2312 bytes.
        with pytest.raises(gpusampler.ResourceExhaustedError, match="needs 2312 bytes"):
            shm.sample(labels, num_samples=64, seed=1, output_region=r.window(2048))
        out = shm.sample(labels, num_samples=64, seed=1, output_region=r.window(1536, 2312))
        assert out.indices.shape == (2, 64)
        with pytest.raises(gpusampler.InvalidArgumentError, match="4096 bytes"):
            shm.sample(labels, num_samples=64, seed=1, output_region=r.window(4000, 200))


@pytest.mark.parametrize("size", [0, 3000])
def test_truncated_after_registration_is_failed_precondition(shm, shm_server, size):
    """The SIGBUS case: the client shrinks the object under the server's mapping."""
    import gpusampler

    labels = np.tile(np.array([1, 0, 0, 1], dtype=np.int64), 100)
    r = shm.register_region(1 << 20, name=f"trunc{size}")
    try:
        shm.sample(labels, features_for(len(labels)), num_samples=128, seed=2, output_region=r)
        os.truncate(f"/dev/shm/{r.key[1:]}", size)
        with pytest.raises(gpusampler.FailedPreconditionError, match="truncated"):
            shm.sample(labels, features_for(len(labels)), num_samples=128, seed=2,
                       output_region=r)
        assert shm_server.process.poll() is None, shm_server.log_text()
        assert_serving(shm)
    finally:
        shm.unregister_region(r.name)


def test_regions_belong_to_their_token(shm_server, shm, region):
    import gpusampler

    with gpusampler.Client(shm_server.target, token=TOKEN_B, timeout=30) as b:
        assert ("main", region.byte_size) in shm.list_regions()
        assert b.list_regions() == []
        with pytest.raises(gpusampler.NotFoundError, match="not registered"):
            b.sample(np.array([1, 0, 1]), num_samples=2, output_region=region)
        with pytest.raises(gpusampler.NotFoundError):
            b.unregister_region("main")
        mine = b.register_region(4096, name="main")  # names are per token
        assert b.list_regions() == [("main", 4096)]
        mine.close()
    assert ("main", region.byte_size) in shm.list_regions()


def test_unregister_during_requests_never_hurts_the_server(shm, shm_server):
    """Requests racing an unregister either complete (before it) or fail CANCELLED /
    NOT_FOUND; the server stays up (the mapping outlives the requests that hold it)."""
    import gpusampler

    labels = (np.arange(20000) % 3 == 0).astype(np.int64).reshape(4, -1)
    feats = features_for(labels.size).reshape(4, -1, D)
    codes = []
    for round_ in range(5):
        r = shm.register_region(4 << 20, name=f"race{round_}")

        def hammer():
            for _ in range(20):
                try:
                    shm.sample(labels, feats, num_samples=512, output_region=r)
                    codes.append("OK")
                except gpusampler.GpuSamplerError as e:
                    codes.append(e.code.name)
                except ValueError:  # this client already dropped the region
                    codes.append("LOCAL")
        t = threading.Thread(target=hammer)
        t.start()
        shm.unregister_region(r.name)
        t.join()
    assert set(codes) <= {"OK", "CANCELLED", "NOT_FOUND", "LOCAL"}, codes
    assert shm_server.process.poll() is None
    assert_serving(shm)


def test_metrics(shm, shm_server, region):
    labels = np.tile(np.array([1, 0], dtype=np.int64), 64)
    shm.sample(labels, num_samples=16, seed=3, output_region=region)
    text = urllib.request.urlopen(
        f"http://127.0.0.1:{shm_server.metrics_port}/metrics", timeout=10).read().decode()
    lines = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
             if line.startswith("gpusampler_shared_memory")}
    assert lines["gpusampler_shared_memory_regions"] >= 1
    assert lines["gpusampler_shared_memory_written_bytes_total"] >= 16 * 8
    # The region RPCs are counted like every Sampler call, failures included.
    shm.register_region(4096, name="metrics-extra")
    assert ("metrics-extra", 4096) in [tuple(x) for x in shm.list_regions()]
    shm.unregister_region("metrics-extra")
    with pytest.raises(Exception):
        shm.unregister_region("metrics-extra")  # NOT_FOUND now
    text = urllib.request.urlopen(
        f"http://127.0.0.1:{shm_server.metrics_port}/metrics", timeout=10).read().decode()
    counts = {}
    for line in text.splitlines():
        if line.startswith("gpusampler_requests_total{"):
            key, value = line.rsplit(" ", 1)
            counts[key] = float(value)

    def count(method, code):
        return sum(v for k, v in counts.items()
                   if f'method="{method}"' in k and f'code="{code}"' in k)
    assert count("RegisterRegion", "OK") >= 2
    assert count("ListRegions", "OK") >= 1
    assert count("UnregisterRegion", "OK") >= 1
    assert count("UnregisterRegion", "NOT_FOUND") >= 1


def test_sample_iterable_shared_memory(shm_server):
    import gpusampler
    from gpusampler.data import SampleIterable

    labels = (np.arange(4 * 300) % 4 == 0).astype(np.int64).reshape(4, 300)
    feats = features_for(labels.size).reshape(4, 300, D)
    with gpusampler.Client(shm_server.target, token=TOKEN_A) as c:
        plain = SampleIterable(c, labels=labels, features=feats, num_samples=32, steps=6,
                               seed=9, prefetch=2)
        viaShm = SampleIterable(c, labels=labels, features=feats, num_samples=32, steps=6,
                                seed=9, prefetch=2, shared_memory=True)
        want = [b.features.clone() for b in plain]
        got = []
        for b in viaShm:
            got.append(b.features.clone())  # read before the next-but-one batch
        assert len(got) == 6
        for a, b in zip(want, got):
            assert a.numpy().tobytes() == b.numpy().tobytes()


def written_bytes(server):
    text = urllib.request.urlopen(
        f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(line.split(" ")[1]) for line in text.splitlines()
               if line.startswith("gpusampler_shared_memory_written_bytes_total"))


def test_sample_iterable_shared_memory_stream_producer(shm_server):
    """The stream producer (one SampleStream, `prefetch` requests in flight) rotates its own
    slots of one region: the same batches as plain unary answers, and after the first answers
    (inline, to size the region) every answer goes through the region."""
    import gpusampler
    from gpusampler.data import SampleIterable

    labels = (np.arange(4 * 300) % 3 == 0).astype(np.int64).reshape(4, 300)
    feats = features_for(labels.size).reshape(4, 300, D)
    steps, prefetch = 14, 2
    with gpusampler.Client(shm_server.target, token=TOKEN_A) as c:
        plain = SampleIterable(c, labels=labels, features=feats, num_samples=32, steps=steps,
                               seed=4, prefetch=prefetch)
        want = [(b.indices.clone(), b.features.clone()) for b in plain]
        streamed = SampleIterable(c, labels=labels, features=feats, num_samples=32,
                                  steps=steps, seed=4, prefetch=prefetch, shared_memory=True)
        streamed._producer = "stream"
        before = written_bytes(shm_server)
        got = [(b.indices.clone(), b.features.clone()) for b in streamed]
        after = written_bytes(shm_server)
    assert len(got) == steps
    for (wi, wf), (gi, gf) in zip(want, got):
        assert wi.numpy().tobytes() == gi.numpy().tobytes()
        assert wf.numpy().tobytes() == gf.numpy().tobytes()
    # The requests the stream took before the first answer sized the region went inline (the
    # sender reads ahead of its window: prefetch + 2 here, one spare); every later one, the
    # region.
    per_answer = 4 * 32 * (8 + 8 + 4 * D) + 2 * 4 * 4
    assert (steps - prefetch - 3) * per_answer <= after - before <= steps * per_answer
