from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

CANCELLED: Status
COMPILE_ERROR: Status
DESCRIPTOR: _descriptor.FileDescriptor
INTERPRETER_FRESH: Interpreter
INTERPRETER_PRESTARTED: Interpreter
INTERPRETER_UNSPECIFIED: Interpreter
ISOLATION_FRESH: Isolation
ISOLATION_SHARED: Isolation
KERNEL_DIED: Status
KILLED_BY_SIGNAL: Status
LOST: Status
NETWORK_MODE_ALLOWLIST: NetworkMode
NETWORK_MODE_NONE: NetworkMode
NETWORK_MODE_UNSPECIFIED: NetworkMode
NONZERO_EXIT: Status
OK: Status
OOM_KILLED: Status
OUTPUT_LIMIT: Status
PROCESS_EXITED: ProcessState
PROCESS_KILLED: ProcessState
PROCESS_RUNNING: ProcessState
PROCESS_STATE_UNSPECIFIED: ProcessState
RUNTIME_ERROR: Status
RUN_STATE_FINISHED: RunState
RUN_STATE_RUNNING: RunState
RUN_STATE_UNSPECIFIED: RunState
SESSION_STATE_ACTIVE: SessionState
SESSION_STATE_DELETED: SessionState
SESSION_STATE_EXPIRED: SessionState
SESSION_STATE_FAILED: SessionState
SESSION_STATE_LOST: SessionState
SESSION_STATE_PAUSED: SessionState
SESSION_STATE_UNSPECIFIED: SessionState
STATUS_UNSPECIFIED: Status
TIMEOUT: Status
TOOL_RISK_HIGH: ToolRisk
TOOL_RISK_READ: ToolRisk
TOOL_RISK_UNSPECIFIED: ToolRisk
TOOL_RISK_WRITE: ToolRisk

class AttachProcessEvent(_message.Message):
    __slots__ = ["dropped", "exited", "stderr", "stdout"]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    dropped: int
    exited: ProcessInfo
    stderr: bytes
    stdout: bytes
    def __init__(self, stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., dropped: _Optional[int] = ..., exited: _Optional[_Union[ProcessInfo, _Mapping]] = ...) -> None: ...

class AttachProcessRequest(_message.Message):
    __slots__ = ["close_stdin", "resize", "signal", "start", "stdin"]
    CLOSE_STDIN_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    close_stdin: bool
    resize: TerminalSize
    signal: int
    start: AttachStart
    stdin: bytes
    def __init__(self, start: _Optional[_Union[AttachStart, _Mapping]] = ..., stdin: _Optional[bytes] = ..., close_stdin: bool = ..., resize: _Optional[_Union[TerminalSize, _Mapping]] = ..., signal: _Optional[int] = ...) -> None: ...

class AttachRunRequest(_message.Message):
    __slots__ = ["run_id", "stderr_offset", "stdout_offset"]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    stderr_offset: int
    stdout_offset: int
    def __init__(self, run_id: _Optional[str] = ..., stdout_offset: _Optional[int] = ..., stderr_offset: _Optional[int] = ...) -> None: ...

class AttachStart(_message.Message):
    __slots__ = ["process_id", "session_id", "stderr_offset", "stdout_offset"]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    session_id: str
    stderr_offset: int
    stdout_offset: int
    def __init__(self, session_id: _Optional[str] = ..., process_id: _Optional[str] = ..., stdout_offset: _Optional[int] = ..., stderr_offset: _Optional[int] = ...) -> None: ...

