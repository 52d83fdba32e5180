"""Uploads as forgiving as the CLI: a Windows-1252 CSV (an Excel export) is taken, stored as
UTF-8, previewed with its accented names intact and the encoding named, and read by pandas'
defaults in the sandbox; through the API and through the page (a real browser).
"""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

import service_support
import web_support
from service_support import upload
from web_support import sign_in, watch

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster
browser = web_support.browser

TEXT = "city,visits\nMontréal,12\nSão Paulo,4\nZürich,7\nCafé €,1\n"
READ = ("import pandas as pd\ndf = pd.read_csv('/data/cities.csv')\n"
        "print(df.city.tolist(), df.visits.sum())")


@pytest.mark.docker
def test_a_cp1252_csv_uploads_as_utf8_and_the_sandbox_reads_its_names(serve, tmp_path):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    client = server.client(server.key("ana"))
    answer = upload(client, "cities.csv", TEXT.encode("cp1252"))
    assert answer.status_code == 201, answer.text
    dataset = answer.json()
    assert "Montréal,12" in dataset["preview"] and "São Paulo" in dataset["preview"]
    assert "text encoding: Windows-1252 (detected; stored as UTF-8)" in dataset["preview"]
    stored = server.data_dir / "datasets" / dataset["id"] / "cities.csv"
    assert stored.read_bytes() == TEXT.encode()
    assert dataset["size"] == len(TEXT.encode())

    done = client.post("/v1/execute", json={"code": READ, "datasets": [dataset["id"]]})
    assert done.status_code == 200, done.text
    assert done.json()["execution"]["stdout"] == (
        "['Montréal', 'São Paulo', 'Zürich', 'Café €'] 24\n")


@pytest.mark.docker
@pytest.mark.parametrize(("encoded", "named"), [
    (TEXT.encode(), "text encoding: UTF-8\n"),
    (TEXT.encode("utf-16"), "text encoding: UTF-16 (detected; stored as UTF-8)"),
    ("city\nna\u00efve\x81\n".encode("latin-1"), "ISO-8859-1 (detected; stored as UTF-8)"),
])
def test_text_in_utf8_utf16_or_latin1_is_named_and_stored_as_utf8(serve, tmp_path, encoded,
                                                                   named):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    client = server.client(server.key("ana"))
    answer = upload(client, "cities.csv", encoded)
    assert answer.status_code == 201, answer.text
    dataset = answer.json()
    assert named in dataset["preview"] + "\n", dataset["preview"]
    stored = (server.data_dir / "datasets" / dataset["id"] / "cities.csv").read_bytes()
    assert stored == encoded.decode("utf-16" if "UTF-16" in named else
                                    "latin-1" if "8859" in named else "utf-8").encode()
    assert dataset["sha256"] != "" and dataset["size"] == len(stored)


@pytest.mark.docker
def test_json_in_cp1252_is_stored_as_utf8_and_a_binary_is_still_refused(serve, tmp_path):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    client = server.client(server.key("ana"))
    document = json.dumps({"city": "Montréal"}, ensure_ascii=False)
    answer = upload(client, "city.json", document.encode("cp1252"))
    assert answer.status_code == 201, answer.text
    stored = server.data_dir / "datasets" / answer.json()["id"] / "city.json"
    assert json.loads(stored.read_text(encoding="utf-8")) == {"city": "Montréal"}
    refused = upload(client, "data.csv", b"\x7fELF\x02\x01\x01\x00\x00\x00")
    assert refused.status_code == 422 and "NUL" in refused.json()["detail"]


@pytest.mark.docker
def test_the_page_uploads_a_cp1252_csv_and_previews_its_names_and_encoding(
    serve, browser, tmp_path
):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    page = browser.new_page()
    seen = watch(page)
    sign_in(page, server.url, server.key("ana"))
    page.get_by_label("Choose files to upload").set_input_files(files=[{
        "name": "cities.csv", "mimeType": "text/csv", "buffer": TEXT.encode("cp1252")}])
    expect(page.locator("#data-status")).to_have_text("Uploaded cities.csv (60 B).")
    page.get_by_role("button", name="Preview cities.csv").click()
    preview = page.locator("#preview-text")
    expect(preview).to_contain_text("Montréal,12")
    expect(preview).to_contain_text("São Paulo,4")
    expect(preview).to_contain_text("text encoding: Windows-1252 (detected; stored as UTF-8)")
    seen.assert_clean()
