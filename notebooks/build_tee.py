"""Build notebooks/tee.ipynb (run: ``.venv/bin/python notebooks/build_tee.py``)."""

from nbformat.v4 import new_code_cell, new_markdown_cell
from nbwrite import write_notebook

CELLS = [
    new_markdown_cell(
        "# TEE overheads: TensorTEE, cacheline TEE, H100-CC, and TEE + NNA\n\n"
        "Overhead breakdown (re-encryption, verification stalls, metadata) per protection "
        "scheme and GPT-3 size, from `scenarios/tensortee.yaml`; TEE+NNA speedups from "
        "`scenarios/tee_nna.yaml`. Public API only. `HETSIM_NOTEBOOK_SMALL=1` shrinks runs."
    ),
    new_code_cell(
        "import os\nfrom pathlib import Path\n\n"
        "import matplotlib.pyplot as plt\n\nimport hetsim\n\n"
        "ROOT = Path.cwd() if (Path.cwd() / 'scenarios').exists() else Path.cwd().parent\n"
        "SMALL = os.environ.get('HETSIM_NOTEBOOK_SMALL') == '1'\n"
        "STEPS = 2 if SMALL else 20\n"
        "MODELS = ['gpt3-1.3b', 'gpt3-13b'] if SMALL else "
        "['gpt3-1.3b', 'gpt3-2.7b', 'gpt3-6.7b', 'gpt3-13b']"
    ),
    new_code_cell(
        "sc = hetsim.load_scenario(ROOT / 'scenarios' / 'tensortee.yaml', "
        "{'workload.steps': STEPS})\n"
        "table = hetsim.sweep(sc)\n"
        "table = table[table['workload.model'].isin(MODELS)]\n"
        "cols = ['workload.model', 'policies.protection', 'step_s', 'overhead_vs_plain', "
        "'reencrypt_s', 'verify_s', 'metadata_s', 'micro_batches']\n"
        "table[cols]"
    ),
    new_code_cell(
        "parts = ['reencrypt_s', 'verify_s', 'metadata_s']\n"
        "secure = table[table['policies.protection'] != 'none'].copy()\n"
        "for p in parts:\n"
        "    secure[p] = secure[p] / secure['plain_step_s']  # as a fraction of a plain step\n"
        "secure['label'] = secure['workload.model'] + '\\n' + secure['policies.protection']\n"
        "ax = secure.set_index('label')[parts].plot.bar(stacked=True, figsize=(9, 3.5))\n"
        "ax.set_ylabel('overhead / non-secure step')\n"
        "ax.set_title('Overhead breakdown per scheme and model size')\n"
        "plt.tight_layout()"
    ),
    new_code_cell(
        "p = table.pivot(index='workload.model', columns='policies.protection', values='step_s')\n"
        "p['speedup_vs_cacheline'] = p['cacheline'] / p['tensortee']\n"
        "p['tensortee_overhead_%'] = 100 * (p['tensortee'] / p['none'] - 1)\n"
        "p"
    ),
    new_code_cell(
        "nna = hetsim.sweep(ROOT / 'scenarios' / 'tee_nna.yaml', "
        "overrides={'workload.steps': STEPS})\n"
        "ax = nna.pivot(index='policies.execution', columns='workload.model', "
        "values='speedup_vs_tee_only').plot.bar(figsize=(6, 3))\n"
        "ax.set_ylabel('speedup over TEE-only')\n"
        "nna[['workload.model', 'policies.execution', 'step_s', 'speedup_vs_tee_only', "
        "'hidden_share']]"
    ),
]


def main() -> None:
    """Write the notebook next to this script."""
    print(f"wrote {write_notebook(CELLS, 'tee.ipynb')}")


if __name__ == "__main__":
    main()
