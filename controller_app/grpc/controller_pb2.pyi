from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScopeInfo(_message.Message):
    __slots__ = ("scope",)
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    scope: str
    def __init__(self, scope: _Optional[str] = ...) -> None: ...

class StreamInfo(_message.Message):
    __slots__ = ("scope", "stream", "accessOperation")
    class AccessOperation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNSPECIFIED: _ClassVar[StreamInfo.AccessOperation]
        NONE: _ClassVar[StreamInfo.AccessOperation]
        ANY: _ClassVar[StreamInfo.AccessOperation]
        READ: _ClassVar[StreamInfo.AccessOperation]
        WRITE: _ClassVar[StreamInfo.AccessOperation]
        READ_WRITE: _ClassVar[StreamInfo.AccessOperation]
    UNSPECIFIED: StreamInfo.AccessOperation
    NONE: StreamInfo.AccessOperation
    ANY: StreamInfo.AccessOperation
    READ: StreamInfo.AccessOperation
    WRITE: StreamInfo.AccessOperation
    READ_WRITE: StreamInfo.AccessOperation
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    ACCESSOPERATION_FIELD_NUMBER: _ClassVar[int]
    scope: str
    stream: str
    accessOperation: StreamInfo.AccessOperation
    def __init__(self, scope: _Optional[str] = ..., stream: _Optional[str] = ..., accessOperation: _Optional[_Union[StreamInfo.AccessOperation, str]] = ...) -> None: ...

class SegmentId(_message.Message):
    __slots__ = ("streamInfo", "segmentId")
    STREAMINFO_FIELD_NUMBER: _ClassVar[int]
    SEGMENTID_FIELD_NUMBER: _ClassVar[int]
    streamInfo: StreamInfo
    segmentId: int
    def __init__(self, streamInfo: _Optional[_Union[StreamInfo, _Mapping]] = ..., segmentId: _Optional[int] = ...) -> None: ...

