"""`make bench` keeps working as the program grows (no timing is asserted, only that it runs)."""

from __future__ import annotations

import json
import subprocess
import sys

from gpu_stack.offline.runner import PROJECT_DIR

BENCH = PROJECT_DIR / "bench" / "plan_scaling.py"


def test_bench_plans_the_synthetic_stacks_next_to_the_floor():
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--sizes", "1,3", "--repeat", "1"],
        capture_output=True, text=True, cwd=PROJECT_DIR, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # One table with validation Jobs, one without; the floor registered as many resources each time
    # (the script stops otherwise).
    assert out.count("| nodes | resources | res/node | wall s | RSS MiB | floor wall s |") == 2
    cells = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("|")]
    rows = [row for row in cells if row[0].strip().isdigit() and len(row) == 16]
    # ...and the validation footprint: pods and GPU replicas one `up` starts, per size and coverage.
    footprint = [row for row in cells if row[0].strip().isdigit() and len(row) == 6]
    assert [(int(r[0]), r[1].strip()) for r in footprint] == [(1, "sample"), (1, "full"), (3, "sample"), (3, "full")]
    assert [int(r[0]) for r in rows] == [1, 3, 1, 3]
    with_validation, without = rows[:2], rows[2:]
    for a, b in zip(with_validation, without, strict=True):
        assert int(a[1]) > int(b[1]) > 0  # validation adds resources; every plan registers some
    assert "targets at 3 nodes: resources/node" in out
    # The second floor registered every resource with exactly the program's recorded inputs.
    for size in (1, 3):
        line = next(x for x in out.splitlines() if x.startswith(f"same-inputs floor at {size} nodes:"))
        same, total = (int(w) for w in line.split(":")[1].split()[:3:2])
        assert same == total > 0


def test_a_nodes_state_holds_the_scripts_hash_not_its_text_and_a_lease_not_the_node():
    sys.path.insert(0, str(PROJECT_DIR / "bench"))
    try:
        import state_size
    finally:
        sys.path.remove(str(PROJECT_DIR / "bench"))
    from gpu_stack.design.node_prep import script_hash, script_text

    doc = state_size.plan_json(PROJECT_DIR, "dev")
    entries = state_size.node_entries(doc, "gpu-dev-1", state_size.first_run_log())
    text = {name: json.dumps(e) for name, e in entries.items()}
    lines = [line for line in script_text().splitlines() if len(line) > 40]
    assert not [name for name, t in text.items() for line in lines if line in t]  # no line of the script, anywhere
    copy = entries["node-prep-gpu-dev-1-script"]
    assert copy["inputs"]["source"]["path"] == "config/node-scripts/node-prep.sh"
    assert script_hash() in text["node-prep-gpu-dev-1"]
    # The command keeps one summary line of log, not the log; the read keeps the Lease.
    assert entries["node-prep-gpu-dev-1"]["outputs"]["stderr"].count("\n") == 1
    assert entries["node-gpu-dev-1"]["outputs"]["kind"] == "Lease"
    # No label patch: the node's share of the label Job is its table line and its RBAC name.
    assert not [name for name in entries if name.startswith("node-labels-")]
    share = entries["its line of the label table and its name in the label Job's RBAC"]
    assert share == {"data": ["gpu-dev-1"] * 3, "resourceNames": ["gpu-dev-1"] * 3}
    sizes = state_size.measure(doc, "gpu-dev-1", state_size.first_run_log())
    assert sum(compact for _, compact in sizes.values()) < 13 * 1024, sizes
    # With an SSH agent the four copies of the connection hold no key.
    state_size.AGENT = True
    try:
        with_agent = state_size.measure(doc, "gpu-dev-1", state_size.first_run_log())
    finally:
        state_size.AGENT = False
    assert sum(c for _, c in with_agent.values()) < sum(c for _, c in sizes.values()) - 4 * 600, (with_agent, sizes)
