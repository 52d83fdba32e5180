"""sbx's application surface: the one door every face, and your own Python, comes in by.

    from sbx.agent import App, ConversationSpec, load_config, resolve_endpoint

A face (the CLI, the service, its web page, MCP) imports what it needs from
here, from its own package and from its framework, and nothing else of sbx:
the layering test holds it to that. The door hands out the core's app and
conversations, the values they return, one root of sbx's errors, and the few
utilities every face needs, wherever they live below (`safe_text` is the
gate's before it is a face's; sizes and durations are the sandbox's units):
re-exported here rather than moved, so the layers below keep owning them.
Only the commands about the sandbox itself (`doctor`, `selftest`, `gc`,
`bench`, `image`, `packages`) reach below the door.

Names are resolved on first use (PEP 562), so `from sbx.agent import safe_text`
imports the text filter and not the model SDK, the store or the sandbox pool:
the CLI starts in a fraction of a second, and importing a face package never
loops back through this one.

The map (each name's own docstring says more):

The app and its conversations: every way a run starts is a method of theirs.
    App, Conversation: a question `Conversation.ask` (after `Conversation.admit` where a
    face admits it when posted), an answer to a pending question `Conversation.answer`,
    a recorded conversation taken up `App.resume` (or its paused run answered,
    `App.continue_paused`), one question alone `App.answer_one`, one program
    `App.execute`, a tool session for an agent with its own model `App.tool_session`,
    a rerun of a recorded conversation's code `App.rerun`. Each run has one ticket and
    one life (admitted, started, finished) told to the face's `RunRecorder`.
    Answer, os_principal, require_image, DEFAULT_IMAGE, OUTPUT_DIR, RUNS_DIR,
    ConversationSpec, new_conversation_id, Workspace, check_data, idle_reason,
    ProgramSpec, ToolSession, CallReport, file_op, read_file, write_file,
    KeptSession, KeptSessions, SessionHost, Owner, Admitted, SessionNotFound, streamed,
    in_namespace, drop_namespace, clear_variables, Cancellation, Resumable, read_resumable,
    find_transcript, read_paused, RerunReport, ExecutionCheck, recorded_data

Dataset notes: what analysts wrote down about a dataset, shown to later runs.
    DatasetNotes, Note, local_note_store, data_digests

Configuration: the policy file and the model endpoint, read once into typed values.
    load_config, AppConfig, ServiceSettings, ServiceQuotas, OidcSettings, TeamSettings,
    MAX_WORKERS, metrics_team, describe_validation_error, Endpoint, resolve_endpoint,
    LimitsRequest, Limits, configure_tracing

Results and events: what a run returns and what it tells its subscribers on the way.
    RunResult, RunStatus, ExecutionResult, DisplayResult, Artifact, Event, EventSink,
    ConversationStart, RunStart, MessageAdded, ModelReplied, OutputChunk, ToolResult,
    PlanUpdated, Compaction,
    RunEnd, RunError, StateRestored, parse_event, restore_summary, pending_note, PLAN_MARKS,
    Cell, ANSWER_PART_KEYS, ANSWER_PART_TITLES, numbered_events, open_artifact,
    unsafe_name_reason, outcome_of, run_outcome, loss_text

Hosting: many tenants' conversations on one replica, for every face that serves them
(the HTTP API and its page, MCP over HTTP, E2B's API), and its worker processes.
    Host, ServeOptions, DataPaths, Observer, Observers, UNMATCHED_ROUTE, notify_observer,
    EVENT_POLL_S, public_event, Feed, sse_frame, StoreRecorder, delete_runs, run_directory,
    LiveConversation, dataset_paths, limited, owned, owned_values, Tenant, effective_quotas,
    tenant_of, NotAdopted, adopt, Upload, UploadHold, open_upload, format_of, safe_name,
    store_upload, upload_room, ServiceAdmission, UPLOAD_TOOL, WorkerSlot, Supervisor, worker_id,
    announce_ready, listen_unix, EARLY_SIGNALS, freeze_heap

Tool sessions for another agent (MCP, E2B): who calls, and what the host lets them do.
    Caller, SessionAdmission, SessionOpened, SessionRefused, FixedData

A face's store: how a face with a store hears of every run: one ticket, one lifecycle.
    RunRecorder, NoRecorder, RunTicket, RunOutcome, failed_outcome, call_status, new_run_id

The store: the service's record of every tenant's conversations, runs, datasets, keys and
sign-ins (SQLite or PostgreSQL), which the service queries and `sbx serve keys` administers.
A row is named for the table it is (`ConversationRow` is the stored record; `Conversation`
is the live conversation above).
    Database, StoreError, data_dir, database_url, lock_principal, Replicas,
    ConversationRow, RunRow, DatasetRow, EventRow, ArtifactRow, Replica, DbNoteStore,
    dataset_user, HOUR_S, DAY_S, reserve_conversation, check_storage, storage_used,
    stored_bytes, upload_too_large, UNFINISHED_STATUSES (a run's statuses before it ends),
    ApiKey, KeyInfo, SignedInUser, Role, KeyAdminError, hash_key, key_info, lookup_key,
    create_key, list_keys, revoke_key, WebSession, OidcLogin, OidcIdentity, OidcSession

The scripted model: a loopback stand-in for a model endpoint that replays a script, for
`sbx demo`, `sbx ask --demo`, the tests and the benchmarks (no LLM anywhere).
    ScriptedLLM, ScriptedTurn, ScriptedReply, ScriptedRequest, scripted_answer,
    scripted_tool_call

Records: transcripts, their exports and the audit log.
    read_record, RecordedConversation, export_transcript, EXPORT_FORMATS, ExportFormat,
    verify_audit_log, iter_audit_records, audit_call_rows, AUDIT_COLUMNS, audit_key_from_env,
    AUDIT_PATH_ENV

What a face shows of the gate's work: program output, the data files, a missing package.
    OutputSink, index_data_files, module_from_error

Utilities: what every face needs to show untrusted text and read sizes and durations.
    safe_text, safe_json, Redactor, format_size, parse_size, parse_duration, Closing, Problem,
    not_found, quota_exceeded, unavailable

Errors: one root, `SbxError`: what an operator must fix; the model's errors are data.
    SbxError, SandboxError, HostBusy, SettingsError, LimitRefused, LimitTooLow, NoteError,
    UnreadableLine, PolicyError, AuditError, TranscriptError, RecordError, RerunError,
    SessionClosed, TracingError, ModelError, FileOpError, SessionNotFound, StoreError,
    KeyAdminError
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_OWNERS: dict[str, tuple[str, ...]] = {
    "sbx.agent.core.app": ("App", "Answer", "os_principal", "require_image",
        "DEFAULT_IMAGE", "OUTPUT_DIR", "RUNS_DIR"),
    "sbx.agent.core.artifacts": ("open_artifact", "unsafe_name_reason"),
    "sbx.agent.model.cancellation": ("Cancellation",),
    "sbx.agent.core.config": ("load_config", "AppConfig", "ServiceSettings", "ServiceQuotas",
        "OidcSettings", "describe_validation_error", "MAX_WORKERS"),
    "sbx.agent.core.conversation": ("Conversation", "new_conversation_id"),
    "sbx.agent.core.events": ("Event", "EventSink", "ConversationStart", "RunStart",
        "MessageAdded", "ModelReplied", "OutputChunk", "ToolResult", "PlanUpdated", "Compaction",
        "RunEnd", "RunError", "StateRestored", "parse_event"),
    "sbx.agent.core.execute_program": ("ProgramSpec",),
    "sbx.agent.core.limits_request": ("LimitsRequest", "LimitRefused", "LimitTooLow"),
    "sbx.agent.core.notes": ("DatasetNotes", "Note", "local_note_store", "NoteError"),
    "sbx.agent.core.namespaces": ("in_namespace", "drop_namespace", "clear_variables"),
    "sbx.agent.core.sandbox_files": ("file_op", "read_file", "write_file", "FileOpError"),
    "sbx.agent.core.plan": ("pending_note",),
    "sbx.agent.core.problem": ("Problem", "not_found", "quota_exceeded", "unavailable"),
    "sbx.agent.core.restore": ("Cell", "restore_summary"),
    "sbx.agent.core.resume": ("Resumable", "read_resumable", "find_transcript",
        "read_paused"),
    "sbx.agent.core.run_recorder": ("RunRecorder", "NoRecorder", "RunTicket", "RunOutcome",
        "failed_outcome", "call_status", "new_run_id"),
    "sbx.agent.core.settings": ("Endpoint", "resolve_endpoint", "SettingsError"),
    "sbx.agent.core.state": ("RunResult", "RunStatus"),
    "sbx.agent.core.teams": ("TeamSettings", "metrics_team"),
    "sbx.agent.core.tool_session": ("ToolSession", "CallReport", "SessionClosed"),
    "sbx.agent.core.kept_sessions": ("KeptSession", "KeptSessions", "SessionHost", "Owner",
        "Admitted", "SessionNotFound", "streamed"),
    "sbx.agent.core.tracing": ("configure_tracing", "TracingError"),
    "sbx.agent.core.transcript": ("numbered_events", "TranscriptError"),
    "sbx.agent.core.workspace": ("ConversationSpec", "Workspace", "check_data"),
    "sbx.agent.core.outcomes": ("idle_reason", "loss_text", "outcome_of", "run_outcome"),
    "sbx.agent.core.hosting.host": ("Host", "ServeOptions", "DataPaths"),
    "sbx.agent.core.hosting.workers": ("WorkerSlot", "Supervisor", "worker_id", "announce_ready",
        "listen_unix", "EARLY_SIGNALS", "freeze_heap"),
    "sbx.agent.core.hosting.observer": ("Observer", "Observers", "UNMATCHED_ROUTE",
        "notify_observer"),
    "sbx.agent.core.hosting.eventlog": ("EVENT_POLL_S", "public_event"),
    "sbx.agent.core.hosting.feed": ("Feed", "sse_frame"),
    "sbx.agent.core.hosting.recorder": ("StoreRecorder",),
    "sbx.agent.core.hosting.retention": ("delete_runs", "run_directory"),
    "sbx.agent.core.hosting.runs": ("LiveConversation",),
    "sbx.agent.core.hosting.tenancy": ("dataset_paths", "limited", "owned", "owned_values"),
    "sbx.agent.core.hosting.tenants": ("Tenant", "effective_quotas", "tenant_of"),
    "sbx.agent.core.hosting.adopt": ("NotAdopted", "adopt"),
    "sbx.agent.core.hosting.datasets": ("Upload", "UploadHold", "open_upload", "format_of",
        "safe_name", "store_upload", "upload_room"),
    "sbx.agent.core.session_admission": ("Caller", "SessionOpened", "SessionRefused",
        "SessionAdmission", "FixedData"),
    "sbx.agent.core.hosting.session_tenancy": ("ServiceAdmission",),
    "sbx.agent.core.hosting.upload_tool": ("UPLOAD_TOOL",),
    "sbx.agent.core.hosting.store.datasets_held": ("dataset_user",),
    "sbx.agent.core.hosting.store.db": ("Database", "StoreError", "data_dir", "database_url",
        "lock_principal"),
    "sbx.agent.core.hosting.store.keys": ("KeyInfo", "SignedInUser", "Role", "KeyAdminError",
        "hash_key", "key_info", "lookup_key", "create_key", "list_keys", "revoke_key"),
    "sbx.agent.core.hosting.store.models": ("ConversationRow", "RunRow", "DatasetRow", "EventRow",
        "ArtifactRow", "ApiKey", "WebSession", "OidcLogin", "OidcIdentity", "OidcSession",
        "Replica", "UNFINISHED_STATUSES"),
    "sbx.agent.core.hosting.store.notes": ("DbNoteStore",),
    "sbx.agent.core.hosting.store.quotas": ("HOUR_S", "DAY_S", "reserve_conversation",
        "check_storage", "storage_used", "stored_bytes", "upload_too_large"),
    "sbx.agent.core.hosting.store.replicas": ("Replicas",),
    "sbx.agent.export.formats": ("export_transcript", "EXPORT_FORMATS", "ExportFormat"),
    "sbx.agent.model.reply": ("ModelError",),
    "sbx.agent.provenance.data": ("data_digests",),
    "sbx.agent.provenance.parts": ("ANSWER_PART_KEYS", "ANSWER_PART_TITLES"),
    "sbx.agent.testing.scripted_model": ("ScriptedLLM",),
    "sbx.agent.testing.scripted_turns": ("ScriptedReply", "ScriptedRequest", "ScriptedTurn",
        "scripted_answer", "scripted_tool_call"),
    "sbx.agent.core.history": ("read_record", "RecordedConversation", "RecordError"),
    "sbx.agent.core.rerun": ("RerunReport", "ExecutionCheck", "recorded_data", "RerunError"),
    "sbx.sandbox.closing": ("Closing",),
    "sbx.sandbox.errors": ("SbxError", "SandboxError", "HostBusy"),
    "sbx.sandbox.limits": ("Limits",),
    "sbx.sandbox.result": ("ExecutionResult", "Artifact", "DisplayResult"),
    "sbx.sandbox.units": ("format_size", "parse_size", "parse_duration"),
    "sbx.tools.audit": ("audit_key_from_env", "AUDIT_PATH_ENV", "AuditError"),
    "sbx.tools.audit_show": ("audit_call_rows", "AUDIT_COLUMNS"),
    "sbx.tools.audit_verify": ("verify_audit_log", "iter_audit_records", "UnreadableLine"),
    "sbx.tools.builtin.data_files": ("index_data_files",),
    "sbx.tools.builtin.plan": ("PLAN_MARKS",),
    "sbx.tools.context": ("OutputSink",),
    "sbx.tools.hints": ("module_from_error",),
    "sbx.tools.policy": ("PolicyError",),
    "sbx.tools.redact": ("Redactor",),
    "sbx.tools.text_safety": ("safe_text", "safe_json"),
}
"""Each module below the door and the public names it owns."""
_RENAMED: dict[str, str] = {
    "ANSWER_PART_KEYS": "PART_KEYS",
    "ANSWER_PART_TITLES": "PART_TITLES",
    "AUDIT_COLUMNS": "COLUMNS",
    "AUDIT_PATH_ENV": "PATH_ENV",
    "ConversationRow": "Conversation",
    "DatasetRow": "Dataset",
    "EVENT_POLL_S": "POLL_S",
    "EXPORT_FORMATS": "FORMATS",
    "ExportFormat": "Format",
    "LiveConversation": "Live",
    "PLAN_MARKS": "MARKS",
    "RunRow": "Run",
    "RunStatus": "Status",
    "ScriptedReply": "Reply",
    "ScriptedTurn": "Turn",
    "SessionAdmission": "Admission",
    "SessionOpened": "Opened",
    "SessionRefused": "Refused",
    "UNMATCHED_ROUTE": "UNMATCHED",
    "UploadHold": "Hold",
    "audit_call_rows": "call_rows",
    "configure_tracing": "configure_from_env",
    "export_transcript": "export",
    "iter_audit_records": "iter_records",
    "notify_observer": "notify",
    "scripted_answer": "assistant",
    "scripted_tool_call": "tool_call",
    "verify_audit_log": "verify_log",
}
"""Public names that differ from their name in the owning module (a plainer one there)."""
_EXPORTS = {name: module for module, names in _OWNERS.items() for name in names}

__all__ = [
    "ANSWER_PART_KEYS", "ANSWER_PART_TITLES", "AUDIT_COLUMNS", "AUDIT_PATH_ENV", "Admitted",
    "Answer", "ApiKey", "App", "AppConfig", "Artifact", "ArtifactRow", "AuditError", "CallReport",
    "Caller", "Cancellation", "Cell", "Closing", "Compaction", "Conversation", "ConversationRow",
    "ConversationSpec", "ConversationStart", "DAY_S", "DEFAULT_IMAGE", "DataPaths", "Database",
    "DatasetNotes", "DatasetRow", "DbNoteStore", "DisplayResult", "EARLY_SIGNALS", "EVENT_POLL_S",
    "EXPORT_FORMATS", "Endpoint", "Event", "EventRow", "EventSink", "ExecutionCheck",
    "ExecutionResult", "ExportFormat", "Feed", "FileOpError", "FixedData", "HOUR_S", "Host",
    "HostBusy", "KeptSession", "KeptSessions", "KeyAdminError", "KeyInfo", "LimitRefused",
    "LimitTooLow", "Limits", "LimitsRequest", "LiveConversation", "MAX_WORKERS", "MessageAdded",
    "ModelError", "ModelReplied", "NoRecorder", "NotAdopted", "Note", "NoteError", "OUTPUT_DIR",
    "Observer", "Observers", "OidcIdentity", "OidcLogin", "OidcSession", "OidcSettings",
    "OutputChunk", "OutputSink", "Owner", "PLAN_MARKS", "PlanUpdated", "PolicyError", "Problem",
    "ProgramSpec", "RUNS_DIR", "RecordError", "RecordedConversation", "Redactor", "Replica",
    "Replicas", "RerunError", "RerunReport", "Resumable", "Role", "RunEnd", "RunError",
    "RunOutcome", "RunRecorder", "RunResult", "RunRow", "RunStart", "RunStatus", "RunTicket",
    "SandboxError", "SbxError", "ScriptedLLM", "ScriptedReply", "ScriptedRequest", "ScriptedTurn",
    "ServeOptions", "ServiceAdmission", "ServiceQuotas", "ServiceSettings", "SessionAdmission",
    "SessionClosed", "SessionHost", "SessionNotFound", "SessionOpened", "SessionRefused",
    "SettingsError", "SignedInUser", "StateRestored", "StoreError", "StoreRecorder", "Supervisor",
    "TeamSettings", "Tenant", "ToolResult", "ToolSession", "TracingError", "TranscriptError",
    "UNFINISHED_STATUSES", "UNMATCHED_ROUTE", "UPLOAD_TOOL", "UnreadableLine", "Upload",
    "UploadHold", "WebSession",
    "WorkerSlot", "Workspace", "adopt", "announce_ready", "audit_call_rows", "audit_key_from_env",
    "call_status", "check_data", "check_storage", "clear_variables", "configure_tracing",
    "create_key", "data_digests", "data_dir", "database_url", "dataset_paths", "dataset_user",
    "delete_runs", "describe_validation_error", "drop_namespace", "effective_quotas",
    "export_transcript", "failed_outcome", "file_op", "find_transcript", "format_of", "freeze_heap",
    "format_size", "hash_key", "idle_reason", "in_namespace", "index_data_files",
    "iter_audit_records", "key_info", "limited", "list_keys", "listen_unix", "load_config",
    "local_note_store", "lock_principal", "lookup_key", "loss_text", "metrics_team",
    "module_from_error", "new_conversation_id", "new_run_id", "not_found", "notify_observer",
    "numbered_events", "open_artifact", "open_upload", "os_principal", "outcome_of", "owned",
    "owned_values", "parse_duration", "parse_event", "parse_size", "pending_note", "public_event",
    "quota_exceeded", "read_file", "read_paused", "read_record", "read_resumable", "recorded_data",
    "require_image", "reserve_conversation", "resolve_endpoint", "restore_summary", "revoke_key",
    "run_directory", "run_outcome", "safe_json", "safe_name", "safe_text", "scripted_answer",
    "scripted_tool_call", "sse_frame", "storage_used", "store_upload", "stored_bytes", "streamed",
    "tenant_of", "unavailable", "unsafe_name_reason", "upload_room", "upload_too_large",
    "verify_audit_log", "worker_id", "write_file",
]


def __getattr__(name: str) -> object:
    """Import a public name's module on first use, and keep the name here."""
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'sbx.agent' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # the same names, for the type checker (test_layering checks they agree)
    from sbx.agent.core.app import DEFAULT_IMAGE as DEFAULT_IMAGE
    from sbx.agent.core.app import OUTPUT_DIR as OUTPUT_DIR
    from sbx.agent.core.app import RUNS_DIR as RUNS_DIR
    from sbx.agent.core.app import Answer as Answer
    from sbx.agent.core.app import App as App
    from sbx.agent.core.app import os_principal as os_principal
    from sbx.agent.core.app import require_image as require_image
    from sbx.agent.core.artifacts import open_artifact as open_artifact
    from sbx.agent.core.artifacts import unsafe_name_reason as unsafe_name_reason
    from sbx.agent.core.config import MAX_WORKERS as MAX_WORKERS
    from sbx.agent.core.config import AppConfig as AppConfig
    from sbx.agent.core.config import OidcSettings as OidcSettings
    from sbx.agent.core.config import ServiceQuotas as ServiceQuotas
    from sbx.agent.core.config import ServiceSettings as ServiceSettings
    from sbx.agent.core.config import describe_validation_error as describe_validation_error
    from sbx.agent.core.config import load_config as load_config
    from sbx.agent.core.conversation import Conversation as Conversation
    from sbx.agent.core.conversation import new_conversation_id as new_conversation_id
    from sbx.agent.core.events import Compaction as Compaction
    from sbx.agent.core.events import ConversationStart as ConversationStart
    from sbx.agent.core.events import Event as Event
    from sbx.agent.core.events import EventSink as EventSink
    from sbx.agent.core.events import MessageAdded as MessageAdded
    from sbx.agent.core.events import ModelReplied as ModelReplied
    from sbx.agent.core.events import OutputChunk as OutputChunk
    from sbx.agent.core.events import PlanUpdated as PlanUpdated
    from sbx.agent.core.events import RunEnd as RunEnd
    from sbx.agent.core.events import RunError as RunError
    from sbx.agent.core.events import RunStart as RunStart
    from sbx.agent.core.events import StateRestored as StateRestored
    from sbx.agent.core.events import ToolResult as ToolResult
    from sbx.agent.core.events import parse_event as parse_event
    from sbx.agent.core.execute_program import ProgramSpec as ProgramSpec
    from sbx.agent.core.history import RecordedConversation as RecordedConversation
    from sbx.agent.core.history import RecordError as RecordError
    from sbx.agent.core.history import read_record as read_record
    from sbx.agent.core.hosting.adopt import NotAdopted as NotAdopted
    from sbx.agent.core.hosting.adopt import adopt as adopt
    from sbx.agent.core.hosting.datasets import Hold as UploadHold
    from sbx.agent.core.hosting.datasets import Upload as Upload
    from sbx.agent.core.hosting.datasets import format_of as format_of
    from sbx.agent.core.hosting.datasets import open_upload as open_upload
    from sbx.agent.core.hosting.datasets import safe_name as safe_name
    from sbx.agent.core.hosting.datasets import store_upload as store_upload
    from sbx.agent.core.hosting.datasets import upload_room as upload_room
    from sbx.agent.core.hosting.eventlog import POLL_S as EVENT_POLL_S
    from sbx.agent.core.hosting.eventlog import public_event as public_event
    from sbx.agent.core.hosting.feed import Feed as Feed
    from sbx.agent.core.hosting.feed import sse_frame as sse_frame
    from sbx.agent.core.hosting.host import DataPaths as DataPaths
    from sbx.agent.core.hosting.host import Host as Host
    from sbx.agent.core.hosting.host import ServeOptions as ServeOptions
    from sbx.agent.core.hosting.observer import UNMATCHED as UNMATCHED_ROUTE
    from sbx.agent.core.hosting.observer import Observer as Observer
    from sbx.agent.core.hosting.observer import Observers as Observers
    from sbx.agent.core.hosting.observer import notify as notify_observer
    from sbx.agent.core.hosting.recorder import StoreRecorder as StoreRecorder
    from sbx.agent.core.hosting.retention import delete_runs as delete_runs
    from sbx.agent.core.hosting.retention import run_directory as run_directory
    from sbx.agent.core.hosting.runs import Live as LiveConversation
    from sbx.agent.core.hosting.session_tenancy import ServiceAdmission as ServiceAdmission
    from sbx.agent.core.hosting.store.datasets_held import dataset_user as dataset_user
    from sbx.agent.core.hosting.store.db import Database as Database
    from sbx.agent.core.hosting.store.db import StoreError as StoreError
    from sbx.agent.core.hosting.store.db import data_dir as data_dir
    from sbx.agent.core.hosting.store.db import database_url as database_url
    from sbx.agent.core.hosting.store.db import lock_principal as lock_principal
    from sbx.agent.core.hosting.store.keys import KeyAdminError as KeyAdminError
    from sbx.agent.core.hosting.store.keys import KeyInfo as KeyInfo
    from sbx.agent.core.hosting.store.keys import Role as Role
    from sbx.agent.core.hosting.store.keys import SignedInUser as SignedInUser
    from sbx.agent.core.hosting.store.keys import create_key as create_key
    from sbx.agent.core.hosting.store.keys import hash_key as hash_key
    from sbx.agent.core.hosting.store.keys import key_info as key_info
    from sbx.agent.core.hosting.store.keys import list_keys as list_keys
    from sbx.agent.core.hosting.store.keys import lookup_key as lookup_key
    from sbx.agent.core.hosting.store.keys import revoke_key as revoke_key
    from sbx.agent.core.hosting.store.models import UNFINISHED_STATUSES as UNFINISHED_STATUSES
    from sbx.agent.core.hosting.store.models import ApiKey as ApiKey
    from sbx.agent.core.hosting.store.models import ArtifactRow as ArtifactRow
    from sbx.agent.core.hosting.store.models import Conversation as ConversationRow
    from sbx.agent.core.hosting.store.models import Dataset as DatasetRow
    from sbx.agent.core.hosting.store.models import EventRow as EventRow
    from sbx.agent.core.hosting.store.models import OidcIdentity as OidcIdentity
    from sbx.agent.core.hosting.store.models import OidcLogin as OidcLogin
    from sbx.agent.core.hosting.store.models import OidcSession as OidcSession
    from sbx.agent.core.hosting.store.models import Replica as Replica
    from sbx.agent.core.hosting.store.models import Run as RunRow
    from sbx.agent.core.hosting.store.models import WebSession as WebSession
    from sbx.agent.core.hosting.store.notes import DbNoteStore as DbNoteStore
    from sbx.agent.core.hosting.store.quotas import DAY_S as DAY_S
    from sbx.agent.core.hosting.store.quotas import HOUR_S as HOUR_S
    from sbx.agent.core.hosting.store.quotas import check_storage as check_storage
    from sbx.agent.core.hosting.store.quotas import reserve_conversation as reserve_conversation
    from sbx.agent.core.hosting.store.quotas import storage_used as storage_used
    from sbx.agent.core.hosting.store.quotas import stored_bytes as stored_bytes
    from sbx.agent.core.hosting.store.quotas import upload_too_large as upload_too_large
    from sbx.agent.core.hosting.store.replicas import Replicas as Replicas
    from sbx.agent.core.hosting.tenancy import dataset_paths as dataset_paths
    from sbx.agent.core.hosting.tenancy import limited as limited
    from sbx.agent.core.hosting.tenancy import owned as owned
    from sbx.agent.core.hosting.tenancy import owned_values as owned_values
    from sbx.agent.core.hosting.tenants import Tenant as Tenant
    from sbx.agent.core.hosting.tenants import effective_quotas as effective_quotas
    from sbx.agent.core.hosting.tenants import tenant_of as tenant_of
    from sbx.agent.core.hosting.upload_tool import UPLOAD_TOOL as UPLOAD_TOOL
    from sbx.agent.core.hosting.workers import EARLY_SIGNALS as EARLY_SIGNALS
    from sbx.agent.core.hosting.workers import Supervisor as Supervisor
    from sbx.agent.core.hosting.workers import WorkerSlot as WorkerSlot
    from sbx.agent.core.hosting.workers import announce_ready as announce_ready
    from sbx.agent.core.hosting.workers import freeze_heap as freeze_heap
    from sbx.agent.core.hosting.workers import listen_unix as listen_unix
    from sbx.agent.core.hosting.workers import worker_id as worker_id
    from sbx.agent.core.kept_sessions import Admitted as Admitted
    from sbx.agent.core.kept_sessions import KeptSession as KeptSession
    from sbx.agent.core.kept_sessions import KeptSessions as KeptSessions
    from sbx.agent.core.kept_sessions import Owner as Owner
    from sbx.agent.core.kept_sessions import SessionHost as SessionHost
    from sbx.agent.core.kept_sessions import SessionNotFound as SessionNotFound
    from sbx.agent.core.kept_sessions import streamed as streamed
    from sbx.agent.core.limits_request import LimitRefused as LimitRefused
    from sbx.agent.core.limits_request import LimitsRequest as LimitsRequest
    from sbx.agent.core.limits_request import LimitTooLow as LimitTooLow
    from sbx.agent.core.namespaces import clear_variables as clear_variables
    from sbx.agent.core.namespaces import drop_namespace as drop_namespace
    from sbx.agent.core.namespaces import in_namespace as in_namespace
    from sbx.agent.core.notes import DatasetNotes as DatasetNotes
    from sbx.agent.core.notes import Note as Note
    from sbx.agent.core.notes import NoteError as NoteError
    from sbx.agent.core.notes import local_note_store as local_note_store
    from sbx.agent.core.outcomes import idle_reason as idle_reason
    from sbx.agent.core.outcomes import loss_text as loss_text
    from sbx.agent.core.outcomes import outcome_of as outcome_of
    from sbx.agent.core.outcomes import run_outcome as run_outcome
    from sbx.agent.core.plan import pending_note as pending_note
    from sbx.agent.core.problem import Problem as Problem
    from sbx.agent.core.problem import not_found as not_found
    from sbx.agent.core.problem import quota_exceeded as quota_exceeded
    from sbx.agent.core.problem import unavailable as unavailable
    from sbx.agent.core.rerun import ExecutionCheck as ExecutionCheck
    from sbx.agent.core.rerun import RerunError as RerunError
    from sbx.agent.core.rerun import RerunReport as RerunReport
    from sbx.agent.core.rerun import recorded_data as recorded_data
    from sbx.agent.core.restore import Cell as Cell
    from sbx.agent.core.restore import restore_summary as restore_summary
    from sbx.agent.core.resume import Resumable as Resumable
    from sbx.agent.core.resume import find_transcript as find_transcript
    from sbx.agent.core.resume import read_paused as read_paused
    from sbx.agent.core.resume import read_resumable as read_resumable
    from sbx.agent.core.run_recorder import NoRecorder as NoRecorder
    from sbx.agent.core.run_recorder import RunOutcome as RunOutcome
    from sbx.agent.core.run_recorder import RunRecorder as RunRecorder
    from sbx.agent.core.run_recorder import RunTicket as RunTicket
    from sbx.agent.core.run_recorder import call_status as call_status
    from sbx.agent.core.run_recorder import failed_outcome as failed_outcome
    from sbx.agent.core.run_recorder import new_run_id as new_run_id
    from sbx.agent.core.sandbox_files import FileOpError as FileOpError
    from sbx.agent.core.sandbox_files import file_op as file_op
    from sbx.agent.core.sandbox_files import read_file as read_file
    from sbx.agent.core.sandbox_files import write_file as write_file
    from sbx.agent.core.session_admission import Admission as SessionAdmission
    from sbx.agent.core.session_admission import Caller as Caller
    from sbx.agent.core.session_admission import FixedData as FixedData
    from sbx.agent.core.session_admission import Opened as SessionOpened
    from sbx.agent.core.session_admission import Refused as SessionRefused
    from sbx.agent.core.settings import Endpoint as Endpoint
    from sbx.agent.core.settings import SettingsError as SettingsError
    from sbx.agent.core.settings import resolve_endpoint as resolve_endpoint
    from sbx.agent.core.state import RunResult as RunResult
    from sbx.agent.core.state import Status as RunStatus
    from sbx.agent.core.teams import TeamSettings as TeamSettings
    from sbx.agent.core.teams import metrics_team as metrics_team
    from sbx.agent.core.tool_session import CallReport as CallReport
    from sbx.agent.core.tool_session import SessionClosed as SessionClosed
    from sbx.agent.core.tool_session import ToolSession as ToolSession
    from sbx.agent.core.tracing import TracingError as TracingError
    from sbx.agent.core.tracing import configure_from_env as configure_tracing
    from sbx.agent.core.transcript import TranscriptError as TranscriptError
    from sbx.agent.core.transcript import numbered_events as numbered_events
    from sbx.agent.core.workspace import ConversationSpec as ConversationSpec
    from sbx.agent.core.workspace import Workspace as Workspace
    from sbx.agent.core.workspace import check_data as check_data
    from sbx.agent.export.formats import FORMATS as EXPORT_FORMATS
    from sbx.agent.export.formats import Format as ExportFormat
    from sbx.agent.export.formats import export as export_transcript
    from sbx.agent.model.cancellation import Cancellation as Cancellation
    from sbx.agent.model.reply import ModelError as ModelError
    from sbx.agent.provenance.data import data_digests as data_digests
    from sbx.agent.provenance.parts import PART_KEYS as ANSWER_PART_KEYS
    from sbx.agent.provenance.parts import PART_TITLES as ANSWER_PART_TITLES
    from sbx.agent.testing.scripted_model import ScriptedLLM as ScriptedLLM
    from sbx.agent.testing.scripted_turns import Reply as ScriptedReply
    from sbx.agent.testing.scripted_turns import ScriptedRequest as ScriptedRequest
    from sbx.agent.testing.scripted_turns import Turn as ScriptedTurn
    from sbx.agent.testing.scripted_turns import assistant as scripted_answer
    from sbx.agent.testing.scripted_turns import tool_call as scripted_tool_call
    from sbx.sandbox.closing import Closing as Closing
    from sbx.sandbox.errors import HostBusy as HostBusy
    from sbx.sandbox.errors import SandboxError as SandboxError
    from sbx.sandbox.errors import SbxError as SbxError
    from sbx.sandbox.limits import Limits as Limits
    from sbx.sandbox.result import Artifact as Artifact
    from sbx.sandbox.result import DisplayResult as DisplayResult
    from sbx.sandbox.result import ExecutionResult as ExecutionResult
    from sbx.sandbox.units import format_size as format_size
    from sbx.sandbox.units import parse_duration as parse_duration
    from sbx.sandbox.units import parse_size as parse_size
    from sbx.tools.audit import PATH_ENV as AUDIT_PATH_ENV
    from sbx.tools.audit import AuditError as AuditError
    from sbx.tools.audit import audit_key_from_env as audit_key_from_env
    from sbx.tools.audit_show import COLUMNS as AUDIT_COLUMNS
    from sbx.tools.audit_show import call_rows as audit_call_rows
    from sbx.tools.audit_verify import UnreadableLine as UnreadableLine
    from sbx.tools.audit_verify import iter_records as iter_audit_records
    from sbx.tools.audit_verify import verify_log as verify_audit_log
    from sbx.tools.builtin.data_files import index_data_files as index_data_files
    from sbx.tools.builtin.plan import MARKS as PLAN_MARKS
    from sbx.tools.context import OutputSink as OutputSink
    from sbx.tools.hints import module_from_error as module_from_error
    from sbx.tools.policy import PolicyError as PolicyError
    from sbx.tools.redact import Redactor as Redactor
    from sbx.tools.text_safety import safe_json as safe_json
    from sbx.tools.text_safety import safe_text as safe_text