class ContinuationToken(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: str
    def __init__(self, token: _Optional[str] = ...) -> None: ...

class ExistsResponse(_message.Message):
    __slots__ = ("exists",)
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    exists: bool
    def __init__(self, exists: _Optional[bool] = ...) -> None: ...

class CreateScopeStatus(_message.Message):
    __slots__ = ("status",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[CreateScopeStatus.Status]
        FAILURE: _ClassVar[CreateScopeStatus.Status]
        SCOPE_EXISTS: _ClassVar[CreateScopeStatus.Status]
        INVALID_SCOPE_NAME: _ClassVar[CreateScopeStatus.Status]
    SUCCESS: CreateScopeStatus.Status
    FAILURE: CreateScopeStatus.Status
    SCOPE_EXISTS: CreateScopeStatus.Status
    INVALID_SCOPE_NAME: CreateScopeStatus.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: CreateScopeStatus.Status
    def __init__(self, status: _Optional[_Union[CreateScopeStatus.Status, str]] = ...) -> None: ...

class DeleteScopeStatus(_message.Message):
    __slots__ = ("status",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[DeleteScopeStatus.Status]
        FAILURE: _ClassVar[DeleteScopeStatus.Status]
        SCOPE_NOT_FOUND: _ClassVar[DeleteScopeStatus.Status]
        SCOPE_NOT_EMPTY: _ClassVar[DeleteScopeStatus.Status]
    SUCCESS: DeleteScopeStatus.Status
    FAILURE: DeleteScopeStatus.Status
    SCOPE_NOT_FOUND: DeleteScopeStatus.Status
    SCOPE_NOT_EMPTY: DeleteScopeStatus.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: DeleteScopeStatus.Status
    def __init__(self, status: _Optional[_Union[DeleteScopeStatus.Status, str]] = ...) -> None: ...

class ScopesRequest(_message.Message):
    __slots__ = ("continuationToken",)
    CONTINUATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    continuationToken: ContinuationToken
    def __init__(self, continuationToken: _Optional[_Union[ContinuationToken, _Mapping]] = ...) -> None: ...

class ScopesResponse(_message.Message):
    __slots__ = ("scopes", "continuationToken")
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    CONTINUATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    scopes: _containers.RepeatedScalarFieldContainer[str]
    continuationToken: ContinuationToken
    def __init__(self, scopes: _Optional[_Iterable[str]] = ..., continuationToken: _Optional[_Union[ContinuationToken, _Mapping]] = ...) -> None: ...

class ScalingPolicy(_message.Message):
    __slots__ = ("scaleType", "targetRate", "scaleFactor", "minNumSegments")
    class ScalingPolicyType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        FIXED_NUM_SEGMENTS: _ClassVar[ScalingPolicy.ScalingPolicyType]
        BY_RATE_IN_KBYTES_PER_SEC: _ClassVar[ScalingPolicy.ScalingPolicyType]
        BY_RATE_IN_EVENTS_PER_SEC: _ClassVar[ScalingPolicy.ScalingPolicyType]
    FIXED_NUM_SEGMENTS: ScalingPolicy.ScalingPolicyType
    BY_RATE_IN_KBYTES_PER_SEC: ScalingPolicy.ScalingPolicyType
    BY_RATE_IN_EVENTS_PER_SEC: ScalingPolicy.ScalingPolicyType
    SCALETYPE_FIELD_NUMBER: _ClassVar[int]
    TARGETRATE_FIELD_NUMBER: _ClassVar[int]
    SCALEFACTOR_FIELD_NUMBER: _ClassVar[int]
    MINNUMSEGMENTS_FIELD_NUMBER: _ClassVar[int]
    scaleType: ScalingPolicy.ScalingPolicyType
    targetRate: int
    scaleFactor: int
    minNumSegments: int
    def __init__(self, scaleType: _Optional[_Union[ScalingPolicy.ScalingPolicyType, str]] = ..., targetRate: _Optional[int] = ..., scaleFactor: _Optional[int] = ..., minNumSegments: _Optional[int] = ...) -> None: ...

class RetentionPolicy(_message.Message):
    __slots__ = ("retentionType", "retentionParam", "retentionMax")
    class RetentionPolicyType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[RetentionPolicy.RetentionPolicyType]
        TIME: _ClassVar[RetentionPolicy.RetentionPolicyType]
        SIZE: _ClassVar[RetentionPolicy.RetentionPolicyType]
    UNKNOWN: RetentionPolicy.RetentionPolicyType
    TIME: RetentionPolicy.RetentionPolicyType
    SIZE: RetentionPolicy.RetentionPolicyType
    RETENTIONTYPE_FIELD_NUMBER: _ClassVar[int]
    RETENTIONPARAM_FIELD_NUMBER: _ClassVar[int]
    RETENTIONMAX_FIELD_NUMBER: _ClassVar[int]
    retentionType: RetentionPolicy.RetentionPolicyType
    retentionParam: int
    retentionMax: int
    def __init__(self, retentionType: _Optional[_Union[RetentionPolicy.RetentionPolicyType, str]] = ..., retentionParam: _Optional[int] = ..., retentionMax: _Optional[int] = ...) -> None: ...

class Tags(_message.Message):
    __slots__ = ("tag",)
    TAG_FIELD_NUMBER: _ClassVar[int]
    tag: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tag: _Optional[_Iterable[str]] = ...) -> None: ...

class StreamConfig(_message.Message):
    __slots__ = ("streamInfo", "scalingPolicy", "retentionPolicy", "tags", "timestampAggregationTimeout", "rolloverSizeBytes")
    STREAMINFO_FIELD_NUMBER: _ClassVar[int]
    SCALINGPOLICY_FIELD_NUMBER: _ClassVar[int]
    RETENTIONPOLICY_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMPAGGREGATIONTIMEOUT_FIELD_NUMBER: _ClassVar[int]
    ROLLOVERSIZEBYTES_FIELD_NUMBER: _ClassVar[int]
    streamInfo: StreamInfo
    scalingPolicy: ScalingPolicy
    retentionPolicy: RetentionPolicy
    tags: Tags
    timestampAggregationTimeout: int
    rolloverSizeBytes: int
    def __init__(self, streamInfo: _Optional[_Union[StreamInfo, _Mapping]] = ..., scalingPolicy: _Optional[_Union[ScalingPolicy, _Mapping]] = ..., retentionPolicy: _Optional[_Union[RetentionPolicy, _Mapping]] = ..., tags: _Optional[_Union[Tags, _Mapping]] = ..., timestampAggregationTimeout: _Optional[int] = ..., rolloverSizeBytes: _Optional[int] = ...) -> None: ...

class CreateStreamStatus(_message.Message):
    __slots__ = ("status",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[CreateStreamStatus.Status]
        FAILURE: _ClassVar[CreateStreamStatus.Status]
        STREAM_EXISTS: _ClassVar[CreateStreamStatus.Status]
        SCOPE_NOT_FOUND: _ClassVar[CreateStreamStatus.Status]
        INVALID_STREAM_NAME: _ClassVar[CreateStreamStatus.Status]
    SUCCESS: CreateStreamStatus.Status
    FAILURE: CreateStreamStatus.Status
    STREAM_EXISTS: CreateStreamStatus.Status
    SCOPE_NOT_FOUND: CreateStreamStatus.Status
    INVALID_STREAM_NAME: CreateStreamStatus.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: CreateStreamStatus.Status
    def __init__(self, status: _Optional[_Union[CreateStreamStatus.Status, str]] = ...) -> None: ...

class UpdateStreamStatus(_message.Message):
    __slots__ = ("status",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[UpdateStreamStatus.Status]
        FAILURE: _ClassVar[UpdateStreamStatus.Status]
        STREAM_NOT_FOUND: _ClassVar[UpdateStreamStatus.Status]
        SCOPE_NOT_FOUND: _ClassVar[UpdateStreamStatus.Status]
        STREAM_SEALED: _ClassVar[UpdateStreamStatus.Status]
    SUCCESS: UpdateStreamStatus.Status
    FAILURE: UpdateStreamStatus.Status
    STREAM_NOT_FOUND: UpdateStreamStatus.Status
    SCOPE_NOT_FOUND: UpdateStreamStatus.Status
    STREAM_SEALED: UpdateStreamStatus.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: UpdateStreamStatus.Status
    def __init__(self, status: _Optional[_Union[UpdateStreamStatus.Status, str]] = ...) -> None: ...

class DeleteStreamStatus(_message.Message):
    __slots__ = ("status",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[DeleteStreamStatus.Status]
        FAILURE: _ClassVar[DeleteStreamStatus.Status]
        STREAM_NOT_FOUND: _ClassVar[DeleteStreamStatus.Status]
        STREAM_NOT_SEALED: _ClassVar[DeleteStreamStatus.Status]
    SUCCESS: DeleteStreamStatus.Status
    FAILURE: DeleteStreamStatus.Status
    STREAM_NOT_FOUND: DeleteStreamStatus.Status
    STREAM_NOT_SEALED: DeleteStreamStatus.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: DeleteStreamStatus.Status
    def __init__(self, status: _Optional[_Union[DeleteStreamStatus.Status, str]] = ...) -> None: ...

class StreamsInScopeRequest(_message.Message):
    __slots__ = ("scope", "continuationToken")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    CONTINUATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    scope: ScopeInfo
    continuationToken: ContinuationToken
    def __init__(self, scope: _Optional[_Union[ScopeInfo, _Mapping]] = ..., continuationToken: _Optional[_Union[ContinuationToken, _Mapping]] = ...) -> None: ...

class StreamsInScopeWithTagRequest(_message.Message):
    __slots__ = ("scope", "tag", "continuationToken")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    CONTINUATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    scope: ScopeInfo
    tag: str
    continuationToken: ContinuationToken
    def __init__(self, scope: _Optional[_Union[ScopeInfo, _Mapping]] = ..., tag: _Optional[str] = ..., continuationToken: _Optional[_Union[ContinuationToken, _Mapping]] = ...) -> None: ...

class StreamsInScopeResponse(_message.Message):
    __slots__ = ("streams", "continuationToken", "status")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[StreamsInScopeResponse.Status]
        FAILURE: _ClassVar[StreamsInScopeResponse.Status]
        SCOPE_NOT_FOUND: _ClassVar[StreamsInScopeResponse.Status]
    SUCCESS: StreamsInScopeResponse.Status
    FAILURE: StreamsInScopeResponse.Status
    SCOPE_NOT_FOUND: StreamsInScopeResponse.Status
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    CONTINUATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    streams: _containers.RepeatedCompositeFieldContainer[StreamInfo]
    continuationToken: ContinuationToken
    status: StreamsInScopeResponse.Status
    def __init__(self, streams: _Optional[_Iterable[_Union[StreamInfo, _Mapping]]] = ..., continuationToken: _Optional[_Union[ContinuationToken, _Mapping]] = ..., status: _Optional[_Union[StreamsInScopeResponse.Status, str]] = ...) -> None: ...

class SegmentRange(_message.Message):
    __slots__ = ("segmentId", "minKey", "maxKey")
    SEGMENTID_FIELD_NUMBER: _ClassVar[int]
    MINKEY_FIELD_NUMBER: _ClassVar[int]
    MAXKEY_FIELD_NUMBER: _ClassVar[int]
    segmentId: SegmentId
    minKey: float
    maxKey: float
    def __init__(self, segmentId: _Optional[_Union[SegmentId, _Mapping]] = ..., minKey: _Optional[float] = ..., maxKey: _Optional[float] = ...) -> None: ...

class SegmentRanges(_message.Message):
    __slots__ = ("segmentRanges", "delegationToken")
    SEGMENTRANGES_FIELD_NUMBER: _ClassVar[int]
    DELEGATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    segmentRanges: _containers.RepeatedCompositeFieldContainer[SegmentRange]
    delegationToken: str
    def __init__(self, segmentRanges: _Optional[_Iterable[_Union[SegmentRange, _Mapping]]] = ..., delegationToken: _Optional[str] = ...) -> None: ...

class GetEpochSegmentsRequest(_message.Message):
    __slots__ = ("streamInfo", "epoch")
    STREAMINFO_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    streamInfo: StreamInfo
    epoch: int
    def __init__(self, streamInfo: _Optional[_Union[StreamInfo, _Mapping]] = ..., epoch: _Optional[int] = ...) -> None: ...

class GetSegmentsRequest(_message.Message):
    __slots__ = ("streamInfo", "timestamp")
    STREAMINFO_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    streamInfo: StreamInfo
    timestamp: int
    def __init__(self, streamInfo: _Optional[_Union[StreamInfo, _Mapping]] = ..., timestamp: _Optional[int] = ...) -> None: ...

class SegmentsAtTime(_message.Message):
    __slots__ = ("segments", "delegationToken")
    class SegmentLocation(_message.Message):
        __slots__ = ("segmentId", "offset")
        SEGMENTID_FIELD_NUMBER: _ClassVar[int]
        OFFSET_FIELD_NUMBER: _ClassVar[int]
        segmentId: SegmentId
        offset: int
        def __init__(self, segmentId: _Optional[_Union[SegmentId, _Mapping]] = ..., offset: _Optional[int] = ...) -> None: ...
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    DELEGATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    segments: _containers.RepeatedCompositeFieldContainer[SegmentsAtTime.SegmentLocation]
    delegationToken: str
    def __init__(self, segments: _Optional[_Iterable[_Union[SegmentsAtTime.SegmentLocation, _Mapping]]] = ..., delegationToken: _Optional[str] = ...) -> None: ...

class SuccessorResponse(_message.Message):
    __slots__ = ("segments", "delegationToken")
    class SegmentEntry(_message.Message):
        __slots__ = ("segment", "value")
        SEGMENT_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        segment: SegmentRange
        value: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, segment: _Optional[_Union[SegmentRange, _Mapping]] = ..., value: _Optional[_Iterable[int]] = ...) -> None: ...
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    DELEGATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    segments: _containers.RepeatedCompositeFieldContainer[SuccessorResponse.SegmentEntry]
    delegationToken: str
    def __init__(self, segments: _Optional[_Iterable[_Union[SuccessorResponse.SegmentEntry, _Mapping]]] = ..., delegationToken: _Optional[str] = ...) -> None: ...

class StreamCut(_message.Message):
    __slots__ = ("streamInfo", "cut")
    class CutEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    STREAMINFO_FIELD_NUMBER: _ClassVar[int]
    CUT_FIELD_NUMBER: _ClassVar[int]
    streamInfo: StreamInfo
    cut: _containers.ScalarMap[int, int]
    def __init__(self, streamInfo: _Optional[_Union[StreamInfo, _Mapping]] = ..., cut: _Optional[_Mapping[int, int]] = ...) -> None: ...

class StreamCutRange(_message.Message):
    __slots__ = ("streamInfo", "to")
    class FromEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    class ToEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    STREAMINFO_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    streamInfo: StreamInfo
    to: _containers.ScalarMap[int, int]
    def __init__(self, streamInfo: _Optional[_Union[StreamInfo, _Mapping]] = ..., to: _Optional[_Mapping[int, int]] = ..., **kwargs) -> None: ...

class StreamCutRangeResponse(_message.Message):
    __slots__ = ("segments", "delegationToken")
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    DELEGATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    segments: _containers.RepeatedCompositeFieldContainer[SegmentId]
    delegationToken: str
    def __init__(self, segments: _Optional[_Iterable[_Union[SegmentId, _Mapping]]] = ..., delegationToken: _Optional[str] = ...) -> None: ...

class SegmentValidityResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: bool
    def __init__(self, response: _Optional[bool] = ...) -> None: ...

class StreamCutValidityResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: bool
    def __init__(self, response: _Optional[bool] = ...) -> None: ...

class NodeUri(_message.Message):
    __slots__ = ("endpoint", "port")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    port: int
    def __init__(self, endpoint: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class DelegationToken(_message.Message):
    __slots__ = ("delegationToken",)
    DELEGATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    delegationToken: str
    def __init__(self, delegationToken: _Optional[str] = ...) -> None: ...

class ScaleRequest(_message.Message):
    __slots__ = ("streamInfo", "sealedSegments", "newKeyRanges", "scaleTimestamp")
    class KeyRangeEntry(_message.Message):
        __slots__ = ("start", "end")
        START_FIELD_NUMBER: _ClassVar[int]
        END_FIELD_NUMBER: _ClassVar[int]
        start: float
        end: float
        def __init__(self, start: _Optional[float] = ..., end: _Optional[float] = ...) -> None: ...
    STREAMINFO_FIELD_NUMBER: _ClassVar[int]
    SEALEDSEGMENTS_FIELD_NUMBER: _ClassVar[int]
    NEWKEYRANGES_FIELD_NUMBER: _ClassVar[int]
    SCALETIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    streamInfo: StreamInfo
    sealedSegments: _containers.RepeatedScalarFieldContainer[int]
    newKeyRanges: _containers.RepeatedCompositeFieldContainer[ScaleRequest.KeyRangeEntry]
    scaleTimestamp: int
    def __init__(self, streamInfo: _Optional[_Union[StreamInfo, _Mapping]] = ..., sealedSegments: _Optional[_Iterable[int]] = ..., newKeyRanges: _Optional[_Iterable[_Union[ScaleRequest.KeyRangeEntry, _Mapping]]] = ..., scaleTimestamp: _Optional[int] = ...) -> None: ...

class ScaleResponse(_message.Message):
    __slots__ = ("status", "segments", "epoch")
    class ScaleStreamStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STARTED: _ClassVar[ScaleResponse.ScaleStreamStatus]
        FAILURE: _ClassVar[ScaleResponse.ScaleStreamStatus]
        PRECONDITION_FAILED: _ClassVar[ScaleResponse.ScaleStreamStatus]
    STARTED: ScaleResponse.ScaleStreamStatus
    FAILURE: ScaleResponse.ScaleStreamStatus
    PRECONDITION_FAILED: ScaleResponse.ScaleStreamStatus
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    status: ScaleResponse.ScaleStreamStatus
    segments: _containers.RepeatedCompositeFieldContainer[SegmentRange]
    epoch: int
    def __init__(self, status: _Optional[_Union[ScaleResponse.ScaleStreamStatus, str]] = ..., segments: _Optional[_Iterable[_Union[SegmentRange, _Mapping]]] = ..., epoch: _Optional[int] = ...) -> None: ...

class ScaleStatusRequest(_message.Message):
    __slots__ = ("streamInfo", "epoch")
    STREAMINFO_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    streamInfo: StreamInfo
    epoch: int
    def __init__(self, streamInfo: _Optional[_Union[StreamInfo, _Mapping]] = ..., epoch: _Optional[int] = ...) -> None: ...

class ScaleStatusResponse(_message.Message):
    __slots__ = ("status",)
    class ScaleStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        IN_PROGRESS: _ClassVar[ScaleStatusResponse.ScaleStatus]
        SUCCESS: _ClassVar[ScaleStatusResponse.ScaleStatus]
        INVALID_INPUT: _ClassVar[ScaleStatusResponse.ScaleStatus]
        INTERNAL_ERROR: _ClassVar[ScaleStatusResponse.ScaleStatus]
    IN_PROGRESS: ScaleStatusResponse.ScaleStatus
    SUCCESS: ScaleStatusResponse.ScaleStatus
    INVALID_INPUT: ScaleStatusResponse.ScaleStatus
    INTERNAL_ERROR: ScaleStatusResponse.ScaleStatus
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: ScaleStatusResponse.ScaleStatus
    def __init__(self, status: _Optional[_Union[ScaleStatusResponse.ScaleStatus, str]] = ...) -> None: ...

class TxnId(_message.Message):
    __slots__ = ("highBits", "lowBits")
    HIGHBITS_FIELD_NUMBER: _ClassVar[int]
    LOWBITS_FIELD_NUMBER: _ClassVar[int]
    highBits: int
    lowBits: int
    def __init__(self, highBits: _Optional[int] = ..., lowBits: _Optional[int] = ...) -> None: ...

class CreateTxnRequest(_message.Message):
    __slots__ = ("streamInfo", "lease", "scaleGracePeriod")
    STREAMINFO_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    SCALEGRACEPERIOD_FIELD_NUMBER: _ClassVar[int]
    streamInfo: StreamInfo
    lease: int
    scaleGracePeriod: int
    def __init__(self, streamInfo: _Optional[_Union[StreamInfo, _Mapping]] = ..., lease: _Optional[int] = ..., scaleGracePeriod: _Optional[int] = ...) -> None: ...

class CreateTxnResponse(_message.Message):
    __slots__ = ("txnId", "activeSegments", "delegationToken")
    TXNID_FIELD_NUMBER: _ClassVar[int]
    ACTIVESEGMENTS_FIELD_NUMBER: _ClassVar[int]
    DELEGATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    txnId: TxnId
    activeSegments: _containers.RepeatedCompositeFieldContainer[SegmentRange]
    delegationToken: str
    def __init__(self, txnId: _Optional[_Union[TxnId, _Mapping]] = ..., activeSegments: _Optional[_Iterable[_Union[SegmentRange, _Mapping]]] = ..., delegationToken: _Optional[str] = ...) -> None: ...

class TxnRequest(_message.Message):
    __slots__ = ("streamInfo", "txnId", "writerId", "timestamp")
    STREAMINFO_FIELD_NUMBER: _ClassVar[int]
    TXNID_FIELD_NUMBER: _ClassVar[int]
    WRITERID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    streamInfo: StreamInfo
    txnId: TxnId
    writerId: str
    timestamp: int
    def __init__(self, streamInfo: _Optional[_Union[StreamInfo, _Mapping]] = ..., txnId: _Optional[_Union[TxnId, _Mapping]] = ..., writerId: _Optional[str] = ..., timestamp: _Optional[int] = ...) -> None: ...

class PingTxnRequest(_message.Message):
    __slots__ = ("streamInfo", "txnId", "lease")
    STREAMINFO_FIELD_NUMBER: _ClassVar[int]
    TXNID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    streamInfo: StreamInfo
    txnId: TxnId
    lease: int
    def __init__(self, streamInfo: _Optional[_Union[StreamInfo, _Mapping]] = ..., txnId: _Optional[_Union[TxnId, _Mapping]] = ..., lease: _Optional[int] = ...) -> None: ...

class TxnStatus(_message.Message):
    __slots__ = ("status",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[TxnStatus.Status]
        FAILURE: _ClassVar[TxnStatus.Status]
        STREAM_NOT_FOUND: _ClassVar[TxnStatus.Status]
        TRANSACTION_NOT_FOUND: _ClassVar[TxnStatus.Status]
    SUCCESS: TxnStatus.Status
    FAILURE: TxnStatus.Status
    STREAM_NOT_FOUND: TxnStatus.Status
    TRANSACTION_NOT_FOUND: TxnStatus.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: TxnStatus.Status
    def __init__(self, status: _Optional[_Union[TxnStatus.Status, str]] = ...) -> None: ...

class PingTxnStatus(_message.Message):
    __slots__ = ("status",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OK: _ClassVar[PingTxnStatus.Status]
        LEASE_TOO_LARGE: _ClassVar[PingTxnStatus.Status]
        MAX_EXECUTION_TIME_EXCEEDED: _ClassVar[PingTxnStatus.Status]
        SCALE_GRACE_TIME_EXCEEDED: _ClassVar[PingTxnStatus.Status]
        DISCONNECTED: _ClassVar[PingTxnStatus.Status]
        COMMITTED: _ClassVar[PingTxnStatus.Status]
        ABORTED: _ClassVar[PingTxnStatus.Status]
        UNKNOWN: _ClassVar[PingTxnStatus.Status]
    OK: PingTxnStatus.Status
    LEASE_TOO_LARGE: PingTxnStatus.Status
    MAX_EXECUTION_TIME_EXCEEDED: PingTxnStatus.Status
    SCALE_GRACE_TIME_EXCEEDED: PingTxnStatus.Status
    DISCONNECTED: PingTxnStatus.Status
    COMMITTED: PingTxnStatus.Status
    ABORTED: PingTxnStatus.Status
    UNKNOWN: PingTxnStatus.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: PingTxnStatus.Status
    def __init__(self, status: _Optional[_Union[PingTxnStatus.Status, str]] = ...) -> None: ...

class TxnState(_message.Message):
    __slots__ = ("state",)
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[TxnState.State]
        OPEN: _ClassVar[TxnState.State]
        COMMITTING: _ClassVar[TxnState.State]
        COMMITTED: _ClassVar[TxnState.State]
        ABORTING: _ClassVar[TxnState.State]
        ABORTED: _ClassVar[TxnState.State]
    UNKNOWN: TxnState.State
    OPEN: TxnState.State
    COMMITTING: TxnState.State
    COMMITTED: TxnState.State
    ABORTING: TxnState.State
    ABORTED: TxnState.State
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: TxnState.State
    def __init__(self, state: _Optional[_Union[TxnState.State, str]] = ...) -> None: ...

class ListCompletedTxnRequest(_message.Message):
    __slots__ = ("streamInfo",)
    STREAMINFO_FIELD_NUMBER: _ClassVar[int]
    streamInfo: StreamInfo
    def __init__(self, streamInfo: _Optional[_Union[StreamInfo, _Mapping]] = ...) -> None: ...

class TxnResponse(_message.Message):
    __slots__ = ("txnId", "status")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        COMMITTED: _ClassVar[TxnResponse.Status]
        ABORTED: _ClassVar[TxnResponse.Status]
    COMMITTED: TxnResponse.Status
    ABORTED: TxnResponse.Status
    TXNID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    txnId: TxnId
    status: TxnResponse.Status
    def __init__(self, txnId: _Optional[_Union[TxnId, _Mapping]] = ..., status: _Optional[_Union[TxnResponse.Status, str]] = ...) -> None: ...

class ListCompletedTxnResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _containers.RepeatedCompositeFieldContainer[TxnResponse]
    def __init__(self, response: _Optional[_Iterable[_Union[TxnResponse, _Mapping]]] = ...) -> None: ...

class TimestampFromWriter(_message.Message):
    __slots__ = ("writer", "position", "timestamp")
    WRITER_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    writer: str
    position: StreamCut
    timestamp: int
    def __init__(self, writer: _Optional[str] = ..., position: _Optional[_Union[StreamCut, _Mapping]] = ..., timestamp: _Optional[int] = ...) -> None: ...

class TimestampResponse(_message.Message):
    __slots__ = ("result",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[TimestampResponse.Status]
        INVALID_TIME: _ClassVar[TimestampResponse.Status]
        INVALID_POSITION: _ClassVar[TimestampResponse.Status]
        INTERNAL_ERROR: _ClassVar[TimestampResponse.Status]
    SUCCESS: TimestampResponse.Status
    INVALID_TIME: TimestampResponse.Status
    INVALID_POSITION: TimestampResponse.Status
    INTERNAL_ERROR: TimestampResponse.Status
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: TimestampResponse.Status
    def __init__(self, result: _Optional[_Union[TimestampResponse.Status, str]] = ...) -> None: ...

class RemoveWriterRequest(_message.Message):
    __slots__ = ("writer", "stream")
    WRITER_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    writer: str
    stream: StreamInfo
    def __init__(self, writer: _Optional[str] = ..., stream: _Optional[_Union[StreamInfo, _Mapping]] = ...) -> None: ...

class RemoveWriterResponse(_message.Message):
    __slots__ = ("result",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[RemoveWriterResponse.Status]
        UNKNOWN_WRITER: _ClassVar[RemoveWriterResponse.Status]
        STREAM_DOES_NOT_EXIST: _ClassVar[RemoveWriterResponse.Status]
        INTERNAL_ERROR: _ClassVar[RemoveWriterResponse.Status]
    SUCCESS: RemoveWriterResponse.Status
    UNKNOWN_WRITER: RemoveWriterResponse.Status
    STREAM_DOES_NOT_EXIST: RemoveWriterResponse.Status
    INTERNAL_ERROR: RemoveWriterResponse.Status
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: RemoveWriterResponse.Status
    def __init__(self, result: _Optional[_Union[RemoveWriterResponse.Status, str]] = ...) -> None: ...

class ReaderGroupConfiguration(_message.Message):
    __slots__ = ("scope", "readerGroupName", "groupRefreshTimeMillis", "automaticCheckpointIntervalMillis", "maxOutstandingCheckpointRequest", "retentionType", "generation", "readerGroupId", "startingStreamCuts", "endingStreamCuts", "rolloverSizeBytes")
    class RetentionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        NONE: _ClassVar[ReaderGroupConfiguration.RetentionType]
        MANUAL: _ClassVar[ReaderGroupConfiguration.RetentionType]
        AUTOMATIC: _ClassVar[ReaderGroupConfiguration.RetentionType]
    NONE: ReaderGroupConfiguration.RetentionType
    MANUAL: ReaderGroupConfiguration.RetentionType
    AUTOMATIC: ReaderGroupConfiguration.RetentionType
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    READERGROUPNAME_FIELD_NUMBER: _ClassVar[int]
    GROUPREFRESHTIMEMILLIS_FIELD_NUMBER: _ClassVar[int]
    AUTOMATICCHECKPOINTINTERVALMILLIS_FIELD_NUMBER: _ClassVar[int]
    MAXOUTSTANDINGCHECKPOINTREQUEST_FIELD_NUMBER: _ClassVar[int]
    RETENTIONTYPE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    READERGROUPID_FIELD_NUMBER: _ClassVar[int]
    STARTINGSTREAMCUTS_FIELD_NUMBER: _ClassVar[int]
    ENDINGSTREAMCUTS_FIELD_NUMBER: _ClassVar[int]
    ROLLOVERSIZEBYTES_FIELD_NUMBER: _ClassVar[int]
    scope: str
    readerGroupName: str
    groupRefreshTimeMillis: int
    automaticCheckpointIntervalMillis: int
    maxOutstandingCheckpointRequest: int
    retentionType: int
    generation: int
    readerGroupId: str
    startingStreamCuts: _containers.RepeatedCompositeFieldContainer[StreamCut]
    endingStreamCuts: _containers.RepeatedCompositeFieldContainer[StreamCut]
    rolloverSizeBytes: int
    def __init__(self, scope: _Optional[str] = ..., readerGroupName: _Optional[str] = ..., groupRefreshTimeMillis: _Optional[int] = ..., automaticCheckpointIntervalMillis: _Optional[int] = ..., maxOutstandingCheckpointRequest: _Optional[int] = ..., retentionType: _Optional[int] = ..., generation: _Optional[int] = ..., readerGroupId: _Optional[str] = ..., startingStreamCuts: _Optional[_Iterable[_Union[StreamCut, _Mapping]]] = ..., endingStreamCuts: _Optional[_Iterable[_Union[StreamCut, _Mapping]]] = ..., rolloverSizeBytes: _Optional[int] = ...) -> None: ...

class ReaderGroupInfo(_message.Message):
    __slots__ = ("scope", "readerGroup", "readerGroupId", "generation")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    READERGROUP_FIELD_NUMBER: _ClassVar[int]
    READERGROUPID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    scope: str
    readerGroup: str
    readerGroupId: str
    generation: int
    def __init__(self, scope: _Optional[str] = ..., readerGroup: _Optional[str] = ..., readerGroupId: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class CreateReaderGroupResponse(_message.Message):
    __slots__ = ("status", "config")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[CreateReaderGroupResponse.Status]
        FAILURE: _ClassVar[CreateReaderGroupResponse.Status]
        SCOPE_NOT_FOUND: _ClassVar[CreateReaderGroupResponse.Status]
        INVALID_RG_NAME: _ClassVar[CreateReaderGroupResponse.Status]
    SUCCESS: CreateReaderGroupResponse.Status
    FAILURE: CreateReaderGroupResponse.Status
    SCOPE_NOT_FOUND: CreateReaderGroupResponse.Status
    INVALID_RG_NAME: CreateReaderGroupResponse.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    status: CreateReaderGroupResponse.Status
    config: ReaderGroupConfiguration
    def __init__(self, status: _Optional[_Union[CreateReaderGroupResponse.Status, str]] = ..., config: _Optional[_Union[ReaderGroupConfiguration, _Mapping]] = ...) -> None: ...

class ReaderGroupConfigResponse(_message.Message):
    __slots__ = ("config", "status")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[ReaderGroupConfigResponse.Status]
        FAILURE: _ClassVar[ReaderGroupConfigResponse.Status]
        RG_NOT_FOUND: _ClassVar[ReaderGroupConfigResponse.Status]
    SUCCESS: ReaderGroupConfigResponse.Status
    FAILURE: ReaderGroupConfigResponse.Status
    RG_NOT_FOUND: ReaderGroupConfigResponse.Status
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    config: ReaderGroupConfiguration
    status: ReaderGroupConfigResponse.Status
    def __init__(self, config: _Optional[_Union[ReaderGroupConfiguration, _Mapping]] = ..., status: _Optional[_Union[ReaderGroupConfigResponse.Status, str]] = ...) -> None: ...

class UpdateReaderGroupResponse(_message.Message):
    __slots__ = ("status", "generation")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[UpdateReaderGroupResponse.Status]
        FAILURE: _ClassVar[UpdateReaderGroupResponse.Status]
        RG_NOT_FOUND: _ClassVar[UpdateReaderGroupResponse.Status]
        INVALID_CONFIG: _ClassVar[UpdateReaderGroupResponse.Status]
    SUCCESS: UpdateReaderGroupResponse.Status
    FAILURE: UpdateReaderGroupResponse.Status
    RG_NOT_FOUND: UpdateReaderGroupResponse.Status
    INVALID_CONFIG: UpdateReaderGroupResponse.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    status: UpdateReaderGroupResponse.Status
    generation: int
    def __init__(self, status: _Optional[_Union[UpdateReaderGroupResponse.Status, str]] = ..., generation: _Optional[int] = ...) -> None: ...

class DeleteReaderGroupStatus(_message.Message):
    __slots__ = ("status",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[DeleteReaderGroupStatus.Status]
        FAILURE: _ClassVar[DeleteReaderGroupStatus.Status]
        RG_NOT_FOUND: _ClassVar[DeleteReaderGroupStatus.Status]
    SUCCESS: DeleteReaderGroupStatus.Status
    FAILURE: DeleteReaderGroupStatus.Status
    RG_NOT_FOUND: DeleteReaderGroupStatus.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: DeleteReaderGroupStatus.Status
    def __init__(self, status: _Optional[_Union[DeleteReaderGroupStatus.Status, str]] = ...) -> None: ...

class SubscribersResponse(_message.Message):
    __slots__ = ("subscribers", "status")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[SubscribersResponse.Status]
        FAILURE: _ClassVar[SubscribersResponse.Status]
        STREAM_NOT_FOUND: _ClassVar[SubscribersResponse.Status]
    SUCCESS: SubscribersResponse.Status
    FAILURE: SubscribersResponse.Status
    STREAM_NOT_FOUND: SubscribersResponse.Status
    SUBSCRIBERS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    subscribers: _containers.RepeatedScalarFieldContainer[str]
    status: SubscribersResponse.Status
    def __init__(self, subscribers: _Optional[_Iterable[str]] = ..., status: _Optional[_Union[SubscribersResponse.Status, str]] = ...) -> None: ...

class SubscriberStreamCut(_message.Message):
    __slots__ = ("subscriber", "generation", "readerGroupId", "streamCut")
    SUBSCRIBER_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    READERGROUPID_FIELD_NUMBER: _ClassVar[int]
    STREAMCUT_FIELD_NUMBER: _ClassVar[int]
    subscriber: str
    generation: int
    readerGroupId: str
    streamCut: StreamCut
    def __init__(self, subscriber: _Optional[str] = ..., generation: _Optional[int] = ..., readerGroupId: _Optional[str] = ..., streamCut: _Optional[_Union[StreamCut, _Mapping]] = ...) -> None: ...

class UpdateSubscriberStatus(_message.Message):
    __slots__ = ("status",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[UpdateSubscriberStatus.Status]
        FAILURE: _ClassVar[UpdateSubscriberStatus.Status]
        STREAM_NOT_FOUND: _ClassVar[UpdateSubscriberStatus.Status]
        SUBSCRIBER_NOT_FOUND: _ClassVar[UpdateSubscriberStatus.Status]
        STREAM_CUT_NOT_VALID: _ClassVar[UpdateSubscriberStatus.Status]
        GENERATION_MISMATCH: _ClassVar[UpdateSubscriberStatus.Status]
    SUCCESS: UpdateSubscriberStatus.Status
    FAILURE: UpdateSubscriberStatus.Status
    STREAM_NOT_FOUND: UpdateSubscriberStatus.Status
    SUBSCRIBER_NOT_FOUND: UpdateSubscriberStatus.Status
    STREAM_CUT_NOT_VALID: UpdateSubscriberStatus.Status
    GENERATION_MISMATCH: UpdateSubscriberStatus.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: UpdateSubscriberStatus.Status
    def __init__(self, status: _Optional[_Union[UpdateSubscriberStatus.Status, str]] = ...) -> None: ...

class KeyValueTableConfig(_message.Message):
    __slots__ = ("scope", "kvtName", "partitionCount", "primaryKeyLength", "secondaryKeyLength", "rolloverSizeBytes")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KVTNAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONCOUNT_FIELD_NUMBER: _ClassVar[int]
    PRIMARYKEYLENGTH_FIELD_NUMBER: _ClassVar[int]
    SECONDARYKEYLENGTH_FIELD_NUMBER: _ClassVar[int]
    ROLLOVERSIZEBYTES_FIELD_NUMBER: _ClassVar[int]
    scope: str
    kvtName: str
    partitionCount: int
    primaryKeyLength: int
    secondaryKeyLength: int
    rolloverSizeBytes: int
    def __init__(self, scope: _Optional[str] = ..., kvtName: _Optional[str] = ..., partitionCount: _Optional[int] = ..., primaryKeyLength: _Optional[int] = ..., secondaryKeyLength: _Optional[int] = ..., rolloverSizeBytes: _Optional[int] = ...) -> None: ...

class KeyValueTableInfo(_message.Message):
    __slots__ = ("scope", "kvtName")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KVTNAME_FIELD_NUMBER: _ClassVar[int]
    scope: str
    kvtName: str
    def __init__(self, scope: _Optional[str] = ..., kvtName: _Optional[str] = ...) -> None: ...

class CreateKeyValueTableStatus(_message.Message):
    __slots__ = ("status",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[CreateKeyValueTableStatus.Status]
        FAILURE: _ClassVar[CreateKeyValueTableStatus.Status]
        TABLE_EXISTS: _ClassVar[CreateKeyValueTableStatus.Status]
        SCOPE_NOT_FOUND: _ClassVar[CreateKeyValueTableStatus.Status]
        INVALID_TABLE_NAME: _ClassVar[CreateKeyValueTableStatus.Status]
    SUCCESS: CreateKeyValueTableStatus.Status
    FAILURE: CreateKeyValueTableStatus.Status
    TABLE_EXISTS: CreateKeyValueTableStatus.Status
    SCOPE_NOT_FOUND: CreateKeyValueTableStatus.Status
    INVALID_TABLE_NAME: CreateKeyValueTableStatus.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: CreateKeyValueTableStatus.Status
    def __init__(self, status: _Optional[_Union[CreateKeyValueTableStatus.Status, str]] = ...) -> None: ...

class KeyValueTableConfigResponse(_message.Message):
    __slots__ = ("config", "status")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[KeyValueTableConfigResponse.Status]
        FAILURE: _ClassVar[KeyValueTableConfigResponse.Status]
        TABLE_NOT_FOUND: _ClassVar[KeyValueTableConfigResponse.Status]
    SUCCESS: KeyValueTableConfigResponse.Status
    FAILURE: KeyValueTableConfigResponse.Status
    TABLE_NOT_FOUND: KeyValueTableConfigResponse.Status
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    config: KeyValueTableConfig
    status: KeyValueTableConfigResponse.Status
    def __init__(self, config: _Optional[_Union[KeyValueTableConfig, _Mapping]] = ..., status: _Optional[_Union[KeyValueTableConfigResponse.Status, str]] = ...) -> None: ...

class KVTablesInScopeRequest(_message.Message):
    __slots__ = ("scope", "continuationToken")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    CONTINUATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    scope: ScopeInfo
    continuationToken: ContinuationToken
    def __init__(self, scope: _Optional[_Union[ScopeInfo, _Mapping]] = ..., continuationToken: _Optional[_Union[ContinuationToken, _Mapping]] = ...) -> None: ...

class KVTablesInScopeResponse(_message.Message):
    __slots__ = ("kvtables", "continuationToken", "status")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[KVTablesInScopeResponse.Status]
        FAILURE: _ClassVar[KVTablesInScopeResponse.Status]
        SCOPE_NOT_FOUND: _ClassVar[KVTablesInScopeResponse.Status]
    SUCCESS: KVTablesInScopeResponse.Status
    FAILURE: KVTablesInScopeResponse.Status
    SCOPE_NOT_FOUND: KVTablesInScopeResponse.Status
    KVTABLES_FIELD_NUMBER: _ClassVar[int]
    CONTINUATIONTOKEN_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    kvtables: _containers.RepeatedCompositeFieldContainer[KeyValueTableInfo]
    continuationToken: ContinuationToken
    status: KVTablesInScopeResponse.Status
    def __init__(self, kvtables: _Optional[_Iterable[_Union[KeyValueTableInfo, _Mapping]]] = ..., continuationToken: _Optional[_Union[ContinuationToken, _Mapping]] = ..., status: _Optional[_Union[KVTablesInScopeResponse.Status, str]] = ...) -> None: ...

class DeleteKVTableStatus(_message.Message):
    __slots__ = ("status",)
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUCCESS: _ClassVar[DeleteKVTableStatus.Status]
        FAILURE: _ClassVar[DeleteKVTableStatus.Status]
        TABLE_NOT_FOUND: _ClassVar[DeleteKVTableStatus.Status]
    SUCCESS: DeleteKVTableStatus.Status
    FAILURE: DeleteKVTableStatus.Status
    TABLE_NOT_FOUND: DeleteKVTableStatus.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: DeleteKVTableStatus.Status
    def __init__(self, status: _Optional[_Union[DeleteKVTableStatus.Status, str]] = ...) -> None: ...

class ServerRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ServerResponse(_message.Message):
    __slots__ = ("nodeURI",)
    NODEURI_FIELD_NUMBER: _ClassVar[int]
    nodeURI: _containers.RepeatedCompositeFieldContainer[NodeUri]
    def __init__(self, nodeURI: _Optional[_Iterable[_Union[NodeUri, _Mapping]]] = ...) -> None: ...

class ControllerToBucketMappingRequest(_message.Message):
    __slots__ = ("serviceType",)
    class BucketType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        RetentionService: _ClassVar[ControllerToBucketMappingRequest.BucketType]
        WatermarkingService: _ClassVar[ControllerToBucketMappingRequest.BucketType]
    RetentionService: ControllerToBucketMappingRequest.BucketType
    WatermarkingService: ControllerToBucketMappingRequest.BucketType
    SERVICETYPE_FIELD_NUMBER: _ClassVar[int]
    serviceType: ControllerToBucketMappingRequest.BucketType
    def __init__(self, serviceType: _Optional[_Union[ControllerToBucketMappingRequest.BucketType, str]] = ...) -> None: ...

class BucketIds(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, id: _Optional[_Iterable[int]] = ...) -> None: ...

class ControllerToBucketMappingResponse(_message.Message):
    __slots__ = ("mapping",)
    class MappingEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: BucketIds
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[BucketIds, _Mapping]] = ...) -> None: ...
    MAPPING_FIELD_NUMBER: _ClassVar[int]
    mapping: _containers.MessageMap[str, BucketIds]
    def __init__(self, mapping: _Optional[_Mapping[str, BucketIds]] = ...) -> None: ...
