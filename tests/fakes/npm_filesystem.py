"""server-filesystem from npm, joined as an outside cluster the way a user adds it: installed
into its own npm prefix under a test's temp folder, its files copied into the sandbox work dir
(``--copy``), run in the local sandbox. Not a fake: the real server; the tests that use it are
slow and skip where npm, node or the registry is missing."""

from __future__ import annotations

from pathlib import Path

from fakes.registry_servers import npm_servers
from trajsynth.mcp_servers.registry import add_outside_cluster
from trajsynth.schemas import ToolCluster

PACKAGE = "@modelcontextprotocol/server-filesystem"


def filesystem_cluster(tmp: Path, docs: dict[str, str], bin_: Path | None = None) -> ToolCluster:
    """The cluster ``fs`` over a folder ``docs`` holding ``docs`` (file name -> text);
    ``bin_``: an npm ``.bin`` that already holds the server (else it is installed under
    ``tmp``)."""
    bin_ = bin_ or npm_servers(tmp / "npm", PACKAGE)
    folder = tmp / "seed" / "docs"
    folder.mkdir(parents=True)
    for name, text in docs.items():
        (folder / name).write_text(text)
    tmp.chmod(0o755)  # the sandbox's unprivileged user reads the server, as in a venv
    [cluster] = add_outside_cluster(
        "fs",
        command=["node", str(bin_ / "mcp-server-filesystem"), "."],
        clusters_dir=tmp / "clusters", sandbox_kind="local",
        copies=[f"{folder}:docs"],
    )  # fmt: skip
    return cluster
