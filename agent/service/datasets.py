"""`/v1/datasets`: upload (multipart, streamed, capped), list, show with preview, delete.

A dataset is stored as `<data dir>/datasets/<id>/<safe name>`: the directory
is an id the server made, the name is reduced by `safe_name` (letters, digits,
`._-`), so nothing a client sends becomes a path. Text (CSV, TSV, JSON) is
stored as UTF-8 whatever encoding it came in (`text_encoding`). The preview
computed at upload is what the model is told about the file when a
conversation uses it (columns and dtypes for CSV/TSV; the reader to use for
Parquet, Excel and JSON), and for text, the encoding it was read in.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

from sqlalchemy import select
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from sbx.agent import ServiceQuotas, format_size, summarize_data
from sbx.agent.core.hosting.tenancy import owned
from sbx.agent.core.hosting.tenants import effective_quotas
from sbx.agent.service import text_encoding
from sbx.agent.service.api import Call, api, json_response
from sbx.agent.service.host import Service
from sbx.agent.service.problems import Problem, quota_exceeded
from sbx.agent.service.schemas import DatasetOut, Listing
from sbx.agent.service.uploads import (
    Upload,
    check_content,
    format_of,
    receive_upload,
    safe_name,
)
from sbx.agent.store.datasets_held import dataset_user
from sbx.agent.store.db import lock_principal
from sbx.agent.store.models import Dataset
from sbx.agent.store.quotas import (
    reserve_dataset_bytes,
    storage_used,
    stored_bytes,
    upload_too_large,
)

UPLOAD_PATH = "/v1/datasets"
TEXT_FORMATS = frozenset({"csv", "tsv", "json"})
"""Formats that are text: stored as UTF-8 whatever encoding they came in."""


@api("POST", UPLOAD_PATH, response=DatasetOut, status=201)
async def upload_dataset(call: Call) -> Response:
    """Upload a dataset (multipart/form-data, one part named `file`)."""
    quotas = effective_quotas(call.service.settings, call.key)
    limit, over = await run_in_threadpool(upload_room, call.service, call.principal, quotas)
    with call.service.uploads.hold(call.principal, limit) as hold:
        upload = await receive_upload(call.request, call.service.paths.datasets,
                                      quotas.upload_bytes, upload_too_large(quotas), hold, over)
        try:
            row = await run_in_threadpool(store_upload, call.service, call.principal, quotas,
                                          upload)
        finally:
            upload.path.unlink(missing_ok=True)
    return json_response(_out(row, preview=True), 201)


def upload_room(service: Service, principal: str, quotas: ServiceQuotas) -> tuple[int, Problem]:
    """How many bytes the key's uploads in progress may hold together, and the 429 past it.

    One allowed upload's worth (`upload_bytes`), and never more than the room left in
    `dataset_bytes` and `storage_bytes`: concurrent uploads share it, so they cannot hold
    more temporary disk than the key could keep.
    """
    with service.db.read() as session:
        datasets = quotas.dataset_bytes - stored_bytes(session, principal)
        storage = quotas.storage_bytes - storage_used(session, principal)
    limit = max(0, min(quotas.upload_bytes, datasets, storage))
    quota = ("upload_bytes" if limit == quotas.upload_bytes else
             "dataset_bytes" if limit == max(0, datasets) else "storage_bytes")
    over = quota_exceeded(quota, f"your uploads in progress would hold more than "
                          f"{format_size(limit)}, the room your quotas leave; wait for them "
                          "to end, or delete datasets or runs", 1.0)
    return limit, over


def store_upload(service: Service, principal: str, quotas: ServiceQuotas, upload: Upload
                 ) -> Dataset:
    """Check the file, move it under its id, compute the preview, reserve the bytes.

    The one way a file becomes a dataset: `POST /v1/datasets` and the MCP face's
    `upload_dataset` both come here. Raises `Problem` (415, 422, 429).
    """
    name = safe_name(upload.filename)
    fmt = format_of(name)
    check_content(name, upload.head)
    codec = text_encoding.detect(upload.path) if fmt in TEXT_FORMATS else None
    if codec not in (None, text_encoding.UTF8):
        upload.size, upload.sha256, upload.head = text_encoding.store_as_utf8(
            upload.path, codec, name)
    ident = "ds-" + uuid.uuid4().hex[:12]
    directory = service.paths.datasets / ident
    directory.mkdir(mode=0o700)
    final = directory / name
    try:
        os.rename(upload.path, final)
        os.chmod(final, 0o644)  # the sandbox's unprivileged user reads it through its mount
        row = Dataset(id=ident, principal=principal, name=name, format=fmt,
                      size=upload.size, sha256=upload.sha256,
                      preview=_preview(final, codec), created_at=time.time())
        with service.db.write() as session:
            reserve_dataset_bytes(session, principal, quotas, upload.size)
            session.add(row)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return row


@api("GET", "/v1/datasets", response=Listing)
def list_datasets(call: Call) -> Response:
    """List your datasets, newest first."""
    with call.service.db.read() as session:
        rows = session.scalars(select(Dataset).where(Dataset.principal == call.principal)
                               .order_by(Dataset.created_at.desc())).all()
        return json_response(Listing(items=[_out(row, preview=False) for row in rows]))


@api("GET", "/v1/datasets/{dataset_id}", response=DatasetOut)
def get_dataset(call: Call) -> Response:
    """One dataset with its preview."""
    with call.service.db.read() as session:
        row = owned(session, Dataset, "dataset", call.params["dataset_id"], call.principal)
        return json_response(_out(row, preview=True))


@api("DELETE", "/v1/datasets/{dataset_id}", status=204)
def delete_dataset(call: Call) -> Response:
    """Delete a dataset no open conversation or running execution uses; it leaves your quota."""
    with call.service.db.write() as session:
        lock_principal(session, call.principal)  # an execution resolving it waits, or is seen
        row = owned(session, Dataset, "dataset", call.params["dataset_id"], call.principal)
        user = dataset_user(session, call.principal, row.id)
        if user is not None:
            raise Problem(409, "dataset-in-use", f"dataset {row.id} is used by {user}")
        session.delete(row)
        ident = row.id
    shutil.rmtree(call.service.paths.datasets / ident, ignore_errors=True)
    return Response(status_code=204)


def _preview(path: Path, codec: str | None) -> str:
    """What the model is told about the file, and for text, the encoding it was read in."""
    summary = summarize_data([path])
    return summary if codec is None else f"{summary}\n{text_encoding.describe(codec)}"


def _out(row: Dataset, *, preview: bool) -> DatasetOut:
    return DatasetOut(id=row.id, name=row.name, format=row.format, size=row.size,
                      sha256=row.sha256, created_at=row.created_at,
                      preview=row.preview if preview else None)
