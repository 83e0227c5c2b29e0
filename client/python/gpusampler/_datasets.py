"""Resident datasets: the upload's chunk stream, and what create/delete/list answer when
they had to reach several addresses (servers without a shared dataset repository each keep
their own copy, so those calls go to every address and their outcomes are merged here)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import (Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    TypeVar)

import grpc
import numpy as np

from gpusampler import _tensors
from gpusampler._args import check_bool, check_int, check_name
from gpusampler._requests import row_splits_tensor
from gpusampler.errors import GpuSamplerError, NotFoundError
from gpusampler.v1 import sampler_pb2 as pb

T = TypeVar("T")
#: The address of a dataset call that any one replica answers (one address given, or servers
#: sharing a dataset repository): its answer and its error are the call's own.
ANY = ""
#: Per address: what it answered, and the addresses that failed with their errors.
Outcomes = Tuple[Dict[str, T], Dict[str, GpuSamplerError]]


@dataclass
class DatasetInfo:
    """A resident dataset stored on the server (``create_dataset``, ``list_datasets``)."""

    name: str
    num_rows: int
    num_elements: int
    label_dtype: str
    feature_dtype: Optional[str]
    feature_shape: Tuple[int, ...]
    bytes: int
    sha256: str
    devices: Tuple[str, ...]
    #: Without a shared repository and with several addresses: the addresses (as given to
    #: the client) that hold this version. Empty when one server or a repository answered.
    replicas: Tuple[str, ...] = ()

    @staticmethod
    def _from_pb(d: pb.DatasetInfo, replicas: Tuple[str, ...] = ()) -> "DatasetInfo":
        return DatasetInfo(
            name=d.name,
            num_rows=d.num_rows,
            num_elements=d.num_elements,
            label_dtype=_tensors.wire_name(d.label_dtype),
            feature_dtype=_tensors.wire_name(d.feature_dtype) if d.feature_dtype else None,
            feature_shape=tuple(d.feature_shape),
            bytes=d.bytes,
            sha256=d.sha256,
            devices=tuple(d.devices),
            replicas=replicas,
        )


# ---------------------------------------------------------------------------- upload
@dataclass
class _Upload:
    """A dataset as wire tensors, cut into chunks of ``per`` elements."""

    name: str
    replace: bool
    labels: pb.Tensor
    features: Optional[pb.Tensor]
    row_splits: Optional[pb.Tensor]
    per: int
    progress: bool
    scores: Optional[pb.Tensor] = None  # FLOAT32 [total] (docs/semantics.md, "Classes")

    def chunks(self) -> Iterator[pb.DatasetChunk]:
        total = self.labels.shape[0]
        at = 0
        while True:
            end = min(total, at + self.per)
            chunk = self._chunk(at, end)
            if self.progress:
                _progress(self.name, end / total if total else 1.0)
            yield chunk
            if end >= total:
                break
            at = end
        if self.progress:
            sys.stderr.write("\n")

    def _chunk(self, at: int, end: int) -> pb.DatasetChunk:
        """Elements [at, end); the first chunk also carries the name, replace and
        row_splits."""
        c = pb.DatasetChunk(labels=_rows(self.labels, at, end))
        if at == 0:
            c.name = self.name
            c.replace = self.replace
            if self.row_splits is not None:
                c.row_splits.CopyFrom(self.row_splits)
        if self.features is not None:
            c.features.CopyFrom(_rows(self.features, at, end))
        if self.scores is not None:
            c.scores.CopyFrom(_rows(self.scores, at, end))
        return c


def _rows(t: pb.Tensor, at: int, end: int) -> pb.Tensor:
    """Rows [at, end) of a wire tensor."""
    row = _tensors.row_bytes(t)
    return pb.Tensor(dtype=t.dtype, shape=[end - at] + list(t.shape[1:]),
                     data=t.data[at * row:end * row])


def _progress(name: str, done: float) -> None:
    bar = "#" * int(done * 30)
    sys.stderr.write(f"\rgpusampler: uploading {name} [{bar:<30}] {done * 100:5.1f}%")
    sys.stderr.flush()


def upload_chunks(name: str, labels: Any, features: Any, row_splits: Any, replace: bool,
                  chunk_bytes: Optional[int], progress: Optional[bool],
                  max_message_bytes: int,
                  scores: Any = None) -> Callable[[], Iterator[pb.DatasetChunk]]:
    """create_dataset's arguments, checked, as a maker of the upload's chunk stream (one
    fresh stream per replica uploaded to)."""
    check_name("name", name)
    check_bool("replace", replace)
    if chunk_bytes is None:
        chunk_bytes = min(16 << 20, max_message_bytes // 4)
    chunk_bytes = check_int("chunk_bytes", chunk_bytes, 1, max_message_bytes)
    if labels is None:
        raise TypeError("labels must be an array or tensor, got None")
    label_tensor, _ = _tensors.to_wire(labels, "labels")
    if len(label_tensor.shape) != 1:
        raise ValueError(f"labels must be 1-D [total], got shape {list(label_tensor.shape)}")
    total = label_tensor.shape[0]
    feature_tensor, _ = _tensors.optional_to_wire(features, "features")
    if feature_tensor is not None and (not feature_tensor.shape
                                       or feature_tensor.shape[0] != total):
        raise ValueError(f"features must be [total, ...] with total = {total}, got "
                         f"shape {list(feature_tensor.shape)}")
    splits = None if row_splits is None else row_splits_tensor(row_splits)
    score_tensor = _score_tensor(scores, total)
    element = _tensors.row_bytes(label_tensor) + (
        _tensors.row_bytes(feature_tensor) if feature_tensor is not None else 0) + (
        4 if score_tensor is not None else 0)
    if progress is None:
        progress = sys.stderr.isatty() and total * element > (64 << 20)
    upload = _Upload(name, replace, label_tensor, feature_tensor, splits,
                     per=max(1, chunk_bytes // element), progress=progress,
                     scores=score_tensor)
    return upload.chunks


def _score_tensor(scores: Any, total: int) -> Optional[pb.Tensor]:
    """A dataset's scores (any real 1-D array or tensor, one per label) as FLOAT32."""
    if scores is None:
        return None
    array = _tensors.host_array(scores)
    if array.dtype.kind not in "fiu" or array.dtype == np.bool_:
        raise TypeError(f"scores must be real numbers, got {array.dtype}")
    if array.shape != (total,):
        raise ValueError(f"scores must be [total] with total = {total}, got shape "
                         f"{list(array.shape)}")
    return _tensors.to_wire(np.ascontiguousarray(array, np.float32), "scores")[0]


