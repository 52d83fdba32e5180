"""`/v1/datasets`: upload (multipart, streamed, capped), list, show with preview, delete.

How a received file becomes a dataset (names, formats, content, encoding,
preview, quota) is the hosting's (`sbx.agent.core.hosting.datasets`), shared
with the MCP face's `upload_dataset`.
"""

from __future__ import annotations

import shutil

from sqlalchemy import select
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from sbx.agent import (
    DatasetRow,
    dataset_user,
    effective_quotas,
    lock_principal,
    owned,
    store_upload,
    upload_room,
    upload_too_large,
)
from sbx.agent.service.api import Call, api, json_response
from sbx.agent.service.problems import Problem
from sbx.agent.service.schemas import DatasetOut, Listing
from sbx.agent.service.uploads import receive_upload

UPLOAD_PATH = "/v1/datasets"


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


@api("GET", "/v1/datasets", response=Listing)
def list_datasets(call: Call) -> Response:
    """List your datasets, newest first."""
    with call.service.db.read() as session:
        rows = session.scalars(select(DatasetRow).where(DatasetRow.principal == call.principal)
                               .order_by(DatasetRow.created_at.desc())).all()
        return json_response(Listing(items=[_out(row, preview=False) for row in rows]))


@api("GET", "/v1/datasets/{dataset_id}", response=DatasetOut)
def get_dataset(call: Call) -> Response:
    """One dataset with its preview."""
    with call.service.db.read() as session:
        row = owned(session, DatasetRow, "dataset", call.params["dataset_id"], call.principal)
        return json_response(_out(row, preview=True))


@api("DELETE", "/v1/datasets/{dataset_id}", status=204)
def delete_dataset(call: Call) -> Response:
    """Delete a dataset no open conversation or running execution uses; it leaves your quota."""
    with call.service.db.write() as session:
        lock_principal(session, call.principal)  # an execution resolving it waits, or is seen
        row = owned(session, DatasetRow, "dataset", call.params["dataset_id"], call.principal)
        user = dataset_user(session, call.principal, row.id)
        if user is not None:
            raise Problem(409, "dataset-in-use", f"dataset {row.id} is used by {user}")
        session.delete(row)
        ident = row.id
    shutil.rmtree(call.service.paths.datasets / ident, ignore_errors=True)
    return Response(status_code=204)


def _out(row: DatasetRow, *, preview: bool) -> DatasetOut:
    return DatasetOut(id=row.id, name=row.name, format=row.format, size=row.size,
                      sha256=row.sha256, created_at=row.created_at,
                      preview=row.preview if preview else None)
