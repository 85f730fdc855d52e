"""Speed of the diversity stage (docs/methods.md §5) on synthetic rollouts, embeddings included.

    python bench/diversity.py [--n 10000] [--clusters 12] [--embed-max-chars 1000] [--fake]

Builds ``n`` trajectories (assistant text, reads, writes, failing calls, a few exact copies)
without any model, then times each part: digests + rule labels, CAC, embeddings
(all-MiniLM-L6-v2, each distinct digest once; ``--fake`` swaps in a hashing embedder to time
the rest alone), the mode codebook fit and assignment, near-duplicates and the report. Prints
one JSON object of seconds and counts. Target: 10,000 trajectories in <= 60 s on 2
CPU cores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time

import numpy as np

from trajsynth.curation.diversity import (
    ModeCodebook,
    cac,
    digest,
    diversity_report,
    embed_digests,
    near_duplicates,
    rule_mode,
)
from trajsynth.schemas import (
    FunctionCall,
    Message,
    ObsClass,
    Termination,
    ToolAccess,
    ToolCall,
    ToolCallRecord,
    Trajectory,
)

TOOLS = {
    "search_flights": ToolAccess.READ,
    "get_fare_rules": ToolAccess.READ,
    "get_order": ToolAccess.READ,
    "list_items": ToolAccess.READ,
    "book_flight": ToolAccess.WRITE,
    "cancel_order": ToolAccess.WRITE,
    "run_python": ToolAccess.WRITE,
}
PHRASES = [
    "Let me look that up for you.",
    "I found a few options; the cheapest morning nonstop leaves at 8:05.",
    "Which order do you mean? I see two recent ones.",
    "The call failed, so I will try the other order number.",
    "I will compute the total with a short script.",
    "Your booking is confirmed; I checked the reservation again to be sure.",
    "Comparing the refund rules of both fares before I book.",
]


def make(i: int, rng: random.Random, n_clusters: int) -> Trajectory:
    tid = f"t{i:06d}"
    messages = [Message(role="system", content="sys"), Message(role="user", content="goal")]
    calls = []
    if rng.random() < 0.15:
        messages.append(Message(role="assistant", content=rng.choice(PHRASES[2:3])))
        messages.append(Message(role="user", content="The one from May."))
    for k in range(rng.randint(0, 7)):
        tool = rng.choice(list(TOOLS))
        args = {"order_id": f"W{rng.randint(1, 40)}", "qty": rng.randint(1, 3)}
        if k and rng.random() < 0.5:
            args["flight_id"] = f"UA{rng.randint(100, 140)}"
        error = rng.random() < 0.12
        cid = f"{tid}-c{k}"
        obs = (
            "Error: not found"
            if error
            else json.dumps({"flight_id": f"UA{rng.randint(100, 140)}", "total": k * 10.5})
        )
        text = " ".join(rng.choice(PHRASES) for _ in range(rng.randint(1, 3)))
        messages.append(
            Message(
                role="assistant",
                content=text,
                tool_calls=[
                    ToolCall(id=cid, function=FunctionCall(name=tool, arguments=json.dumps(args)))
                ],
            )
        )
        messages.append(Message(role="tool", content=obs, tool_call_id=cid, name=tool))
        calls.append(
            ToolCallRecord(
                call_id=cid,
                tool=tool,
                raw_arguments=json.dumps(args),
                arguments=args,
                observation=obs,
                obs_class=ObsClass.ERROR if error else ObsClass.OK,
                turn=k,
            )
        )
    messages.append(Message(role="assistant", content=rng.choice(PHRASES) + f" Ref {i % 97}."))
    return Trajectory(
        trajectory_id=tid,
        run_id="bench",
        blueprint_id=f"bp{i // 5}",
        tree_id=f"tree{i // 5}",
        leaf_node_id=f"leaf{i}",
        cluster_id=f"cluster-{i % n_clusters:02d}",
        messages=messages,
        calls=calls,
        final_answer=messages[-1].content,
        termination=Termination.USER_STOP,
    )


def fake_embedder(texts):
    rows = []
    for t in texts:
        seed = int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)
        rows.append(np.random.default_rng(seed).normal(size=384))
    return np.asarray(rows, dtype=np.float32)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--clusters", type=int, default=12)
    ap.add_argument("--embed-max-chars", type=int, default=1000)
    ap.add_argument("--fake", action="store_true", help="hashing embedder instead of MiniLM")
    args = ap.parse_args()
    rng = random.Random(0)
    trajs = [make(i, rng, args.clusters) for i in range(args.n)]
    for i in range(0, args.n, 50):  # exact copies under new ids
        trajs[i + 1] = trajs[i].model_copy(update={"trajectory_id": f"copy{i}"})
    t: dict[str, float] = {}

    start = time.perf_counter()
    digests = [digest(x, TOOLS) for x in trajs]
    labels = [rule_mode(x, TOOLS) for x in trajs]
    t["digest_and_rules_s"] = time.perf_counter() - start

    start = time.perf_counter()
    cacs = [cac(x).cac for x in trajs]
    t["cac_s"] = time.perf_counter() - start

    start = time.perf_counter()
    if args.fake:
        embedder = fake_embedder
    else:
        from trajsynth.curation.embeddings import load_embedder

        embedder = load_embedder()
        t["embedder_load_s"] = time.perf_counter() - start
        start = time.perf_counter()
    emb = embed_digests(digests, embedder, max_chars=args.embed_max_chars)
    t["embed_s"] = time.perf_counter() - start

    start = time.perf_counter()
    book = ModeCodebook.fit(emb.vectors, labels, digests)
    t["codebook_fit_s"] = time.perf_counter() - start
    start = time.perf_counter()
    modes = book.assign(emb.vectors, labels)
    t["assign_s"] = time.perf_counter() - start

    start = time.perf_counter()
    scores = {x.trajectory_id: c for x, c in zip(trajs, cacs, strict=True)}
    marks = near_duplicates(trajs, emb.vectors, scores)
    t["near_duplicates_s"] = time.perf_counter() - start

    start = time.perf_counter()
    dup = {m.trajectory_id for m in marks}
    keep = [i for i, x in enumerate(trajs) if x.trajectory_id not in dup]
    report = diversity_report(
        round=0,
        domains=["retail"] * len(keep),
        clusters=[trajs[i].cluster_id for i in keep],
        modes=[modes[i].mode_id for i in keep],
        cac_values=[cacs[i] for i in keep],
        k_clusters=args.clusters,
        k_modes=book.k,
        mode_codebook=book.codebook_id,
        n_duplicates=len(dup),
    )
    t["report_s"] = time.perf_counter() - start
    t["total_s"] = sum(v for k, v in t.items() if k != "embedder_load_s")
    print(
        json.dumps(
            {
                "n": args.n,
                "distinct_digests": emb.n_embedded,
                "codebook": book.kind,
                "k": book.k,
                "silhouette": book.silhouette,
                "duplicates": len(marks),
                "h_mode_norm": round(report.h_mode_norm, 4),
                "cac_mean": round(report.cac_mean or 0.0, 3),
                **{k: round(v, 2) for k, v in t.items()},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