# ---------------------------------------------------------------------------- fan-out
def outcomes(addresses: Sequence[str], results: Sequence[Any],
             error: Callable[[grpc.RpcError], GpuSamplerError]) -> Outcomes[Any]:
    """One call's results on each address (an answer, or the exception it raised) as the
    answers and the errors by address; ``error`` maps a gRPC error. Anything else raised
    is raised again."""
    answers: Dict[str, Any] = {}
    failed: Dict[str, GpuSamplerError] = {}
    for address, result in zip(addresses, results):
        if isinstance(result, grpc.RpcError):
            failed[address] = error(result)
        elif isinstance(result, BaseException):
            raise result
        else:
            answers[address] = result
    return answers, failed


def created(name: str, infos: Mapping[str, pb.DatasetInfo],
            failed: Mapping[str, GpuSamplerError]) -> DatasetInfo:
    """create_dataset's answer after uploading to any one replica, or to every address."""
    if ANY in failed:
        raise failed[ANY]
    if failed:
        raise fanout_error(f"create_dataset({name!r})", failed, list(infos))
    if ANY in infos:
        return DatasetInfo._from_pb(infos[ANY])
    return DatasetInfo._from_pb(next(iter(infos.values())), tuple(infos))


def delete_request(name: Any) -> pb.DeleteDatasetRequest:
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__} {name!r}")
    return pb.DeleteDatasetRequest(name=name)


def check_deleted(name: str, done: Sequence[str], failed: Mapping[str, GpuSamplerError]) -> None:
    """delete_dataset's outcome over the addresses it reached: an address without the
    dataset is done; NOT_FOUND only when none held it."""
    missing = {a: e for a, e in failed.items() if isinstance(e, NotFoundError)}
    others = {a: e for a, e in failed.items() if a not in missing}
    if others:
        raise fanout_error(f"delete_dataset({name!r})", others, list(done) + list(missing))
    if missing and not done:
        if len(missing) == 1:
            raise next(iter(missing.values()))
        raise fanout_error(f"delete_dataset({name!r})", missing, [])


def listed(responses: Mapping[str, pb.ListDatasetsResponse],
           failed: Mapping[str, GpuSamplerError]) -> List[DatasetInfo]:
    """list_datasets' answer from the lists of the addresses it reached."""
    if failed:
        raise fanout_error("list_datasets()", failed, list(responses))
    if ANY in responses:
        return [DatasetInfo._from_pb(d) for d in responses[ANY].datasets]
    return _merge_lists([(address, list(r.datasets)) for address, r in responses.items()])


def _merge_lists(lists: Sequence[Tuple[str, Sequence[pb.DatasetInfo]]]) -> List[DatasetInfo]:
    """Per-address dataset lists as one: a version (name and sha256) once, with the
    addresses that hold it."""
    order: List[Tuple[str, str]] = []
    first: Dict[Tuple[str, str], pb.DatasetInfo] = {}
    holders: Dict[Tuple[str, str], List[str]] = {}
    for address, infos in lists:
        for d in infos:
            key = (d.name, d.sha256)
            if key not in first:
                order.append(key)
                first[key] = d
                holders[key] = []
            holders[key].append(address)
    return [DatasetInfo._from_pb(first[k], tuple(holders[k])) for k in order]


def fanout_error(what: str, failed: Mapping[str, GpuSamplerError],
                 succeeded: Sequence[str]) -> GpuSamplerError:
    """One error for a dataset call that failed on some of the addresses it had to reach:
    the class of the first failure, a message naming every failed address and why, and
    ``failed`` / ``succeeded`` attributes for code that wants to act on them."""
    first = next(iter(failed.values()))
    n = len(failed) + len(succeeded)
    text = "; ".join(f"{a}: {e}" for a, e in failed.items())
    tail = f"; it succeeded on {', '.join(succeeded)}" if succeeded else ""
    error = type(first)(first.code, f"{what} failed on {len(failed)} of {n} addresses "
                        f"(no shared dataset repository, so each keeps its own copy): "
                        f"{text}{tail}")
    error.failed = dict(failed)
    error.succeeded = list(succeeded)
    return error
