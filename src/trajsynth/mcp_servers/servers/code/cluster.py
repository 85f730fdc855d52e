"""What the code cluster is: its domain, its description, the dependency edges it states
and the facts its tasks' words use. Its ``trajsynth.clusters`` entry point names ``CLUSTER``."""

from __future__ import annotations

from trajsynth.schemas import BundledCluster, DeclaredEdge, Domain, DomainFacts, Precondition

__all__ = ["CLUSTER"]

CLUSTER = BundledCluster(
    cluster_id="code",
    domain=Domain.CODE,
    description=(
        "A Python code interpreter with a work directory: run Python, list, read, write and "
        "delete files, and run the project's unittest tests."
    ),
    module=__name__.rpartition(".")[0],  # this folder's package
    declared_edges=[
        DeclaredEdge(
            source="list_files", target="read_file", out_field="files[].path", in_param="path"
        ),
        DeclaredEdge(
            source="list_files", target="delete_file", out_field="files[].path", in_param="path"
        ),
        DeclaredEdge(source="write_file", target="run_tests", out_field="path", in_param="path"),
    ],
    # what the tools accept: run_tests finds tests only in a test file (test*.py)
    preconditions=[
        Precondition(
            tool="run_tests",
            param="path",
            table="files",
            column="path",
            pattern=r"(^|/)test[^/]*\.py$",
        )
    ],
    facts=DomainFacts(persona="A developer working on a small project."),
)
