"""Build notebooks/moe.ipynb (run: ``.venv/bin/python notebooks/build_moe.py``)."""

from nbformat.v4 import new_code_cell, new_markdown_cell
from nbwrite import write_notebook

CELLS = [
    new_markdown_cell(
        "# MoE expert offloading: HybriMoE and AdapMoE against their baselines\n\n"
        "Speedups over kTransformers per model and cache ratio (`scenarios/hybrimoe.yaml`), "
        "MRS vs LRU hit rates, AdapMoE's experts/latency trade-off (`scenarios/adapmoe.yaml`) "
        "and a per-layer GPU/CPU/PCIe timeline of one decode token. Public API only; "
        "`HETSIM_NOTEBOOK_SMALL=1` shrinks the runs."
    ),
    new_code_cell(
        "import json\nimport os\nfrom pathlib import Path\n\n"
        "import matplotlib.pyplot as plt\nimport pandas as pd\n\nimport hetsim\n\n"
        "ROOT = Path.cwd() if (Path.cwd() / 'scenarios').exists() else Path.cwd().parent\n"
        "SMALL = os.environ.get('HETSIM_NOTEBOOK_SMALL') == '1'\n"
        "OUT = 6 if SMALL else 32\n"
        "PROMPT = 32 if SMALL else 128\n"
        "MODELS = ['deepseek-v2-lite'] if SMALL else "
        "['mixtral-8x7b', 'deepseek-v2-lite', 'qwen2-57b-a14b']\n"
        "RATIOS = [0.25, 0.75] if SMALL else [0.25, 0.5, 0.75]\n"
        "HYBRIMOE = ROOT / 'scenarios' / 'hybrimoe.yaml'"
    ),
    new_markdown_cell("## Prefill (TTFT) and decode (TBT) speedups over kTransformers"),
    new_code_cell(
        "base = hetsim.load_scenario(HYBRIMOE)\n"
        "grid = {'workload.model': MODELS, 'workload.cache_fraction': RATIOS,\n"
        "        'policies': base.sweep['policies']}\n"
        "sc = hetsim.load_scenario(HYBRIMOE, {'workload.output_tokens': OUT,\n"
        "                                        'workload.prompt_tokens': PROMPT,\n"
        "                                        'sweep': grid})\n"
        "table = hetsim.sweep(sc, workers=1)\n"
        "table['system'] = table['system'].str.split('/').str[1]\n"
        "keys = ['workload.model', 'workload.cache_fraction']\n"
        "wide = table.pivot_table(index=keys, columns='system', values=['ttft_s', 'tbt_mean_s'])\n"
        "speedup = pd.concat({m: wide[m].rdiv(wide[m]['ktransformers'], axis=0)\n"
        "                     for m in ['ttft_s', 'tbt_mean_s']}, axis=1)\n"
        "speedup.round(2)"
    ),
    new_code_cell(
        "fig, axes = plt.subplots(1, 2, figsize=(11, 3.5), sharey=False)\n"
        "for ax, metric, title in zip(axes, ['ttft_s', 'tbt_mean_s'], ['prefill', 'decode']):\n"
        "    speedup[metric].drop(columns='ktransformers').plot.bar(ax=ax, rot=30)\n"
        "    ax.axhline(1.0, color='k', lw=0.8)\n"
        "    ax.set_title(f'{title} speedup over kTransformers')\n"
        "    ax.set_xlabel('')\n"
        "fig.tight_layout()\n"
        "print('mean speedup over kTransformers:')\n"
        "speedup.mean().unstack(0).round(2)"
    ),
    new_markdown_cell("## Cache hit rate: MRS vs LRU under HybriMoE scheduling"),
    new_code_cell(
        "rows = []\n"
        "for ratio in RATIOS:\n"
        "    for cache in ['lru', 'mrs']:\n"
        "        r = hetsim.run(HYBRIMOE, overrides={\n"
        "            'workload.cache_fraction': ratio, 'workload.output_tokens': 4 * OUT,\n"
        "            'workload.prompt_tokens': PROMPT, 'policies.cache': cache})\n"
        "        rows.append({'cache_fraction': ratio, 'cache': cache,\n"
        "                     'hit_rate': float(r.summary['cache_hit_rate'].iloc[0])})\n"
        "hits = pd.DataFrame(rows).pivot(index='cache_fraction', columns='cache',\n"
        "                                values='hit_rate')\n"
        "ax = hits.plot(marker='o', figsize=(5, 3.2))\n"
        "ax.set_ylabel('decode hit rate')\n"
        "hits.round(3)"
    ),
    new_markdown_cell("## AdapMoE: activated experts vs time between tokens"),
    new_code_cell(
        "ad = hetsim.sweep(ROOT / 'scenarios' / 'adapmoe.yaml',\n"
        "                     overrides={'workload.output_tokens': 2 * OUT,\n"
        "                                'workload.prompt_tokens': 8})\n"
        "def short(cell):  # sweep tables store dict values as JSON text\n"
        "    p = json.loads(cell)\n"
        "    if isinstance(p['gating'], dict):\n"
        "        return f\"T={p['gating']['threshold']}\"\n"
        "    return 'mixtral-offloading' + ('' if p['prefetch'] == 'none' else ' +prefetch')\n"
        "\n"
        "ad['label'] = [short(p) for p in ad['policies']]\n"
        "ax = ad.plot.scatter(x='experts_per_token', y='tbt_mean_s', figsize=(5, 3.2))\n"
        "for _, row in ad.iterrows():\n"
        "    ax.annotate(row['label'], (row['experts_per_token'], row['tbt_mean_s']), fontsize=7)\n"
        "ad[['label', 'experts_per_token', 'tbt_mean_s', 'cache_hit_rate', 'prefetch_accuracy']]"
    ),
    new_markdown_cell("## One decode token, layer by layer: GPU, CPU and PCIe (HybriMoE)"),
    new_code_cell(
        "r = hetsim.run(HYBRIMOE, overrides={'workload.output_tokens': 3,\n"
        "                                       'workload.prompt_tokens': PROMPT})\n"
        "steps = r.tables['steps']\n"
        "token = steps[steps.phase == 'decode'].iloc[-1]\n"
        "spans = r.spans\n"
        "spans = spans[(spans.start_s >= token.start_s) & (spans.end_s <= token.end_s + 1e-3)]\n"
        "fig, ax = plt.subplots(figsize=(11, 2.6))\n"
        "for y, (track, part) in enumerate(spans.groupby('track')):\n"
        "    ax.broken_barh(list(zip((part.start_s - token.start_s) * 1e3,\n"
        "                            (part.end_s - part.start_s) * 1e3)), (y - 0.4, 0.8))\n"
        "ax.set_yticks(range(spans.track.nunique()), sorted(spans.track.unique()))\n"
        "ax.set_xlabel('ms since the token started')\n"
        "layers = r.tables['layers']\n"
        "layers[layers.step == token.step].head(8)"
    ),
]


def main() -> None:
    """Write the notebook next to this script."""
    print(f"wrote {write_notebook(CELLS, 'moe.ipynb')}")


if __name__ == "__main__":
    main()
