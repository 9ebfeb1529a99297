"""The ``jupyter_client`` kernel manager of grading: a student's kernel, always confined.

:class:`SandboxKernelManager` starts the kernel through the :mod:`.sandbox` wrapper
(``python -m normedu.course.sandbox ... -- <kernel command>``), or, given a warm
:class:`.zygote.Zygote`, forks it from there with the same confinement. It sits above both
modules (the zygote imports the confinement from the sandbox), so that neither imports the
other back. Importing it imports ``jupyter_client``; the sandbox wrapper itself must start
without it, which is why this class is not in :mod:`.sandbox`.
"""

from __future__ import annotations

import json
import sys

from jupyter_client.manager import AsyncKernelManager
from traitlets import Any, Bool, Int, List, Unicode

from .zygote import fork_kernel

__all__ = ["SandboxKernelManager"]


class SandboxKernelManager(AsyncKernelManager):
    """An ``AsyncKernelManager`` that starts the kernel through :func:`.sandbox.main`, or,
    given a ``sandbox_zygote`` (:class:`.zygote.Zygote`), forks it from there with the same
    confinement (:func:`.sandbox.confine`)."""

    sandbox_workdir = Unicode("").tag(config=True)
    sandbox_memory_mb = Int(0).tag(config=True)
    sandbox_threads = Int(1).tag(config=True)
    sandbox_landlock = Unicode("auto").tag(config=True)
    sandbox_network = Bool(False).tag(config=True)
    sandbox_readable = List(Unicode()).tag(config=True)
    #: a grading kernel's reach as JSON (:mod:`.reach`); empty: none (a plain sandbox)
    sandbox_reach = Unicode("").tag(config=True)
    sandbox_zygote = Any(None, allow_none=True)

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        sandbox = {
            "workdir": self.sandbox_workdir,
            "memory_mb": self.sandbox_memory_mb,
            "threads": self.sandbox_threads,
            "landlock": self.sandbox_landlock,
            "network": self.sandbox_network,
            "readable": list(self.sandbox_readable),
            "reach": json.loads(self.sandbox_reach) if self.sandbox_reach else None,
        }
        # Without a zygote (or with one that died): through the wrapper, confined the same.
        if not fork_kernel(self, self.sandbox_zygote, kernel_cmd, sandbox, self.sandbox_workdir):
            await super()._async_launch_kernel(kernel_cmd, **kw)

    def format_kernel_cmd(self, extra_arguments=None):
        cmd = super().format_kernel_cmd(extra_arguments)
        if not self.sandbox_workdir:
            raise ValueError("SandboxKernelManager needs sandbox_workdir")
        wrapper = [
            sys.executable, "-m", "normedu.course.sandbox",
            "--workdir", self.sandbox_workdir,
            "--memory-mb", str(self.sandbox_memory_mb),
            "--threads", str(self.sandbox_threads),
            "--landlock", self.sandbox_landlock,
        ]  # fmt: skip
        if self.sandbox_network:
            wrapper.append("--allow-network")
        for path in self.sandbox_readable:
            wrapper += ["--readable", path]
        if self.sandbox_reach:
            wrapper += ["--reach", self.sandbox_reach]
        return [*wrapper, "--", *cmd]
