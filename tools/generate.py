"""Regenerate every file part that comes from the settings dataclasses and the CRD module.

Usage: python -P tools/generate.py   (or `make generate`)

Writes the chart's CRD (charts/hedgerow/crds/), and the tables between `<!-- generated:NAME -->`
and `<!-- end generated:NAME -->` in docs: the server's, the gateway's and the operator's
settings (from hedgerow.server_settings, hedgerow.gpu_settings, hedgerow.gateway_settings and
hedgerow.operator.main), the flags of `hedgerow guard record` and `check` (hedgerow.commands.guard)
and of `hedgerow fetch-model` (hedgerow.fetch_settings), and the EmbeddingService's spec fields
(from the CRD, whose settings fields come from those same dataclasses). tests/test_generated.py fails when a committed copy differs from what this writes.
"""

import re
from pathlib import Path

from hedgerow.commands.guard import CheckSettings, RecordSettings
from hedgerow.fetch_settings import FetchSettings
from hedgerow.gateway_settings import GatewaySettings
from hedgerow.gpu_settings import GpuSettings
from hedgerow.operator import crd
from hedgerow.operator.main import OperatorSettings
from hedgerow.server_settings import ServerSettings
from hedgerow.settings import markdown_table

ROOT = Path(__file__).resolve().parent.parent
CRD_PATH = ROOT / "charts" / "hedgerow" / "crds" / crd.CRD_FILE
TABLES = {
    "docs/server.md": {"server-settings": lambda: markdown_table(ServerSettings, GpuSettings)},
    "docs/gateway.md": {"gateway-settings": lambda: markdown_table(GatewaySettings)},
    "docs/operator.md": {"operator-settings": lambda: markdown_table(OperatorSettings),
                         "spec-fields": crd.spec_table,
                         "guard-record-settings": lambda: markdown_table(RecordSettings),
                         "guard-check-settings": lambda: markdown_table(CheckSettings),
                         "fetch-model-settings": lambda: markdown_table(FetchSettings)},
}


def with_table(text: str, name: str, table: str, where: str) -> str:
    """`text` with the table between NAME's markers replaced by `table`."""
    pattern = re.compile(rf"(<!-- generated:{name} -->\n).*?(<!-- end generated:{name} -->)",
                         re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"{where} has no <!-- generated:{name} --> ... "
                         f"<!-- end generated:{name} --> markers")
    return pattern.sub(lambda m: m.group(1) + table + m.group(2), text)


def artifacts() -> dict[Path, str]:
    """Every generated file's whole text, by path."""
    out = {CRD_PATH: crd.crd_yaml()}
    for relative, tables in TABLES.items():
        path = ROOT / relative
        text = path.read_text()
        for name, render in tables.items():
            text = with_table(text, name, render(), relative)
        out[path] = text
    return out


if __name__ == "__main__":
    for path, text in artifacts().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
