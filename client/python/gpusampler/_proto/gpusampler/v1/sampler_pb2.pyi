from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
DTYPE_BFLOAT16: DType
DTYPE_BOOL: DType
DTYPE_FLOAT16: DType
DTYPE_FLOAT32: DType
DTYPE_FLOAT64: DType
DTYPE_INT16: DType
DTYPE_INT32: DType
DTYPE_INT64: DType
DTYPE_INT8: DType
DTYPE_UINT8: DType
DTYPE_UNSPECIFIED: DType
EPOCH_MODE_ELEMENTS: EpochMode
EPOCH_MODE_ROWS: EpochMode
EPOCH_MODE_UNSPECIFIED: EpochMode
FILL_POLICY_BOTH: FillPolicy
FILL_POLICY_NEGATIVES_ONLY: FillPolicy
FILL_POLICY_NONE: FillPolicy
FILL_POLICY_UNSPECIFIED: FillPolicy
SELECTION_HARDEST: Selection
SELECTION_MIXED: Selection
SELECTION_UNIFORM: Selection
SELECTION_UNSPECIFIED: Selection
SELECTION_WEIGHTED: Selection

class ClassSpec(_message.Message):
    __slots__ = ["count", "fraction", "hard_fraction", "labels", "rest", "selection"]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FRACTION_FIELD_NUMBER: _ClassVar[int]
    HARD_FRACTION_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    REST_FIELD_NUMBER: _ClassVar[int]
    SELECTION_FIELD_NUMBER: _ClassVar[int]
    count: int
    fraction: float
    hard_fraction: float
    labels: _containers.RepeatedCompositeFieldContainer[LabelRange]
    rest: bool
    selection: Selection
    def __init__(self, labels: _Optional[_Iterable[_Union[LabelRange, _Mapping]]] = ..., count: _Optional[int] = ..., fraction: _Optional[float] = ..., rest: bool = ..., selection: _Optional[_Union[Selection, str]] = ..., hard_fraction: _Optional[float] = ...) -> None: ...

