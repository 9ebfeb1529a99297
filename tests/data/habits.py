"""Honest LayerNorm hand-ins with what real students leave in their answer cells (issue 45).

``HABITS[name]`` is ``{answer cell grade_id: source}``: the solution's answers (from the
instructor's notebook) with that cell replaced by a correct answer that also carries the
habit. Every one must get full marks with no ``tampered`` flag. The first seven cost 6/12 and
a ``tampered`` flag under the old text deny-list; the next ten always passed; the last three
are magics students paste from tutorials.
"""

_FORWARD = """def layernorm_forward(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return gamma * (x - mu) / np.sqrt(var + eps) + beta
"""
_DEMO = "_x = np.random.default_rng(0).standard_normal((4, 8))\n"
_CALL = "layernorm_forward(_x, np.ones(8), np.zeros(8))"


def _fwd(before: str = "", after: str = "", body: str = _FORWARD) -> dict[str, str]:
    return {"layernorm_forward": f"import numpy as np\n{before}\n\n{body}\n{after}"}


HABITS: dict[str, dict[str, str]] = {
    # -- refused (6/12, tampered) by the text deny-list before issue 45
    "timeit": _fwd(after=f"{_DEMO}%timeit {_CALL}\n"),
    "shell": _fwd(after="!python --version\n"),
    "future_hints": {
        "layernorm_forward": "from __future__ import annotations\n\nimport numpy as np\n\n\n"
        "def layernorm_forward(\n    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, "
        "eps: float = 1e-5\n) -> np.ndarray:\n"
        "    mu: np.ndarray = x.mean(axis=-1, keepdims=True)\n"
        "    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)\n"
        "    return gamma * (x - mu) / np.sqrt(var + eps) + beta\n"
    },
    "sys_time_os": _fwd(
        after=f"import sys, time, os\n{_DEMO}_t0 = time.perf_counter()\n{_CALL}\n"
        'print(f"{time.perf_counter() - _t0:.1e} s, {sys.platform}, pid {os.getpid()}")\n'
    ),
    "warnings": _fwd(
        before='import warnings\nwarnings.filterwarnings("ignore", category=RuntimeWarning)\n'
    ),
    "scipy_stats": _fwd(
        after=f"import scipy.stats\n{_DEMO}print(scipy.stats.describe({_CALL}.ravel()))\n"
    ),
    "literal_getattr": _fwd(before="_DTYPE = getattr(np, 'float64')\nprint(_DTYPE)\n"),
    # -- passed before
    "main_demo": _fwd(after=f'if __name__ == "__main__":\n    {_DEMO}    print({_CALL})\n'),
    "debug_prints": _fwd(
        body=_FORWARD.replace("    var =", '    print("mu", mu.shape)\n    var =')
    ),
    "plot": _fwd(
        after=f"import matplotlib.pyplot as plt\n{_DEMO}plt.plot({_CALL}[0])\nplt.show()\n"
    ),
    "lru_cache": _fwd(
        before="from functools import lru_cache\n\n\n@lru_cache(maxsize=None)\n"
        "def _axis():\n    return -1\n",
        body=_FORWARD.replace("axis=-1", "axis=_axis()"),
    ),
    "dataclass": _fwd(
        before="from dataclasses import dataclass\n\n\n@dataclass\nclass _Config:\n"
        "    axis: int = -1\n\n\n_CFG = _Config()\n",
        body=_FORWARD.replace("axis=-1", "axis=_CFG.axis"),
    ),
    "seterr": _fwd(before='np.seterr(all="ignore")\n'),
    "global_counter": _fwd(
        before="_calls = 0\n",
        body=_FORWARD.replace("    mu =", "    global _calls\n    _calls += 1\n    mu ="),
    ),
    "comments_torch": _fwd(
        before="# Same as torch.nn.LayerNorm(D) and torch.nn.functional.layer_norm(x, (D,)).\n"
    ),
    "docstring_torch": _fwd(
        body=_FORWARD.replace(
            "    mu =", '    """As torch.nn.LayerNorm, written with NumPy."""\n    mu ='
        )
    ),
    "helper_function": _fwd(
        before="\n\ndef _mean(a):\n    return a.mean(axis=-1, keepdims=True)\n",
        body=_FORWARD.replace("x.mean(axis=-1, keepdims=True)", "_mean(x)"),
    ),
    # -- magics pasted from tutorials
    "matplotlib_inline": _fwd(before="%matplotlib inline\n"),
    "time_cell_magic": {"layernorm_forward": "%%time\nimport numpy as np\n\n\n" + _FORWARD},
    "help_line": _fwd(after="np.mean?\n"),
}