class BundleChunk(_message.Message):
    __slots__ = ["data"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ["run_id"]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class CancelRunResponse(_message.Message):
    __slots__ = ["state"]
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: RunState
    def __init__(self, state: _Optional[_Union[RunState, str]] = ...) -> None: ...

class CaseProgress(_message.Message):
    __slots__ = ["case", "submission_id"]
    CASE_FIELD_NUMBER: _ClassVar[int]
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    case: CaseResult
    submission_id: str
    def __init__(self, submission_id: _Optional[str] = ..., case: _Optional[_Union[CaseResult, _Mapping]] = ...) -> None: ...

class CaseResult(_message.Message):
    __slots__ = ["bundle_digest", "duration", "exit_code", "index", "message", "name", "peak_memory_bytes", "run_id", "signal", "status", "stderr", "stderr_truncated", "stdout", "stdout_truncated", "verdict"]
    BUNDLE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDERR_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDOUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    bundle_digest: str
    duration: _duration_pb2.Duration
    exit_code: int
    index: int
    message: str
    name: str
    peak_memory_bytes: int
    run_id: str
    signal: int
    status: Status
    stderr: bytes
    stderr_truncated: bool
    stdout: bytes
    stdout_truncated: bool
    verdict: Judgement.Verdict
    def __init__(self, index: _Optional[int] = ..., name: _Optional[str] = ..., verdict: _Optional[_Union[Judgement.Verdict, str]] = ..., message: _Optional[str] = ..., status: _Optional[_Union[Status, str]] = ..., exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., peak_memory_bytes: _Optional[int] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., stdout_truncated: bool = ..., stderr_truncated: bool = ..., run_id: _Optional[str] = ..., bundle_digest: _Optional[str] = ...) -> None: ...

class Checker(_message.Message):
    __slots__ = ["code", "language"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    language: str
    def __init__(self, language: _Optional[str] = ..., code: _Optional[str] = ...) -> None: ...

class ClosePortRequest(_message.Message):
    __slots__ = ["port", "session_id"]
    PORT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    port: int
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class ClosePortResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class Comparison(_message.Message):
    __slots__ = ["absolute", "kind", "relative"]
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    ABSOLUTE_FIELD_NUMBER: _ClassVar[int]
    CHECKER: Comparison.Kind
    EXACT: Comparison.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    LINES: Comparison.Kind
    NUMBERS: Comparison.Kind
    RELATIVE_FIELD_NUMBER: _ClassVar[int]
    absolute: float
    kind: Comparison.Kind
    relative: float
    def __init__(self, kind: _Optional[_Union[Comparison.Kind, str]] = ..., absolute: _Optional[float] = ..., relative: _Optional[float] = ...) -> None: ...

class CompileResult(_message.Message):
    __slots__ = ["bundle_digest", "duration", "message", "ok", "run_id", "stderr", "stdout"]
    BUNDLE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    bundle_digest: str
    duration: _duration_pb2.Duration
    message: str
    ok: bool
    run_id: str
    stderr: bytes
    stdout: bytes
    def __init__(self, ok: bool = ..., message: _Optional[str] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., run_id: _Optional[str] = ..., bundle_digest: _Optional[str] = ...) -> None: ...

class ConfirmRequest(_message.Message):
    __slots__ = ["arguments_json", "call_id", "deadline", "tool"]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    arguments_json: str
    call_id: str
    deadline: _timestamp_pb2.Timestamp
    tool: str
    def __init__(self, call_id: _Optional[str] = ..., tool: _Optional[str] = ..., arguments_json: _Optional[str] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Confirmation(_message.Message):
    __slots__ = ["call_id", "confirmed"]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    confirmed: bool
    def __init__(self, call_id: _Optional[str] = ..., confirmed: bool = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ["idle_ttl", "language", "options", "ttl"]
    IDLE_TTL_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    idle_ttl: _duration_pb2.Duration
    language: str
    options: RunOptions
    ttl: _duration_pb2.Duration
    def __init__(self, language: _Optional[str] = ..., options: _Optional[_Union[RunOptions, _Mapping]] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., idle_ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class DeleteSessionRequest(_message.Message):
    __slots__ = ["session_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class DisplayFile(_message.Message):
    __slots__ = ["mime", "path", "sha256", "size"]
    MIME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    mime: str
    path: str
    sha256: str
    size: int
    def __init__(self, mime: _Optional[str] = ..., path: _Optional[str] = ..., sha256: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class EvaluateEvent(_message.Message):
    __slots__ = ["case_done", "error", "judgement"]
    CASE_DONE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    JUDGEMENT_FIELD_NUMBER: _ClassVar[int]
    case_done: CaseProgress
    error: SubmissionError
    judgement: Judgement
    def __init__(self, case_done: _Optional[_Union[CaseProgress, _Mapping]] = ..., judgement: _Optional[_Union[Judgement, _Mapping]] = ..., error: _Optional[_Union[SubmissionError, _Mapping]] = ...) -> None: ...

class EvaluateRequest(_message.Message):
    __slots__ = ["submission"]
    SUBMISSION_FIELD_NUMBER: _ClassVar[int]
    submission: Submission
    def __init__(self, submission: _Optional[_Union[Submission, _Mapping]] = ...) -> None: ...

class File(_message.Message):
    __slots__ = ["content", "executable", "path"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    EXECUTABLE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    content: bytes
    executable: bool
    path: str
    def __init__(self, path: _Optional[str] = ..., content: _Optional[bytes] = ..., executable: bool = ...) -> None: ...

class FileChunk(_message.Message):
    __slots__ = ["data"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class ForkSessionRequest(_message.Message):
    __slots__ = ["from_bundle"]
    FROM_BUNDLE_FIELD_NUMBER: _ClassVar[int]
    from_bundle: str
    def __init__(self, from_bundle: _Optional[str] = ...) -> None: ...

class ForkSessionResponse(_message.Message):
    __slots__ = ["first_differing", "reproduced", "session", "warnings"]
    FIRST_DIFFERING_FIELD_NUMBER: _ClassVar[int]
    REPRODUCED_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    first_differing: int
    reproduced: bool
    session: SessionInfo
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session: _Optional[_Union[SessionInfo, _Mapping]] = ..., reproduced: bool = ..., first_differing: _Optional[int] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class GetBundleRequest(_message.Message):
    __slots__ = ["attestation", "digest"]
    ATTESTATION_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    attestation: bool
    digest: str
    def __init__(self, digest: _Optional[str] = ..., attestation: bool = ...) -> None: ...

class GetFileRequest(_message.Message):
    __slots__ = ["bundle_digest", "path"]
    BUNDLE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    bundle_digest: str
    path: str
    def __init__(self, bundle_digest: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ["run_id"]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ["error", "labels", "network", "result", "run_id", "started", "state", "tenant"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    error: str
    labels: _containers.ScalarMap[str, str]
    network: _containers.RepeatedCompositeFieldContainer[NetworkEvent]
    result: Result
    run_id: str
    started: Started
    state: RunState
    tenant: str
    def __init__(self, run_id: _Optional[str] = ..., state: _Optional[_Union[RunState, str]] = ..., started: _Optional[_Union[Started, _Mapping]] = ..., result: _Optional[_Union[Result, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., error: _Optional[str] = ..., tenant: _Optional[str] = ..., network: _Optional[_Iterable[_Union[NetworkEvent, _Mapping]]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ["session_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class Image(_message.Message):
    __slots__ = ["digest", "locked_digest", "locked_recipe_digest", "name", "packages", "present", "recipe_digest"]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    LOCKED_DIGEST_FIELD_NUMBER: _ClassVar[int]
    LOCKED_RECIPE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PACKAGES_FIELD_NUMBER: _ClassVar[int]
    PRESENT_FIELD_NUMBER: _ClassVar[int]
    RECIPE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    digest: str
    locked_digest: str
    locked_recipe_digest: str
    name: str
    packages: _containers.RepeatedScalarFieldContainer[str]
    present: bool
    recipe_digest: str
    def __init__(self, name: _Optional[str] = ..., digest: _Optional[str] = ..., locked_digest: _Optional[str] = ..., present: bool = ..., recipe_digest: _Optional[str] = ..., locked_recipe_digest: _Optional[str] = ..., packages: _Optional[_Iterable[str]] = ...) -> None: ...

class Judgement(_message.Message):
    __slots__ = ["bundle_digest", "bundle_error", "cases", "compile", "duration", "first_failing", "image", "image_digest", "isolation", "judgement_id", "passed", "retried", "runtime", "submission_id", "tenant", "total", "verdict"]
    class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    ACCEPTED: Judgement.Verdict
    BUNDLE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_ERROR_FIELD_NUMBER: _ClassVar[int]
    CASES_FIELD_NUMBER: _ClassVar[int]
    COMPILE_ERROR: Judgement.Verdict
    COMPILE_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    FIRST_FAILING_FIELD_NUMBER: _ClassVar[int]
    IMAGE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    JUDGEMENT_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT: Judgement.Verdict
    OUTPUT_LIMIT: Judgement.Verdict
    PASSED_FIELD_NUMBER: _ClassVar[int]
    RETRIED_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_ERROR: Judgement.Verdict
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ERROR: Judgement.Verdict
    SKIPPED: Judgement.Verdict
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT: Judgement.Verdict
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    VERDICT_UNSPECIFIED: Judgement.Verdict
    WRONG_ANSWER: Judgement.Verdict
    bundle_digest: str
    bundle_error: str
    cases: _containers.RepeatedCompositeFieldContainer[CaseResult]
    compile: CompileResult
    duration: _duration_pb2.Duration
    first_failing: int
    image: str
    image_digest: str
    isolation: Isolation
    judgement_id: str
    passed: int
    retried: bool
    runtime: str
    submission_id: str
    tenant: str
    total: int
    verdict: Judgement.Verdict
    def __init__(self, judgement_id: _Optional[str] = ..., submission_id: _Optional[str] = ..., verdict: _Optional[_Union[Judgement.Verdict, str]] = ..., passed: _Optional[int] = ..., total: _Optional[int] = ..., first_failing: _Optional[int] = ..., cases: _Optional[_Iterable[_Union[CaseResult, _Mapping]]] = ..., compile: _Optional[_Union[CompileResult, _Mapping]] = ..., isolation: _Optional[_Union[Isolation, str]] = ..., image: _Optional[str] = ..., image_digest: _Optional[str] = ..., runtime: _Optional[str] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., bundle_digest: _Optional[str] = ..., bundle_error: _Optional[str] = ..., tenant: _Optional[str] = ..., retried: bool = ...) -> None: ...

class KernelError(_message.Message):
    __slots__ = ["name", "traceback", "value"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    traceback: _containers.RepeatedScalarFieldContainer[str]
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., traceback: _Optional[_Iterable[str]] = ...) -> None: ...

class KernelReply(_message.Message):
    __slots__ = ["displays", "error", "execution_count", "result"]
    class ResultEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DISPLAYS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_COUNT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    displays: _containers.RepeatedCompositeFieldContainer[MimeBundle]
    error: KernelError
    execution_count: int
    result: _containers.ScalarMap[str, str]
    def __init__(self, execution_count: _Optional[int] = ..., result: _Optional[_Mapping[str, str]] = ..., displays: _Optional[_Iterable[_Union[MimeBundle, _Mapping]]] = ..., error: _Optional[_Union[KernelError, _Mapping]] = ...) -> None: ...

class Language(_message.Message):
    __slots__ = ["command", "image", "name"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    command: _containers.RepeatedScalarFieldContainer[str]
    image: str
    name: str
    def __init__(self, name: _Optional[str] = ..., image: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ...) -> None: ...

class Limits(_message.Message):
    __slots__ = ["cpu_millis", "disk_bytes", "memory_bytes", "pids", "stderr_bytes", "stdout_bytes", "timeout_ms"]
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    STDERR_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDOUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    cpu_millis: int
    disk_bytes: int
    memory_bytes: int
    pids: int
    stderr_bytes: int
    stdout_bytes: int
    timeout_ms: int
    def __init__(self, memory_bytes: _Optional[int] = ..., cpu_millis: _Optional[int] = ..., pids: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., stdout_bytes: _Optional[int] = ..., stderr_bytes: _Optional[int] = ..., disk_bytes: _Optional[int] = ...) -> None: ...

class ListFilesRequest(_message.Message):
    __slots__ = ["path", "session_id"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    path: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class ListFilesResponse(_message.Message):
    __slots__ = ["files"]
    FILES_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[OutputFile]
    def __init__(self, files: _Optional[_Iterable[_Union[OutputFile, _Mapping]]] = ...) -> None: ...

class ListImagesRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListImagesResponse(_message.Message):
    __slots__ = ["backend", "default_limits", "engine_version", "images", "languages", "max_limits", "mounts", "network_policies", "network_rules", "network_secrets", "pools", "runtimes", "signing_keys", "tools", "version"]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_LIMITS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_VERSION_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    LANGUAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_LIMITS_FIELD_NUMBER: _ClassVar[int]
    MOUNTS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_POLICIES_FIELD_NUMBER: _ClassVar[int]
    NETWORK_RULES_FIELD_NUMBER: _ClassVar[int]
    NETWORK_SECRETS_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    RUNTIMES_FIELD_NUMBER: _ClassVar[int]
    SIGNING_KEYS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    backend: str
    default_limits: Limits
    engine_version: str
    images: _containers.RepeatedCompositeFieldContainer[Image]
    languages: _containers.RepeatedCompositeFieldContainer[Language]
    max_limits: Limits
    mounts: _containers.RepeatedScalarFieldContainer[str]
    network_policies: _containers.RepeatedCompositeFieldContainer[NetworkPolicy]
    network_rules: _containers.RepeatedCompositeFieldContainer[NetworkRule]
    network_secrets: _containers.RepeatedCompositeFieldContainer[NetworkSecret]
    pools: _containers.RepeatedCompositeFieldContainer[Pool]
    runtimes: _containers.RepeatedCompositeFieldContainer[RuntimeInfo]
    signing_keys: _containers.RepeatedScalarFieldContainer[str]
    tools: _containers.RepeatedCompositeFieldContainer[ToolSpec]
    version: str
    def __init__(self, languages: _Optional[_Iterable[_Union[Language, _Mapping]]] = ..., images: _Optional[_Iterable[_Union[Image, _Mapping]]] = ..., runtimes: _Optional[_Iterable[_Union[RuntimeInfo, _Mapping]]] = ..., backend: _Optional[str] = ..., default_limits: _Optional[_Union[Limits, _Mapping]] = ..., max_limits: _Optional[_Union[Limits, _Mapping]] = ..., mounts: _Optional[_Iterable[str]] = ..., pools: _Optional[_Iterable[_Union[Pool, _Mapping]]] = ..., network_policies: _Optional[_Iterable[_Union[NetworkPolicy, _Mapping]]] = ..., network_rules: _Optional[_Iterable[_Union[NetworkRule, _Mapping]]] = ..., signing_keys: _Optional[_Iterable[str]] = ..., version: _Optional[str] = ..., engine_version: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[ToolSpec, _Mapping]]] = ..., network_secrets: _Optional[_Iterable[_Union[NetworkSecret, _Mapping]]] = ...) -> None: ...

class ListPortsRequest(_message.Message):
    __slots__ = ["session_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ListPortsResponse(_message.Message):
    __slots__ = ["ports"]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    ports: _containers.RepeatedCompositeFieldContainer[PortInfo]
    def __init__(self, ports: _Optional[_Iterable[_Union[PortInfo, _Mapping]]] = ...) -> None: ...

class ListProcessesRequest(_message.Message):
    __slots__ = ["session_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ListProcessesResponse(_message.Message):
    __slots__ = ["processes"]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    processes: _containers.RepeatedCompositeFieldContainer[ProcessInfo]
    def __init__(self, processes: _Optional[_Iterable[_Union[ProcessInfo, _Mapping]]] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ["runs"]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[GetRunResponse]
    def __init__(self, runs: _Optional[_Iterable[_Union[GetRunResponse, _Mapping]]] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ["sessions"]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[SessionInfo]
    def __init__(self, sessions: _Optional[_Iterable[_Union[SessionInfo, _Mapping]]] = ...) -> None: ...

class MimeBundle(_message.Message):
    __slots__ = ["data", "files"]
    class DataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DATA_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    data: _containers.ScalarMap[str, str]
    files: _containers.RepeatedCompositeFieldContainer[DisplayFile]
    def __init__(self, data: _Optional[_Mapping[str, str]] = ..., files: _Optional[_Iterable[_Union[DisplayFile, _Mapping]]] = ...) -> None: ...

class Network(_message.Message):
    __slots__ = ["caps", "mode", "policy", "rules", "secrets"]
    CAPS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    caps: NetworkCaps
    mode: NetworkMode
    policy: str
    rules: _containers.RepeatedCompositeFieldContainer[NetworkRule]
    secrets: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, mode: _Optional[_Union[NetworkMode, str]] = ..., policy: _Optional[str] = ..., rules: _Optional[_Iterable[_Union[NetworkRule, _Mapping]]] = ..., caps: _Optional[_Union[NetworkCaps, _Mapping]] = ..., secrets: _Optional[_Iterable[str]] = ...) -> None: ...

class NetworkCaps(_message.Message):
    __slots__ = ["bytes_in", "bytes_out", "connections"]
    BYTES_IN_FIELD_NUMBER: _ClassVar[int]
    BYTES_OUT_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    bytes_in: int
    bytes_out: int
    connections: int
    def __init__(self, bytes_out: _Optional[int] = ..., bytes_in: _Optional[int] = ..., connections: _Optional[int] = ...) -> None: ...

class NetworkEvent(_message.Message):
    __slots__ = ["addr", "allowed", "bytes_in", "bytes_out", "index", "injections", "kind", "masked", "name", "port", "reason", "rule", "secrets", "time", "via"]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    BYTES_IN_FIELD_NUMBER: _ClassVar[int]
    BYTES_OUT_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    INJECTIONS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MASKED_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    VIA_FIELD_NUMBER: _ClassVar[int]
    addr: str
    allowed: bool
    bytes_in: int
    bytes_out: int
    index: int
    injections: int
    kind: str
    masked: int
    name: str
    port: int
    reason: str
    rule: str
    secrets: _containers.RepeatedScalarFieldContainer[str]
    time: _timestamp_pb2.Timestamp
    via: str
    def __init__(self, index: _Optional[int] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ..., via: _Optional[str] = ..., port: _Optional[int] = ..., addr: _Optional[str] = ..., allowed: bool = ..., rule: _Optional[str] = ..., reason: _Optional[str] = ..., bytes_out: _Optional[int] = ..., bytes_in: _Optional[int] = ..., secrets: _Optional[_Iterable[str]] = ..., injections: _Optional[int] = ..., masked: _Optional[int] = ...) -> None: ...

class NetworkPolicy(_message.Message):
    __slots__ = ["name", "rules"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    name: str
    rules: _containers.RepeatedCompositeFieldContainer[NetworkRule]
    def __init__(self, name: _Optional[str] = ..., rules: _Optional[_Iterable[_Union[NetworkRule, _Mapping]]] = ...) -> None: ...

class NetworkRule(_message.Message):
    __slots__ = ["cidr", "host", "ports"]
    CIDR_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    cidr: str
    host: str
    ports: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, host: _Optional[str] = ..., cidr: _Optional[str] = ..., ports: _Optional[_Iterable[int]] = ...) -> None: ...

class NetworkSecret(_message.Message):
    __slots__ = ["hosts", "methods", "name", "paths", "placeholder", "program_env"]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    METHODS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    PLACEHOLDER_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_ENV_FIELD_NUMBER: _ClassVar[int]
    hosts: _containers.RepeatedScalarFieldContainer[str]
    methods: _containers.RepeatedScalarFieldContainer[str]
    name: str
    paths: _containers.RepeatedScalarFieldContainer[str]
    placeholder: str
    program_env: str
    def __init__(self, name: _Optional[str] = ..., hosts: _Optional[_Iterable[str]] = ..., paths: _Optional[_Iterable[str]] = ..., methods: _Optional[_Iterable[str]] = ..., placeholder: _Optional[str] = ..., program_env: _Optional[str] = ...) -> None: ...

class OpenPortRequest(_message.Message):
    __slots__ = ["port", "session_id"]
    PORT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    port: int
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class OutputFile(_message.Message):
    __slots__ = ["omitted", "path", "sha256", "size", "type"]
    OMITTED_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    omitted: str
    path: str
    sha256: str
    size: int
    type: str
    def __init__(self, path: _Optional[str] = ..., type: _Optional[str] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ..., omitted: _Optional[str] = ...) -> None: ...

class PauseSessionRequest(_message.Message):
    __slots__ = ["session_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class Pool(_message.Message):
    __slots__ = ["egress", "failing_since", "failure", "failures", "image", "preimport", "ready", "runtime", "size"]
    EGRESS_FIELD_NUMBER: _ClassVar[int]
    FAILING_SINCE_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    PREIMPORT_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    egress: bool
    failing_since: _timestamp_pb2.Timestamp
    failure: str
    failures: int
    image: str
    preimport: bool
    ready: int
    runtime: str
    size: int
    def __init__(self, image: _Optional[str] = ..., runtime: _Optional[str] = ..., ready: _Optional[int] = ..., size: _Optional[int] = ..., egress: bool = ..., failing_since: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., failure: _Optional[str] = ..., failures: _Optional[int] = ..., preimport: bool = ...) -> None: ...

class PortInfo(_message.Message):
    __slots__ = ["opened_at", "port", "session_id", "token", "url"]
    OPENED_AT_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    opened_at: _timestamp_pb2.Timestamp
    port: int
    session_id: str
    token: str
    url: str
    def __init__(self, session_id: _Optional[str] = ..., port: _Optional[int] = ..., url: _Optional[str] = ..., token: _Optional[str] = ..., opened_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ProcessInfo(_message.Message):
    __slots__ = ["argv", "ended_at", "exit_code", "process_id", "session_id", "started_at", "state", "stderr_bytes", "stdout_bytes", "terminal", "workdir"]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STDERR_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDOUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    ended_at: _timestamp_pb2.Timestamp
    exit_code: int
    process_id: str
    session_id: str
    started_at: _timestamp_pb2.Timestamp
    state: ProcessState
    stderr_bytes: int
    stdout_bytes: int
    terminal: bool
    workdir: str
    def __init__(self, session_id: _Optional[str] = ..., process_id: _Optional[str] = ..., argv: _Optional[_Iterable[str]] = ..., workdir: _Optional[str] = ..., state: _Optional[_Union[ProcessState, str]] = ..., exit_code: _Optional[int] = ..., started_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., stdout_bytes: _Optional[int] = ..., stderr_bytes: _Optional[int] = ..., terminal: bool = ...) -> None: ...

class ReadFileRequest(_message.Message):
    __slots__ = ["path", "session_id"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    path: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class ReadProcessOutputRequest(_message.Message):
    __slots__ = ["max_bytes", "process_id", "session_id", "stderr_offset", "stdout_offset", "wait_ms"]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    max_bytes: int
    process_id: str
    session_id: str
    stderr_offset: int
    stdout_offset: int
    wait_ms: int
    def __init__(self, session_id: _Optional[str] = ..., process_id: _Optional[str] = ..., stdout_offset: _Optional[int] = ..., stderr_offset: _Optional[int] = ..., max_bytes: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class ReadProcessOutputResponse(_message.Message):
    __slots__ = ["next_stderr_offset", "next_stdout_offset", "process", "stderr", "stderr_start", "stdout", "stdout_start"]
    NEXT_STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDERR_START_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDOUT_START_FIELD_NUMBER: _ClassVar[int]
    next_stderr_offset: int
    next_stdout_offset: int
    process: ProcessInfo
    stderr: bytes
    stderr_start: int
    stdout: bytes
    stdout_start: int
    def __init__(self, stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., stdout_start: _Optional[int] = ..., stderr_start: _Optional[int] = ..., next_stdout_offset: _Optional[int] = ..., next_stderr_offset: _Optional[int] = ..., process: _Optional[_Union[ProcessInfo, _Mapping]] = ...) -> None: ...

class ResizeProcessRequest(_message.Message):
    __slots__ = ["process_id", "session_id", "size"]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    session_id: str
    size: TerminalSize
    def __init__(self, session_id: _Optional[str] = ..., process_id: _Optional[str] = ..., size: _Optional[_Union[TerminalSize, _Mapping]] = ...) -> None: ...

class ResizeProcessResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class Result(_message.Message):
    __slots__ = ["bundle_digest", "bundle_error", "cold_reason", "duration", "exit_code", "files", "kernel", "limits", "message", "network_bytes_in", "network_bytes_out", "network_connections", "network_denied", "peak_memory_bytes", "queued", "reproducible_digest", "run_id", "session", "signal", "start", "status", "stderr_total", "stderr_truncated", "stdout_total", "stdout_truncated", "tenant", "tool_calls"]
    BUNDLE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_ERROR_FIELD_NUMBER: _ClassVar[int]
    COLD_REASON_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NETWORK_BYTES_IN_FIELD_NUMBER: _ClassVar[int]
    NETWORK_BYTES_OUT_FIELD_NUMBER: _ClassVar[int]
    NETWORK_CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_DENIED_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    REPRODUCIBLE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STDERR_TOTAL_FIELD_NUMBER: _ClassVar[int]
    STDERR_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    STDOUT_TOTAL_FIELD_NUMBER: _ClassVar[int]
    STDOUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    bundle_digest: str
    bundle_error: str
    cold_reason: str
    duration: _duration_pb2.Duration
    exit_code: int
    files: _containers.RepeatedCompositeFieldContainer[OutputFile]
    kernel: KernelReply
    limits: Limits
    message: str
    network_bytes_in: int
    network_bytes_out: int
    network_connections: int
    network_denied: int
    peak_memory_bytes: int
    queued: _duration_pb2.Duration
    reproducible_digest: str
    run_id: str
    session: SessionCall
    signal: int
    start: str
    status: Status
    stderr_total: int
    stderr_truncated: bool
    stdout_total: int
    stdout_truncated: bool
    tenant: str
    tool_calls: int
    def __init__(self, run_id: _Optional[str] = ..., status: _Optional[_Union[Status, str]] = ..., exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., queued: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., stdout_total: _Optional[int] = ..., stderr_total: _Optional[int] = ..., stdout_truncated: bool = ..., stderr_truncated: bool = ..., peak_memory_bytes: _Optional[int] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., message: _Optional[str] = ..., bundle_digest: _Optional[str] = ..., files: _Optional[_Iterable[_Union[OutputFile, _Mapping]]] = ..., bundle_error: _Optional[str] = ..., reproducible_digest: _Optional[str] = ..., start: _Optional[str] = ..., cold_reason: _Optional[str] = ..., session: _Optional[_Union[SessionCall, _Mapping]] = ..., kernel: _Optional[_Union[KernelReply, _Mapping]] = ..., network_connections: _Optional[int] = ..., network_denied: _Optional[int] = ..., network_bytes_out: _Optional[int] = ..., network_bytes_in: _Optional[int] = ..., tenant: _Optional[str] = ..., tool_calls: _Optional[int] = ...) -> None: ...

class ResumeSessionRequest(_message.Message):
    __slots__ = ["session_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class RunCodeRequest(_message.Message):
    __slots__ = ["code", "language", "options"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    code: str
    language: str
    options: RunOptions
    def __init__(self, language: _Optional[str] = ..., code: _Optional[str] = ..., options: _Optional[_Union[RunOptions, _Mapping]] = ...) -> None: ...

class RunCommandRequest(_message.Message):
    __slots__ = ["argv", "options", "shell"]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    SHELL_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    options: RunOptions
    shell: str
    def __init__(self, argv: _Optional[_Iterable[str]] = ..., shell: _Optional[str] = ..., options: _Optional[_Union[RunOptions, _Mapping]] = ...) -> None: ...

class RunEvent(_message.Message):
    __slots__ = ["network", "result", "started", "stderr", "stdout"]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    network: NetworkEvent
    result: Result
    started: Started
    stderr: bytes
    stdout: bytes
    def __init__(self, started: _Optional[_Union[Started, _Mapping]] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., result: _Optional[_Union[Result, _Mapping]] = ..., network: _Optional[_Union[NetworkEvent, _Mapping]] = ...) -> None: ...

class RunOptions(_message.Message):
    __slots__ = ["detach", "env", "files", "idempotency_key", "image", "interpreter", "labels", "limits", "live_read_tools", "mounts", "network", "replay_of", "runtime", "seed", "session_id", "stdin", "tool_record", "tools", "workdir"]
    class EnvEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DETACH_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    INTERPRETER_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    LIVE_READ_TOOLS_FIELD_NUMBER: _ClassVar[int]
    MOUNTS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    REPLAY_OF_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_RECORD_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    detach: bool
    env: _containers.ScalarMap[str, str]
    files: _containers.RepeatedCompositeFieldContainer[File]
    idempotency_key: str
    image: str
    interpreter: Interpreter
    labels: _containers.ScalarMap[str, str]
    limits: Limits
    live_read_tools: bool
    mounts: _containers.RepeatedScalarFieldContainer[str]
    network: Network
    replay_of: str
    runtime: str
    seed: int
    session_id: str
    stdin: bytes
    tool_record: bytes
    tools: _containers.RepeatedScalarFieldContainer[str]
    workdir: str
    def __init__(self, image: _Optional[str] = ..., runtime: _Optional[str] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., network: _Optional[_Union[Network, _Mapping]] = ..., files: _Optional[_Iterable[_Union[File, _Mapping]]] = ..., mounts: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., stdin: _Optional[bytes] = ..., workdir: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., seed: _Optional[int] = ..., session_id: _Optional[str] = ..., detach: bool = ..., idempotency_key: _Optional[str] = ..., interpreter: _Optional[_Union[Interpreter, str]] = ..., tools: _Optional[_Iterable[str]] = ..., tool_record: _Optional[bytes] = ..., live_read_tools: bool = ..., replay_of: _Optional[str] = ...) -> None: ...

class RunWithToolsEvent(_message.Message):
    __slots__ = ["confirm", "run", "tool_call"]
    CONFIRM_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    confirm: ConfirmRequest
    run: RunEvent
    tool_call: ToolCall
    def __init__(self, run: _Optional[_Union[RunEvent, _Mapping]] = ..., tool_call: _Optional[_Union[ToolCall, _Mapping]] = ..., confirm: _Optional[_Union[ConfirmRequest, _Mapping]] = ...) -> None: ...

class RunWithToolsRequest(_message.Message):
    __slots__ = ["code", "command", "confirmation", "confirms", "tool_result", "tools"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_FIELD_NUMBER: _ClassVar[int]
    CONFIRMS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    code: RunCodeRequest
    command: RunCommandRequest
    confirmation: Confirmation
    confirms: bool
    tool_result: ToolResult
    tools: _containers.RepeatedCompositeFieldContainer[ToolSpec]
    def __init__(self, code: _Optional[_Union[RunCodeRequest, _Mapping]] = ..., command: _Optional[_Union[RunCommandRequest, _Mapping]] = ..., tool_result: _Optional[_Union[ToolResult, _Mapping]] = ..., confirmation: _Optional[_Union[Confirmation, _Mapping]] = ..., tools: _Optional[_Iterable[_Union[ToolSpec, _Mapping]]] = ..., confirms: bool = ...) -> None: ...

class RuntimeInfo(_message.Message):
    __slots__ = ["allowed", "is_default", "name", "version"]
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    allowed: bool
    is_default: bool
    name: str
    version: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., is_default: bool = ..., allowed: bool = ...) -> None: ...

class SessionCall(_message.Message):
    __slots__ = ["parent_bundle", "seq", "session_id", "workspace_after", "workspace_before"]
    PARENT_BUNDLE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_AFTER_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_BEFORE_FIELD_NUMBER: _ClassVar[int]
    parent_bundle: str
    seq: int
    session_id: str
    workspace_after: str
    workspace_before: str
    def __init__(self, session_id: _Optional[str] = ..., seq: _Optional[int] = ..., parent_bundle: _Optional[str] = ..., workspace_before: _Optional[str] = ..., workspace_after: _Optional[str] = ...) -> None: ...

class SessionInfo(_message.Message):
    __slots__ = ["calls", "created_at", "expires_at", "idle_expires_at", "image", "image_digest", "labels", "language", "last_bundle", "last_used_at", "limits", "network", "reason", "runtime", "session_id", "start", "state", "tenant"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CALLS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    IDLE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    LAST_BUNDLE_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_AT_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    calls: int
    created_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    idle_expires_at: _timestamp_pb2.Timestamp
    image: str
    image_digest: str
    labels: _containers.ScalarMap[str, str]
    language: str
    last_bundle: str
    last_used_at: _timestamp_pb2.Timestamp
    limits: Limits
    network: Network
    reason: str
    runtime: str
    session_id: str
    start: str
    state: SessionState
    tenant: str
    def __init__(self, session_id: _Optional[str] = ..., state: _Optional[_Union[SessionState, str]] = ..., reason: _Optional[str] = ..., language: _Optional[str] = ..., image: _Optional[str] = ..., image_digest: _Optional[str] = ..., runtime: _Optional[str] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_used_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., idle_expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., calls: _Optional[int] = ..., last_bundle: _Optional[str] = ..., start: _Optional[str] = ..., tenant: _Optional[str] = ..., network: _Optional[_Union[Network, _Mapping]] = ...) -> None: ...

class SignalProcessRequest(_message.Message):
    __slots__ = ["process_id", "session_id", "signal"]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    session_id: str
    signal: int
    def __init__(self, session_id: _Optional[str] = ..., process_id: _Optional[str] = ..., signal: _Optional[int] = ...) -> None: ...

class StartProcessRequest(_message.Message):
    __slots__ = ["argv", "env", "session_id", "shell", "terminal", "workdir"]
    class EnvEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ARGV_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SHELL_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    session_id: str
    shell: str
    terminal: TerminalSize
    workdir: str
    def __init__(self, session_id: _Optional[str] = ..., argv: _Optional[_Iterable[str]] = ..., shell: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., workdir: _Optional[str] = ..., terminal: _Optional[_Union[TerminalSize, _Mapping]] = ...) -> None: ...

class Started(_message.Message):
    __slots__ = ["backend", "image", "image_digest", "limits", "preimported", "prestarted", "run_id", "runtime", "runtime_version", "started_at"]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    IMAGE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    PREIMPORTED_FIELD_NUMBER: _ClassVar[int]
    PRESTARTED_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    backend: str
    image: str
    image_digest: str
    limits: Limits
    preimported: _containers.RepeatedScalarFieldContainer[str]
    prestarted: bool
    run_id: str
    runtime: str
    runtime_version: str
    started_at: _timestamp_pb2.Timestamp
    def __init__(self, run_id: _Optional[str] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., image: _Optional[str] = ..., image_digest: _Optional[str] = ..., runtime: _Optional[str] = ..., runtime_version: _Optional[str] = ..., backend: _Optional[str] = ..., started_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., prestarted: bool = ..., preimported: _Optional[_Iterable[str]] = ...) -> None: ...

class Submission(_message.Message):
    __slots__ = ["argv", "cases", "checker", "code", "env", "files", "id", "idempotency_key", "image", "isolation", "language", "limits", "runtime", "seed", "stop_on_failure"]
    class EnvEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ARGV_FIELD_NUMBER: _ClassVar[int]
    CASES_FIELD_NUMBER: _ClassVar[int]
    CHECKER_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    STOP_ON_FAILURE_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    cases: _containers.RepeatedCompositeFieldContainer[TestCase]
    checker: Checker
    code: str
    env: _containers.ScalarMap[str, str]
    files: _containers.RepeatedCompositeFieldContainer[File]
    id: str
    idempotency_key: str
    image: str
    isolation: Isolation
    language: str
    limits: Limits
    runtime: str
    seed: int
    stop_on_failure: bool
    def __init__(self, id: _Optional[str] = ..., language: _Optional[str] = ..., code: _Optional[str] = ..., argv: _Optional[_Iterable[str]] = ..., files: _Optional[_Iterable[_Union[File, _Mapping]]] = ..., cases: _Optional[_Iterable[_Union[TestCase, _Mapping]]] = ..., checker: _Optional[_Union[Checker, _Mapping]] = ..., image: _Optional[str] = ..., runtime: _Optional[str] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., env: _Optional[_Mapping[str, str]] = ..., seed: _Optional[int] = ..., stop_on_failure: bool = ..., isolation: _Optional[_Union[Isolation, str]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class SubmissionError(_message.Message):
    __slots__ = ["code", "message", "retry_after", "submission_id"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    retry_after: _duration_pb2.Duration
    submission_id: str
    def __init__(self, submission_id: _Optional[str] = ..., code: _Optional[int] = ..., message: _Optional[str] = ..., retry_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class TerminalSize(_message.Message):
    __slots__ = ["cols", "rows", "term"]
    COLS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    cols: int
    rows: int
    term: str
    def __init__(self, rows: _Optional[int] = ..., cols: _Optional[int] = ..., term: _Optional[str] = ...) -> None: ...

class TestCase(_message.Message):
    __slots__ = ["args", "compare", "expected_stdout", "files", "limits", "name", "stdin", "test"]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    COMPARE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_STDOUT_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    TEST_FIELD_NUMBER: _ClassVar[int]
    args: _containers.RepeatedScalarFieldContainer[str]
    compare: Comparison
    expected_stdout: bytes
    files: _containers.RepeatedCompositeFieldContainer[File]
    limits: Limits
    name: str
    stdin: bytes
    test: str
    def __init__(self, name: _Optional[str] = ..., stdin: _Optional[bytes] = ..., args: _Optional[_Iterable[str]] = ..., files: _Optional[_Iterable[_Union[File, _Mapping]]] = ..., expected_stdout: _Optional[bytes] = ..., compare: _Optional[_Union[Comparison, _Mapping]] = ..., test: _Optional[str] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ["arguments_json", "call_id", "idempotency_key", "tool"]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    arguments_json: str
    call_id: str
    idempotency_key: str
    tool: str
    def __init__(self, call_id: _Optional[str] = ..., tool: _Optional[str] = ..., arguments_json: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ["call_id", "error", "result_json"]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    error: str
    result_json: str
    def __init__(self, call_id: _Optional[str] = ..., result_json: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class ToolSpec(_message.Message):
    __slots__ = ["description", "input_schema_json", "name", "risk"]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RISK_FIELD_NUMBER: _ClassVar[int]
    description: str
    input_schema_json: str
    name: str
    risk: ToolRisk
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., input_schema_json: _Optional[str] = ..., risk: _Optional[_Union[ToolRisk, str]] = ...) -> None: ...

class UpdateSessionNetworkRequest(_message.Message):
    __slots__ = ["network", "session_id"]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    network: Network
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., network: _Optional[_Union[Network, _Mapping]] = ...) -> None: ...

class UploadFileRequest(_message.Message):
    __slots__ = ["data", "header"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    header: UploadHeader
    def __init__(self, header: _Optional[_Union[UploadHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class UploadFileResponse(_message.Message):
    __slots__ = ["path", "sha256", "size"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    path: str
    sha256: str
    size: int
    def __init__(self, path: _Optional[str] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class UploadHeader(_message.Message):
    __slots__ = ["executable", "path", "session_id"]
    EXECUTABLE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    executable: bool
    path: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., executable: bool = ...) -> None: ...

class WaitProcessRequest(_message.Message):
    __slots__ = ["process_id", "session_id"]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., process_id: _Optional[str] = ...) -> None: ...

class WaitRunRequest(_message.Message):
    __slots__ = ["run_id"]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class WriteProcessStdinRequest(_message.Message):
    __slots__ = ["close", "data", "process_id", "session_id"]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    close: bool
    data: bytes
    process_id: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., process_id: _Optional[str] = ..., data: _Optional[bytes] = ..., close: bool = ...) -> None: ...

class WriteProcessStdinResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class Interpreter(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class NetworkMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ToolRisk(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class RunState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class SessionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ProcessState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Isolation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