class DatasetChunk(_message.Message):
    __slots__ = ["features", "labels", "name", "replace", "row_splits", "scores"]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    ROW_SPLITS_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    features: Tensor
    labels: Tensor
    name: str
    replace: bool
    row_splits: Tensor
    scores: Tensor
    def __init__(self, name: _Optional[str] = ..., labels: _Optional[_Union[Tensor, _Mapping]] = ..., features: _Optional[_Union[Tensor, _Mapping]] = ..., row_splits: _Optional[_Union[Tensor, _Mapping]] = ..., replace: bool = ..., scores: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class DatasetInfo(_message.Message):
    __slots__ = ["bytes", "devices", "feature_dtype", "feature_shape", "label_dtype", "name", "num_elements", "num_rows", "sha256"]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    FEATURE_DTYPE_FIELD_NUMBER: _ClassVar[int]
    FEATURE_SHAPE_FIELD_NUMBER: _ClassVar[int]
    LABEL_DTYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_ELEMENTS_FIELD_NUMBER: _ClassVar[int]
    NUM_ROWS_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    devices: _containers.RepeatedScalarFieldContainer[str]
    feature_dtype: DType
    feature_shape: _containers.RepeatedScalarFieldContainer[int]
    label_dtype: DType
    name: str
    num_elements: int
    num_rows: int
    sha256: str
    def __init__(self, name: _Optional[str] = ..., num_rows: _Optional[int] = ..., num_elements: _Optional[int] = ..., label_dtype: _Optional[_Union[DType, str]] = ..., feature_dtype: _Optional[_Union[DType, str]] = ..., feature_shape: _Optional[_Iterable[int]] = ..., bytes: _Optional[int] = ..., sha256: _Optional[str] = ..., devices: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteDatasetRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteDatasetResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DeviceInfo(_message.Message):
    __slots__ = ["id", "memory_bytes", "name"]
    ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    id: str
    memory_bytes: int
    name: str
    def __init__(self, name: _Optional[str] = ..., memory_bytes: _Optional[int] = ..., id: _Optional[str] = ...) -> None: ...

class EpochSpec(_message.Message):
    __slots__ = ["drop_last", "epoch", "mode", "rank", "rows_per_step", "shuffle_seed", "step", "world_size"]
    DROP_LAST_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    ROWS_PER_STEP_FIELD_NUMBER: _ClassVar[int]
    SHUFFLE_SEED_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    drop_last: bool
    epoch: int
    mode: EpochMode
    rank: int
    rows_per_step: int
    shuffle_seed: int
    step: int
    world_size: int
    def __init__(self, shuffle_seed: _Optional[int] = ..., epoch: _Optional[int] = ..., world_size: _Optional[int] = ..., rank: _Optional[int] = ..., step: _Optional[int] = ..., mode: _Optional[_Union[EpochMode, str]] = ..., rows_per_step: _Optional[int] = ..., drop_last: bool = ...) -> None: ...

class GetServerInfoRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class LabelRange(_message.Message):
    __slots__ = ["hi", "lo"]
    HI_FIELD_NUMBER: _ClassVar[int]
    LO_FIELD_NUMBER: _ClassVar[int]
    hi: int
    lo: int
    def __init__(self, lo: _Optional[int] = ..., hi: _Optional[int] = ...) -> None: ...

class Limits(_message.Message):
    __slots__ = ["max_batch_rows", "max_elements", "max_message_bytes", "max_num_samples", "max_row_elements", "max_rows"]
    MAX_BATCH_ROWS_FIELD_NUMBER: _ClassVar[int]
    MAX_ELEMENTS_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    MAX_ROWS_FIELD_NUMBER: _ClassVar[int]
    MAX_ROW_ELEMENTS_FIELD_NUMBER: _ClassVar[int]
    max_batch_rows: int
    max_elements: int
    max_message_bytes: int
    max_num_samples: int
    max_row_elements: int
    max_rows: int
    def __init__(self, max_message_bytes: _Optional[int] = ..., max_rows: _Optional[int] = ..., max_elements: _Optional[int] = ..., max_row_elements: _Optional[int] = ..., max_num_samples: _Optional[int] = ..., max_batch_rows: _Optional[int] = ...) -> None: ...

class ListDatasetsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListDatasetsResponse(_message.Message):
    __slots__ = ["datasets"]
    DATASETS_FIELD_NUMBER: _ClassVar[int]
    datasets: _containers.RepeatedCompositeFieldContainer[DatasetInfo]
    def __init__(self, datasets: _Optional[_Iterable[_Union[DatasetInfo, _Mapping]]] = ...) -> None: ...

class ListRegionsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListRegionsResponse(_message.Message):
    __slots__ = ["regions"]
    REGIONS_FIELD_NUMBER: _ClassVar[int]
    regions: _containers.RepeatedCompositeFieldContainer[RegionInfo]
    def __init__(self, regions: _Optional[_Iterable[_Union[RegionInfo, _Mapping]]] = ...) -> None: ...

class OutputRegion(_message.Message):
    __slots__ = ["byte_size", "name", "offset"]
    BYTE_SIZE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    byte_size: int
    name: str
    offset: int
    def __init__(self, name: _Optional[str] = ..., offset: _Optional[int] = ..., byte_size: _Optional[int] = ...) -> None: ...

class RegionInfo(_message.Message):
    __slots__ = ["byte_size", "name"]
    BYTE_SIZE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    byte_size: int
    name: str
    def __init__(self, name: _Optional[str] = ..., byte_size: _Optional[int] = ...) -> None: ...

class RegisterRegionRequest(_message.Message):
    __slots__ = ["byte_size", "name", "offset", "shm_key"]
    BYTE_SIZE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    SHM_KEY_FIELD_NUMBER: _ClassVar[int]
    byte_size: int
    name: str
    offset: int
    shm_key: str
    def __init__(self, name: _Optional[str] = ..., shm_key: _Optional[str] = ..., offset: _Optional[int] = ..., byte_size: _Optional[int] = ...) -> None: ...

class SampleRequest(_message.Message):
    __slots__ = ["dataset", "epoch", "features", "labels", "output_region", "request_id", "return_features", "row_splits", "rows", "scores", "seed", "spec"]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_REGION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RETURN_FEATURES_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    ROW_SPLITS_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    epoch: EpochSpec
    features: Tensor
    labels: Tensor
    output_region: OutputRegion
    request_id: str
    return_features: bool
    row_splits: Tensor
    rows: Tensor
    scores: Tensor
    seed: int
    spec: SamplingSpec
    def __init__(self, request_id: _Optional[str] = ..., spec: _Optional[_Union[SamplingSpec, _Mapping]] = ..., labels: _Optional[_Union[Tensor, _Mapping]] = ..., features: _Optional[_Union[Tensor, _Mapping]] = ..., row_splits: _Optional[_Union[Tensor, _Mapping]] = ..., seed: _Optional[int] = ..., dataset: _Optional[str] = ..., rows: _Optional[_Union[Tensor, _Mapping]] = ..., return_features: bool = ..., scores: _Optional[_Union[Tensor, _Mapping]] = ..., epoch: _Optional[_Union[EpochSpec, _Mapping]] = ..., output_region: _Optional[_Union[OutputRegion, _Mapping]] = ...) -> None: ...

class SampleResponse(_message.Message):
    __slots__ = ["dataset_sha256", "device", "epoch_steps", "features", "indices", "labels", "num_negative", "num_per_class", "num_positive", "request_id", "seed", "timing"]
    DATASET_SHA256_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_STEPS_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    INDICES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    NUM_NEGATIVE_FIELD_NUMBER: _ClassVar[int]
    NUM_PER_CLASS_FIELD_NUMBER: _ClassVar[int]
    NUM_POSITIVE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    dataset_sha256: str
    device: str
    epoch_steps: int
    features: Tensor
    indices: Tensor
    labels: Tensor
    num_negative: Tensor
    num_per_class: Tensor
    num_positive: Tensor
    request_id: str
    seed: int
    timing: ServerTiming
    def __init__(self, request_id: _Optional[str] = ..., indices: _Optional[_Union[Tensor, _Mapping]] = ..., labels: _Optional[_Union[Tensor, _Mapping]] = ..., features: _Optional[_Union[Tensor, _Mapping]] = ..., num_positive: _Optional[_Union[Tensor, _Mapping]] = ..., num_negative: _Optional[_Union[Tensor, _Mapping]] = ..., seed: _Optional[int] = ..., device: _Optional[str] = ..., timing: _Optional[_Union[ServerTiming, _Mapping]] = ..., dataset_sha256: _Optional[str] = ..., num_per_class: _Optional[_Union[Tensor, _Mapping]] = ..., epoch_steps: _Optional[int] = ...) -> None: ...

class SamplingSpec(_message.Message):
    __slots__ = ["classes", "fill_order", "fill_policy", "negative_label", "num_samples", "positive_fraction", "positive_label"]
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    FILL_ORDER_FIELD_NUMBER: _ClassVar[int]
    FILL_POLICY_FIELD_NUMBER: _ClassVar[int]
    NEGATIVE_LABEL_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    POSITIVE_FRACTION_FIELD_NUMBER: _ClassVar[int]
    POSITIVE_LABEL_FIELD_NUMBER: _ClassVar[int]
    classes: _containers.RepeatedCompositeFieldContainer[ClassSpec]
    fill_order: _containers.RepeatedScalarFieldContainer[int]
    fill_policy: FillPolicy
    negative_label: int
    num_samples: int
    positive_fraction: float
    positive_label: int
    def __init__(self, num_samples: _Optional[int] = ..., positive_fraction: _Optional[float] = ..., positive_label: _Optional[int] = ..., negative_label: _Optional[int] = ..., fill_policy: _Optional[_Union[FillPolicy, str]] = ..., classes: _Optional[_Iterable[_Union[ClassSpec, _Mapping]]] = ..., fill_order: _Optional[_Iterable[int]] = ...) -> None: ...

class ServerInfo(_message.Message):
    __slots__ = ["backend", "dataset_repository", "devices", "limits", "revision", "version"]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    DATASET_REPOSITORY_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    backend: str
    dataset_repository: bool
    devices: _containers.RepeatedCompositeFieldContainer[DeviceInfo]
    limits: Limits
    revision: str
    version: str
    def __init__(self, version: _Optional[str] = ..., devices: _Optional[_Iterable[_Union[DeviceInfo, _Mapping]]] = ..., backend: _Optional[str] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., revision: _Optional[str] = ..., dataset_repository: bool = ...) -> None: ...

class ServerTiming(_message.Message):
    __slots__ = ["batch_rows", "compute_us", "queue_us", "total_us"]
    BATCH_ROWS_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_US_FIELD_NUMBER: _ClassVar[int]
    QUEUE_US_FIELD_NUMBER: _ClassVar[int]
    TOTAL_US_FIELD_NUMBER: _ClassVar[int]
    batch_rows: int
    compute_us: int
    queue_us: int
    total_us: int
    def __init__(self, queue_us: _Optional[int] = ..., compute_us: _Optional[int] = ..., total_us: _Optional[int] = ..., batch_rows: _Optional[int] = ...) -> None: ...

class Tensor(_message.Message):
    __slots__ = ["data", "dtype", "shape"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    dtype: DType
    shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dtype: _Optional[_Union[DType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class UnregisterRegionRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class UnregisterRegionResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class FillPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Selection(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class EpochMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
