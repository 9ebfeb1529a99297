"""Provenance of a measurement: enough to tell later where a number came from.

Every stored result (benchmarks, GPU scale experiments) carries this dictionary.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from .paths import course_root


def _git_commit() -> str | None:
    # A GPU machine may get a copy of the working tree without .git: the command that sends
    # it there passes the commit in NORMEDU_GIT_COMMIT. Otherwise: the commit of the course
    # checkout (normedu.paths), not of wherever the package is installed.
    if os.environ.get("NORMEDU_GIT_COMMIT"):
        return os.environ["NORMEDU_GIT_COMMIT"]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=course_root() or Path.cwd(),
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def device_name(device: str | None = None) -> str:
    """Human-readable name of a torch device: the GPU model, or the CPU model and thread count."""
    import torch

    dev = (
        torch.device(device)
        if device
        else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    )
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cpu = cpu.replace("(R)", "").replace("(TM)", "").replace(" CPU", "").strip()
    n = torch.get_num_threads()
    return f"CPU ({cpu}, {n} thread{'s' if n != 1 else ''})"


def provenance(command: str | list[str] | None = None, device: str | None = None) -> dict[str, Any]:
    """Return ``{device, torch, python, numpy, threads, date, command, commit, platform}``.

    ``command`` defaults to this process's command line, so the stored file says how to
    regenerate itself.
    """
    import numpy as np
    import torch

    if command is None:
        command = (
            [Path(sys.argv[0]).name, *sys.argv[1:]] if sys.argv and sys.argv[0] else ["python"]
        )
    if isinstance(command, list):
        command = shlex.join(command)
    return {
        "device": device_name(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "commit": _git_commit(),
    }
