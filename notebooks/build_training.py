"""Build notebooks/training.ipynb (run: ``.venv/bin/python notebooks/build_training.py``)."""

from nbformat.v4 import new_code_cell, new_markdown_cell
from nbwrite import write_notebook

CELLS = [
    new_markdown_cell(
        "# Training memory: Chameleon/SmartSwap and SlimPipe\n\n"
        "Memory timeline of one iteration per swap policy, iteration time against model size "
        "(`scenarios/chameleon.yaml`), and pipeline Gantt charts per schedule "
        "(`scenarios/slimpipe.yaml`). Public API only; `HETSIM_NOTEBOOK_SMALL=1` shrinks runs."
    ),
    new_code_cell(
        "import os\nfrom pathlib import Path\n\n"
        "import matplotlib.pyplot as plt\nimport pandas as pd\n\nimport hetsim\n\n"
        "ROOT = Path.cwd() if (Path.cwd() / 'scenarios').exists() else Path.cwd().parent\n"
        "SMALL = os.environ.get('HETSIM_NOTEBOOK_SMALL') == '1'\n"
        "CH = ROOT / 'scenarios' / 'chameleon.yaml'\nSP = ROOT / 'scenarios' / 'slimpipe.yaml'\n"
        "ITERS = 6 if SMALL else 40\n"
        "SIZES = [0.75, 2.0] if SMALL else [0.75, 1.0, 2.0, 3.0, 4.0, 5.0]\n"
        "POLICIES = ['none', 'recompute', 'static-swap', 'chameleon']"
    ),
    new_markdown_cell("## Memory timeline of one iteration per policy (model at 2x HBM)"),
    new_code_cell(
        "fig, ax = plt.subplots(figsize=(9, 3.5))\n"
        "for pol in POLICIES:\n"
        "    res = hetsim.run(CH, overrides={'policies.swap': pol, 'workload.size_x_hbm': 2.0,\n"
        "                                       'workload.iterations': ITERS,\n"
        "                                       'workload.timeline_iterations': [ITERS - 1]})\n"
        "    ops = res.tables['ops']\n"
        "    if len(ops):\n"
        "        ax.step(ops.start_s, ops.used_bytes / 2**30, where='post', label=pol)\n"
        "    else:\n"
        "        print(pol, 'failed:', res.summary.failure.iloc[0][:90])\n"
        "ax.axhline(64, color='k', lw=0.8, ls='--')\n"
        "ax.set_xlabel('time in iteration (s)'); ax.set_ylabel('device memory (GiB)'); ax.legend()"
    ),
    new_markdown_cell("## Iteration time against model size"),
    new_code_cell(
        "rows = []\n"
        "for size in SIZES:\n"
        "    for pol in POLICIES:\n"
        "        s = hetsim.run(CH, overrides={'policies.swap': pol, "
        "'workload.size_x_hbm': size,\n"
        "                                         'workload.iterations': ITERS}).summary\n"
        "        rows.append(s.assign(policy=pol, size=size))\n"
        "table = pd.DataFrame([r.iloc[0] for r in rows]).reset_index(drop=True)\n"
        "ok = table[table.oom == 0]\n"
        "ax = ok.pivot(index='footprint_x_hbm', columns='policy', values='last_iteration_s')"
        ".plot(marker='o', figsize=(7, 3.5))\n"
        "ax.set_xlabel('footprint / HBM'); ax.set_ylabel('iteration time (s)')\n"
        "table[['size', 'policy', 'footprint_x_hbm', 'oom', 'last_iteration_s', 'stall_s', "
        "'profile_s', 'mfu']]"
    ),
    new_markdown_cell("## Pipeline schedules: Gantt charts (32K context, full recompute)"),
    new_code_cell(
        "scheds = ['gpipe', '1f1b', 'interleaved', 'slimpipe']\n"
        "fig, axes = plt.subplots(len(scheds), 1, figsize=(10, 8), sharex=True)\n"
        "for ax, sch in zip(axes, scheds):\n"
        "    over = {'policies.schedule': sch, 'workload.model.seq_len': 32768,\n"
        "            'workload.recompute': 'full'}\n"
        "    if SMALL:\n"
        "        over.update({'workload.micro_batches': 8, 'workload.stages': 4})\n"
        "    res = hetsim.run(SP, overrides=over)\n"
        "    u = res.tables['units']\n"
        "    for kind, colour in (('F', 'tab:blue'), ('B', 'tab:orange')):\n"
        "        part = u[u.kind == kind]\n"
        "        ax.barh(part.stage, part.end_s - part.start_s, left=part.start_s, color=colour)\n"
        "    s = res.summary.iloc[0]\n"
        '    ax.set_title(f"{sch}: bubble {s.bubble:.2f}, "\n'
        '                 f"peak act {s.peak_act_bytes / 1e9:.1f} GB",\n'
        "                 fontsize=9)\n"
        "    ax.invert_yaxis(); ax.set_ylabel('stage')\n"
        "axes[-1].set_xlabel('time (s)'); plt.tight_layout()"
    ),
    new_markdown_cell("## Per-stage peak activations, bubble and MFU against context"),
    new_code_cell(
        "seqs = [32768, 131072] if SMALL else [32768, 65536, 131072, 262144, 524288]\n"
        "rows = []\n"
        "for seq in seqs:\n"
        "    for rc in ('none', 'full'):\n"
        "        for sch in scheds:\n"
        "            s = hetsim.run(SP, overrides={'policies.schedule': sch, "
        "'workload.recompute': rc,\n"
        "                                             'workload.model.seq_len': seq}).summary\n"
        "            rows.append(s.assign(schedule=sch, recompute=rc, seq_len=seq))\n"
        "pp = pd.DataFrame([r.iloc[0] for r in rows]).reset_index(drop=True)\n"
        "pp['peak_act_GB'] = pp.peak_act_stage0_bytes / 1e9\n"
        "pp[['seq_len', 'recompute', 'schedule', 'bubble', 'peak_act_GB', 'oom', 'mfu']]"
    ),
]


def main() -> None:
    """Write the notebook next to this script."""
    print(f"wrote {write_notebook(CELLS, 'training.ipynb')}")


if __name__ == "__main__":
    main()
